// cuda/caching_allocator.cu — CachingAllocator and device_memory_info (caching_allocator.hpp).
//
// Design note: every CUDA call runs with the allocator's device current (DeviceScope restores the
// caller's device afterwards), so a backend on device 1 may free from a thread whose current device
// is 0. deallocate is noexcept: a pointer the allocator did not hand out is a bug in the caller,
// reported on stderr and ended with std::abort rather than a silent leak or a double free.
#include <cstdio>
#include <cstdlib>

#include "cuda/caching_allocator.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/geometry.hpp"

namespace carto::cuda {

namespace {

// Makes `device` current for its lifetime (only when it is not already).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    CARTO_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CARTO_CUDA_CHECK(cudaSetDevice(device));
    changed_ = previous_ != device;
  }
  ~DeviceScope() {
    if (changed_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

DeviceMemoryInfo device_memory_info(int device) {
  const DeviceScope scope(device);
  DeviceMemoryInfo info;
  CARTO_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

CachingAllocator::CachingAllocator(int device, cudaStream_t stream)
    : device_(device), stream_(stream) {}

CachingAllocator::~CachingAllocator() {
  const std::lock_guard lock(mutex_);
  int previous = 0;
  const bool have_previous = cudaGetDevice(&previous) == cudaSuccess;
  (void)cudaSetDevice(device_);
  // cudaFree waits for the device's work; a failure here (a device already lost) cannot be
  // reported from a destructor and frees nothing more, so it is ignored.
  for (auto& [key, blocks] : cached_) {
    for (void* p : blocks) (void)cudaFree(p);
  }
  for (auto& [p, block] : in_use_) (void)cudaFree(p);
  if (have_previous) (void)cudaSetDevice(previous);
}

void* CachingAllocator::allocate(std::size_t bytes, MemoryCategory /*category*/) {
  return allocate_on(bytes, stream_);
}

void* CachingAllocator::allocate_on(std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  const std::size_t size = size_class(bytes);
  const std::lock_guard lock(mutex_);
  void* p = nullptr;
  const auto bin = cached_.find(BinKey{stream, size});
  if (bin != cached_.end() && !bin->second.empty()) {
    p = bin->second.back();
    bin->second.pop_back();
    ++hits_;
  } else {
    p = malloc_block(size);
  }
  in_use_.emplace(p, Block{.bytes = size, .stream = stream});
  allocated_ += size;
  return p;
}

void* CachingAllocator::malloc_block(std::size_t size) {
  const DeviceScope scope(device_);
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, size);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // reset the last error before retrying
    release_cached_locked();
    status = cudaMalloc(&p, size);
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    detail::fail("carto::cuda::CachingAllocator: cudaMalloc of ", size, " bytes (",
                 static_cast<double>(size) / kMiB, " MiB) on device ", device_,
                 " failed: ", describe_cuda(status), "; carto holds ",
                 static_cast<double>(reserved_) / kMiB, " MiB (",
                 static_cast<double>(allocated_) / kMiB, " MiB in use) and the device reports ",
                 static_cast<double>(free_bytes) / kMiB, " MiB free of ",
                 static_cast<double>(total_bytes) / kMiB,
                 " MiB; a smaller micro-batch or more tensor parallelism would need less");
  }
  reserved_ += size;
  ++mallocs_;
  return p;
}

void CachingAllocator::deallocate(void* pointer, std::size_t /*bytes*/,
                                  MemoryCategory /*category*/) noexcept {
  if (pointer == nullptr) return;
  const std::lock_guard lock(mutex_);
  const auto it = in_use_.find(pointer);
  if (it == in_use_.end()) {
    std::fprintf(stderr,
                 "carto::cuda::CachingAllocator: deallocate of %p, which this allocator (device "
                 "%d) did not allocate or already got back\n",
                 pointer, device_);
    std::abort();
  }
  const Block block = it->second;
  in_use_.erase(it);
  allocated_ -= block.bytes;
  cached_[BinKey{block.stream, block.bytes}].push_back(pointer);
}

void CachingAllocator::release_cached() {
  const std::lock_guard lock(mutex_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  const DeviceScope scope(device_);
  // A cached block may still be read by kernels enqueued before it was given back.
  CARTO_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& [key, blocks] : cached_) {
    while (!blocks.empty()) {  // one by one, so that a failure leaves the books right
      CARTO_CUDA_CHECK(cudaFree(blocks.back()));
      blocks.pop_back();
      reserved_ -= key.second;
    }
  }
  cached_.clear();
}

std::size_t CachingAllocator::reserved_bytes() const {
  const std::lock_guard lock(mutex_);
  return reserved_;
}

std::size_t CachingAllocator::allocated_bytes() const {
  const std::lock_guard lock(mutex_);
  return allocated_;
}

std::int64_t CachingAllocator::mallocs() const {
  const std::lock_guard lock(mutex_);
  return mallocs_;
}

std::int64_t CachingAllocator::cache_hits() const {
  const std::lock_guard lock(mutex_);
  return hits_;
}

}  // namespace carto::cuda
