// The Megatron layer as a check: one GPT block under the strategies of Megatron-LM's
// tensor-parallel plan (Shoeybi et al. 2019; Korthikanti et al. 2022, arXiv 2205.05198) must give
// the published per-layer activation bytes and exactly the published collectives. Every strategy
// used is looked up in enumerate_strategies, so the check also shows the enumeration contains
// Megatron's plan.
#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "support/megatron_plan.hpp"

using namespace carto;
using carto::testing::megatron_plan;
using carto::testing::SequenceParallel;

namespace {

struct Model {
  std::int64_t s, b, h, a;
};

const GroupCost& block(const AssignmentCost& c) {
  for (const GroupCost& grp : c.groups) {
    if (grp.name == LayerName("block.0")) return grp;
  }
  FAIL("no group block.0");
  return c.groups.front();
}

struct Counted {
  int count = 0;
  std::int64_t bytes = 0;  // of each; -1 when they differ
};

Counted count(const GroupCost& grp, CommRole role, Phase phase, Collective kind) {
  Counted c;
  for (const CommEvent& e : grp.collectives) {
    if (e.role != role || e.phase != phase || e.kind != kind) continue;
    c.bytes = c.count == 0 || c.bytes == e.bytes ? e.bytes : -1;
    ++c.count;
  }
  return c;
}

AssignmentCost evaluate_block(const Model& m, std::int64_t t, SequenceParallel sp,
                              std::int64_t dp = 1) {
  const GptConfig config{
      .name = "check", .layers = 1, .hidden = m.h, .heads = m.a, .vocab = 512, .seq = m.s};
  const Graph g = build_gpt(config, {.batch = m.b,
                                     .precision = Precision::mixed_bf16,
                                     .attention = AttentionKind::materialized,
                                     .dropout = 0.1,
                                     .layernorm_stats = LayerNormStats::ignored});
  const DeviceMesh mesh = dp > 1 ? DeviceMesh{{"dp", dp}, {"tp", t}} : DeviceMesh{{"tp", t}};
  return evaluate_assignment(g, mesh, hardware::h100(), megatron_plan(g, mesh, m.h, sp));
}

constexpr Model kModels[] = {{.s = 64, .b = 2, .h = 64, .a = 8},
                             {.s = 128, .b = 1, .h = 96, .a = 8},
                             {.s = 32, .b = 4, .h = 128, .a = 16}};

}  // namespace

TEST_CASE("Megatron tensor parallelism: activation bytes and two all-reduces each way",
          "[search][megatron]") {
  for (const Model& m : kModels) {
    for (const std::int64_t t : {1, 2, 4, 8}) {
      INFO("s " << m.s << " b " << m.b << " h " << m.h << " a " << m.a << " t " << t);
      const GroupCost grp = block(evaluate_block(m, t, SequenceParallel::off));
      const std::int64_t sbh = m.s * m.b * m.h;
      // Korthikanti et al. 2022, Table 2 (tensor parallel): s b h (10 + 24/t + 5 a s / (h t))
      // bytes, 16-bit values, 1-byte dropout masks, layernorm statistics ignored.
      REQUIRE(grp.saved_bytes == 10 * sbh + 24 * sbh / t + 5 * m.a * m.s * m.s * m.b / t);
      if (t == 1) {
        REQUIRE(grp.collectives.empty());
        continue;
      }
      // Shoeybi et al. 2019 §3 (Megatron-LM), Fig. 4: two all-reduces in forward (g after the
      // attention projection and after the second MLP linear) and two in backward (f before QKV and
      // before the first MLP linear), each of the s·b·h activations: bf16, 2sbh bytes.
      const Counted fwd = count(grp, CommRole::reshard, Phase::forward, Collective::all_reduce);
      const Counted bwd = count(grp, CommRole::reshard, Phase::backward, Collective::all_reduce);
      REQUIRE(fwd.count == 2);
      REQUIRE(fwd.bytes == 2 * sbh);
      REQUIRE(bwd.count == 2);
      REQUIRE(bwd.bytes == 2 * sbh);
      REQUIRE(grp.collectives.size() == 4);  // nothing else: no gradient reduction, no other move
    }
  }
}

TEST_CASE(
    "Megatron tensor + sequence parallelism: activation bytes, all-gathers and reduce-scatters",
    "[search][megatron]") {
  for (const Model& m : kModels) {
    for (const std::int64_t t : {1, 2, 4, 8}) {
      INFO("s " << m.s << " b " << m.b << " h " << m.h << " a " << m.a << " t " << t);
      const GroupCost grp = block(evaluate_block(m, t, SequenceParallel::on));
      const std::int64_t sbh = m.s * m.b * m.h;
      // Korthikanti et al. 2022, Table 2 (tensor + sequence parallel): s b h (34/t + 5 a s / (h
      // t)).
      REQUIRE(grp.saved_bytes == 34 * sbh / t + 5 * m.a * m.s * m.s * m.b / t);
      if (t == 1) continue;
      // Korthikanti et al. 2022 §4.2.2, Fig. 5: g is an all-gather in forward and a reduce-scatter
      // in backward, ḡ the reverse; two of each per layer and direction, each over s·b·h values
      // (nccl-tests' S: the gathered output, the full reduce-scatter input: 2sbh bytes).
      for (const Phase phase : {Phase::forward, Phase::backward}) {
        const Counted ag = count(grp, CommRole::reshard, phase, Collective::all_gather);
        const Counted rs = count(grp, CommRole::reshard, phase, Collective::reduce_scatter);
        REQUIRE(ag.count == 2);
        REQUIRE(ag.bytes == 2 * sbh);
        REQUIRE(rs.count == 2);
        REQUIRE(rs.bytes == 2 * sbh);
        REQUIRE(count(grp, CommRole::reshard, phase, Collective::all_reduce).count == 0);
      }
      // The column-parallel linears keep their input split along the sequence and gather it again
      // in backward (Megatron-LM megatron/core/tensor_parallel/layers.py,
      // LinearWithGradAccumulationAndAsyncCommunication; Korthikanti et al. §4.2.2).
      const Counted regather =
          count(grp, CommRole::regather, Phase::backward, Collective::all_gather);
      REQUIRE(regather.count == 2);
      REQUIRE(regather.bytes == 2 * sbh);
      // Parameters that see sequence-split inputs (both layernorms' gamma and beta, the
      // row-parallel biases) get Partial(tp) gradients, all-reduced over tp as Megatron-LM does for
      // its sequence-parallel parameters (megatron/core/distributed/finalize_model_grads.py).
      const Counted sync =
          count(grp, CommRole::gradient_sync, Phase::backward, Collective::all_reduce);
      REQUIRE(sync.count == 6);
      REQUIRE(sync.bytes == 2 * m.h);
      REQUIRE(grp.collectives.size() == 8 + 2 + 6);
    }
  }
}

TEST_CASE(
    "Megatron with data parallelism: activations per local batch, gradients all-reduced over dp",
    "[search][megatron]") {
  const Model m{.s = 64, .b = 4, .h = 64, .a = 8};
  const std::int64_t t = 4;
  const std::int64_t dp = 2;
  const GroupCost grp = block(evaluate_block(m, t, SequenceParallel::off, dp));
  const std::int64_t b = m.b / dp;  // the local micro-batch
  const std::int64_t sbh = m.s * b * m.h;
  REQUIRE(grp.saved_bytes == 10 * sbh + 24 * sbh / t + 5 * m.a * m.s * m.s * b / t);
  // Every parameter's gradient is Partial(dp): one all-reduce each of its local bytes. The block's
  // local parameters: QKV (h·3h + 3h)/t, projection h·h/t + h, MLP (h·4h + 4h)/t + 4h·h/t + h, two
  // layernorms 2h each; bf16.
  const std::int64_t h = m.h;
  const std::int64_t local_params =
      (3 * h * h + 3 * h) / t + h * h / t + h + (4 * h * h + 4 * h) / t + 4 * h * h / t + h + 4 * h;
  std::int64_t synced = 0;
  int syncs = 0;
  for (const CommEvent& e : grp.collectives) {
    if (e.role != CommRole::gradient_sync) continue;
    REQUIRE(e.axis == AxisName("dp"));
    synced += e.bytes;
    ++syncs;
  }
  REQUIRE(syncs == 12);  // 4 weights, 4 biases, 2 gammas, 2 betas
  REQUIRE(synced == 2 * local_params);
  REQUIRE(grp.param_bytes == 2 * local_params);
  REQUIRE(count(grp, CommRole::reshard, Phase::forward, Collective::all_reduce).count == 2);
  REQUIRE(count(grp, CommRole::reshard, Phase::backward, Collective::all_reduce).count == 2);
}
