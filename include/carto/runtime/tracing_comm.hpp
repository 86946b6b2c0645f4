// carto/runtime/tracing_comm.hpp — a Communicator that times every collective of the one it wraps
// into a trace::Recorder (carto/runtime/trace.hpp).
//
// Design note: a decorator with the wrapped communicator's group and rank. Each collective is
// forwarded, waited for (so the event spans the whole collective, also on an asynchronous
// communicator) and recorded with its kind, the bytes of its receive buffer (the send buffer for
// reduce-scatter: the S of cost/collectives.hpp) and the group's name. split() wraps the new group
// alike, so MeshComms built on a TracingComm world traces every axis group. Splits themselves are
// not recorded.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>

#include "carto/runtime/communicator.hpp"
#include "carto/runtime/trace.hpp"

namespace carto {

class TracingComm final : public Communicator {
 public:
  TracingComm(Communicator& inner, trace::Recorder& recorder)
      : Communicator(inner.group(), inner.rank()), inner_(&inner), rec_(&recorder) {}
  TracingComm(std::unique_ptr<Communicator> owned, trace::Recorder& recorder)
      : Communicator(owned->group(), owned->rank()),
        owned_(std::move(owned)),
        inner_(owned_.get()),
        rec_(&recorder) {}

  [[nodiscard]] Communicator& inner() const { return *inner_; }

 protected:
  Work do_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     ReduceOp op, CommStream stream) override {
    return run(CollectiveKind::all_reduce, recv.size(),
               [&] { return inner_->all_reduce(send, recv, dtype, op, stream); });
  }
  Work do_all_gather(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     CommStream stream) override {
    return run(CollectiveKind::all_gather, recv.size(),
               [&] { return inner_->all_gather(send, recv, dtype, stream); });
  }
  Work do_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                         ReduceOp op, CommStream stream) override {
    return run(CollectiveKind::reduce_scatter, send.size(),
               [&] { return inner_->reduce_scatter(send, recv, dtype, op, stream); });
  }
  Work do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     CommStream stream) override {
    return run(CollectiveKind::all_to_all, recv.size(),
               [&] { return inner_->all_to_all(send, recv, dtype, stream); });
  }
  Work do_broadcast(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                    int root, CommStream stream) override {
    return run(CollectiveKind::broadcast, recv.size(),
               [&] { return inner_->broadcast(send, recv, dtype, root, stream); });
  }
  Work do_barrier(CommStream stream) override {
    return run(CollectiveKind::barrier, 0, [&] { return inner_->barrier(stream); });
  }
  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override {
    return std::make_unique<TracingComm>(inner_->split(color, key, std::move(name)), *rec_);
  }

 private:
  template <class F>
  Work run(CollectiveKind kind, std::size_t bytes, F&& issue) {
    trace::timed(rec_, trace::Kind::collective, to_string_view(kind),
                 static_cast<std::int64_t>(bytes), 0, name(), [&] { issue().wait(); });
    return {};
  }

  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  trace::Recorder* rec_;
};

}  // namespace carto
