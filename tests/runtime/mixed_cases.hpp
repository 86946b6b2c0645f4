// tests/runtime/mixed_cases.hpp — mixed-bf16 parity bounds.
#pragma once

#include <carto/runtime/bf16.hpp>
#include <cmath>
#include <sstream>
#include <string>

#include "runtime/executor_cases.hpp"

namespace carto::testing {

// Mixed-bf16 training against a reference: the bounds derived from bf16's unit roundoff, shared
// by the CPU parity tests (test_executor.cpp) and the CUDA ones (tests/cuda/test_cuda_parity.cpp).
//
// Tolerances. A sharded mixed-bf16 run and the single-device one compute the same function but do
// not round alike: a contraction split over devices stores each device's partial sum in bf16 before
// the (fp32, rank-order) reduction rounds the sum once more, where one device rounds the whole sum
// once; a data-parallel parameter gradient is such a sum over the batch. At such a stage the two
// values differ by up to u·Σ|partials| + 2u·|sum|. From the first stage where they differ, every
// later bf16 store (each op's output in forward, each input gradient in backward: N = 2·ops stores
// on the way from a parameter to the loss and back) rounds a slightly different value, and two
// values a fraction of an ulp apart round to neighbours with a probability of that fraction; so
// after the first divergence the two runs' roundings behave as independent: each store adds to the
// norm-wise relative difference a rounding error of RMS u/√3 per run, uncorrelated across stores
// (an RMS model, not a worst case), giving ρ = sqrt(2·N/3)·u for two bf16 runs and sqrt(N/3)·u
// between a bf16 run and the fp32 run (which rounds only at 2^-24, negligible here).
//  - Parameters. The runs use AdamW with ε = 1 ≫ sqrt(v̂) (lr 0.5): the update is lr·m̂/(1+√v̂),
//    linear in the gradients to within √v̂ ≪ 1. (With the default ε = 1e-8 the update is close to
//    lr·sign(g), and an element whose gradient is below its rounding error flips its step: no bound
//    on u limits that.) So the updates Δ = p_S - p_0 of the two runs differ norm-wise by the
//    gradients' relative difference: ‖Δ - Δ_ref‖ / ‖Δ_ref‖ <= 2ρ (a factor 2 for the path's gain
//    and the RMS model's spread). A run one step short misses a whole update (≈ 1/S of Δ), and a
//    run on other batches has other gradients: both are far past it.
//  - Losses. A loss is the mean over T tokens of lse(z) - z_target, each moved by at most 2·|δz|
//    (the softmax's gradient has ℓ1 norm <= 2) with |δz| of RMS ρ·max|z| per logit, independent
//    across tokens: |ΔL| <= 4·sqrt(1/T)·ρ·max|z| (4 RMS widths), max|z| measured on the reference.

inline constexpr std::int64_t kMixedBatch = 4;
inline constexpr int kMixedSteps = 3;

inline TrainSetup linear_adamw() {
  return {.trainer = {.seed = 77, .adamw = {.learning_rate = 0.5f, .epsilon = 1.0f}},
          .batch_seed = 1000,
          .diagnostics = true,
          .split_workspace = true};
}

inline constexpr GptConfig kMixed{.name = "small",
                                  .layers = 2,
                                  .hidden = 128,
                                  .heads = 4,
                                  .vocab = kTiny.vocab,
                                  .seq = kTiny.seq};

inline Graph mixed_graph(std::int64_t batch) {
  return build_gpt(kMixed, {.batch = batch, .precision = Precision::mixed_bf16, .dropout = 0.1});
}

// ‖Δ - Δ_ref‖ / ‖Δ_ref‖ over all parameters, Δ = final - initial (the reference's initial).
inline double update_error(const RunResult& got, const RunResult& ref) {
  double num = 0, den = 0;
  for (std::size_t p = 0; p < ref.params.size(); ++p) {
    for (std::size_t i = 0; i < ref.params[p].size(); ++i) {
      const double d_ref = static_cast<double>(ref.params[p][i]) - ref.initial[p][i];
      const double d_got = static_cast<double>(got.params[p][i]) - ref.initial[p][i];
      num += (d_got - d_ref) * (d_got - d_ref);
      den += d_ref * d_ref;
    }
  }
  return std::sqrt(num / den);
}

struct MixedBounds {
  double rho = 0;     // norm-wise relative difference of the gradients
  double update = 0;  // on update_error
  double loss = 0;    // on |ΔL| per step
};

// `runs_rounding` is 2 between two bf16 runs, 1 between a bf16 run and the fp32 run.
inline MixedBounds mixed_bounds(const Graph& g, const RunResult& ref, int runs_rounding) {
  const double stores = 2.0 * static_cast<double>(g.num_ops());
  const double tokens = static_cast<double>(kMixedBatch * kTiny.seq);
  MixedBounds b;
  b.rho = std::sqrt(runs_rounding * stores / 3.0) * kBf16Unit;
  b.update = 2 * b.rho;
  b.loss = 4 * std::sqrt(1.0 / tokens) * b.rho * ref.logit_max;
  return b;
}

// An empty string when `got` is within the bounds of `ref`; else what is past them. `worst`
// collects the largest update error and loss difference, each over its bound.
inline std::string compare_mixed(const RunResult& got, const RunResult& ref, const MixedBounds& b,
                                 double* worst_update = nullptr, double* worst_loss = nullptr) {
  if (got.params.size() != ref.params.size()) return "different numbers of parameters";
  std::string problems;
  const double e = update_error(got, ref);
  if (worst_update != nullptr) *worst_update = std::max(*worst_update, e / b.update);
  if (!(e <= b.update)) problems += detail::concat("update error ", e, " > ", b.update, "; ");
  for (std::size_t s = 0; s < std::min(got.losses.size(), ref.losses.size()); ++s) {
    const double d = std::abs(got.losses[s] - ref.losses[s]);
    if (worst_loss != nullptr) *worst_loss = std::max(*worst_loss, d / b.loss);
    if (!(d <= b.loss))
      problems += detail::concat("step ", s, ": loss ", got.losses[s], " vs ", ref.losses[s],
                                 " (bound ", b.loss, "); ");
  }
  if (got.losses.size() != ref.losses.size())
    problems += detail::concat(got.losses.size(), " steps vs ", ref.losses.size(), "; ");
  return problems;
}

inline std::string describe(const RunResult& got, const RunResult& ref, const MixedBounds& b) {
  std::ostringstream o;
  o << "update error " << update_error(got, ref) << " (bound " << b.update << "), losses";
  for (std::size_t s = 0; s < std::min(got.losses.size(), ref.losses.size()); ++s)
    o << " " << got.losses[s] - ref.losses[s];
  o << " off (bound " << b.loss << ")";
  return o.str();
}

}  // namespace carto::testing
