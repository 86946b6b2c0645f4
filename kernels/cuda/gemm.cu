// cuda/gemm.cu — cuBLASLt GEMMs (gemm.cuh): plans per shape, dtype reduction, the call.
#include <cublasLt.h>

#include <cstdint>
#include <functional>
#include <string_view>
#include <unordered_map>

#include "cuda/elementwise.cuh"
#include "cuda/gemm.cuh"

namespace carto::cuda {

namespace {

// Pointer alignment in bytes, up to the 256 cuBLASLt assumes by default: an algorithm chosen for
// aligned operands may not run on a view that starts inside a buffer.
std::uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

struct PlanKey {
  bool bf16_inputs = false, bf16_c = false;
  LtGemm lt{};
  std::uint32_t align_first = 256, align_second = 256, align_c = 256;

  friend bool operator==(const PlanKey& x, const PlanKey& y) {
    auto same = [](const LtMatrix& p, const LtMatrix& q) {
      return p.rows == q.rows && p.cols == q.cols && p.ld == q.ld &&
             p.batch_stride == q.batch_stride;
    };
    return x.bf16_inputs == y.bf16_inputs && x.bf16_c == y.bf16_c &&
           x.lt.transpose_first == y.lt.transpose_first &&
           x.lt.transpose_second == y.lt.transpose_second && x.lt.m == y.lt.m && x.lt.n == y.lt.n &&
           x.lt.k == y.lt.k && x.lt.batch == y.lt.batch && same(x.lt.first, y.lt.first) &&
           same(x.lt.second, y.lt.second) && same(x.lt.c, y.lt.c) &&
           x.align_first == y.align_first && x.align_second == y.align_second &&
           x.align_c == y.align_c;
  }
};

struct PlanKeyHash {
  std::size_t operator()(const PlanKey& key) const {
    std::size_t h = 0;
    auto mix = [&h](std::int64_t v) {
      h ^= std::hash<std::int64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    };
    mix(key.bf16_inputs + 2 * key.bf16_c + 4 * key.lt.transpose_first +
        8 * key.lt.transpose_second);
    for (std::int64_t v : {key.lt.m, key.lt.n, key.lt.k, key.lt.batch, key.lt.first.batch_stride,
                           key.lt.second.batch_stride, key.lt.first.rows, key.lt.second.rows})
      mix(v);
    mix(key.align_first + 512 * key.align_second + 512 * 512 * std::int64_t{key.align_c});
    return h;
  }
};

// cuBLASLt's descriptors for one shape and the algorithm its heuristic picked. Members are
// destroyed in the destructor whichever were created, so a failure half-way leaks nothing.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c != nullptr) (void)cublasLtMatrixLayoutDestroy(c);
    if (second != nullptr) (void)cublasLtMatrixLayoutDestroy(second);
    if (first != nullptr) (void)cublasLtMatrixLayoutDestroy(first);
    if (desc != nullptr) (void)cublasLtMatmulDescDestroy(desc);
  }
};

struct Preference {
  cublasLtMatmulPreference_t handle = nullptr;
  Preference() { CARTO_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&handle)); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  ~Preference() { (void)cublasLtMatmulPreferenceDestroy(handle); }
  template <class T>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, T value) {
    CARTO_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(handle, attribute, &value, sizeof value));
  }
};

void make_layout(cublasLtMatrixLayout_t* layout, bool bf16, const LtMatrix& m, std::int64_t batch) {
  CARTO_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(layout, bf16 ? CUDA_R_16BF : CUDA_R_32F,
                                                static_cast<std::uint64_t>(m.rows),
                                                static_cast<std::uint64_t>(m.cols), m.ld));
  if (batch > 1) {
    const auto count = static_cast<std::int32_t>(batch);
    CARTO_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof count));
    const std::int64_t stride = m.batch_stride;
    CARTO_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
}

}  // namespace

struct GemmContext::Plans {
  cublasLtHandle_t handle = nullptr;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;

  Plans() { CARTO_CUBLAS_CHECK(cublasLtCreate(&handle)); }
  Plans(const Plans&) = delete;
  Plans& operator=(const Plans&) = delete;
  ~Plans() {
    plans.clear();
    (void)cublasLtDestroy(handle);
  }

  const Plan& get(const PlanKey& key) {
    const auto found = plans.find(key);
    if (found != plans.end()) return *found->second;
    auto plan = std::make_unique<Plan>();
    const LtGemm& lt = key.lt;
    CARTO_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_first = lt.transpose_first ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = lt.transpose_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    CARTO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &op_first, sizeof op_first));
    CARTO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                      &op_second, sizeof op_second));
    make_layout(&plan->first, key.bf16_inputs, lt.first, lt.batch);
    make_layout(&plan->second, key.bf16_inputs, lt.second, lt.batch);
    make_layout(&plan->c, key.bf16_c, lt.c, lt.batch);

    Preference preference;
    preference.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                   static_cast<std::uint64_t>(kGemmWorkspaceBytes));
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_first);
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_second);
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
    cublasLtMatmulHeuristicResult_t result{};
    int found_count = 0;
    CARTO_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->first, plan->second,
                                                      plan->c, plan->c, preference.handle, 1,
                                                      &result, &found_count));
    CARTO_CHECK(found_count > 0 && result.state == CUBLAS_STATUS_SUCCESS,
                "gemm: cuBLASLt has no algorithm for the column-major product (m, n, k) = (", lt.m,
                ", ", lt.n, ", ", lt.k, "), batch ", lt.batch, ", ",
                key.bf16_inputs ? "bf16" : "fp32", " inputs, ", key.bf16_c ? "bf16" : "fp32",
                " C, alignments ", key.align_first, "/", key.align_second, "/", key.align_c,
                " bytes, within ", kGemmWorkspaceBytes, " bytes of workspace");
    plan->algo = result.algo;
    plan->workspace = result.workspaceSize;
    return *plans.emplace(key, std::move(plan)).first->second;
  }
};

GemmContext::GemmContext() : plans_(std::make_unique<Plans>()) {}
GemmContext::~GemmContext() = default;
std::size_t GemmContext::plan_count() const { return plans_->plans.size(); }

namespace {

struct MatrixDims {
  std::int64_t rows = 0, cols = 0, batch = 0;
};
MatrixDims matrix_dims(const TensorShape& s, std::string_view which) {
  CARTO_CHECK(s.rank() >= 2, "gemm: operand ", which, " needs rank >= 2; got ", s);
  const std::int64_t rows = s.dims()[s.rank() - 2].extent, cols = s.dims()[s.rank() - 1].extent;
  return {.rows = rows, .cols = cols, .batch = s.numel() / (rows * cols)};
}

// An fp32 copy of `count` elements in workspace (exact for bf16), or nothing when `copy` is false.
Buffer fp32_workspace(const Launch& launch, Elements from, std::int64_t count, bool copy) {
  Buffer wide(*launch.workspace, static_cast<std::size_t>(count) * sizeof(float),
              MemoryCategory::temporaries);
  if (copy) convert_elements(launch, from, Elements{wide.data(), false}, count);
  return wide;
}

}  // namespace

void gemm(const Launch& launch, GemmContext& context, ConstTensorView a, ConstTensorView b,
          TensorView c, const GemmArgs& args) {
  const MatrixDims ad = matrix_dims(a.shape(), "a"), bd = matrix_dims(b.shape(), "b"),
                   cd = matrix_dims(c.shape, "c");
  const RowMajorGemm g{.a_rows = ad.rows,
                       .a_cols = ad.cols,
                       .a_batch = ad.batch,
                       .b_rows = bd.rows,
                       .b_cols = bd.cols,
                       .b_batch = bd.batch,
                       .c_rows = cd.rows,
                       .c_cols = cd.cols,
                       .c_batch = cd.batch,
                       .transpose_a = args.a == Transpose::yes,
                       .transpose_b = args.b == Transpose::yes};
  CARTO_CHECK(gemm_dims_agree(g), "gemm: ", a.shape(), g.transpose_a ? "ᵀ" : "", " · ", b.shape(),
              g.transpose_b ? "ᵀ" : "", " does not give ", c.shape,
              " (a's and b's batches must equal c's or be 1)");
  Elements ea = elements_of(a), eb = elements_of(b);
  const Elements ec = elements_of(c);
  CARTO_CHECK(launch.workspace != nullptr, "gemm: the launch has no workspace allocator");
  if (c.numel() == 0) return;
  const LtGemm lt = lt_gemm(g);
  if (lt.k == 0) {  // an empty sum: C = beta·C
    if (args.beta == 0.0f) {
      fill(launch, c, 0.0f);
    } else {
      scale(launch, c, args.beta, c);
    }
    return;
  }
  // cuBLASLt takes A and B of one dtype: widen the bf16 one of a mixed pair (exact).
  Buffer wide_a, wide_b, wide_c;
  if (ea.bf16 && !eb.bf16) {
    wide_a = fp32_workspace(launch, ea, a.numel(), true);
    ea = {wide_a.data(), false};
  } else if (eb.bf16 && !ea.bf16) {
    wide_b = fp32_workspace(launch, eb, b.numel(), true);
    eb = {wide_b.data(), false};
  }
  // fp32 inputs give an fp32 result: into an fp32 copy of a bf16 C, rounded back once below.
  Elements out = ec;
  if (!ea.bf16 && ec.bf16) {
    wide_c = fp32_workspace(launch, ec, c.numel(), args.beta != 0.0f);
    out = {wide_c.data(), false};
  }
  const PlanKey key{.bf16_inputs = ea.bf16,
                    .bf16_c = out.bf16,
                    .lt = lt,
                    .align_first = alignment_of(eb.data),
                    .align_second = alignment_of(ea.data),
                    .align_c = alignment_of(out.data)};
  GemmContext::Plans& plans = context.plans();
  const Plan& plan = plans.get(key);
  const Buffer workspace(*launch.workspace, plan.workspace, MemoryCategory::temporaries);
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B's memory first (lt_gemm).
  CARTO_CUBLAS_CHECK(cublasLtMatmul(plans.handle, plan.desc, &args.alpha, eb.data, plan.first,
                                    ea.data, plan.second, &args.beta, out.data, plan.c, out.data,
                                    plan.c, &plan.algo, workspace.data(), plan.workspace,
                                    launch.stream));
  if (out.data != ec.data) convert_elements(launch, out, ec, c.numel());
  // The workspace buffers go back to the caching allocator, kept for this stream.
}

}  // namespace carto::cuda
