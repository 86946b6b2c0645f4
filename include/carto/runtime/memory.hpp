// carto/runtime/memory.hpp — the memory tracker of one rank and its tracked allocator.
//
// Design note. Every runtime allocation of a rank is recorded by its MemoryTracker, tagged with a
// MemoryKind: parameters, gradients, optimizer states, saved activations, temporaries,
// communication buffers, workspace. The profiler predicts five coarser categories
// (profile/schedule.hpp's MemoryCategory, where temporaries include communication buffers and
// workspace); profile_category() maps a kind onto them and to_memory_bytes() a breakdown, so
// measured and predicted peaks compare category by category. The tracker keeps current and peak
// bytes per kind and in total, and the split by kind *at the moment of the total peak*, which is
// what the profiler's predicted peak is compared with. Invariants:
//   - current[k] >= 0 for every kind; total == Σ current[k];
//   - peak_bytes() >= current_bytes(), and at_peak().total() == peak_bytes();
//   - peak_by_kind()[k] >= at_peak()[k] (a kind's own peak may come at another moment).
// Buffers are RAII handles: freeing happens when the handle dies, exactly once, with the kind
// and size it was allocated with. A TrackedAllocator must outlive its buffers. Memory comes from a
// RawAllocator (host memory here; the CUDA backend supplies device memory), so `data()` may be a
// device pointer. An optional limit turns an allocation past it into a carto::Error that shows
// what is in use, so a plan that needs more than its budget fails loudly at the allocation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "carto/error.hpp"
#include "carto/profile/schedule.hpp"

namespace carto {

enum class MemoryKind : std::uint8_t {
  parameters,
  gradients,
  optimizer_states,
  saved_activations,
  temporaries,
  communication_buffers,
  workspace
};

inline constexpr std::size_t kNumMemoryKinds = 7;
inline constexpr MemoryKind kAllMemoryKinds[kNumMemoryKinds] = {
    MemoryKind::parameters,        MemoryKind::gradients,   MemoryKind::optimizer_states,
    MemoryKind::saved_activations, MemoryKind::temporaries, MemoryKind::communication_buffers,
    MemoryKind::workspace};

constexpr std::string_view to_string_view(MemoryKind c) {
  switch (c) {
    case MemoryKind::parameters: return "parameters";
    case MemoryKind::gradients: return "gradients";
    case MemoryKind::optimizer_states: return "optimizer_states";
    case MemoryKind::saved_activations: return "saved_activations";
    case MemoryKind::temporaries: return "temporaries";
    case MemoryKind::communication_buffers: return "communication_buffers";
    case MemoryKind::workspace: return "workspace";
  }
  return "?";
}

inline std::ostream& operator<<(std::ostream& out, MemoryKind c) {
  return out << to_string_view(c);
}

// The profiler's category of a kind.
constexpr MemoryCategory profile_category(MemoryKind k) {
  switch (k) {
    case MemoryKind::parameters: return MemoryCategory::parameters;
    case MemoryKind::gradients: return MemoryCategory::gradients;
    case MemoryKind::optimizer_states: return MemoryCategory::optimizer;
    case MemoryKind::saved_activations: return MemoryCategory::activations;
    case MemoryKind::temporaries:
    case MemoryKind::communication_buffers:
    case MemoryKind::workspace: return MemoryCategory::temporaries;
  }
  return MemoryCategory::temporaries;
}

// The kind an allocation tagged with a profiler category is recorded under.
constexpr MemoryKind memory_kind(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameters: return MemoryKind::parameters;
    case MemoryCategory::gradients: return MemoryKind::gradients;
    case MemoryCategory::optimizer: return MemoryKind::optimizer_states;
    case MemoryCategory::activations: return MemoryKind::saved_activations;
    case MemoryCategory::temporaries: return MemoryKind::temporaries;
  }
  return MemoryKind::temporaries;
}

// Bytes per kind.
struct MemoryBreakdown {
  std::array<std::int64_t, kNumMemoryKinds> bytes{};

  [[nodiscard]] constexpr std::int64_t operator[](MemoryKind c) const {
    return bytes[static_cast<std::size_t>(c)];
  }
  constexpr std::int64_t& operator[](MemoryKind c) { return bytes[static_cast<std::size_t>(c)]; }
  [[nodiscard]] constexpr std::int64_t total() const {
    std::int64_t t = 0;
    for (std::int64_t b : bytes) t += b;
    return t;
  }
  friend constexpr bool operator==(const MemoryBreakdown&, const MemoryBreakdown&) = default;
};

// The breakdown in the profiler's categories (MemoryBytes), to set beside its prediction.
constexpr MemoryBytes to_memory_bytes(const MemoryBreakdown& m) {
  MemoryBytes out;
  for (MemoryKind k : kAllMemoryKinds) out[profile_category(k)] += m[k];
  return out;
}

// "parameters=1024 gradients=0 ... total=1024" (bytes).
inline std::ostream& operator<<(std::ostream& out, const MemoryBreakdown& m) {
  for (MemoryKind c : kAllMemoryKinds) out << to_string_view(c) << '=' << m[c] << ' ';
  return out << "total=" << m.total();
}

// Current and peak bytes of one rank. Thread-safe (a rank may allocate from helper threads).
class MemoryTracker {
 public:
  // Allocations tagged with the profiler's categories (the backend's Allocator interface).
  void record_allocate(MemoryCategory c, std::int64_t bytes) {
    record_allocate(memory_kind(c), bytes);
  }
  void record_free(MemoryCategory c, std::int64_t bytes) { record_free(memory_kind(c), bytes); }

  void record_allocate(MemoryKind c, std::int64_t bytes) {
    if (bytes < 0) detail::fail("carto: cannot allocate ", bytes, " bytes of ", c);
    std::lock_guard lock(mutex_);
    current_[c] += bytes;
    total_ += bytes;
    ++live_;
    ++allocations_;
    if (current_[c] > peak_by_kind_[c]) peak_by_kind_[c] = current_[c];
    if (total_ > peak_) {
      peak_ = total_;
      at_peak_ = current_;
    }
  }
  void record_free(MemoryKind c, std::int64_t bytes) {
    std::lock_guard lock(mutex_);
    if (bytes < 0 || bytes > current_[c] || live_ == 0) {
      detail::fail("carto: freeing ", bytes, " bytes of ", c, " but only ", current_[c],
                   " are allocated of that kind (", live_, " live allocations)");
    }
    current_[c] -= bytes;
    total_ -= bytes;
    --live_;
  }

  [[nodiscard]] MemoryBreakdown current() const {
    std::lock_guard lock(mutex_);
    return current_;
  }
  [[nodiscard]] std::int64_t current_bytes() const {
    std::lock_guard lock(mutex_);
    return total_;
  }
  [[nodiscard]] std::int64_t current_bytes(MemoryKind c) const {
    std::lock_guard lock(mutex_);
    return current_[c];
  }
  // The highest total so far.
  [[nodiscard]] std::int64_t peak_bytes() const {
    std::lock_guard lock(mutex_);
    return peak_;
  }
  // The split by kind at the moment the total reached peak_bytes() (the first such moment).
  [[nodiscard]] MemoryBreakdown at_peak() const {
    std::lock_guard lock(mutex_);
    return at_peak_;
  }
  // Each kind's own highest value (not simultaneous in general).
  [[nodiscard]] MemoryBreakdown peak_by_kind() const {
    std::lock_guard lock(mutex_);
    return peak_by_kind_;
  }
  [[nodiscard]] std::int64_t peak_bytes(MemoryKind c) const {
    std::lock_guard lock(mutex_);
    return peak_by_kind_[c];
  }
  [[nodiscard]] std::int64_t live_allocations() const {
    std::lock_guard lock(mutex_);
    return live_;
  }
  [[nodiscard]] std::int64_t total_allocations() const {
    std::lock_guard lock(mutex_);
    return allocations_;
  }
  // Starts a new measurement: the peaks become what is in use now.
  void reset_peak() {
    std::lock_guard lock(mutex_);
    peak_ = total_;
    at_peak_ = current_;
    peak_by_kind_ = current_;
  }

 private:
  mutable std::mutex mutex_;
  MemoryBreakdown current_;
  MemoryBreakdown at_peak_;
  MemoryBreakdown peak_by_kind_;
  std::int64_t total_ = 0;
  std::int64_t peak_ = 0;
  std::int64_t live_ = 0;
  std::int64_t allocations_ = 0;
};

// Where the bytes come from: host memory, or device memory in the CUDA backend.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  [[nodiscard]] virtual void* allocate(std::size_t bytes, std::size_t alignment) = 0;
  virtual void deallocate(void* data, std::size_t bytes, std::size_t alignment) noexcept = 0;
};

class HostRawAllocator final : public RawAllocator {
 public:
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment) override {
    return ::operator new (bytes, std::align_val_t{alignment});
  }
  void deallocate(void* data, std::size_t bytes, std::size_t alignment) noexcept override {
    ::operator delete (data, bytes, std::align_val_t{alignment});
  }
};

class TrackedAllocator;

// An owned allocation; frees itself (and tells the tracker) when it dies. Move-only.
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;
  TrackedBuffer(TrackedBuffer&& other) noexcept { *this = std::move(other); }
  TrackedBuffer& operator=(TrackedBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      owner_ = std::exchange(other.owner_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      kind_ = other.kind_;
    }
    return *this;
  }
  ~TrackedBuffer() { reset(); }

  [[nodiscard]] std::byte* data() const { return data_; }
  [[nodiscard]] std::int64_t size_bytes() const { return bytes_; }
  [[nodiscard]] bool empty() const { return bytes_ == 0; }
  [[nodiscard]] MemoryKind kind() const { return kind_; }
  [[nodiscard]] std::span<std::byte> bytes() const {
    return {data_, static_cast<std::size_t>(bytes_)};
  }
  // The buffer as elements of T; its size must be a whole number of them.
  template <class T>
  [[nodiscard]] std::span<T> as() const {
    if (bytes_ % static_cast<std::int64_t>(sizeof(T)) != 0) {
      detail::fail("carto: a buffer of ", bytes_, " bytes of ", kind_, " is not a whole number of ",
                   sizeof(T), "-byte elements");
    }
    return {reinterpret_cast<T*>(data_), static_cast<std::size_t>(bytes_) / sizeof(T)};
  }
  // Frees now (no-op on an empty buffer).
  inline void reset() noexcept;

 private:
  friend class TrackedAllocator;
  TrackedBuffer(TrackedAllocator* owner, std::byte* data, std::int64_t bytes, MemoryKind c)
      : owner_(owner), data_(data), bytes_(bytes), kind_(c) {}

  TrackedAllocator* owner_ = nullptr;
  std::byte* data_ = nullptr;
  std::int64_t bytes_ = 0;
  MemoryKind kind_ = MemoryKind::temporaries;
};

struct TrackedAllocatorOptions {
  std::string name = "rank";     // for messages: "rank 3"
  std::int64_t limit_bytes = 0;  // 0: no limit
  std::size_t alignment = 64;    // bytes; a power of two
};

// The allocator of one rank: raw memory plus a MemoryTracker.
class TrackedAllocator {
 public:
  explicit TrackedAllocator(
      TrackedAllocatorOptions options = {},
      std::unique_ptr<RawAllocator> raw = std::make_unique<HostRawAllocator>())
      : options_(std::move(options)), raw_(std::move(raw)) {
    const std::size_t a = options_.alignment;
    if (a == 0 || (a & (a - 1)) != 0) {
      detail::fail("carto: allocator alignment must be a power of two, got ", a);
    }
    if (options_.limit_bytes < 0) {
      detail::fail("carto: allocator limit must be >= 0 bytes (0: none), got ",
                   options_.limit_bytes);
    }
  }
  TrackedAllocator(const TrackedAllocator&) = delete;
  TrackedAllocator& operator=(const TrackedAllocator&) = delete;

  // `bytes` of `kind`; zero bytes give an empty buffer that is not counted.
  [[nodiscard]] TrackedBuffer allocate(MemoryKind kind, std::int64_t bytes) {
    if (bytes < 0) detail::fail("carto: ", options_.name, " cannot allocate ", bytes, " bytes");
    if (bytes == 0) return {};
    if (options_.limit_bytes > 0 && tracker_.current_bytes() + bytes > options_.limit_bytes) {
      detail::fail("carto: ", options_.name, ": allocating ", bytes, " bytes of ", kind,
                   " would use ", tracker_.current_bytes() + bytes, " bytes, past the limit of ",
                   options_.limit_bytes, "; in use: ", tracker_.current());
    }
    void* p = raw_->allocate(static_cast<std::size_t>(bytes), options_.alignment);
    tracker_.record_allocate(kind, bytes);
    return TrackedBuffer(this, static_cast<std::byte*>(p), bytes, kind);
  }
  // `count` elements of T.
  template <class T>
  [[nodiscard]] TrackedBuffer allocate_array(MemoryKind kind, std::int64_t count) {
    return allocate(kind, count * static_cast<std::int64_t>(sizeof(T)));
  }

  [[nodiscard]] const MemoryTracker& tracker() const { return tracker_; }
  [[nodiscard]] MemoryTracker& tracker() { return tracker_; }
  [[nodiscard]] const TrackedAllocatorOptions& options() const { return options_; }

 private:
  friend class TrackedBuffer;
  void release(std::byte* data, std::int64_t bytes, MemoryKind kind) noexcept {
    raw_->deallocate(data, static_cast<std::size_t>(bytes), options_.alignment);
    try {
      tracker_.record_free(kind, bytes);
    } catch (...) {
      // Unreachable while buffers free what they allocated; a destructor must not throw.
    }
  }

  TrackedAllocatorOptions options_;
  std::unique_ptr<RawAllocator> raw_;
  MemoryTracker tracker_;
};

inline void TrackedBuffer::reset() noexcept {
  if (owner_ != nullptr) owner_->release(data_, bytes_, kind_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace carto
