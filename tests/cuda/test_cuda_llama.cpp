// The CUDA backend's Llama kernels and grouped-query attention against the CPU backend
// (cpu::CpuBackend) as the reference: every call run on both backends with the same random
// non-zero inputs, in fp32 and bf16, and every gradient in both CopyModes.
//  - RMSNorm forward and backward, on rows a warp reduces (48 columns, enough rows for dgamma's
//    chunked column sums) and rows a whole block reduces (1100 columns), the four combinations of
//    modes.dx and modes.dgamma;
//  - the split RMSNorm: partial sums of 2 and 4 column pieces, the all-reduce on the host, apply,
//    backward partial sums, backward apply; rstd of apply equals the CPU's bit for bit when both
//    get the same sums (both compute it from them in double);
//  - silu(gate)·up forward and backward, gate wide enough to reach σ's saturated tails;
//  - rotary forward (out of place and in place) and backward, with position offsets 0, 5 and 1000;
//  - one call mixing bf16 and fp32 views (bf16 activations, fp32 parameters and gradients);
//  - fused attention with causal masking and dropout: grouped-query (q of rank 5) whole, on a shard
//    of the query sequence and of each group's query heads (placement offsets), and the multi-head
//    form on a sequence shard; forward, then backward from each backend's own forward.
// Outputs start as NaN on the GPU (1e6 on the CPU), so an element a kernel fails to write, or an
// assigned gradient that reads its old value, is caught. Tolerances as test_cuda_specific.cpp
// argues: each backend is within tolerance(dtype, K, scale) of the exact value for a kernel whose
// longest chain of dependent roundings is K (tests/kernels/test_llama_kernels.cpp holds both to
// that against double references), so the two differ by at most twice that bound; an accumulated
// output adds the magnitude of its start to the scale.
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cpu/cpu_backend.hpp>
#include <cstdint>
#include <cuda/cuda_backend.hpp>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernel_support.hpp"

using namespace carto;
using namespace carto::test;

namespace {

cpu::CpuBackend& cpu_backend() {
  static cpu::CpuBackend backend;
  return backend;
}

constexpr float kGpuPoison = std::numeric_limits<float>::quiet_NaN();
constexpr float kCpuPoison = 1e6f;

const CopyMode kModes[] = {CopyMode::assign, CopyMode::accumulate};

const char* mode_name(CopyMode m) { return m == CopyMode::assign ? "assign" : "accumulate"; }

TensorShape dims(std::initializer_list<std::int64_t> extents) {
  TensorShape s;
  int d = 0;
  for (const std::int64_t e : extents) {
    const std::string name = "d" + std::to_string(d++);
    s.push_back({.name = DimName(std::string_view(name)), .extent = e});
  }
  return s;
}

// One tensor on each backend.
struct Twin {
  DeviceTensor cpu;
  DeviceTensor gpu;
  std::vector<float> start;  // what both started with (an input's values, an accumulated output's)
};

// An input: the same values on both backends.
Twin input(const TensorShape& shape, const std::vector<float>& values, DType dtype) {
  return {DeviceTensor(cpu_backend(), shape, values, dtype),
          DeviceTensor(test_backend(), shape, values, dtype), values};
}
Twin random_twin(const TensorShape& shape, std::uint32_t object, DType dtype, float stddev = 1.0f) {
  return input(shape, random_input(shape.numel(), object, dtype, stddev), dtype);
}
// An output written by the call: poisoned on both.
Twin output(const TensorShape& shape, DType dtype = DType::fp32) {
  Twin t{DeviceTensor(cpu_backend(), shape, dtype), DeviceTensor(test_backend(), shape, dtype), {}};
  cpu_backend().fill(t.cpu, kCpuPoison);
  test_backend().fill(t.gpu, kGpuPoison);
  return t;
}
// A gradient stored in `mode`: poisoned (assign must overwrite it) or random values to add onto.
Twin gradient(const TensorShape& shape, DType dtype, CopyMode mode, std::uint32_t object) {
  if (mode == CopyMode::assign) return output(shape, dtype);
  return random_twin(shape, object, dtype);
}

// The GPU's values within twice `chain`'s tolerance of the CPU's (scale: the CPU result's largest
// magnitude plus the start's).
void check_parity(const std::string& what, const Twin& t, std::int64_t chain,
                  std::int64_t intermediates = 0) {
  const std::vector<double> want = to_double(t.cpu.download());
  const std::vector<float> got = t.gpu.download();
  double scale = max_abs(want);
  if (!t.start.empty()) scale += max_abs(to_double(t.start));
  const Tolerance one = tolerance(t.gpu.dtype(), chain, scale, intermediates);
  CARTO_CHECK_CLOSE(what, got, want, (Tolerance{.atol = 2 * one.atol, .rtol = 2 * one.rtol}));
}

}  // namespace

TEST_CASE("CUDA RMSNorm forward and backward equal the CPU backend", "[cuda][llama][rmsnorm]") {
  const DType dtype = CARTO_TEST_DTYPES();
  struct Shape {
    std::int64_t rows_a, rows_b, columns;
  };
  // 256 rows of 48: warp rows, dgamma in 5 chunks of rows. 6 rows of 1100: whole-block rows.
  for (const Shape sh : {Shape{4, 64, 48}, Shape{3, 2, 1100}}) {
    const std::int64_t c = sh.columns, rows = sh.rows_a * sh.rows_b;
    INFO(to_string_view(dtype) << ", rows " << rows << " of " << c);
    const TensorShape xs = dims({sh.rows_a, sh.rows_b, c}), gs = dims({c}),
                      rs = dims({sh.rows_a, sh.rows_b});
    const Twin x = random_twin(xs, 1, dtype, 2.0f), g = random_twin(gs, 2, dtype),
               dy = random_twin(xs, 3, dtype);
    Twin y = output(xs, dtype), rstd = output(rs);
    const RmsNormArgs args{.epsilon = 1e-5f};
    cpu_backend().rmsnorm_forward(x.cpu, g.cpu, y.cpu, rstd.cpu, args);
    test_backend().rmsnorm_forward(x.gpu, g.gpu, y.gpu, rstd.gpu, args);
    check_parity("rmsnorm y", y, c + 6);
    check_parity("rmsnorm rstd", rstd, c + 4);

    for (const CopyMode mdx : kModes) {
      for (const CopyMode mdg : kModes) {
        INFO("dx " << mode_name(mdx) << ", dgamma " << mode_name(mdg));
        Twin dx = gradient(xs, dtype, mdx, 4), dg = gradient(gs, dtype, mdg, 5);
        const NormGradModes modes{.dx = mdx, .dgamma = mdg};
        cpu_backend().rmsnorm_backward(dy.cpu, x.cpu, g.cpu, rstd.cpu, dx.cpu, dg.cpu, modes);
        test_backend().rmsnorm_backward(dy.gpu, x.gpu, g.gpu, rstd.gpu, dx.gpu, dg.gpu, modes);
        check_parity("rmsnorm dx", dx, 2 * c + 8);
        check_parity("rmsnorm dgamma", dg, c + rows + 8);
      }
    }
  }
}

TEST_CASE("CUDA split RMSNorm (partial sums, apply, backward) equals the CPU backend",
          "[cuda][llama][rmsnorm]") {
  const DType dtype = CARTO_TEST_DTYPES();
  constexpr std::int64_t C = 96, A = 5, Bn = 7, R = A * Bn;
  const std::vector<float> x = random_input(R * C, 10, dtype, 1.5f), g = random_input(C, 11, dtype),
                           w = random_input(R * C, 12, dtype);
  const TensorShape rs = dims({A, Bn});
  for (const std::int64_t parts : {std::int64_t{2}, std::int64_t{4}}) {
    const std::int64_t c = C / parts;
    INFO(to_string_view(dtype) << ", " << parts << " pieces of " << c << " columns");
    const TensorShape ls = dims({A, Bn, c}), lg = dims({c});
    auto piece = [&](const std::vector<float>& v, std::int64_t p, std::int64_t width) {
      std::vector<float> out;
      for (std::int64_t r = 0; r < static_cast<std::int64_t>(v.size()) / width; ++r)
        out.insert(out.end(), v.begin() + r * width + p * c, v.begin() + r * width + p * c + c);
      return out;
    };
    std::vector<Twin> xp, gp, dyp;
    for (std::int64_t p = 0; p < parts; ++p) {
      xp.push_back(input(ls, piece(x, p, C), dtype));
      gp.push_back(input(lg, piece(g, p, C), dtype));
      dyp.push_back(input(ls, piece(w, p, C), dtype));
    }
    // The all-reduce of each backend's partial sums, on the host, pieces in order.
    std::vector<float> sums_cpu(R, 0.0f), sums_gpu(R, 0.0f);
    for (std::int64_t p = 0; p < parts; ++p) {
      Twin s = output(rs);
      cpu_backend().rmsnorm_partial_sums(xp[p].cpu, s.cpu);
      test_backend().rmsnorm_partial_sums(xp[p].gpu, s.gpu);
      check_parity("rmsnorm_partial_sums", s, 2);
      const std::vector<float> sc = s.cpu.download(), sg = s.gpu.download();
      for (std::int64_t r = 0; r < R; ++r) {
        sums_cpu[r] += sc[r];
        sums_gpu[r] += sg[r];
      }
    }
    const RmsNormArgs args{.epsilon = 1e-5f};
    // rstd from the same sums: the same bits.
    {
      const Twin same = input(rs, sums_cpu, DType::fp32);
      Twin y = output(ls, dtype), rstd = output(rs);
      cpu_backend().rmsnorm_apply(xp[0].cpu, same.cpu, C, gp[0].cpu, y.cpu, rstd.cpu, args);
      test_backend().rmsnorm_apply(xp[0].gpu, same.gpu, C, gp[0].gpu, y.gpu, rstd.gpu, args);
      const std::vector<float> rc = rstd.cpu.download(), rg = rstd.gpu.download();
      std::int64_t differing = 0;
      for (std::size_t i = 0; i < rc.size(); ++i)
        differing += std::bit_cast<std::uint32_t>(rc[i]) != std::bit_cast<std::uint32_t>(rg[i]);
      INFO("rmsnorm_apply rstd from the same sums: " << differing << " of " << rc.size()
                                                     << " differ in their bits");
      CHECK(differing == 0);
    }
    // Each backend's own pipeline, as an executor runs it.
    DeviceTensor total_cpu(cpu_backend(), rs, sums_cpu), total_gpu(test_backend(), rs, sums_gpu);
    std::vector<Twin> rstd;
    std::vector<float> back_cpu(R, 0.0f), back_gpu(R, 0.0f);
    for (std::int64_t p = 0; p < parts; ++p) {
      Twin y = output(ls, dtype);
      rstd.push_back(output(rs));
      cpu_backend().rmsnorm_apply(xp[p].cpu, total_cpu, C, gp[p].cpu, y.cpu, rstd[p].cpu, args);
      test_backend().rmsnorm_apply(xp[p].gpu, total_gpu, C, gp[p].gpu, y.gpu, rstd[p].gpu, args);
      check_parity("rmsnorm_apply y", y, C + 6);
      check_parity("rmsnorm_apply rstd", rstd[p], C + 4);
      Twin s = output(rs);
      cpu_backend().rmsnorm_backward_partial_sums(dyp[p].cpu, xp[p].cpu, gp[p].cpu, rstd[p].cpu,
                                                  s.cpu);
      test_backend().rmsnorm_backward_partial_sums(dyp[p].gpu, xp[p].gpu, gp[p].gpu, rstd[p].gpu,
                                                   s.gpu);
      check_parity("rmsnorm_backward_partial_sums", s, c + 8);
      const std::vector<float> sc = s.cpu.download(), sg = s.gpu.download();
      for (std::int64_t r = 0; r < R; ++r) {
        back_cpu[r] += sc[r];
        back_gpu[r] += sg[r];
      }
    }
    DeviceTensor btotal_cpu(cpu_backend(), rs, back_cpu), btotal_gpu(test_backend(), rs, back_gpu);
    for (const CopyMode mode : kModes) {
      INFO(mode_name(mode));
      for (std::int64_t p = 0; p < parts; ++p) {
        Twin dx = gradient(ls, dtype, mode, 13), dg = gradient(lg, dtype, mode, 14);
        const NormGradModes modes{.dx = mode, .dgamma = mode};
        cpu_backend().rmsnorm_backward_apply(dyp[p].cpu, xp[p].cpu, gp[p].cpu, rstd[p].cpu,
                                             btotal_cpu, C, dx.cpu, dg.cpu, modes);
        test_backend().rmsnorm_backward_apply(dyp[p].gpu, xp[p].gpu, gp[p].gpu, rstd[p].gpu,
                                              btotal_gpu, C, dx.gpu, dg.gpu, modes);
        check_parity("rmsnorm_backward_apply dx", dx, 2 * C + 8);
        check_parity("rmsnorm_backward_apply dgamma", dg, C + R + 8);
      }
    }
  }
}

TEST_CASE("CUDA silu(gate)·up forward and backward equal the CPU backend",
          "[cuda][llama][swiglu]") {
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(to_string_view(dtype));
  const TensorShape xs = dims({37, 211});  // 7807 elements: more than one grid-stride pass
  const Twin gate = random_twin(xs, 20, dtype, 3.0f), up = random_twin(xs, 21, dtype),
             dy = random_twin(xs, 22, dtype);
  Twin y = output(xs, dtype);
  cpu_backend().silu_mul_forward(gate.cpu, up.cpu, y.cpu);
  test_backend().silu_mul_forward(gate.gpu, up.gpu, y.gpu);
  check_parity("silu_mul y", y, 8);
  for (const CopyMode mode : kModes) {
    INFO(mode_name(mode));
    Twin dg = gradient(xs, dtype, mode, 23), du = gradient(xs, dtype, mode, 24);
    cpu_backend().silu_mul_backward(gate.cpu, up.cpu, dy.cpu, dg.cpu, du.cpu, mode);
    test_backend().silu_mul_backward(gate.gpu, up.gpu, dy.gpu, dg.gpu, du.gpu, mode);
    check_parity("silu_mul dgate", dg, 12);
    check_parity("silu_mul dup", du, 8);
  }
}

TEST_CASE("CUDA rotary embedding forward and backward equal the CPU backend",
          "[cuda][llama][rotary]") {
  const DType dtype = CARTO_TEST_DTYPES();
  struct Case {
    TensorShape shape;
    RotaryArgs args;
  };
  const Case cases[] = {
      {dims({2, 3, 12, 16}), {.theta = 10000.0, .position_offset = 0}},
      {dims({2, 3, 12, 16}), {.theta = 10000.0, .position_offset = 1000}},
      {dims({7, 10}), {.theta = 500000.0, .position_offset = 5}},  // Llama 3's θ, rank 2
  };
  for (const Case& c : cases) {
    INFO(to_string_view(dtype) << ", x " << c.shape << ", position offset "
                               << c.args.position_offset << ", theta " << c.args.theta);
    const Twin x = random_twin(c.shape, 30, dtype), dy = random_twin(c.shape, 31, dtype);
    Twin y = output(c.shape, dtype);
    cpu_backend().rotary_forward(x.cpu, y.cpu, c.args);
    test_backend().rotary_forward(x.gpu, y.gpu, c.args);
    check_parity("rotary y", y, 6);
    // In place (y == x) on the GPU: the same bits as out of place.
    DeviceTensor inplace(test_backend(), c.shape, x.start, dtype);
    test_backend().rotary_forward(inplace, inplace, c.args);
    CHECK(inplace.download() == y.gpu.download());
    for (const CopyMode mode : kModes) {
      INFO(mode_name(mode));
      Twin dx = gradient(c.shape, dtype, mode, 32);
      cpu_backend().rotary_backward(dy.cpu, dx.cpu, c.args, mode);
      test_backend().rotary_backward(dy.gpu, dx.gpu, c.args, mode);
      check_parity("rotary dx", dx, 6);
    }
  }
}

TEST_CASE("CUDA Llama kernels on mixed dtypes in one call equal the CPU backend",
          "[cuda][llama][bf16]") {
  // bf16 activations with fp32 parameters and fp32 accumulated gradients (and the reverse), as a
  // mixed-precision plan passes them.
  const DType bf = DType::bf16, f32 = DType::fp32;
  const TensorShape xs = dims({6, 40}), gs = dims({40}), rs = dims({6});
  const Twin x = random_twin(xs, 60, bf, 2.0f), g = random_twin(gs, 61, f32),
             dy = random_twin(xs, 62, bf);
  Twin y = output(xs, bf), rstd = output(rs);
  cpu_backend().rmsnorm_forward(x.cpu, g.cpu, y.cpu, rstd.cpu, {});
  test_backend().rmsnorm_forward(x.gpu, g.gpu, y.gpu, rstd.gpu, {});
  check_parity("mixed rmsnorm y", y, 40 + 6);
  Twin dx = gradient(xs, f32, CopyMode::accumulate, 63),
       dg = gradient(gs, f32, CopyMode::accumulate, 64);
  const NormGradModes acc{.dx = CopyMode::accumulate, .dgamma = CopyMode::accumulate};
  cpu_backend().rmsnorm_backward(dy.cpu, x.cpu, g.cpu, rstd.cpu, dx.cpu, dg.cpu, acc);
  test_backend().rmsnorm_backward(dy.gpu, x.gpu, g.gpu, rstd.gpu, dx.gpu, dg.gpu, acc);
  check_parity("mixed rmsnorm dx", dx, 2 * 40 + 8);
  check_parity("mixed rmsnorm dgamma", dg, 40 + 6 + 8);

  const Twin up = random_twin(xs, 65, f32);
  Twin dgate = gradient(xs, f32, CopyMode::assign, 66),
       dup = gradient(xs, bf, CopyMode::assign, 67);
  cpu_backend().silu_mul_backward(x.cpu, up.cpu, dy.cpu, dgate.cpu, dup.cpu, CopyMode::assign);
  test_backend().silu_mul_backward(x.gpu, up.gpu, dy.gpu, dgate.gpu, dup.gpu, CopyMode::assign);
  check_parity("mixed silu_mul dgate", dgate, 12);
  check_parity("mixed silu_mul dup", dup, 8);

  const RotaryArgs rot{.theta = 10000.0, .position_offset = 17};
  Twin rx = gradient(xs, f32, CopyMode::accumulate, 68);
  cpu_backend().rotary_backward(dy.cpu, rx.cpu, rot, CopyMode::accumulate);
  test_backend().rotary_backward(dy.gpu, rx.gpu, rot, CopyMode::accumulate);
  check_parity("mixed rotary dx", rx, 6);
}

namespace {

// One attention call pair: q (and out, dout, dq) of q_shape, k, v (and dk, dv) of kv_shape,
// logsumexp of lse_shape; forward on each backend, then backward from its own forward in `mode`.
struct AttentionCase {
  std::string name;
  TensorShape q_shape, kv_shape, lse_shape;
  AttentionArgs args;
  std::int64_t group = 1;  // query heads summed into one key/value head
};

void check_attention(const AttentionCase& c, DType dtype) {
  const std::int64_t rank = static_cast<std::int64_t>(c.q_shape.rank());
  const std::int64_t d = c.q_shape.dims()[rank - 1].extent;
  const std::int64_t sq = c.q_shape.dims()[rank - 2].extent;
  const std::int64_t sk = c.kv_shape.dims()[2].extent;
  const Twin q = random_twin(c.q_shape, 40, dtype), k = random_twin(c.kv_shape, 41, dtype),
             v = random_twin(c.kv_shape, 42, dtype), dout = random_twin(c.q_shape, 43, dtype);
  Twin out = output(c.q_shape, dtype), lse = output(c.lse_shape);
  cpu_backend().attention_forward(q.cpu, k.cpu, v.cpu, out.cpu, lse.cpu, c.args);
  test_backend().attention_forward(q.gpu, k.gpu, v.gpu, out.gpu, lse.gpu, c.args);
  const std::int64_t mid_f = dtype == DType::bf16 ? 1 : 0, mid_b = dtype == DType::bf16 ? 3 : 0;
  check_parity(c.name + " out", out, d + 2 * sk + 8, mid_f);
  check_parity(c.name + " logsumexp", lse, d + sk + 8);
  for (const CopyMode mode : kModes) {
    INFO(mode_name(mode));
    Twin dq = gradient(c.q_shape, dtype, mode, 44), dk = gradient(c.kv_shape, dtype, mode, 45),
         dv = gradient(c.kv_shape, dtype, mode, 46);
    cpu_backend().attention_backward(q.cpu, k.cpu, v.cpu, out.cpu, lse.cpu, dout.cpu, dq.cpu,
                                     dk.cpu, dv.cpu, c.args, mode);
    test_backend().attention_backward(q.gpu, k.gpu, v.gpu, out.gpu, lse.gpu, dout.gpu, dq.gpu,
                                      dk.gpu, dv.gpu, c.args, mode);
    // dk and dv sum the group's query heads: group·Sq terms.
    const std::int64_t chain = 2 * d + 2 * c.group * std::max(sq, sk) + 12;
    check_parity(c.name + " dq", dq, chain, mid_b);
    check_parity(c.name + " dk", dk, chain, mid_b);
    check_parity(c.name + " dv", dv, chain, mid_b);
  }
}

}  // namespace

TEST_CASE("CUDA grouped-query fused attention forward and backward equal the CPU backend",
          "[cuda][attention][gqa]") {
  const DType dtype = CARTO_TEST_DTYPES();
  constexpr std::int64_t B = 2, N = 2, G = 3, S = 70, D = 16;
  const float scale = 0.25f;  // 1/sqrt(D)
  const RngStream rng{.seed = 7, .id = stream_id(RngPurpose::dropout, 12, 1)};
  std::vector<AttentionCase> cases;
  for (const float dropout : {0.0f, 0.2f}) {
    cases.push_back(
        {.name = "gqa whole, dropout " + std::to_string(dropout),
         .q_shape = dims({B, N, G, S, D}),
         .kv_shape = dims({B, N, S, D}),
         .lse_shape = dims({B, N, G, S}),
         .args = {.scale = scale, .masking = Masking::causal, .dropout = dropout, .rng = rng},
         .group = G});
  }
  // Query heads 1 and 2 of each group, query rows [40, 70) against every key: placed in the
  // global (B, N, G, S, S) probabilities.
  cases.push_back(
      {.name = "gqa shard of heads and queries",
       .q_shape = dims({B, N, 2, 30, D}),
       .kv_shape = dims({B, N, S, D}),
       .lse_shape = dims({B, N, 2, 30}),
       .args = {.scale = scale,
                .masking = Masking::causal,
                .dropout = 0.2f,
                .rng = rng,
                .placement = {.global_extents = {B, N, G, S, S}, .offset = {0, 0, 1, 40, 0}}},
       .group = 2});
  // Head dim 64 and one query head per group: the rank-5 form with g = 1.
  cases.push_back({.name = "gqa d 64, g 1",
                   .q_shape = dims({1, 3, 1, 33, 64}),
                   .kv_shape = dims({1, 3, 33, 64}),
                   .lse_shape = dims({1, 3, 1, 33}),
                   .args = {.scale = 0.125f, .masking = Masking::causal, .rng = rng},
                   .group = 1});
  // The multi-head form on a sequence and head shard (its dropout indices are the rank-4 ones).
  cases.push_back({.name = "mha shard of heads and queries",
                   .q_shape = dims({B, 2, 30, D}),
                   .kv_shape = dims({B, 2, S, D}),
                   .lse_shape = dims({B, 2, 30}),
                   .args = {.scale = scale,
                            .masking = Masking::causal,
                            .dropout = 0.2f,
                            .rng = rng,
                            .placement = {.global_extents = {B, 4, S, S}, .offset = {0, 2, 40, 0}}},
                   .group = 1});
  for (const AttentionCase& c : cases) {
    SECTION(c.name) {
      INFO(c.name << ", " << to_string_view(dtype));
      check_attention(c, dtype);
    }
  }
}
