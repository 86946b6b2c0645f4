// Host-buffer collectives on top of a device communicator (LoopbackComm, NcclComm), so the
// closed-form collective cases of tests/runtime/comm_cases.hpp, written for host vectors, run
// unchanged on GPU communicators.
//
// DeviceMirror is a Communicator whose every collective copies the host send and recv bytes into
// device memory, runs the wrapped communicator's collective on the device copies and copies recv
// back. Aliasing is kept: when send and recv overlap on the host (the in-place forms), they are
// mirrored as one device region, so the device call is in place exactly when the host call is; an
// out-of-place send is never copied back, so a collective that wrote into it is caught by the
// cases' check that send is unchanged. split() wraps the wrapped communicator's split.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <carto/runtime/communicator.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "cuda/cuda_check.hpp"

namespace carto::testing {

// A non-blocking stream of the current device, destroyed with the object.
class DeviceStream {
 public:
  DeviceStream() { CARTO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~DeviceStream() { cudaStreamDestroy(stream_); }
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  [[nodiscard]] cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Device bytes from cudaMalloc, freed with the object.
class DeviceBytes {
 public:
  explicit DeviceBytes(std::size_t bytes) {
    if (bytes > 0) CARTO_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), bytes));
  }
  ~DeviceBytes() { cudaFree(data_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  [[nodiscard]] std::byte* data() const { return data_; }

 private:
  std::byte* data_ = nullptr;
};

class DeviceMirror final : public Communicator {
 public:
  explicit DeviceMirror(std::unique_ptr<Communicator> inner)
      : Communicator(inner->group(), inner->rank()), inner_(std::move(inner)) {}
  [[nodiscard]] Communicator& inner() const { return *inner_; }

 protected:
  Work do_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     ReduceOp op, CommStream) override {
    return mirrored(send, recv,
                    [&](auto s, auto r) { return inner_->all_reduce(s, r, dtype, op); });
  }
  Work do_all_gather(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     CommStream) override {
    return mirrored(send, recv, [&](auto s, auto r) { return inner_->all_gather(s, r, dtype); });
  }
  Work do_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                         ReduceOp op, CommStream) override {
    return mirrored(send, recv,
                    [&](auto s, auto r) { return inner_->reduce_scatter(s, r, dtype, op); });
  }
  Work do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     CommStream) override {
    return mirrored(send, recv, [&](auto s, auto r) { return inner_->all_to_all(s, r, dtype); });
  }
  Work do_broadcast(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                    int root, CommStream) override {
    return mirrored(send, recv,
                    [&](auto s, auto r) { return inner_->broadcast(s, r, dtype, root); });
  }
  Work do_barrier(CommStream) override {
    inner_->barrier().wait();
    return {};
  }
  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override {
    return std::make_unique<DeviceMirror>(inner_->split(color, key, std::move(name)));
  }

 private:
  using Call = std::function<Work(std::span<const std::byte>, std::span<std::byte>)>;

  static Work mirrored(std::span<const std::byte> send, std::span<std::byte> recv,
                       const Call& call) {
    const bool overlap = !send.empty() && !recv.empty() &&
                         std::less<>{}(send.data(), recv.data() + recv.size()) &&
                         std::less<>{}(recv.data(), send.data() + send.size());
    if (overlap) {
      // One region for the union; recv is writable host memory and so is the union (one vector).
      const std::byte* lo =
          std::min(send.data(), static_cast<const std::byte*>(recv.data()), std::less<>{});
      const std::byte* hi =
          std::max(send.data() + send.size(),
                   static_cast<const std::byte*>(recv.data() + recv.size()), std::less<>{});
      const auto bytes = static_cast<std::size_t>(hi - lo);
      DeviceBytes region(bytes);
      CARTO_CUDA_CHECK(cudaMemcpy(region.data(), lo, bytes, cudaMemcpyHostToDevice));
      std::byte* dev_send = region.data() + (send.data() - lo);
      std::byte* dev_recv = region.data() + (recv.data() - lo);
      call({dev_send, send.size()}, {dev_recv, recv.size()}).wait();
      CARTO_CUDA_CHECK(cudaMemcpy(recv.data(), dev_recv, recv.size(), cudaMemcpyDeviceToHost));
      return {};
    }
    DeviceBytes dev_send(send.size()), dev_recv(recv.size());
    if (!send.empty()) {
      CARTO_CUDA_CHECK(
          cudaMemcpy(dev_send.data(), send.data(), send.size(), cudaMemcpyHostToDevice));
    }
    if (!recv.empty()) {
      CARTO_CUDA_CHECK(
          cudaMemcpy(dev_recv.data(), recv.data(), recv.size(), cudaMemcpyHostToDevice));
    }
    call({dev_send.data(), send.size()}, {dev_recv.data(), recv.size()}).wait();
    if (!recv.empty()) {
      CARTO_CUDA_CHECK(
          cudaMemcpy(recv.data(), dev_recv.data(), recv.size(), cudaMemcpyDeviceToHost));
    }
    return {};
  }

  std::unique_ptr<Communicator> inner_;
};

}  // namespace carto::testing
