// carto-plan as a user runs it: the JSON of `profile` against the published formulas, and one clear
// error line with exit code 2 for bad input. The binary's path comes from CMake (CARTO_PLAN_PATH).
#include <array>
#include <carto/util/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "support/carto_plan_run.hpp"

using carto::Json;

namespace {

using carto::testing::Run;
Run run(const std::string& args) { return carto::testing::run_carto_plan(args); }

// The JSON a successful `carto-plan COMMAND ... --json` prints.
Json command_json(const std::string& args) {
  const Run r = run(args + " --json");
  INFO(r.output);
  REQUIRE(r.code == 0);
  return Json::parse(r.output);
}
Json profile_json(const std::string& args) { return command_json("profile " + args); }

struct Model {
  const char* name;
  std::int64_t l, h, a, V, s;
};

// The GPT-3-family configurations of Korthikanti et al. 2022, Table 3 (V = 51200, s = 2048).
constexpr Model kGpt3[] = {{"gpt3-22b", 48, 6144, 64, 51200, 2048},
                           {"gpt3-175b", 96, 12288, 96, 51200, 2048},
                           {"gpt3-530b", 105, 20480, 128, 51200, 2048},
                           {"gpt3-1t", 128, 25600, 160, 51200, 2048}};

}  // namespace

TEST_CASE("carto-plan profile --json agrees with the published formulas", "[tools][profile]") {
  for (const Model& m : kGpt3) {
    for (const std::int64_t B : {1, 4}) {
      INFO(m.name << " batch " << B);
      const Json p = profile_json(std::string("--model ") + m.name + " --batch " +
                                  std::to_string(B) + " --layernorm-stats ignored");
      const std::int64_t l = m.l, h = m.h, a = m.a, V = m.V, s = m.s;
      // Narayanan et al. 2021 §5.1: P = 12lh²(1 + 13/(12h) + (V+s)/(12lh)) = 12lh² + 13lh + (V+s)h,
      // plus the final layernorm's 2h, which the formula leaves out.
      const std::int64_t P = 12 * l * h * h + 13 * l * h + (V + s) * h + 2 * h;
      REQUIRE(p.at("params").as_int() == P);
      // Korthikanti et al. 2022 Eq. 7: 72Bslh²(1 + s/(6h) + V/(12lh)) = 72Bslh² + 12Bs²lh + 6BsVh.
      REQUIRE(p.at("flops").at("matmul_step").as_int() ==
              72 * B * s * l * h * h + 12 * B * s * s * l * h + 6 * B * s * V * h);
      // Korthikanti et al. 2022 Eq. 1: sbh(34 + 5as/h) = 34sbh + 5as²b bytes per layer.
      REQUIRE(p.at("memory").at("activation_bytes_per_layer").as_int() ==
              34 * s * B * h + 5 * a * s * s * B);
      // ZeRO (Rajbhandari et al. 2019) §3.1: 2 + 2 + 12 bytes per parameter.
      REQUIRE(p.at("memory").at("params_bytes").as_int() == 2 * P);
      REQUIRE(p.at("memory").at("grads_bytes").as_int() == 2 * P);
      REQUIRE(p.at("memory").at("optimizer_bytes").as_int() == 12 * P);
      // Parameters and optimizer states persist through the whole step.
      REQUIRE(p.at("memory").at("peak_bytes").as_int() >= 2 * P + 12 * P);
    }
  }
}

TEST_CASE("carto-plan profile with full recomputation", "[tools][profile]") {
  const Model m = kGpt3[1];
  const std::int64_t B = 2, l = m.l, h = m.h, V = m.V, s = m.s;
  const Json p = profile_json("--model gpt3-175b --batch 2 --recompute full");
  // Narayanan et al. 2021 Eq. 3: 96Bslh²(1 + s/(6h) + V/(16lh)) = 96Bslh² + 16Bs²lh + 6BsVh.
  REQUIRE(p.at("flops").at("matmul_step").as_int() ==
          96 * B * s * l * h * h + 16 * B * s * s * l * h + 6 * B * s * V * h);
  // Korthikanti et al. 2022 Table 2, full recompute: 2sbh per layer.
  REQUIRE(p.at("memory").at("activation_bytes_per_layer").as_int() == 2 * s * B * h);
  REQUIRE(p.at("flops").at("step").as_int() == p.at("flops").at("forward").as_int() +
                                                   p.at("flops").at("backward").as_int() +
                                                   p.at("flops").at("recompute").as_int());
  REQUIRE(p.at("flops").at("recompute").as_int() > 0);
  REQUIRE(p.at("layers").as_array().size() == static_cast<std::size_t>(l) + 4);
}

TEST_CASE("carto-plan profile builds a model from size flags", "[tools][profile]") {
  // GPT-2 124M by hand: 12 layers, h 768, 12 heads, V 50257, s 1024 -> 124,439,808 parameters
  // (Narayanan et al. 2021 §5.1 formula + 2h for the final layernorm).
  const Json p = profile_json("--layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024");
  REQUIRE(p.at("params").as_int() == 124439808);
  REQUIRE(p.at("model").at("name").as_string() == "custom");
  // Flags override a preset's values.
  const Json q = profile_json("--model gpt2-124m --layers 2");
  REQUIRE(q.at("model").at("layers").as_int() == 2);
  REQUIRE(q.at("params").as_int() ==
          12 * 2 * 768 * 768 + 13 * 2 * 768 + (50257 + 1024) * 768 + 2 * 768);
  const Run table = run("profile --model gpt2-124m");
  REQUIRE(table.code == 0);
  REQUIRE_THAT(table.output, Catch::Contains("parameters        124,439,808"));
}

TEST_CASE("carto-plan rejects bad input with one line and exit code 2", "[tools][profile]") {
  const std::pair<const char*, const char*> cases[] = {
      {"profile --model gpt9", "unknown model 'gpt9'; the presets are gpt2-124m"},
      {"profile --hidden 64",
       "without --model, give --layers, --hidden, --heads, --vocab and --seq"},
      {"profile --layers 2 --hidden 64 --heads 7 --vocab 10 --seq 8",
       "heads (7) must divide hidden (64)"},
      {"profile --model gpt2-124m --batch 0", "--batch needs a positive integer, got '0'"},
      {"profile --model gpt2-124m --batch 3x", "--batch needs a positive integer, got '3x'"},
      {"profile --model gpt2-124m --dropout 1", "--dropout needs a probability in [0, 1), got '1'"},
      {"profile --model gpt2-124m --dtype fp64", "--dtype is one of bf16|fp32, got 'fp64'"},
      {"profile --model gpt2-124m --frobnicate", "unknown flag --frobnicate"},
      {"profile --model", "--model needs a value"},
      {"profile --json --json --model gpt2-124m", "--json is given twice"},
      {"reticulate", "unknown command 'reticulate'"},
  };
  for (const auto& [args, message] : cases) {
    const Run r = run(args);
    INFO(args << "\n" << r.output);
    REQUIRE(r.code == 2);
    REQUIRE_THAT(r.output, Catch::Contains(message));
    REQUIRE(r.output.find("carto-plan") == 0);
  }
}

TEST_CASE("carto-plan plan: JSON fields, the frontier and a budget no plan meets",
          "[tools][plan]") {
  const std::string model =
      "plan --layers 2 --hidden 32 --heads 4 --vocab 64 --seq 16 --devices 2 --batch 4 ";
  const Json j = command_json(model + "--memory 1GiB --micro-batches 1,2");
  REQUIRE(j.at("mesh").as_array().size() == 1);
  REQUIRE(j.at("mesh").as_array()[0].at("size").as_int() == 2);
  REQUIRE(j.at("zero_stage").as_int() >= 0);
  REQUIRE(j.at("micro_batches").as_int() >= 1);
  REQUIRE(j.at("ops").as_array().size() > 10);
  for (const Json& op : j.at("ops").as_array()) {
    REQUIRE(op.at("name").is_string());
    REQUIRE(op.at("strategy").is_string());
    REQUIRE(op.at("input_specs").is_array());
    REQUIRE(op.at("output_spec").is_string());
    REQUIRE(op.at("checkpointed").is_bool());
  }
  const std::int64_t peak = j.at("predicted").at("peak_memory_bytes").as_int();
  REQUIRE(peak <= std::int64_t{1} << 30);
  REQUIRE(j.at("predicted").at("step_time_s").as_double() > 0);
  std::int64_t parts = 0;
  for (const auto& [k, v] : j.at("predicted").at("memory_breakdown").as_object())
    parts += v.as_int();
  REQUIRE(parts == peak);
  const auto& frontier = j.at("frontier").as_array();
  REQUIRE(frontier.size() >= 2);
  for (std::size_t i = 1; i < frontier.size(); ++i) {
    REQUIRE(frontier[i].at("time_s").as_double() > frontier[i - 1].at("time_s").as_double());
    REQUIRE(frontier[i].at("peak_memory_bytes").as_int() <
            frontier[i - 1].at("peak_memory_bytes").as_int());
  }
  REQUIRE(j.at("search_time_s").as_double() > 0);

  const Run tight = run(model + "--memory 1000");
  REQUIRE(tight.code == 2);
  REQUIRE_THAT(tight.output,
               Catch::Contains("no plan fits the memory budget of 1000 B per device; the least "
                               "memory any plan needs is"));
  const Run bad = run(model + "--memory 80GiBs");
  REQUIRE(bad.code == 2);
  REQUIRE_THAT(bad.output, Catch::Contains("unknown unit 'GiBs'"));
  const Run pin = run(model + "--memory 1GiB --pin 'nothing=R'");
  REQUIRE(pin.code == 2);
  REQUIRE_THAT(pin.output, Catch::Contains("pin 'nothing=R' names no op"));
}

TEST_CASE("carto-plan plan --attention fused plans the fused attention op", "[tools][plan]") {
  const std::string model =
      "plan --layers 2 --hidden 32 --heads 4 --vocab 64 --seq 64 --devices 1 "
      "--batch 4 --memory 1GiB --checkpoint none ";
  // The ops of each plan by kind, and its predicted peak.
  auto kinds = [](const Json& j) {
    std::string names;
    for (const Json& op : j.at("ops").as_array()) names += op.at("name").as_string() + " ";
    return names;
  };
  const Json materialized = command_json(model);
  const Json fused = command_json(model + "--attention fused");
  REQUIRE_THAT(kinds(materialized), Catch::Contains("block.0.softmax0"));
  REQUIRE_THAT(kinds(materialized), !Catch::Contains("fused_attention"));
  REQUIRE_THAT(kinds(fused), Catch::Contains("block.0.fused_attention0"));
  REQUIRE_THAT(kinds(fused), !Catch::Contains("softmax0 "));
  // Without checkpointing the materialized plan keeps each block's (B, a, S, S) scores and
  // probabilities; the fused one keeps none of them, so its peak is lower.
  REQUIRE(fused.at("predicted").at("peak_memory_bytes").as_int() <
          materialized.at("predicted").at("peak_memory_bytes").as_int());
  const Run bad = run(model + "--attention flash");
  REQUIRE(bad.code == 2);
  REQUIRE_THAT(bad.output, Catch::Contains("--attention is one of materialized|fused"));
}

TEST_CASE("carto-plan plan --mesh searches one mesh, --time-limit stops the search",
          "[tools][plan]") {
  const std::string model =
      "plan --layers 2 --hidden 32 --heads 4 --vocab 64 --seq 16 --batch 4 --memory 1GiB ";
  // Without --mesh the search would name its axis x and also try 2x2.
  const Json j = command_json(model + "--devices 4 --mesh a=4");
  const auto& axes = j.at("mesh").as_array();
  REQUIRE(axes.size() == 1);
  REQUIRE(axes[0].at("name").as_string() == "a");
  REQUIRE(axes[0].at("size").as_int() == 4);
  REQUIRE(!j.at("frontier").as_array().empty());
  for (const Json& f : j.at("frontier").as_array()) REQUIRE(f.at("mesh").as_string() == "{a:4}");
  // The JSON names the space and the memory resolution; the full space is never slower.
  REQUIRE(j.at("search_space").as_string() == "standard");
  REQUIRE(j.at("tolerance").as_double() == 0.02);
  const Json full = command_json(model + "--devices 4 --mesh a=4 --space full --tolerance 0");
  REQUIRE(full.at("search_space").as_string() == "full");
  REQUIRE(full.at("tolerance").as_double() == 0);
  REQUIRE(full.at("predicted").at("step_time_s").as_double() <=
          j.at("predicted").at("step_time_s").as_double() * (1 + 1e-9));
  const std::pair<const char*, const char*> bad[] = {
      {"--devices 4 --mesh x=8", "--mesh x=8 has 8 devices; --devices is 4"},
      {"--devices 4 --mesh x=", "--mesh:"},
      {"--devices 4 --time-limit 0", "--time-limit needs a positive number, got '0'"},
      {"--devices 4 --time-limit soon", "--time-limit needs a positive number, got 'soon'"},
      {"--devices 4 --space sideways", "--space is one of standard|full, got 'sideways'"},
  };
  for (const auto& [args, message] : bad) {
    const Run r = run(model + args);
    INFO(args << "\n" << r.output);
    REQUIRE(r.code == 2);
    REQUIRE_THAT(r.output, Catch::Contains(message));
  }
  // --verbose reports each DP on stderr, the budgeted one of the mesh searched among them.
  const Run verbose = run(model + "--devices 4 --mesh a=4 --verbose");
  INFO(verbose.output);
  REQUIRE(verbose.code == 0);
  REQUIRE_THAT(verbose.output, Catch::Contains("carto-plan: [") &&
                                   Catch::Contains("least-time DP, mesh {a:4}, ZeRO ") &&
                                   Catch::Contains("frontier DP, mesh {a:4}, ZeRO ") &&
                                   Catch::Contains(" labels, ") &&
                                   Catch::Contains(" plans that fit"));
  REQUIRE_THAT(run(model + "--devices 4 --mesh a=4").output, !Catch::Contains("frontier DP"));
  // A search that cannot finish in a millisecond stops with an error saying so.
  const Run stopped =
      run("plan --layers 4 --hidden 256 --heads 8 --vocab 1024 --seq 128 --batch 8 --devices 8 "
          "--memory 80GiB --tolerance 0 --time-limit 0.001");
  INFO(stopped.output);
  REQUIRE(stopped.code == 2);
  REQUIRE_THAT(stopped.output, Catch::Contains("the search passed its time limit"));
}
