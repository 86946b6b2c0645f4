// The trace a Trainer records (carto/runtime/trace.hpp): the Chrome trace-event file parses with
// the project's JSON parser, has one track per rank, its events cover each step, every kernel and
// collective is attributed to an op or a phase, and the per-op table adds up to the step. On one
// rank and on a 2x2 mesh of thread ranks under a searched plan.
#include <carto/cost/hardware.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <carto/runtime/trace_table.hpp>
#include <carto/runtime/trainer.hpp>
#include <carto/search.hpp>
#include <carto/spec/text.hpp>
#include <carto/util/json.hpp>
#include <catch2/catch.hpp>
#include <cpu/cpu_backend.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace carto;

const GptConfig kConfig{
    .name = "trace", .layers = 2, .hidden = 32, .heads = 4, .vocab = 24, .seq = 16};
constexpr std::int64_t kBatch = 4;
constexpr int kSteps = 3;

Graph make_graph(std::int64_t batch) {
  return build_gpt(kConfig, {.batch = batch, .precision = Precision::fp32, .dropout = 0.1});
}

Plan plan_for(const DeviceMesh& mesh, std::vector<int> zero_stages) {
  SearchOptions options{.precision = Precision::fp32,
                        .dropout_masks = DropoutMasks::regenerated,
                        .zero_stages = std::move(zero_stages),
                        .meshes = {mesh}};
  return search(make_graph, kConfig.name, kBatch, mesh.num_devices(), hardware::cpu(), options);
}

TokenBatch batch_for(int step) {
  TokenBatch b{.batch = kBatch, .seq = kConfig.seq};
  for (std::int64_t i = 0; i < kBatch * kConfig.seq; ++i) {
    b.ids.push_back(static_cast<std::int32_t>((i * 7 + step * 3) % kConfig.vocab));
    b.targets.push_back(static_cast<std::int32_t>((i * 7 + step * 3 + 1) % kConfig.vocab));
  }
  return b;
}

struct Interval {
  double begin, end;
};

// The length of the union of `spans` clipped to [lo, hi].
double covered(std::vector<Interval> spans, double lo, double hi) {
  std::sort(spans.begin(), spans.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  double total = 0, at = lo;
  for (const Interval& s : spans) {
    const double b = std::max(s.begin, at), e = std::min(s.end, hi);
    if (e > b) {
      total += e - b;
      at = e;
    }
  }
  return total;
}

// Trains kSteps steps of `plan` with a trace, writes it and checks the file.
void check_trace(const Plan& plan) {
  const Graph g = make_graph(kBatch / plan.micro_batches);
  trace::Trace tr;
  std::vector<std::vector<trace::OpRow>> tables(static_cast<std::size_t>(plan.mesh.num_devices()));
  std::vector<std::vector<double>> step_seconds(tables.size());
  run_threads(static_cast<int>(plan.mesh.num_devices()), [&](Communicator& world) {
    cpu::CpuBackend backend;
    MeshComms comms(world, plan.mesh);
    Trainer trainer(g, plan, backend, comms, hardware::cpu(), {.trace = &tr});
    for (int s = 0; s < kSteps; ++s) {
      step_seconds[static_cast<std::size_t>(world.rank())].push_back(
          trainer.step_with_stats(batch_for(s)).seconds);
    }
    tables[static_cast<std::size_t>(world.rank())] =
        trace::op_table(tr.rank(world.rank()), g, plan,
                        plan_strategies(g, plan,
                                        {.precision = plan.precision,
                                         .dropout_masks = DropoutMasks::regenerated,
                                         .gradient_reduction = plan.gradient_reduction}),
                        hardware::cpu());
  });

  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("carto_test_trace_" + std::to_string(plan.mesh.num_devices()) + ".json");
  trace::write_chrome_trace(path.string(), tr.ranks());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(path);
  const Json doc = Json::parse(text.str());
  REQUIRE(doc.is_object());
  const Json* events = doc.find("traceEvents");
  REQUIRE(events != nullptr);
  REQUIRE(events->is_array());

  const auto ranks = static_cast<std::size_t>(plan.mesh.num_devices());
  std::set<std::int64_t> named_tracks, event_tracks;
  std::vector<std::vector<Interval>> steps(ranks), inside(ranks), unattributed(ranks);
  std::vector<int> kernels(ranks, 0), collectives(ranks, 0);
  std::int64_t gemm_flops = 0;
  for (const Json& e : events->as_array()) {
    const std::string ph = e.find("ph")->as_string();
    const std::int64_t pid = e.find("pid")->as_int();
    CHECK(e.find("tid")->as_int() == 0);
    if (ph == "M") {
      if (e.find("name")->as_string() == "process_name") {
        named_tracks.insert(pid);
        CHECK(e.find("args")->find("name")->as_string() == "rank " + std::to_string(pid));
      }
      continue;
    }
    REQUIRE(ph == "X");
    event_tracks.insert(pid);
    REQUIRE(pid >= 0);
    REQUIRE(static_cast<std::size_t>(pid) < ranks);
    const auto r = static_cast<std::size_t>(pid);
    const double ts = e.find("ts")->as_double(), dur = e.find("dur")->as_double();
    CHECK(dur >= 0);
    const std::string cat = e.find("cat")->as_string();
    const Json& args = *e.find("args");
    const std::string phase = args.find("phase")->as_string();
    if (cat == "step") {
      steps[r].push_back({ts, ts + dur});
      continue;
    }
    if (cat == "kernel" || cat == "collective") {
      (cat == "kernel" ? kernels : collectives)[r] += 1;
      if (phase == "none") unattributed[r].push_back({ts, ts + dur});
      if (e.find("name")->as_string() == "gemm" && args.find("flops") != nullptr)
        gemm_flops += args.find("flops")->as_int();
      if (cat == "collective") CHECK(args.find("group") != nullptr);
    }
    if (cat == "op") CHECK(!args.find("op_name")->as_string().empty());
    inside[r].push_back({ts, ts + dur});
  }
  CHECK(named_tracks.size() == ranks);  // one track per rank
  CHECK(event_tracks.size() == ranks);
  CHECK(gemm_flops > 0);
  for (std::size_t r = 0; r < ranks; ++r) {
    INFO("rank " << r);
    REQUIRE(steps[r].size() == static_cast<std::size_t>(kSteps));
    CHECK(kernels[r] > 0);
    if (ranks > 1) CHECK(collectives[r] > 0);
    // Inside a step every kernel and collective belongs to an op or a phase: only parameter
    // initialisation (before the first step) runs outside every op and phase.
    for (const Interval& k : unattributed[r]) {
      for (const Interval& s : steps[r]) CHECK((k.end <= s.begin || k.begin >= s.end));
    }
    for (const Interval& s : steps[r]) {
      const double span = s.end - s.begin;
      const double union_us = covered(inside[r], s.begin, s.end);
      INFO("step of " << span << " us, events cover " << union_us << " us");
      CHECK(union_us >= 0.9 * span);
      CHECK(union_us <= span * (1 + 1e-9) + 1e-3);
    }
    // The step's wall time as the trainer measured it equals the step event's span.
    for (std::size_t s = 0; s < steps[r].size(); ++s) {
      const double traced = (steps[r][s].end - steps[r][s].begin) * 1e-6;
      CHECK(traced >= step_seconds[r][s]);
      CHECK(traced <=
            step_seconds[r][s] * 1.05 + 0.02);  // two clock reads apart, on a loaded machine
    }
    // The table: the ops' forward and backward lie inside the step, and the rows are priced.
    const std::vector<trace::OpRow>& table = tables[r];
    REQUIRE(table.size() == g.num_ops() + 4);
    double ops = 0, predicted = 0;
    for (std::size_t k = 0; k < g.num_ops(); ++k) {
      CHECK(table[k].forward_s > 0);
      CHECK(table[k].backward_s > 0);
      ops += table[k].measured_s();
      predicted += table[k].predicted_s();
    }
    const trace::OpRow& step = table.back();
    CHECK(step.name == "step");
    CHECK(ops <= step.forward_s);
    // The rows left are resharding, the gradient phase (where a rank that finished early waits
    // for the others) and the optimizer; with the loss read (a collective: the ranks wait for
    // each other there too) and the executor's work between ops they fill the step, as the
    // events' coverage above shows. How much of it the ops take depends on how the thread ranks
    // share the cores, so no share is asserted.
    CHECK(table[g.num_ops()].name == "reshard");
    CHECK(table[g.num_ops() + 1].name == "gradients");
    CHECK(table[g.num_ops() + 2].name == "optimizer");
    CHECK(table[g.num_ops() + 1].forward_s > 0);
    CHECK(table[g.num_ops() + 2].forward_s > 0);
    CHECK(step.predicted_s() == plan.step_time_s);
    CHECK(predicted > 0);
    CHECK(predicted <= plan.step_time_s * (1 + 1e-9));
  }
}

TEST_CASE("trace: one rank", "[trace]") { check_trace(plan_for(parse_mesh("x=1"), {0})); }

TEST_CASE("trace: a 2x2 mesh of thread ranks", "[trace]") {
  check_trace(plan_for(parse_mesh("x=2,y=2"), {0, 1}));
}

TEST_CASE("trace: kernels outside a scope, recompute inside backward", "[trace]") {
  trace::Trace tr;
  trace::Recorder& rec = tr.rank(0);
  {
    const trace::Active active(&rec);
    const trace::OpScope back(3, trace::Phase::backward);
    const trace::OpScope again(2, trace::Phase::forward);
    CHECK(trace::context().phase == trace::Phase::recompute);
    CHECK(trace::context().op == 2);
  }
  CHECK(trace::context().recorder == nullptr);
  CHECK(trace::context().op == -1);
  REQUIRE(rec.events().size() == 2);
  CHECK(rec.events()[0].phase == trace::Phase::recompute);  // the inner scope ends first
  CHECK(rec.events()[1].phase == trace::Phase::backward);
  CHECK(rec.events()[0].start_us >= rec.events()[1].start_us);
  CHECK(rec.events()[0].end_us <= rec.events()[1].end_us);
  CHECK_THROWS_WITH(trace::write_chrome_trace("/nonexistent-folder/t.json", tr.ranks()),
                    Catch::Contains("cannot write the trace"));
}

}  // namespace
