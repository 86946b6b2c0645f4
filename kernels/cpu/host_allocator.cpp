// The CPU backend's host memory: 64-byte aligned blocks, freed large blocks cached by size
// (cpu_backend.hpp's note on HostAllocator).
#include <new>

#include "cpu_backend.hpp"

namespace carto::cpu {

namespace {
constexpr std::align_val_t kAlignment{64};

void* system_allocate(std::size_t bytes) {
  void* p = ::operator new(bytes, kAlignment, std::nothrow);
  if (p == nullptr)
    carto::detail::fail("carto::cpu: out of host memory allocating ", bytes, " bytes");
  return p;
}
void system_free(void* p) noexcept { ::operator delete(p, kAlignment); }
}  // namespace

HostAllocator::~HostAllocator() { release_cached(); }

void* HostAllocator::allocate(std::size_t bytes, MemoryCategory /*category*/) {
  if (bytes == 0) return nullptr;
  if (bytes < kCachedFrom) return system_allocate(bytes);  // glibc's heap serves these well
  const std::lock_guard lock(mutex_);
  if (const auto hit = cache_.find(bytes); hit != cache_.end()) {
    void* p = hit->second;
    cache_.erase(hit);
    cached_ -= bytes;
    live_ += bytes;
    return p;
  }
  // A miss: keep live + cached within the peak and a quarter, counting this block as live.
  live_ += bytes;
  if (live_ > peak_) peak_ = live_;
  evict_to(peak_ + peak_ / 4 - live_);
  try {
    return system_allocate(bytes);
  } catch (...) {
    live_ -= bytes;
    throw;
  }
}

void HostAllocator::deallocate(void* pointer, std::size_t bytes,
                               MemoryCategory /*category*/) noexcept {
  if (pointer == nullptr) return;
  if (bytes < kCachedFrom) return system_free(pointer);
  const std::lock_guard lock(mutex_);
  live_ -= bytes;
  try {
    cache_.emplace(bytes, pointer);
    cached_ += bytes;
  } catch (...) {  // no memory for the map's node: give the block back instead
    system_free(pointer);
  }
}

std::size_t HostAllocator::cached_bytes() const {
  const std::lock_guard lock(mutex_);
  return cached_;
}

std::size_t HostAllocator::live_bytes() const {
  const std::lock_guard lock(mutex_);
  return live_;
}

void HostAllocator::release_cached() noexcept {
  const std::lock_guard lock(mutex_);
  evict_to(0);
}

void HostAllocator::evict_to(std::size_t limit) noexcept {
  // Largest blocks first: fewest frees to get under the limit.
  while (cached_ > limit && !cache_.empty()) {
    const auto last = std::prev(cache_.end());
    cached_ -= last->first;
    system_free(last->second);
    cache_.erase(last);
  }
}

}  // namespace carto::cpu
