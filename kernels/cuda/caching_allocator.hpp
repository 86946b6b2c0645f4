// cuda/caching_allocator.hpp — device memory for the CUDA backend, cached per stream.
//
// Design note: cudaMalloc and cudaFree synchronize the device and cost tens of microseconds, and
// a training step allocates and frees the same tensors every step. CachingAllocator rounds each
// request up to a size class (geometry.hpp's size_class: less than a quarter wasted), gets a
// class-sized block from cudaMalloc only when its cache has none, and on deallocate keeps the block
// in a bin of (stream, size class) instead of freeing it. A later request of the same class on the
// same stream takes it back: the stream orders the new user's kernels after the old user's, so no
// event is needed. A block is never handed to another stream (allocate_on with a different stream
// draws from that stream's bins). So from the second step on, a step calls cudaMalloc no more
// (mallocs() counts the calls; the GPU tests check it).
//
// Blocks are whole cudaMalloc allocations, never split or merged, so every pointer is aligned to
// 256 bytes (CUDA's guarantee; Allocator asks for 64). When cudaMalloc fails the allocator frees
// its cached blocks (release_cached) and tries once more, then throws carto::Error naming the
// request, what it holds and what the device reports free. The allocator is used from one host
// thread at a time per stream, but its bookkeeping is locked so that a communicator thread may
// free through it too. It must outlive the memory it handed out; its destructor frees all blocks.
#pragma once

#include <cuda_runtime_api.h>

#include <carto/runtime/backend.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace carto::cuda {

// cudaMemGetInfo of one device (free and total bytes as the driver sees them, all processes).
struct DeviceMemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};
DeviceMemoryInfo device_memory_info(int device);

class CachingAllocator final : public Allocator {
 public:
  // Blocks on `device`, cached for `stream` unless allocate_on names another stream.
  CachingAllocator(int device, cudaStream_t stream);
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Allocator: a block for the default stream (the backend's).
  void* allocate(std::size_t bytes, MemoryCategory category) override;
  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept override;

  // A block to be used on `stream`; deallocate returns it to that stream's bins.
  void* allocate_on(std::size_t bytes, cudaStream_t stream);

  // Frees every cached (unused) block after synchronizing the device; blocks in use stay.
  void release_cached();

  // Bytes held from cudaMalloc (in use plus cached), and bytes in use (class sizes).
  [[nodiscard]] std::size_t reserved_bytes() const;
  [[nodiscard]] std::size_t allocated_bytes() const;
  // How many times cudaMalloc was called, and how many requests a cached block served.
  [[nodiscard]] std::int64_t mallocs() const;
  [[nodiscard]] std::int64_t cache_hits() const;

  [[nodiscard]] int device() const { return device_; }

 private:
  struct Block {
    std::size_t bytes = 0;  // the class size
    cudaStream_t stream = nullptr;
  };
  using BinKey = std::pair<cudaStream_t, std::size_t>;

  void* malloc_block(std::size_t bytes);  // cudaMalloc, with one retry after release_cached
  void release_cached_locked();

  int device_;
  cudaStream_t stream_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> in_use_;
  std::map<BinKey, std::vector<void*>> cached_;
  std::size_t reserved_ = 0;
  std::size_t allocated_ = 0;
  std::int64_t mallocs_ = 0;
  std::int64_t hits_ = 0;
};

}  // namespace carto::cuda
