// carto/runtime/trace.hpp — a timeline of one training step per rank: every kernel, reshard and
// collective with its rank, op, bytes, FLOPs and start/end times, written as Chrome trace-event
// JSON.
//
// Design note. Recording is done by decorators, so neither a backend nor a communicator needs to
// know about tracing: TracingBackend (tracing_backend.hpp) wraps the real Backend and times every
// kernel; TracingComm (tracing_comm.hpp) wraps a Communicator and times every collective. Which op
// of the graph a kernel belongs to comes from op-name scopes: the executor opens an OpScope around
// each op's forward and backward (one line each), and a Span around each reshard; the Trainer
// opens the step, gradient-reduction and optimizer spans. The current scope and recorder are
// thread-local: each rank is one thread (or one process), and a rank issues its kernels from its
// own thread. A forward scope opened inside a backward one is a checkpoint recompute.
//
// Times are microseconds of std::chrono::steady_clock since the Trace's origin, which every rank
// of a process shares, so thread ranks line up on one time axis. The decorators synchronize the
// wrapped backend after each kernel and wait for each collective, so an asynchronous backend's
// times are what the kernel took (the CPU backend and thread communicators are synchronous
// anyway). Without a Recorder installed a scope costs two thread-local writes.
//
// Chrome trace-event format (the "JSON Object Format" of Google's Trace Event Format document):
// complete events ("ph": "X") with ts and dur in microseconds; pid = the rank, tid = 0, and a
// process_name metadata event "rank r": Perfetto and chrome://tracing show one track per rank,
// ops as the outer slices and their kernels and collectives nested inside.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "carto/error.hpp"
#include "carto/util/files.hpp"
#include "carto/util/json.hpp"

namespace carto::trace {

// What part of a step an event belongs to.
enum class Phase : std::uint8_t { none, forward, backward, recompute, gradients, optimizer };

constexpr std::string_view to_string_view(Phase p) {
  switch (p) {
    case Phase::none: return "none";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::recompute: return "recompute";
    case Phase::gradients: return "gradients";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

// What an event is: the kinds nest as step > phase > op > reshard > kernel / collective.
enum class Kind : std::uint8_t { step, phase, op, reshard, kernel, collective };

constexpr std::string_view to_string_view(Kind k) {
  switch (k) {
    case Kind::step: return "step";
    case Kind::phase: return "phase";
    case Kind::op: return "op";
    case Kind::reshard: return "reshard";
    case Kind::kernel: return "kernel";
    case Kind::collective: return "collective";
  }
  return "?";
}

struct Event {
  std::string name;  // kernel or collective name, "reshard", the phase or "step"
  Kind kind = Kind::kernel;
  std::int32_t op = -1;  // the graph op it ran for; -1 outside any op
  Phase phase = Phase::none;
  std::int64_t bytes = 0;  // bytes read and written (kernels), moved (collectives, reshards)
  std::int64_t flops = 0;  // GEMM and attention FLOPs (2 per multiply-add); 0 for the rest
  std::string group{};     // the communicator's group, for collectives
  double start_us = 0;
  double end_us = 0;
  [[nodiscard]] double seconds() const { return (end_us - start_us) * 1e-6; }
};

using Clock = std::chrono::steady_clock;

// The events of one rank. Not thread-safe: one rank records from one thread.
class Recorder {
 public:
  Recorder(int rank, Clock::time_point origin) : rank_(rank), origin_(origin) {}

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] double now_us() const {
    return std::chrono::duration<double, std::micro>(Clock::now() - origin_).count();
  }
  void record(Event e) { events_.push_back(std::move(e)); }
  [[nodiscard]] const std::vector<Event>& events() const { return events_; }
  void clear() { events_.clear(); }

  // The graph's op names, for the trace and the op table (set by the Trainer).
  void set_op_names(std::vector<std::string> names) { op_names_ = std::move(names); }
  [[nodiscard]] std::string_view op_name(std::int32_t op) const {
    return op >= 0 && static_cast<std::size_t>(op) < op_names_.size()
               ? std::string_view(op_names_[static_cast<std::size_t>(op)])
               : std::string_view();
  }

 private:
  int rank_;
  Clock::time_point origin_;
  std::vector<Event> events_;
  std::vector<std::string> op_names_;
};

// The recorders of every rank in this process, sharing one time origin. rank() is thread-safe.
class Trace {
 public:
  Trace() : origin_(Clock::now()) {}
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  Recorder& rank(int r) {
    CARTO_CHECK(r >= 0, "trace: rank ", r, " must be >= 0");
    const std::lock_guard lock(mutex_);
    for (const auto& rec : recorders_) {
      if (rec->rank() == r) return *rec;
    }
    recorders_.push_back(std::make_unique<Recorder>(r, origin_));
    std::sort(recorders_.begin(), recorders_.end(),
              [](const auto& a, const auto& b) { return a->rank() < b->rank(); });
    for (const auto& rec : recorders_) {
      if (rec->rank() == r) return *rec;
    }
    detail::fail("trace: rank ", r, " vanished");  // unreachable
  }
  // Every rank recorded so far, by rank. Call once the ranks have stopped recording.
  [[nodiscard]] std::vector<const Recorder*> ranks() const {
    const std::lock_guard lock(mutex_);
    std::vector<const Recorder*> out;
    for (const auto& rec : recorders_) out.push_back(rec.get());
    return out;
  }

 private:
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Recorder>> recorders_;
};

// ---- the thread's current recorder and scope
// ---------------------------------------------------------------------------

struct Context {
  Recorder* recorder = nullptr;
  std::int32_t op = -1;
  Phase phase = Phase::none;
};

inline Context& context() {
  thread_local Context c;
  return c;
}

// Installs `recorder` (may be null) as this thread's recorder for the scope's lifetime.
class Active {
 public:
  explicit Active(Recorder* recorder) : saved_(context()) { context().recorder = recorder; }
  ~Active() { context() = saved_; }
  Active(const Active&) = delete;
  Active& operator=(const Active&) = delete;

 private:
  Context saved_;
};

// One op's forward or backward (or a phase when op is -1): the kernels inside are attributed to
// it, and with a recorder installed the scope itself is an event. A forward scope opened inside a
// backward one is recorded as a recompute.
class OpScope {
 public:
  OpScope(std::int64_t op, Phase phase) : saved_(context()) {
    Context& c = context();
    if (phase == Phase::forward &&
        (saved_.phase == Phase::backward || saved_.phase == Phase::recompute))
      phase = Phase::recompute;
    c.op = static_cast<std::int32_t>(op);
    c.phase = phase;
    if (c.recorder != nullptr) start_ = c.recorder->now_us();
  }
  ~OpScope() {
    Context& c = context();
    if (c.recorder != nullptr) {
      Event e{.name = std::string(c.op >= 0 ? c.recorder->op_name(c.op) : to_string_view(c.phase)),
              .kind = c.op >= 0 ? Kind::op : Kind::phase,
              .op = c.op,
              .phase = c.phase,
              .start_us = start_,
              .end_us = c.recorder->now_us()};
      if (e.name.empty()) e.name = detail::concat("op ", c.op);
      c.recorder->record(std::move(e));
    }
    c.op = saved_.op;
    c.phase = saved_.phase;
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  Context saved_;
  double start_ = 0;
};

// A named span inside the current op (a reshard, a step): an event of `kind` with `bytes`.
class Span {
 public:
  Span(Kind kind, std::string_view name, std::int64_t bytes = 0)
      : recorder_(context().recorder), kind_(kind), name_(name), bytes_(bytes) {
    if (recorder_ != nullptr) start_ = recorder_->now_us();
  }
  ~Span() {
    if (recorder_ == nullptr) return;
    const Context& c = context();
    recorder_->record({.name = std::string(name_),
                       .kind = kind_,
                       .op = c.op,
                       .phase = c.phase,
                       .bytes = bytes_,
                       .start_us = start_,
                       .end_us = recorder_->now_us()});
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  Recorder* recorder_;
  Kind kind_;
  std::string_view name_;
  std::int64_t bytes_;
  double start_ = 0;
};

// Times one call of a decorator into `recorder` (null: not timed), attributed to the current op.
template <class F>
void timed(Recorder* recorder, Kind kind, std::string_view name, std::int64_t bytes,
           std::int64_t flops, std::string_view group, F&& call) {
  if (recorder == nullptr) {
    call();
    return;
  }
  const double start = recorder->now_us();
  call();
  const Context& c = context();
  recorder->record({.name = std::string(name),
                    .kind = kind,
                    .op = c.op,
                    .phase = c.phase,
                    .bytes = bytes,
                    .flops = flops,
                    .group = std::string(group),
                    .start_us = start,
                    .end_us = recorder->now_us()});
}

// ---- Chrome trace-event JSON
// ---------------------------------------------------------------------------------------

namespace detail {
inline void write_escaped(std::ostream& out, std::string_view s) { out << Json(s).dump(); }
}  // namespace detail

// Writes every rank's events as one Chrome trace-event JSON document.
inline void write_chrome_trace(std::ostream& out, std::span<const Recorder* const> ranks) {
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    out << (first ? "\n" : ",\n");
    first = false;
  };
  char number[64];
  auto num = [&](double v) {
    std::snprintf(number, sizeof number, "%.3f", v);
    return std::string_view(number);
  };
  for (const Recorder* rec : ranks) {
    sep();
    out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << rec->rank()
        << ",\"tid\":0,\"args\":{\"name\":\"rank " << rec->rank() << "\"}}";
    sep();
    out << "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" << rec->rank()
        << ",\"tid\":0,\"args\":{\"sort_index\":" << rec->rank() << "}}";
    for (const Event& e : rec->events()) {
      sep();
      out << "{\"name\":";
      detail::write_escaped(out, e.name);
      out << ",\"cat\":\"" << to_string_view(e.kind)
          << "\",\"ph\":\"X\",\"ts\":" << num(e.start_us);
      out << ",\"dur\":" << num(std::max(0.0, e.end_us - e.start_us)) << ",\"pid\":" << rec->rank()
          << ",\"tid\":0,\"args\":{\"phase\":\"" << to_string_view(e.phase) << "\"";
      if (e.op >= 0) {
        out << ",\"op\":" << e.op << ",\"op_name\":";
        detail::write_escaped(out, rec->op_name(e.op));
      }
      if (e.bytes != 0) out << ",\"bytes\":" << e.bytes;
      if (e.flops != 0) out << ",\"flops\":" << e.flops;
      if (!e.group.empty()) {
        out << ",\"group\":";
        detail::write_escaped(out, e.group);
      }
      out << "}}";
    }
  }
  out << "\n]}\n";
}

// Writes the trace to `path` atomically (util/files.hpp: a temporary file in the same folder,
// fsync, rename).
inline void write_chrome_trace(const std::string& path, std::span<const Recorder* const> ranks) {
  std::ostringstream out;
  write_chrome_trace(out, ranks);
  atomic_write(path, out.str(), "trace");
}

}  // namespace carto::trace
