// Sharded training on one GPU equals unsharded training on one GPU: the executor runs a 2-layer GPT
// (tests/runtime/executor_cases.hpp's kTiny) for 5 steps on loopback meshes of 2, 4 and 2x2 ranks
// (every rank a host thread with its own CudaBackend and stream on GPU 0, LoopbackComm between
// them), under a Megatron-style plan and plans the search picks, and must end with the losses and
// parameters of the one-rank run. The one-rank GPU run itself must match the CPU backend's. Beside
// parity, each run's measured peak memory (rank 0, every allocation through the memory tracker)
// must be within 5% of the schedule model's prediction for the plan (search/price.hpp), as on the
// CPU (tests/runtime/test_executor.cpp).
//
// Tolerances, fp32 (as test_executor.cpp argues): a sharded run sums the same products in another
// order, so values differ by rounding; after 5 AdamW steps parameters agree to 1e-4 absolute and
// losses to 1e-4 relative, while a wrong plan changes values by their own size (1e-2 .. 1). The GPU
// against the CPU: different kernels, the same argument.
//
// Precision is a field of each case, and plans and references follow it (mixed() for mixed bf16).
// Mixed-bf16 runs are held to the bounds derived from bf16's unit roundoff in
// tests/runtime/mixed_cases.hpp (the CPU's), on its smaller model and linear AdamW.
//
// With CARTO_GPU_REPORT set to a file name, each case appends one line to it (scripts/gpu-check
// prints them): "parity<TAB>name<TAB>ok|FAIL<TAB>detail" and
// "memory<TAB>name<TAB>predicted<TAB>measured<TAB>ratio".
#include <carto/cost/hardware.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/runtime/executor.hpp>
#include <carto/runtime/trainer.hpp>
#include <carto/search.hpp>
#include <carto/search/strategy.hpp>
#include <carto/spec/text.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cuda/cuda_backend.hpp>
#include <cuda/loopback_comm.hpp>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/executor_cases.hpp"
#include "runtime/mixed_cases.hpp"
#include "support/megatron_plan.hpp"

using namespace carto;
using namespace carto::testing;

namespace {

constexpr std::int64_t kBatch = 4;
constexpr int kSteps = 5;

enum class PlanKind : std::uint8_t { megatron, fastest, leanest };

struct ParityCase {
  std::string mesh;
  PlanKind kind = PlanKind::megatron;
  Precision precision = Precision::fp32;
  AttentionKind attention = AttentionKind::materialized;
};

Graph parity_graph(const ParityCase& c) {
  return build_gpt(
      kTiny, {.batch = kBatch, .precision = c.precision, .attention = c.attention, .dropout = 0.1});
}

DpOptions dp_options(const ParityCase& c, const DeviceMesh& mesh) {
  // The exact DP of two blocks on a 2-D mesh takes minutes; a 5% memory tolerance prunes it (the
  // CPU matrix does the same).
  return {.precision = c.precision,
          .dropout_masks = DropoutMasks::regenerated,
          .tolerance = mesh.num_axes() > 1 ? 0.05 : 0.0};
}

Plan plan_for(const ParityCase& c, const Graph& g, const HardwareProfile& hw) {
  const DeviceMesh mesh = parse_mesh(c.mesh);
  if (c.kind == PlanKind::megatron) {
    const Plan p =
        make_plan(g, mesh, megatron_strategy_indices(g, mesh, kTiny.hidden, SequenceParallel::off));
    return c.precision == Precision::mixed_bf16 ? mixed(p) : p;
  }
  const DpOptions dp = dp_options(c, mesh);
  const DpResult r = dp_frontier(g, mesh, hw, dp);
  REQUIRE(!r.frontier.empty());
  Plan plan;
  detail::describe_plan(plan, g, mesh, hw, dp,
                        c.kind == PlanKind::fastest ? r.frontier.front() : r.frontier.back());
  return plan;
}

std::string describe(const ParityCase& c) {
  const char* kind = c.kind == PlanKind::megatron  ? "megatron"
                     : c.kind == PlanKind::fastest ? "searched (fastest)"
                                                   : "searched (leanest)";
  return std::string(kind) + " mesh " + c.mesh + " " + std::string(to_string_view(c.precision)) +
         " " + std::string(to_string_view(c.attention)) + " attention";
}

// One rank's part of training, as executor_cases.hpp's train_rank, on a given backend (the
// setup's diagnostics too; its split_workspace is the CPU's and is not used here).
RunResult train_rank_on(Backend& backend, Communicator& world, const Graph& g, const Plan& plan,
                        int steps, std::int64_t batch, const TrainSetup& setup) {
  const HardwareProfile hw = hardware::h100();
  RunResult out;
  MeshComms comms(world, plan.mesh);
  Trainer trainer(g, plan, backend, comms, hw, setup.trainer);
  if (setup.diagnostics) {
    for (TensorId t : trainer.executor().parameters())
      out.initial.push_back(trainer.executor().parameter(t));
  }
  trainer.memory().reset_peak();  // the set-up's temporaries are not part of a step
  for (int s = 0; s < steps; ++s) {
    out.losses.push_back(
        trainer.step(random_batch(batch, setup.batch_seed + static_cast<std::uint32_t>(s))));
  }
  out.peak_bytes = trainer.memory().peak_bytes();
  out.at_peak = trainer.memory().at_peak();
  if (setup.diagnostics && steps > 0) {
    out.logit_max =
        logit_max(trainer, g, random_batch(batch / plan.micro_batches, setup.batch_seed + 999));
  }
  for (TensorId t : trainer.executor().parameters())
    out.params.push_back(trainer.executor().parameter(t));
  return out;
}

// What the device says besides the tracker: the caching allocator's bytes held from cudaMalloc
// (rank 0), and the growth of the device's used memory (cudaMemGetInfo, all ranks of the loopback
// mesh together: allocator blocks, cuBLASLt handles, streams) from before the run to its end with
// every rank's backend still alive.
struct DeviceMemory {
  std::int64_t reserved_bytes = 0;
  std::int64_t driver_bytes = 0;
};

// The plan trained on loopback ranks on GPU 0; rank 0's result.
RunResult train_on_gpu(const Graph& g, const Plan& plan, int steps = kSteps,
                       std::int64_t batch = kBatch, const TrainSetup& setup = {},
                       DeviceMemory* device = nullptr) {
  RunResult out;
  std::mutex mutex;
  const cuda::DeviceMemoryInfo before = cuda::device_memory_info(0);
  cuda::run_loopback(
      static_cast<int>(plan.mesh.num_devices()), 0, [&](cuda::LoopbackWorld& world, int rank) {
        cuda::CudaBackend backend(0);
        auto comm = world.communicator(rank, backend.stream());
        RunResult r = train_rank_on(backend, *comm, g, plan, steps, batch, setup);
        backend.synchronize();
        comm->barrier().wait();  // every rank done, none destroyed yet
        if (rank == 0) {
          std::lock_guard lock(mutex);
          out = std::move(r);
          if (device != nullptr) {
            const cuda::DeviceMemoryInfo after = cuda::device_memory_info(0);
            device->reserved_bytes =
                static_cast<std::int64_t>(backend.caching_allocator().reserved_bytes());
            device->driver_bytes = static_cast<std::int64_t>(before.free_bytes) -
                                   static_cast<std::int64_t>(after.free_bytes);
          }
        }
        comm->barrier().wait();
      });
  return out;
}

void report(const std::string& line) {
  const char* path = std::getenv("CARTO_GPU_REPORT");
  if (path == nullptr || *path == '\0') return;
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  std::ofstream(path, std::ios::app) << line << "\n";
}

}  // namespace

TEST_CASE("one GPU trains as the CPU backend does", "[cuda][executor]") {
  const Graph g = tiny_graph(kBatch);
  const DeviceMesh one = parse_mesh("1");
  const Plan plan = make_plan(g, one, replicated_strategies(g, one));
  const RunResult gpu = train_on_gpu(g, plan);
  RunResult cpu;
  run_threads(1, [&](Communicator& world) { cpu = train_rank(world, g, plan, kSteps, kBatch); });
  REQUIRE(gpu.losses.size() == static_cast<std::size_t>(kSteps));
  const std::string problems = compare_runs(gpu, cpu);
  report("parity\tone GPU vs CPU\t" + std::string(problems.empty() ? "ok" : "FAIL") + "\t" +
         problems);
  INFO(problems);
  CHECK(problems.empty());
}

TEST_CASE("sharded training on loopback meshes equals one GPU, memory as predicted",
          "[cuda][executor]") {
  const HardwareProfile hw = hardware::h100();
  std::vector<ParityCase> cases;
  for (const char* mesh : {"tp=2", "tp=4", "dp=2,tp=2"})
    cases.push_back({.mesh = mesh, .kind = PlanKind::megatron, .attention = AttentionKind::fused});
  for (const char* mesh : {"2", "4", "2x2"}) {
    cases.push_back({.mesh = mesh, .kind = PlanKind::fastest});
    cases.push_back({.mesh = mesh, .kind = PlanKind::leanest});
  }
  // The one-rank reference per graph (precision, attention kind).
  std::map<std::pair<Precision, AttentionKind>, RunResult> reference;
  int failures = 0, over = 0;
  std::string table =
      "plan | predicted bytes | measured bytes | measured/predicted | allocator reserved (rank 0) "
      "| cudaMemGetInfo growth (all ranks)\n";
  for (const ParityCase& c : cases) {
    const std::string name = describe(c);
    const Graph g = parity_graph(c);
    const Plan plan = plan_for(c, g, hw);
    const auto key = std::make_pair(c.precision, c.attention);
    if (!reference.contains(key)) {
      const DeviceMesh one = parse_mesh("1");
      const Plan single = make_plan(g, one, replicated_strategies(g, one));
      reference[key] =
          train_on_gpu(g, c.precision == Precision::mixed_bf16 ? mixed(single) : single);
    }
    const RunResult& ref = reference[key];
    DeviceMemory device;
    const RunResult got = train_on_gpu(g, plan, kSteps, kBatch, {}, &device);
    const std::string problems = compare_runs(got, ref);
    failures += problems.empty() ? 0 : 1;
    if (!problems.empty()) UNSCOPED_INFO(name << ": " << problems);
    report("parity\t" + name + "\t" + (problems.empty() ? "ok" : "FAIL") + "\t" + problems);

    DpOptions priced = dp_options(c, plan.mesh);
    priced.zero_stage = plan.zero_stage;
    priced.micro_batches = plan.micro_batches;
    const PointCost predicted =
        evaluate_point(g, plan.mesh, hw, priced, plan.strategy, plan_checkpoints(g, plan));
    const double ratio =
        static_cast<double>(got.peak_bytes) / static_cast<double>(predicted.peak_bytes);
    const bool bad = std::abs(ratio - 1.0) > 0.05;
    over += bad ? 1 : 0;
    table += name + " | " + std::to_string(predicted.peak_bytes) + " | " +
             std::to_string(got.peak_bytes) + " | " + std::to_string(ratio) + " | " +
             std::to_string(device.reserved_bytes) + " | " + std::to_string(device.driver_bytes) +
             (bad ? "  <-- past 5%" : "") + "\n";
    report("memory\t" + name + "\t" + std::to_string(predicted.peak_bytes) + "\t" +
           std::to_string(got.peak_bytes) + "\t" + std::to_string(ratio) + "\t" +
           std::to_string(device.reserved_bytes) + "\t" + std::to_string(device.driver_bytes));
    // The tracker sees every allocation, so the allocator's blocks (class sizes, cached) hold at
    // least its peak; the driver's growth holds at least the allocator's blocks.
    CHECK(device.reserved_bytes >= got.peak_bytes);
    CHECK(device.driver_bytes >= device.reserved_bytes);
  }
  WARN(table);
  CHECK(failures == 0);
  CHECK(over == 0);
}

TEST_CASE("mixed bf16 on loopback meshes equals one GPU, and one GPU the CPU, within bf16's bounds",
          "[cuda][executor][bf16]") {
  const HardwareProfile hw = hardware::h100();
  const Graph g = mixed_graph(kMixedBatch);
  const DeviceMesh one = parse_mesh("1");
  const Plan single = mixed(make_plan(g, one, replicated_strategies(g, one)));
  TrainSetup setup = linear_adamw();
  setup.split_workspace = false;
  const RunResult ref = train_on_gpu(g, single, kMixedSteps, kMixedBatch, setup);
  const MixedBounds b = mixed_bounds(g, ref, 2);
  int failures = 0;
  auto check = [&](const std::string& name, const RunResult& got, const RunResult& want) {
    const std::string problems = compare_mixed(got, want, b);
    failures += problems.empty() ? 0 : 1;
    if (!problems.empty()) UNSCOPED_INFO(name << ": " << problems);
    report("parity\t" + name + "\t" + (problems.empty() ? "ok" : "FAIL") + "\t" +
           describe(got, want, b));
  };
  // One GPU against the CPU backend: other kernels, other roundings, the same bounds.
  RunResult cpu;
  run_threads(1, [&](Communicator& world) {
    cpu = train_rank(world, g, single, kMixedSteps, kMixedBatch, setup);
  });
  check("mixed_bf16 one GPU vs CPU", ref, cpu);
  for (const char* mesh : {"tp=2", "dp=2,tp=2"}) {
    const DeviceMesh m = parse_mesh(mesh);
    const Plan plan = mixed(
        make_plan(g, m, megatron_strategy_indices(g, m, kMixed.hidden, SequenceParallel::off)));
    check(std::string("mixed_bf16 megatron mesh ") + mesh,
          train_on_gpu(g, plan, kMixedSteps, kMixedBatch, setup), ref);
  }
  for (const char* mesh : {"2", "2x2"}) {
    const Plan plan = plan_for(
        {.mesh = mesh, .kind = PlanKind::fastest, .precision = Precision::mixed_bf16}, g, hw);
    check(std::string("mixed_bf16 searched (fastest) mesh ") + mesh,
          train_on_gpu(g, plan, kMixedSteps, kMixedBatch, setup), ref);
  }
  CHECK(failures == 0);
}
