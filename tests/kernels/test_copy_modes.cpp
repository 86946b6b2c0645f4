// The store modes of the backward kernels (backend.hpp's CopyMode): `assign` writes every element
// of a gradient output whatever the memory held, `accumulate` adds to it, and each output of a
// call follows its own mode.
//
// Reference: the accumulate call on zeroed outputs, which the other kernel tests hold to finite
// differences and double references. For every kernel and dtype the test runs the call again with
// each output either assigned into memory filled with NaN (any element the kernel skipped, or read
// before writing, stays NaN) or accumulated onto random values s; an assigned output must equal
// the reference exactly (0 + v == v, so the two modes agree to the bit), an accumulated one must
// equal s + reference within the rounding of the one addition (bf16: the store's rounding of the
// reference counts as one intermediate, kernel_support.hpp's tolerance).
#include <carto/runtime/rng.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/kernel_support.hpp"

namespace carto::test {
namespace {

using Outputs = std::vector<TensorView>;
using Modes = std::vector<CopyMode>;
using Kernel = std::function<void(const Outputs&, const Modes&)>;

// The mode patterns a call with `n` outputs is run in: all assigned, all accumulated and, when
// each output has its own mode, the two alternations.
std::vector<Modes> patterns(std::size_t n, bool per_output) {
  std::vector<Modes> out{Modes(n, CopyMode::assign), Modes(n, CopyMode::accumulate)};
  if (per_output && n > 1) {
    Modes a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = i % 2 == 0 ? CopyMode::assign : CopyMode::accumulate;
      b[i] = i % 2 == 0 ? CopyMode::accumulate : CopyMode::assign;
    }
    out.push_back(a);
    out.push_back(b);
  }
  return out;
}

// `chain`: the roundings of an accumulated output's additions (rows summed into a per-column
// gradient add one each).
void check_modes(Backend& backend, DType dtype, const std::vector<TensorShape>& shapes,
                 const Kernel& kernel, bool per_output, std::int64_t chain) {
  const std::size_t n = shapes.size();
  auto views = [](const std::vector<std::unique_ptr<DeviceTensor>>& ts) {
    Outputs v;
    for (const auto& t : ts) v.push_back(t->view());
    return v;
  };
  std::vector<std::unique_ptr<DeviceTensor>> zero;
  for (const TensorShape& s : shapes)
    zero.push_back(std::make_unique<DeviceTensor>(zeros(backend, s, dtype)));
  kernel(views(zero), Modes(n, CopyMode::accumulate));
  std::vector<std::vector<float>> ref;
  for (const auto& t : zero) ref.push_back(t->download());
  for (std::size_t i = 0; i < n; ++i) {
    bool nonzero = false;
    for (const float x : ref[i]) nonzero = nonzero || x != 0.0f;
    REQUIRE(nonzero);  // a reference of zeros would test nothing
  }

  for (const Modes& modes : patterns(n, per_output)) {
    std::vector<std::unique_ptr<DeviceTensor>> out;
    std::vector<std::vector<float>> start(n);
    for (std::size_t i = 0; i < n; ++i) {
      out.push_back(std::make_unique<DeviceTensor>(backend, shapes[i], dtype));
      if (modes[i] == CopyMode::assign) {
        backend.fill(*out[i], std::numeric_limits<float>::quiet_NaN());
      } else {
        start[i] = random_input(shapes[i].numel(), 900 + static_cast<std::uint32_t>(i), dtype);
        out[i]->upload(start[i]);
      }
    }
    kernel(views(out), modes);
    for (std::size_t i = 0; i < n; ++i) {
      INFO("output " << i << (modes[i] == CopyMode::assign ? " assigned" : " accumulated"));
      const std::vector<float> got = out[i]->download();
      if (modes[i] == CopyMode::assign) {
        std::int64_t differ = 0;
        for (std::size_t j = 0; j < got.size(); ++j) differ += !(got[j] == ref[i][j]);
        CHECK(differ == 0);
      } else {
        std::vector<double> want(got.size());
        for (std::size_t j = 0; j < got.size(); ++j) {
          want[j] = static_cast<double>(start[i][j]) + static_cast<double>(ref[i][j]);
        }
        CARTO_CHECK_CLOSE("accumulated", got, want, tolerance(dtype, chain, max_abs(want), 1));
      }
    }
  }
}

DeviceTensor input(Backend& backend, const TensorShape& s, std::uint32_t object, DType dtype,
                   float stddev = 1.0f) {
  return {backend, s, random_input(s.numel(), object, dtype, stddev), dtype};
}

}  // namespace

TEST_CASE("copy modes: elementwise backward kernels assign or accumulate", "[kernels][modes]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const TensorShape s{{"b", 3}, {"n", 257}};
  const DeviceTensor x = input(backend, s, 1, dtype, 2.0f), dy = input(backend, s, 2, dtype);
  SECTION("gelu") {
    check_modes(
        backend, dtype, {s},
        [&](const Outputs& o, const Modes& m) { backend.gelu_backward(x, dy, o[0], m[0]); }, false,
        2);
  }
  SECTION("dropout") {
    const DropoutArgs args{.probability = 0.3f,
                           .rng = {.seed = 5, .id = stream_id(RngPurpose::dropout, 2, 1)}};
    check_modes(
        backend, dtype, {s},
        [&](const Outputs& o, const Modes& m) { backend.dropout_backward(dy, o[0], args, m[0]); },
        false, 2);
  }
  SECTION("bias") {
    const TensorShape b{{"n", 257}};
    check_modes(
        backend, dtype, {b},
        [&](const Outputs& o, const Modes& m) { backend.bias_backward(dy, o[0], m[0]); }, false,
        3 + 2);
  }
}

TEST_CASE("copy modes: softmax, layernorm and cross-entropy backward", "[kernels][modes]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  SECTION("causal softmax: the masked entries are assigned 0") {
    const TensorShape s{{"h", 2}, {"q", 9}, {"k", 9}};
    const SoftmaxArgs args{.scale = 0.5f, .masking = Masking::causal};
    DeviceTensor y(backend, s, dtype);
    backend.softmax_forward(input(backend, s, 10, dtype), y, args);
    const DeviceTensor dy = input(backend, s, 11, dtype);
    check_modes(
        backend, dtype, {s},
        [&](const Outputs& o, const Modes& m) {
          backend.softmax_backward(y, dy, o[0], args, m[0]);
        },
        false, 2);
  }
  const std::int64_t rows = 7, c = 33;
  const TensorShape xs{{"rows", rows}, {"c", c}}, cs{{"c", c}}, rs{{"rows", rows}};
  const DeviceTensor x = input(backend, xs, 20, dtype), g = input(backend, cs, 21, dtype),
                     b = input(backend, cs, 22, dtype), dy = input(backend, xs, 23, dtype);
  DeviceTensor y(backend, xs, dtype), mean(backend, rs), rstd(backend, rs);
  backend.layernorm_forward(x, g, b, y, mean, rstd, {});
  auto modes_of = [](const Modes& m) {
    return NormGradModes{.dx = m[0], .dgamma = m[1], .dbeta = m[2]};
  };
  SECTION("layernorm: dx, dgamma, dbeta each in its own mode") {
    check_modes(
        backend, dtype, {xs, cs, cs},
        [&](const Outputs& o, const Modes& m) {
          backend.layernorm_backward(dy, x, g, mean, rstd, o[0], o[1], o[2], modes_of(m));
        },
        true, rows + 2);
  }
  SECTION("layernorm with split columns: the apply call") {
    const TensorShape ss{{"rows", rows}, {"stats", 2}};
    DeviceTensor sums(backend, ss);
    backend.layernorm_backward_partial_sums(dy, x, g, mean, rstd, sums);
    check_modes(
        backend, dtype, {xs, cs, cs},
        [&](const Outputs& o, const Modes& m) {
          backend.layernorm_backward_apply(dy, x, g, mean, rstd, sums, c, o[0], o[1], o[2],
                                           modes_of(m));
        },
        true, rows + 2);
  }
  SECTION("cross-entropy, a vocab shard that holds some of the targets") {
    const std::int64_t v = 19;
    const TensorShape ls{{"rows", rows}, {"v", v}};
    const DeviceTensor logits = input(backend, ls, 30, dtype);
    const std::vector<std::int32_t> ids{3, 25, 0, 18, 30, 7, 21};  // rows >= 19 are not here
    const DeviceIds targets(backend, rs, ids);
    const CrossEntropyArgs args{.vocab_offset = 0, .token_count = rows};
    DeviceTensor row_max(backend, rs), sum_exp(backend, rs), target(backend, rs),
        loss(backend, {{"loss", 1}}), lse(backend, rs);
    backend.cross_entropy_row_max(logits, row_max);
    backend.cross_entropy_sum_exp(logits, row_max, sum_exp);
    backend.cross_entropy_target_logit(logits, targets, target, args);
    backend.cross_entropy_loss(row_max, sum_exp, target, loss, lse, args);
    const DeviceTensor dloss(backend, {{"loss", 1}}, std::vector<float>{1.5f});
    check_modes(
        backend, dtype, {ls},
        [&](const Outputs& o, const Modes& m) {
          backend.cross_entropy_backward(logits, targets, lse, dloss, o[0], args, m[0]);
        },
        false, 2);
  }
}

TEST_CASE("copy modes: embedding, attention and GEMM", "[kernels][modes]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  SECTION("embedding: assign zeroes the rows no token hits") {
    const TensorShape table{{"v", 6}, {"h", 10}}, out{{"n", 5}, {"h", 10}};
    const DeviceTensor dout = input(backend, out, 40, dtype);
    const DeviceIds ids(backend, {{"n", 5}},
                        {9, 10, 12, 9, 15});  // shard rows 8..13 hit: 9, 10, 12
    check_modes(
        backend, dtype, {table},
        [&](const Outputs& o, const Modes& m) {
          backend.embedding_backward(dout, ids, o[0], {.vocab_offset = 8}, m[0]);
        },
        false, 3);
  }
  SECTION("causal attention with dropout: dq, dk, dv") {
    const TensorShape s{{"b", 1}, {"a", 2}, {"s", 37}, {"d", 8}}, ls{{"b", 1}, {"a", 2}, {"s", 37}};
    const DeviceTensor q = input(backend, s, 50, dtype), k = input(backend, s, 51, dtype),
                       v = input(backend, s, 52, dtype), dout = input(backend, s, 53, dtype);
    const AttentionArgs args{.scale = 0.35f,
                             .masking = Masking::causal,
                             .dropout = 0.2f,
                             .rng = {.seed = 3, .id = stream_id(RngPurpose::dropout, 4, 0)}};
    DeviceTensor out(backend, s, dtype), lse(backend, ls);
    backend.attention_forward(q, k, v, out, lse, args);
    check_modes(
        backend, dtype, {s, s, s},
        [&](const Outputs& o, const Modes& m) {
          REQUIRE((m[0] == m[1] && m[1] == m[2]));
          backend.attention_backward(q, k, v, out, lse, dout, o[0], o[1], o[2], args, m[0]);
        },
        false, 2 * 37 + 2);
  }
  SECTION("GEMM: beta = 0 assigns, beta = 1 accumulates") {
    const TensorShape as{{"m", 9}, {"k", 13}}, bs{{"k", 13}, {"n", 11}}, cs{{"m", 9}, {"n", 11}};
    const DeviceTensor a = input(backend, as, 60, dtype), b = input(backend, bs, 61, dtype);
    check_modes(
        backend, dtype, {cs},
        [&](const Outputs& o, const Modes& m) {
          backend.gemm(a, b, o[0], {.beta = m[0] == CopyMode::assign ? 0.0f : 1.0f});
        },
        false, 2);
  }
}

}  // namespace carto::test
