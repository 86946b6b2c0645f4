// The sharded executor runs Llama plans and computes what one device computes: every strategy of
// every op of a one-block Llama alone (the other ops replicated) on meshes (2), (4) and (2x2), and
// a two-block Llama trained 5 steps under random, Megatron-style and searched plans on 2, 4 and
// 2x2 thread ranks, with ZeRO stages, checkpointing and micro-batches; the measured peak memory of
// the Megatron-style and searched plans within 5% of the schedule model's prediction.
//
// Tolerances, as test_executor.cpp derives them: fp32 sums in another order differ by rounding,
// so one forward/backward agrees to 1e-5 absolute and 5 AdamW steps to 1e-4 (losses relative,
// parameters absolute); a wrong plan (a missed all-reduce, a position offset not applied to a
// sequence shard, a query head paired with the wrong key/value head) moves values by their size.
#include <carto/cost/hardware.hpp>
#include <carto/runtime/executor.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <carto/search.hpp>
#include <carto/spec/text.hpp>
#include <catch2/catch.hpp>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "runtime/test_llama_executor_cases.hpp"

using namespace carto;
using namespace carto::testing;

namespace {

struct Grads {
  double loss = 0;
  std::vector<std::vector<float>> grads;
};

std::vector<Strategy> strategies_of(const Graph& g, const DeviceMesh& mesh,
                                    const std::vector<std::size_t>& index) {
  std::vector<Strategy> st;
  for (std::size_t k = 0; k < g.num_ops(); ++k)
    st.push_back(enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh,
                                      {.precision = Precision::fp32})
                     .at(index[k]));
  return st;
}

// One forward/backward on thread ranks: the loss and every parameter gradient (rank 0's view).
Grads one_step(const Graph& g, const DeviceMesh& mesh, const std::vector<std::size_t>& index,
               const TokenBatch& batch) {
  Grads out;
  std::mutex mutex;
  const std::vector<Strategy> st = strategies_of(g, mesh, index);
  std::vector<HostInput> inputs(2);
  inputs[0] = {.tensor = TensorId{0}, .ids = batch.ids};
  inputs[1] = {.tensor = TensorId{1}, .ids = batch.targets};
  run_threads(static_cast<int>(mesh.num_devices()), [&](Communicator& world) {
    cpu::CpuBackend backend;
    MeshComms comms(world, mesh);
    Executor ex(g, mesh, st, backend, comms, hardware::h100(), {.seed = 5});
    const double loss = ex.forward_backward(inputs);
    ex.finish_gradients();
    std::vector<std::vector<float>> grads;
    for (TensorId t : ex.parameters()) grads.push_back(ex.gradient(t));
    if (world.rank() == 0) {
      std::lock_guard lock(mutex);
      out = {.loss = loss, .grads = std::move(grads)};
    }
  });
  return out;
}

double largest_difference(const Grads& got, const Grads& ref) {
  double worst = std::abs(got.loss - ref.loss);
  for (std::size_t p = 0; p < ref.grads.size(); ++p)
    for (std::size_t e = 0; e < ref.grads[p].size(); ++e)
      worst = std::max(worst, static_cast<double>(std::abs(got.grads[p][e] - ref.grads[p][e])));
  return worst;
}

RunResult train(const Graph& g, const Plan& plan, int steps, std::int64_t global_batch) {
  RunResult out;
  std::mutex mutex;
  run_threads(static_cast<int>(plan.mesh.num_devices()), [&](Communicator& world) {
    RunResult r = train_rank(world, g, plan, steps, global_batch);
    if (world.rank() == 0) {
      std::lock_guard lock(mutex);
      out = std::move(r);
    }
  });
  return out;
}

}  // namespace

TEST_CASE("Llama: one device, the first loss is ln(V) and every loss is finite",
          "[executor][llama]") {
  const Graph g = tiny_llama(4);
  const DeviceMesh one = parse_mesh("1");
  const RunResult r = train(g, make_plan(g, one, replicated_strategies(g, one)), 5, 4);
  REQUIRE(r.losses.size() == 5);
  // A 0.02-normal initialisation gives logits near 0: the loss starts near ln(V).
  CHECK(std::abs(r.losses[0] - std::log(static_cast<double>(kTinyLlama.vocab))) < 0.2);
  for (const double l : r.losses) CHECK(std::isfinite(l));
}

TEST_CASE("Llama: every strategy of every op on (2), (4) and (2x2) equals one device",
          "[executor][llama]") {
  const TokenBatch batch = random_batch(4, 19);
  for (const AttentionKind attention : {AttentionKind::materialized, AttentionKind::fused}) {
    const Graph g = tiny_llama(4, attention, 1);
    const Grads ref =
        one_step(g, parse_mesh("1"), replicated_strategies(g, parse_mesh("1")), batch);
    std::int64_t runs = 0, failures = 0;
    std::map<OpKind, std::int64_t> per_kind;
    std::set<int> variants;
    for (const char* m : {"2", "4", "2x2"}) {
      const DeviceMesh mesh = parse_mesh(m);
      const std::vector<std::size_t> base = replicated_strategies(g, mesh);
      for (std::size_t k = 0; k < g.num_ops(); ++k) {
        const auto all = enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh,
                                              {.precision = Precision::fp32});
        for (std::size_t i = 0; i < all.size(); ++i) {
          std::vector<std::size_t> index = base;
          index[k] = i;
          const double worst = largest_difference(one_step(g, mesh, index, batch), ref);
          ++runs;
          ++per_kind[g.ops()[k].kind];
          variants.insert(static_cast<int>(all[i].sharding.variant));
          if (worst > 1e-5) {
            ++failures;
            UNSCOPED_INFO("mesh " << m << " op " << k << " (" << to_string_view(g.ops()[k].kind)
                                  << ") " << to_string(all[i]) << ": largest difference " << worst);
          }
        }
      }
    }
    std::ostringstream kinds;
    for (const auto& [kind, n] : per_kind) kinds << to_string_view(kind) << " " << n << ", ";
    INFO(to_string_view(attention) << " attention: " << runs << " runs (" << kinds.str() << ")");
    for (const OpKind kind : {OpKind::rmsnorm, OpKind::silu_mul, OpKind::rotary})
      CHECK(per_kind[kind] > 0);
    CHECK(per_kind[attention == AttentionKind::fused ? OpKind::fused_attention : OpKind::softmax] >
          0);
    CHECK(variants.size() >= 2);  // distributed statistics (and gathered K, V when fused) ran
    CHECK(failures == 0);
  }
}

TEST_CASE("Llama parity and memory: random, Megatron-style and searched plans equal one device",
          "[executor][llama]") {
  const HardwareProfile hw = hardware::h100();
  constexpr std::int64_t kBatch = 4;
  std::map<std::int64_t, RunResult> reference;
  auto reference_for = [&](std::int64_t micro) -> const RunResult& {
    if (!reference.contains(micro)) {
      const Graph g = tiny_llama(kBatch / micro);
      const DeviceMesh one = parse_mesh("1");
      reference[micro] =
          train(g, make_plan(g, one, replicated_strategies(g, one), 0, micro), 5, kBatch);
    }
    return reference[micro];
  };
  std::ostringstream table;
  table << "plan | predicted bytes | measured bytes | measured/predicted\n";
  int over = 0;
  auto run = [&](const Graph& g, const Plan& plan, const std::string& name, bool memory_checked) {
    INFO(name);
    const RunResult got = train(g, plan, 5, kBatch);
    const std::string problems = compare_runs(got, reference_for(plan.micro_batches));
    INFO(problems);
    CHECK(problems.empty());
    const PointCost predicted = evaluate_point(g, plan.mesh, hw,
                                               DpOptions{.precision = Precision::fp32,
                                                         .dropout_masks = DropoutMasks::regenerated,
                                                         .zero_stage = plan.zero_stage,
                                                         .micro_batches = plan.micro_batches},
                                               plan.strategy, plan_checkpoints(g, plan));
    const double ratio =
        static_cast<double>(got.peak_bytes) / static_cast<double>(predicted.peak_bytes);
    const bool bad = memory_checked && std::abs(ratio - 1.0) > 0.05;
    table << name << " | " << predicted.peak_bytes << " | " << got.peak_bytes << " | " << ratio
          << (memory_checked ? "" : " (not checked)") << (bad ? "  <-- past 5%" : "") << "\n";
    over += bad ? 1 : 0;
  };

  std::uint32_t seed = 1;
  for (const char* m : {"2", "4", "2x2"}) {
    const DeviceMesh mesh = parse_mesh(m);
    for (int zero = 0; zero <= 3; ++zero) {
      const std::int64_t micro = zero % 2 == 1 ? 2 : 1;
      const bool ckpt = zero >= 2;
      const Graph g = tiny_llama(kBatch / micro);
      run(g, make_plan(g, mesh, random_strategies(g, mesh, seed), zero, micro, ckpt),
          "random#" + std::to_string(seed) + " mesh " + m + " zero " + std::to_string(zero) +
              " micro " + std::to_string(micro) + (ckpt ? " ckpt" : ""),
          false);
      ++seed;
    }
  }
  for (const char* m : {"tp=2", "tp=4", "dp=2,tp=2"}) {
    const DeviceMesh mesh = parse_mesh(m);
    for (int zero = 0; zero <= 3; ++zero) {
      const bool ckpt = zero % 2 == 1;
      const Graph g = tiny_llama(kBatch);
      run(g, make_plan(g, mesh, llama_megatron_indices(g, mesh), zero, 1, ckpt),
          std::string("megatron mesh ") + m + " zero " + std::to_string(zero) +
              (ckpt ? " ckpt" : ""),
          true);
    }
  }
  for (const char* m : {"2", "4", "2x2"}) {
    const DeviceMesh mesh = parse_mesh(m);
    const Graph g = tiny_llama(kBatch);
    const DpOptions dp{.precision = Precision::fp32,
                       .dropout_masks = DropoutMasks::regenerated,
                       .tolerance = mesh.num_axes() > 1 ? 0.05 : 0.0};
    const DpResult r = dp_frontier(g, mesh, hw, dp);
    REQUIRE(!r.frontier.empty());
    for (const DpPoint* p : {&r.frontier.front(), &r.frontier.back()}) {
      Plan plan;
      detail::describe_plan(plan, g, mesh, hw, dp, *p);
      run(g, plan,
          std::string("searched mesh ") + m + (p == &r.frontier.front() ? " fastest" : " leanest"),
          true);
    }
  }
  WARN(table.str());
  CHECK(over == 0);
}
