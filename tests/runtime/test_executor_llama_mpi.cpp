// The executor on a Llama graph with ranks as MPI processes (CTest label mpi, mpirun -np 4): a
// 2-layer Llama trained 5 steps under the Megatron-style plan on a dp=2,tp=2 mesh (ZeRO 1,
// checkpointed blocks), under it on tp=4 with fused attention (ZeRO 2), and under a random plan on
// a 2x2 mesh (ZeRO 3, two micro-batches) ends with the losses and parameters of the single-device
// run, which every process computes by itself on one thread rank. Exit code 1 when any rank sees a
// difference past the tolerances of test_executor.cpp.
#include <carto/runtime/thread_comm.hpp>
#include <cstdio>
#include <exception>
#include <mpi/mpi_comm.hpp>
#include <string>

#include "runtime/executor_cases.hpp"
#include "runtime/llama_cases.hpp"

int main(int argc, char** argv) {
  using namespace carto;
  using namespace carto::testing;
  int failures = 0;
  const int rc = mpi::run(argc, argv, [&](Communicator& world) {
    if (world.size() != 4) throw Error("test_executor_llama_mpi runs on 4 ranks (mpirun -np 4)");
    struct Case {
      std::string name;
      AttentionKind attention;
      Plan plan;
      std::int64_t micro;
    };
    constexpr std::int64_t kBatch = 4;
    std::vector<Case> cases;
    {
      const Graph g = tiny_llama_graph(kBatch);
      const DeviceMesh mesh = parse_mesh("dp=2,tp=2");
      cases.push_back({"megatron dp=2,tp=2 zero 1 ckpt", AttentionKind::materialized,
                       make_plan(g, mesh, llama_megatron_strategy_indices(g, mesh), 1, 1, true),
                       1});
    }
    {
      const Graph g = tiny_llama_graph(kBatch, AttentionKind::fused);
      const DeviceMesh mesh = parse_mesh("tp=4");
      cases.push_back({"megatron tp=4 fused zero 2", AttentionKind::fused,
                       make_plan(g, mesh, llama_megatron_strategy_indices(g, mesh), 2), 1});
    }
    {
      const Graph g = tiny_llama_graph(kBatch / 2);
      const DeviceMesh mesh = parse_mesh("2x2");
      cases.push_back({"random 2x2 zero 3 micro 2", AttentionKind::materialized,
                       make_plan(g, mesh, random_strategies(g, mesh, 41), 3, 2), 2});
    }
    for (const Case& c : cases) {
      const Graph g = tiny_llama_graph(kBatch / c.micro, c.attention);
      const RunResult got = train_rank(world, g, c.plan, 5, kBatch);
      RunResult want;
      run_threads(1, [&](Communicator& one) {
        const DeviceMesh single = parse_mesh("1");
        want = train_rank(
            one, g, make_plan(g, single, replicated_strategies(g, single), 0, c.micro), 5, kBatch);
      });
      const std::string problems = compare_runs(got, want);
      if (!problems.empty()) {
        ++failures;
        std::printf("FAILED rank %d, %s: %s\n", world.rank(), c.name.c_str(), problems.c_str());
      } else if (world.rank() == 0) {
        std::printf("ok: %s: 5 losses and %zu parameters equal one device (last loss %.6f)\n",
                    c.name.c_str(), got.params.size(), got.losses.back());
      }
    }
  });
  return rc != 0 ? rc : (failures > 0 ? 1 : 0);
}
