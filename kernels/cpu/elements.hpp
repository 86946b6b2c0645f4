// cpu/elements.hpp — fp32 and bf16 storage behind the CPU kernels' fp32 loops (internal).
//
// Design note: every CPU kernel computes on fp32 pointers (vector_math.hpp's loops, OpenBLAS
// sgemm). A view that is already fp32 is passed to them as it is, so the fp32 path runs the same
// loops on the same memory as before bf16 existed, with no copy and no allocation. A bf16 view is
// staged: the kernel widens the elements a step needs into an fp32 scratch slot (exact), runs the
// fp32 loop on the slot, and for an output rounds the slot back to bf16 once, to nearest even
// (bf16.hpp). An accumulating output (a gradient, dgamma over rows) is widened first, so the
// kernel adds in fp32 and rounds once per call. Steps are blocks of kStageBlock elements (or of
// whole rows for the row kernels), so the scratch stays small and in cache; outputs that every
// row adds into (dgamma, dbeta, db) get a slot of their own for the whole call.
//
// Staging owns the scratch of one call: one fp32 buffer from the backend's current allocator
// (category temporaries, so the memory tracker counts it), carved into one slot per view; a slot
// exists only for a view that is not fp32, and a call whose views are all fp32 allocates nothing.
// It also checks every view's dtype: fp32 or bf16 for data, fp32 for the statistics and master
// weights backend.hpp keeps in fp32; anything else throws a carto::Error naming the call, the
// view and its dtype.
#pragma once

#include <algorithm>
#include <array>
#include <carto/runtime/backend.hpp>
#include <carto/runtime/bf16.hpp>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "parallel.hpp"

namespace carto::cpu::detail {

// Elements per step of a staged elementwise kernel (16 KiB of fp32 per slot).
inline constexpr std::int64_t kStageBlock = 4096;
// The step (and slot size) for a view of n elements: kStageBlock, or n when that is smaller, so a
// small tensor's staging costs its own size.
constexpr std::int64_t stage_block(std::int64_t n) {
  return n < 1 ? 1 : (n < kStageBlock ? n : kStageBlock);
}

// bf16 -> fp32 (exact) and fp32 -> bf16 (to nearest even, NaN kept a quiet NaN: bf16.hpp's
// to_bf16 bit for bit) over n elements; vectorized (cpu_backend.cpp).
void widen(const Bf16* src, float* dst, std::int64_t n);
void narrow(const float* src, Bf16* dst, std::int64_t n);

// The threads a CPU backend's kernels run on (CpuBackend::threads(); 1 for another backend).
int kernel_threads(const Backend& backend);

// A data view (activation, gradient, compute copy of a parameter): fp32 or bf16.
inline void require_storable(std::string_view call, std::string_view what, DType dtype) {
  CARTO_CHECK(dtype == DType::fp32 || dtype == DType::bf16, call, ": ", what, " is ",
              to_string_view(dtype), "; the CPU backend stores fp32 and bf16");
}

// A statistic or master weight (backend.hpp): fp32 only.
inline void require_fp32(std::string_view call, std::string_view what, DType dtype) {
  CARTO_CHECK(dtype == DType::fp32, call, ": ", what, " is ", to_string_view(dtype),
              "; it must be fp32 (statistics, partial sums and AdamW's param, m, v are fp32)");
}
inline const float* fp32_of(std::string_view call, std::string_view what, ConstTensorView v) {
  require_fp32(call, what, v.dtype());
  return static_cast<const float*>(v.data());
}
inline float* fp32_of(std::string_view call, std::string_view what, const TensorView& v) {
  require_fp32(call, what, v.dtype);
  return static_cast<float*>(v.data);
}

// Element i of a data view, as fp32 (for the kernels that read single elements).
inline float load(ConstTensorView v, std::int64_t i) {
  return v.dtype() == DType::bf16 ? to_float(static_cast<const Bf16*>(v.data())[i])
                                  : static_cast<const float*>(v.data())[i];
}

// Whether an output slot starts from the view's values (accumulate) or is only written.
enum class Load : std::uint8_t { no, yes };

class Staging {
 public:
  // One slot per entry: `floats` fp32 elements of scratch for a view of `dtype` (none when it is
  // fp32). Entries are indexed in the order given.
  struct Slot {
    std::string_view what;
    DType dtype = DType::fp32;
    std::int64_t floats = 0;
  };

  Staging(Backend& backend, std::string_view call, std::initializer_list<Slot> slots)
      : threads_(kernel_threads(backend)) {
    CARTO_CHECK(slots.size() <= kMaxSlots, call, ": ", slots.size(), " staged views; at most ",
                kMaxSlots);
    std::int64_t total = 0;
    std::size_t k = 0;
    for (const Slot& s : slots) {
      require_storable(call, s.what, s.dtype);
      offsets_[k++] = s.dtype == DType::fp32 ? -1 : total;
      if (s.dtype != DType::fp32) total += s.floats;
    }
    direct_ = total == 0;
    if (!direct_) {
      buffer_ = backend.allocate({{"staging", total}}, DType::fp32, MemoryCategory::temporaries);
    }
  }

  // Every view is fp32: the kernel may run on the whole tensors in one step.
  [[nodiscard]] bool direct() const { return direct_; }

  // Elements [at, at + n) of x as fp32: x's memory, or slot k holding them widened.
  [[nodiscard]] const float* read(std::size_t k, ConstTensorView x, std::int64_t at,
                                  std::int64_t n) const {
    if (x.dtype() == DType::fp32) return static_cast<const float*>(x.data()) + at;
    float* s = slot(k);
    widen(static_cast<const Bf16*>(x.data()) + at, s, n);
    return s;
  }
  // Where the kernel writes elements [at, at + n) of y in fp32: y's memory, or slot k (holding
  // y's values widened when `load` is yes). commit() stores the slot.
  [[nodiscard]] float* write(std::size_t k, const TensorView& y, std::int64_t at, std::int64_t n,
                             Load load) const {
    if (y.dtype == DType::fp32) return static_cast<float*>(y.data) + at;
    float* s = slot(k);
    if (load == Load::yes) widen(static_cast<const Bf16*>(y.data) + at, s, n);
    return s;
  }
  // Rounds slot k into elements [at, at + n) of y when y is bf16 (fp32: written in place).
  void commit(std::size_t k, const TensorView& y, std::int64_t at, std::int64_t n) const {
    if (y.dtype == DType::fp32) return;
    narrow(slot(k), static_cast<Bf16*>(y.data) + at, n);
  }

  // Calls f(first, count) over [0, n) in steps of `block` (one step when every view is fp32).
  template <class F>
  void for_blocks(std::int64_t n, std::int64_t block, F&& f) const {
    if (direct_) {
      f(std::int64_t{0}, n);
      return;
    }
    for (std::int64_t at = 0; at < n; at += block) f(at, std::min(block, n - at));
  }
  // for_blocks for a kernel whose steps are independent (no output that every step adds into):
  // when every view is fp32, [0, n) is split over the backend's threads (parallel.hpp), ranges of
  // at least `grain` units (elements, or rows of a row kernel); staged views run serially.
  template <class F>
  void for_blocks_parallel(std::int64_t n, std::int64_t block, std::int64_t grain, F&& f) const {
    if (direct_) {
      parallel_ranges(threads_, n, grain, [&](std::int64_t b, std::int64_t e) { f(b, e - b); });
      return;
    }
    for_blocks(n, block, f);
  }
  [[nodiscard]] int threads() const { return threads_; }

 private:
  [[nodiscard]] float* slot(std::size_t k) const {
    return static_cast<float*>(buffer_.data()) + offsets_[k];
  }

  static constexpr std::size_t kMaxSlots = 10;
  std::array<std::int64_t, kMaxSlots> offsets_{};  // no heap allocation on the fp32 path
  int threads_ = 1;
  bool direct_ = true;
  Buffer buffer_;
};

// Rows of `columns` per staged step: about kStageBlock elements, at most the `rows` there are.
inline std::int64_t rows_per_block(std::int64_t columns, std::int64_t rows) {
  const std::int64_t step = columns >= kStageBlock ? 1 : kStageBlock / (columns > 0 ? columns : 1);
  return std::max<std::int64_t>(1, std::min(step, rows));
}
// Rows of `columns` per thread below which a row kernel stays on one thread.
inline std::int64_t row_grain(std::int64_t columns) {
  return std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(columns, 1));
}

}  // namespace carto::cpu::detail
