// Sharded checkpoints: a run saved after two steps and resumed by fresh trainers (another seed
// given, so the saved one must come back) gives bitwise the next losses and parameters of the
// uninterrupted run, in fp32 and mixed bf16, at every ZeRO stage, with dropout (the RNG stream
// continues) and gradient accumulation. Loaded into another plan or mesh (a 2x2 checkpoint into a
// 4-rank 1-D plan and into one device, ZeRO 1 into ZeRO 3) the parameters come back bitwise (a
// reshard moves values) and the next losses agree with the uninterrupted run within 1e-4 relative
// (another plan sums in another order; test_executor holds plans to the same bound). fp32 loaded
// into mixed bf16 keeps the fp32 weights bitwise as the master; its next losses are those of bf16
// compute: within 2 % of the fp32 run's (bf16's unit roundoff is 2^-8 = 0.4 %).
#include <catch2/catch.hpp>
#include <cmath>

#include "runtime/test_checkpoint_cases.hpp"

using namespace carto;
using namespace carto::testing;

namespace {

// Saves after 2 steps, resumes on the same plan for 2 more, and compares with 4 uninterrupted.
void check_resume(const Graph& g, const Plan& plan, const std::string& name) {
  const std::string dir = scratch_folder(name) + "/ckpt";
  const CkptRun whole = ckpt_run(g, plan, {.first = 0, .steps = 4});
  const CkptRun first = ckpt_run(g, plan, {.first = 0, .steps = 2, .save = dir});
  const CkptRun rest = ckpt_run(g, plan, {.first = 2, .steps = 2, .load = dir, .seed = 999});
  INFO(name);
  CHECK_FALSE(rest.loaded.resharded);
  CHECK(rest.loaded.step == 2);
  CHECK(rest.step_count == 4);
  CHECK(rest.data_position == 4);
  REQUIRE(first.losses.size() == 2);
  CHECK(first.losses[1] == whole.losses[1]);
  REQUIRE(rest.losses.size() == 2);
  CHECK(rest.losses[0] == whole.losses[2]);  // bitwise
  CHECK(rest.losses[1] == whole.losses[3]);
  CHECK(rest.params == whole.params);
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}

double rel(double a, double b) { return std::abs(a - b) / std::abs(b); }

}  // namespace

TEST_CASE("a resumed run continues bitwise: fp32, every ZeRO stage, mesh 2x2") {
  for (int zero = 0; zero <= 3; ++zero) {
    const Graph g = ckpt_graph(Precision::fp32);
    check_resume(
        g, random_plan(g, "x=2,y=2", 11 + static_cast<std::uint32_t>(zero), zero, Precision::fp32),
        "fp32-zero" + std::to_string(zero));
  }
  const Graph g2 = ckpt_graph(Precision::fp32, 2);
  check_resume(g2, random_plan(g2, "x=2,y=2", 21, 1, Precision::fp32, 2), "fp32-micro2");
}

TEST_CASE("a resumed run continues bitwise: mixed bf16, every ZeRO stage") {
  for (int zero = 0; zero <= 3; ++zero) {
    const Graph g = ckpt_graph(Precision::mixed_bf16);
    check_resume(g,
                 random_plan(g, zero % 2 == 0 ? "x=2,y=2" : "x=4",
                             31 + static_cast<std::uint32_t>(zero), zero, Precision::mixed_bf16),
                 "bf16-zero" + std::to_string(zero));
  }
}

TEST_CASE("a checkpoint loads into another mesh and plan, resharded") {
  const Graph g = ckpt_graph(Precision::fp32);
  const std::string dir = scratch_folder("reshard") + "/ckpt";
  const Plan saved = random_plan(g, "x=2,y=2", 41, 1, Precision::fp32);
  const CkptRun whole = ckpt_run(g, saved, {.first = 0, .steps = 4});
  const CkptRun first = ckpt_run(g, saved, {.first = 0, .steps = 2, .save = dir});
  struct Target {
    const char* mesh;
    int zero;
    std::uint32_t seed;
  };
  for (const Target t : {Target{"x=4", 3, 42}, Target{"x=1", 0, 43}, Target{"a=2,b=2", 2, 44}}) {
    INFO(t.mesh << " zero " << t.zero);
    const Plan plan = random_plan(g, t.mesh, t.seed, t.zero, Precision::fp32);
    const CkptRun loaded = ckpt_run(g, plan, {.first = 2, .steps = 0, .load = dir, .seed = 5});
    CHECK(loaded.loaded.resharded);
    CHECK(loaded.params == first.params);  // values only moved
    const CkptRun rest = ckpt_run(g, plan, {.first = 2, .steps = 2, .load = dir, .seed = 5});
    REQUIRE(rest.losses.size() == 2);
    CHECK(rel(rest.losses[0], whole.losses[2]) < 1e-4);
    CHECK(rel(rest.losses[1], whole.losses[3]) < 1e-4);
    CHECK(rest.step_count == 4);
  }
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}

TEST_CASE("fp32 loads into mixed bf16 and back") {
  const Graph g32 = ckpt_graph(Precision::fp32);
  const Graph g16 = ckpt_graph(Precision::mixed_bf16);
  const std::string folder = scratch_folder("precision");
  const std::string dir32 = folder + "/fp32";
  const std::string dir16 = folder + "/bf16";
  const Plan p32 = random_plan(g32, "x=2,y=2", 51, 0, Precision::fp32);
  const CkptRun whole = ckpt_run(g32, p32, {.first = 0, .steps = 4});
  const CkptRun first = ckpt_run(g32, p32, {.first = 0, .steps = 2, .save = dir32});
  const Plan p16 = random_plan(g16, "x=4", 52, 2, Precision::mixed_bf16);
  const CkptRun loaded = ckpt_run(g16, p16, {.first = 2, .steps = 0, .load = dir32});
  CHECK(loaded.loaded.resharded);
  CHECK(loaded.params == first.params);  // the master is the fp32 weights
  const CkptRun rest = ckpt_run(g16, p16, {.first = 2, .steps = 2, .load = dir32, .save = dir16});
  REQUIRE(rest.losses.size() == 2);
  CHECK(rel(rest.losses[0], whole.losses[2]) < 0.02);
  CHECK(rel(rest.losses[1], whole.losses[3]) < 0.02);
  CHECK(rest.losses[0] != whole.losses[2]);  // it did compute in bf16
  // And back: the bf16 run's masters become an fp32 run's weights, bitwise.
  const CkptRun back = ckpt_run(g32, p32, {.first = 4, .steps = 0, .load = dir16});
  CHECK(back.loaded.resharded);
  CHECK(back.params == rest.params);
  CHECK(back.step_count == 4);
  std::filesystem::remove_all(folder);
}
