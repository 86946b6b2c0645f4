// Allocators for the kernel tests: one that counts live and peak bytes per category (as the memory
// tracker will), and a guard that installs an allocator on a backend for a scope. The backend of
// the generic tests lives for the whole executable, so the guard uninstalls it even when a check
// throws.
#pragma once

#include <algorithm>
#include <carto/runtime/backend.hpp>
#include <cstddef>
#include <cstdint>

namespace carto::test {

class CountingAllocator final : public Allocator {
 public:
  explicit CountingAllocator(Allocator& inner) : inner_(inner) {}
  void* allocate(std::size_t bytes, MemoryCategory category) override {
    live += static_cast<std::int64_t>(bytes);
    peak = std::max(peak, live);
    ++calls[static_cast<std::size_t>(category)];
    return inner_.allocate(bytes, category);
  }
  void deallocate(void* p, std::size_t bytes, MemoryCategory category) noexcept override {
    live -= static_cast<std::int64_t>(bytes);
    inner_.deallocate(p, bytes, category);
  }
  std::int64_t live = 0, peak = 0;
  std::int64_t calls[5] = {};

 private:
  Allocator& inner_;
};

class AllocatorGuard {
 public:
  AllocatorGuard(Backend& backend, Allocator& allocator) : backend_(backend) {
    backend_.use_allocator(&allocator);
  }
  ~AllocatorGuard() { backend_.use_allocator(nullptr); }
  AllocatorGuard(const AllocatorGuard&) = delete;
  AllocatorGuard& operator=(const AllocatorGuard&) = delete;

 private:
  Backend& backend_;
};

}  // namespace carto::test
