// cuda/gemm.cuh — Backend::gemm on cuBLASLt.
//
// Design note: C = alpha·op(A)·op(B) + beta·C per batch entry, row-major, mapped onto cuBLASLt's
// column-major operands by geometry.hpp's lt_gemm (the mapping is written out there and tested on
// the host). Precision (backend.hpp's contract): fp32 inputs run CUBLAS_COMPUTE_32F, true fp32
// (never TF32); bf16 inputs run bf16 tensor cores accumulating in fp32 (CUBLAS_COMPUTE_32F, scale
// type fp32), C fp32 or bf16 (then cuBLASLt reads C, adds in fp32 and rounds once on the store).
// The combinations cuBLASLt lacks are reduced to those: when a and b differ in dtype the bf16 one
// is widened to fp32 (exact) in workspace; fp32 inputs with a bf16 C compute into an fp32 copy of
// C and round it back once.
// cuBLASLt needs a handle and, per shape, descriptors and an algorithm from its heuristic, which
// costs far more than a small GEMM; GemmContext owns the handle and keeps one plan per (dtypes,
// transposes, extents, strides, pointer alignments), so a training step's GEMMs query the
// heuristic once. That is why gemm takes the context besides the launch (the one family function
// with an extra parameter). Workspace (up to kGemmWorkspaceBytes, as much as the chosen algorithm
// asks) comes from launch.workspace, category temporaries.
#pragma once

#include <cstddef>
#include <memory>

#include "cuda/launch.cuh"

namespace carto::cuda {

// The most workspace a GEMM may take (NVIDIA suggests 32 MiB for Hopper's cuBLASLt kernels).
inline constexpr std::size_t kGemmWorkspaceBytes = std::size_t{32} << 20;

class GemmContext {
 public:
  GemmContext();  // a cuBLASLt handle
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  struct Plans;  // gemm.cu

  [[nodiscard]] Plans& plans() { return *plans_; }
  // How many plans (heuristic queries) the context holds.
  [[nodiscard]] std::size_t plan_count() const;

 private:
  std::unique_ptr<Plans> plans_;
};

// a (batch..., m, k) or (batch..., k, m), b (batch..., k, n) or (batch..., n, k), c (batch..., m,
// n); a's and b's batch is c's or 1.
void gemm(const Launch& launch, GemmContext& context, ConstTensorView a, ConstTensorView b,
          TensorView c, const GemmArgs& args);

}  // namespace carto::cuda
