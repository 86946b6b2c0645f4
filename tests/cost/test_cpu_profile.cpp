// The measured GEMM rate curve (HardwareProfile::matmul_rates), the calibrated CPU profile's
// location and per-thread figures (cpu_profile), and the optimizer step's price.
#include <stdlib.h>

#include <algorithm>
#include <carto/cost.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/search.hpp>
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

using namespace carto;

HardwareProfile curved() {
  HardwareProfile hw = hardware::cpu();
  hw.peak_flops = {.fp32 = 2e10, .bf16 = 1e10, .fp16 = 2e10};
  hw.matmul_rates = {
      {.flops = 1e6, .rate = 1e9}, {.flops = 1e8, .rate = 1e10}, {.flops = 1e9, .rate = 2e10}};
  return hw;
}

// Sets an environment variable for the scope, restoring the old value after.
class Env {
 public:
  Env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~Env() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

 private:
  const char* name_;
  std::string old_;
};

TEST_CASE("matmul_rates: log-linear between the points, clamped outside", "[cost][cpu]") {
  const HardwareProfile hw = curved();
  auto t = [&](double flops, DType d = DType::fp32) {
    return compute_time({.flops = static_cast<std::int64_t>(flops), .bytes = 0, .dtype = d}, hw);
  };
  // 1e7 is halfway between 1e6 and 1e8 in log(flops): the rate halfway, 5.5e9.
  CHECK(t(1e7) == Approx(1e7 / 5.5e9).epsilon(1e-12));
  // 3e8: w = log(3) / log(10) of the way from 1e10 to 2e10.
  CHECK(t(3e8) == Approx(3e8 / (1e10 + std::log10(3.0) * 1e10)).epsilon(1e-12));
  CHECK(t(1e5) == Approx(1e5 / 1e9).epsilon(1e-12));     // below the first point
  CHECK(t(1e11) == Approx(1e11 / 2e10).epsilon(1e-12));  // above the last
  CHECK(t(1e8) == Approx(1e8 / 1e10).epsilon(1e-12));    // on a point
  // bf16 runs at half of fp32's peak here: half the rate.
  CHECK(t(1e8, DType::bf16) == Approx(2 * 1e8 / 1e10).epsilon(1e-12));
  // Memory-bound work still takes the bandwidth term.
  CHECK(compute_time({.flops = 1000, .bytes = 1'000'000'000, .dtype = DType::fp32}, hw) ==
        Approx(1e9 / hw.memory_bandwidth).epsilon(1e-12));
  // Without points, the peak and efficiency as before.
  HardwareProfile flat = hw;
  flat.matmul_rates.clear();
  CHECK(compute_time({.flops = 1'000'000'000, .bytes = 0, .dtype = DType::fp32}, flat) ==
        Approx(1e9 / (2e10 * flat.matmul_efficiency)).epsilon(1e-12));
}

TEST_CASE("matmul_rates are per GEMM call, loop kernels run at loop_rate", "[cost][cpu]") {
  HardwareProfile hw = curved();
  auto t = [&](double flops, std::int64_t calls, DType d = DType::fp32) {
    return compute_time(
        {.flops = static_cast<std::int64_t>(flops), .bytes = 0, .dtype = d, .gemm_calls = calls},
        hw);
  };
  // 100 calls of 1e6 FLOPs each run at the 1e6 point's rate, not at the 1e8 point's.
  CHECK(t(1e8, 100) == Approx(1e8 / 1e9).epsilon(1e-12));
  CHECK(t(1e8, 1) == Approx(1e8 / 1e10).epsilon(1e-12));
  // 10 calls of 1e7: halfway in log(flops), 5.5e9 (the single-call case above).
  CHECK(t(1e8, 10) == Approx(1e8 / 5.5e9).epsilon(1e-12));
  // Without loop_rate, loop kernels (0 calls) take the curve at their FLOPs, as one call.
  CHECK(t(1e8, 0) == Approx(1e8 / 1e10).epsilon(1e-12));
  hw.loop_rate = 4e9;
  CHECK(t(1e8, 0) == Approx(1e8 / 4e9).epsilon(1e-12));
  CHECK(t(1e8, 0, DType::bf16) == Approx(2 * 1e8 / 4e9).epsilon(1e-12));  // bf16: half the peak
  CHECK(t(1e8, 1) == Approx(1e8 / 1e10).epsilon(1e-12));                  // GEMMs unchanged
  // The bandwidth term still decides memory-bound loop kernels.
  CHECK(compute_time({.flops = 1000, .bytes = 1'000'000'000, .dtype = DType::fp32, .gemm_calls = 0},
                     hw) == Approx(1e9 / hw.memory_bandwidth).epsilon(1e-12));
  CHECK(hardware_profile_from_json(Json::parse(to_json(hw).dump()), "t") == hw);
  CHECK(to_json(curved()).find("loop_rate") == nullptr);  // optional: 0 is not written
  hw.loop_rate = -1;
  CHECK_THROWS_WITH(check_hardware_profile(hw, "f.json"),
                    Catch::Contains("'loop_rate'") && Catch::Contains("-1"));
}

TEST_CASE("a strategy's GEMM calls: the local extents of the einsum's batch letters",
          "[cost][cpu]") {
  // The scores einsum of attention has batch letters b and h (in q, k and the scores); a
  // projection has none (one call); a layernorm is no einsum (0).
  const GptConfig config{
      .name = "calls", .layers = 1, .hidden = 32, .heads = 4, .vocab = 16, .seq = 8};
  const Graph g = build_gpt(config, {.batch = 6, .precision = Precision::fp32, .dropout = 0.0});
  const DeviceMesh mesh = parse_mesh("x=2");
  bool scores = false, projection = false, loops = false;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const OpId o{static_cast<std::int32_t>(k)};
    const Op& op = g.op(o);
    for (const Strategy& st : enumerate_strategies(g, o, mesh)) {
      if (op.kind != OpKind::einsum) {
        CHECK(st.gemm_calls == 0);
        loops = true;
        continue;
      }
      const TensorShape out = local_shape(g.tensor(op.output).shape, st.sharding.output, mesh);
      std::int64_t expect = 1;
      for (std::size_t d = 0; d < op.einsum.output.size(); ++d) {
        const char c = op.einsum.output[d];
        const auto& a = op.einsum.inputs[0];
        const auto& b = op.einsum.inputs[1];
        if (std::find(a.begin(), a.end(), c) != a.end() &&
            std::find(b.begin(), b.end(), c) != b.end())
          expect *= out.dims()[d].extent;
      }
      CHECK(st.gemm_calls == expect);
      if (op.einsum.output.size() == 4 && expect > 1) scores = true;
      if (expect == 1) projection = true;
    }
  }
  CHECK(scores);
  CHECK(projection);
  CHECK(loops);
  // Spot values: unsharded, the scores einsum makes batch · heads calls.
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const OpId o{static_cast<std::int32_t>(k)};
    const Op& op = g.op(o);
    if (op.kind != OpKind::einsum || op.einsum.inputs[0].size() != 4) continue;
    const std::vector<Strategy> all = enumerate_strategies(g, o, mesh);
    const auto whole = std::find_if(all.begin(), all.end(), [](const Strategy& st) {
      return st.sharding.output.is_replicated();
    });
    REQUIRE(whole != all.end());
    CHECK(whole->gemm_calls == 6 * 4);
  }
}

TEST_CASE("matmul_rates: JSON round trip and bad points", "[cost][cpu]") {
  const HardwareProfile hw = curved();
  CHECK(hardware_profile_from_json(Json::parse(to_json(hw).dump()), "t") == hw);
  // A profile file without the field reads as before.
  CHECK(hardware_profile_from_json(to_json(hardware::cpu()), "t").matmul_rates.empty());
  HardwareProfile bad = hw;
  bad.matmul_rates[1].flops = 1e5;
  CHECK_THROWS_WITH(check_hardware_profile(bad, "f.json"),
                    Catch::Contains("'matmul_rates[1].flops' must exceed"));
  bad = hw;
  bad.matmul_rates[2].rate = -1;
  CHECK_THROWS_WITH(check_hardware_profile(bad, "f.json"),
                    Catch::Contains("'matmul_rates[2].rate' must be positive"));
}

TEST_CASE("cpu_profile: the calibrated file when it exists, else the built-in one", "[cost][cpu]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "carto_test_cpu_profile";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "cpu-profile.json").string();
  std::filesystem::remove(path);
  const Env file("CARTO_CPU_PROFILE", path.c_str());
  const Env threads("CARTO_CPU_THREADS", nullptr);
  CHECK(cpu_profile_path() == path);

  const CpuProfileChoice none = cpu_profile(1, 4);
  CHECK_FALSE(none.calibrated);
  CHECK(none.profile == hardware::cpu());
  CHECK_THAT(none.note, Catch::Contains("built-in") && Catch::Contains(path));

  HardwareProfile base = curved();
  base.name = "cpu";
  base.loop_rate = 2e9;
  Json j = to_json(base);
  Json entries = Json::array();
  for (int t : {2, 4}) {
    Json e;
    e["threads"] = t;
    e["peak_flops_fp32"] = 1e10 * t;
    e["memory_bandwidth"] = 5e9 * t;
    Json curve = Json::array();
    Json point;
    point["flops"] = 1e8;
    point["rate"] = 1e10 * t;
    curve.push_back(point);
    e["matmul_rates"] = curve;
    if (t == 4) e["loop_rate"] = 3e9;  // optional: the 2-thread entry keeps the base's
    entries.push_back(e);
  }
  j["threads"] = entries;
  {
    std::ofstream out(path);
    out << j.dump(2);
  }
  // 1 rank on 4 cores: 4 threads; 2 ranks: 2 each; 4 or 8 ranks: one thread each (the base).
  const CpuProfileChoice four = cpu_profile(1, 4);
  CHECK(four.calibrated);
  CHECK(four.threads == 4);
  CHECK(four.profile.peak_flops.fp32 == 4e10);
  CHECK(four.profile.memory_bandwidth == 2e10);
  REQUIRE(four.profile.matmul_rates.size() == 1);
  CHECK(four.profile.matmul_rates[0].rate == 4e10);
  CHECK(four.profile.loop_rate == 3e9);
  CHECK(cpu_profile(2, 4).profile.loop_rate == 2e9);
  CHECK_THAT(four.note, Catch::Contains("calibrated") && Catch::Contains("4 threads per rank"));
  CHECK(cpu_profile(2, 4).threads == 2);
  CHECK(cpu_profile(2, 4).profile.memory_bandwidth == 1e10);
  CHECK(cpu_profile(4, 4).threads == 1);
  CHECK(cpu_profile(4, 4).profile == base);
  CHECK(cpu_profile(8, 4).profile == base);
  {
    const Env three("CARTO_CPU_THREADS", "3");  // the largest entry at most 3 threads
    CHECK(cpu_threads_per_rank(1, 4) == 3);
    CHECK(cpu_profile(1, 4).threads == 2);
  }
  {
    const Env bad("CARTO_CPU_THREADS", "two");
    CHECK_THROWS_WITH(cpu_threads_per_rank(1, 4), Catch::Contains("CARTO_CPU_THREADS is 'two'"));
  }
  {
    std::ofstream out(path);
    out << "{\"format\": \"carto-hardware-profile/1\"}";
  }
  CHECK_THROWS_WITH(cpu_profile(1, 4), Catch::Contains(path) && Catch::Contains("'name'"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the optimizer step is priced once per step", "[cost][cpu]") {
  const GptConfig config{
      .name = "opt", .layers = 1, .hidden = 32, .heads = 2, .vocab = 16, .seq = 8};
  const Graph g = build_gpt(config, {.batch = 4, .precision = Precision::fp32, .dropout = 0.0});
  std::int64_t params = 0;
  for (const TensorInfo& t : g.tensors())
    if (t.kind == TensorKind::parameter) params += t.shape.numel();
  const HardwareProfile hw = hardware::cpu();
  auto plan_for = [&](const char* mesh, int zero, std::int64_t micro) {
    SearchOptions o{.precision = Precision::fp32,
                    .dropout_masks = DropoutMasks::regenerated,
                    .zero_stages = {zero},
                    .micro_batches = {micro},
                    .meshes = {parse_mesh(mesh)}};
    const auto graph = [&](std::int64_t b) {
      return build_gpt(config, {.batch = b, .precision = Precision::fp32, .dropout = 0.0});
    };
    return search(graph, config.name, 4, parse_mesh(mesh).num_devices(), hw, o);
  };
  // One device: AdamW reads p, g, m, v and writes p, m, v (28 bytes per fp32 element), whatever
  // the micro-batches.
  for (std::int64_t micro : {1, 2}) {
    const Plan p = plan_for("x=1", 0, micro);
    CHECK(p.time_breakdown.at("optimizer") ==
          Approx(static_cast<double>(params) * 28 / hw.memory_bandwidth).epsilon(1e-12));
  }
  // Data parallel over 2 at ZeRO 1: each device updates half, then gathers the other half.
  const Plan dp = plan_for("x=2", 1, 1);
  bool replicated = true;
  for (const PlanOp& op : dp.ops)
    for (const std::string& s : op.input_specs) replicated = replicated && s.find("x") == s.npos;
  if (replicated) {  // the plan kept every parameter whole: a pure data-parallel plan
    const double update = static_cast<double>(params) / 2 * 28 / hw.memory_bandwidth;
    CHECK(dp.time_breakdown.at("optimizer") > update);
  }
  const Plan zero0 = plan_for("x=2", 0, 1);
  CHECK(zero0.time_breakdown.at("optimizer") > 0);
  CHECK(zero0.time_breakdown.at("optimizer") <=
        static_cast<double>(params) * 28 / hw.memory_bandwidth * (1 + 1e-12));
}

}  // namespace
