#include "training.hpp"

#include <algorithm>
#include <atomic>
#include <carto/runtime/checkpoint.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <carto/runtime/trace_table.hpp>
#include <carto/runtime/trainer.hpp>
#include <carto/util/units.hpp>
#include <chrono>
#include <cmath>
#include <cpu/cpu_backend.hpp>
#include <ctime>
#include <iomanip>
#include <ostream>
#include <random>
#include <span>

namespace demo {

using namespace carto;

namespace {

// The graph's two token inputs, (ids, targets), in tensor order as build_gpt and build_llama make
// them.
std::vector<TensorId> token_inputs(const Graph& g) {
  std::vector<TensorId> out;
  for (std::size_t t = 0; t < g.tensors().size(); ++t) {
    if (g.tensors()[t].kind == TensorKind::index)
      out.push_back(TensorId{static_cast<std::int32_t>(t)});
  }
  CARTO_CHECK(out.size() == 2, "the demo's graph has two token inputs");
  return out;
}

// The logits: input 0 of the softmax-cross-entropy op, (B, S, V).
TensorId logits_tensor(const Graph& g) {
  for (const Op& op : g.ops()) {
    if (op.kind == OpKind::softmax_cross_entropy) return op.inputs[0];
  }
  detail::fail("carto-demo: the model has no softmax_cross_entropy op");
}

double mean_of_last(const std::vector<double>& v, std::size_t n) {
  n = std::min(n, v.size());
  double sum = 0;
  for (std::size_t i = v.size() - n; i < v.size(); ++i) sum += v[i];
  return n == 0 ? 0 : sum / static_cast<double>(n);
}

// A character drawn from softmax(logits / temperature); the largest logit when temperature is 0.
std::int32_t draw(std::span<const float> logits, double temperature, std::mt19937_64& gen) {
  const auto top = std::max_element(logits.begin(), logits.end());
  if (temperature <= 0) return static_cast<std::int32_t>(top - logits.begin());
  std::vector<double> weight(logits.size());
  for (std::size_t v = 0; v < logits.size(); ++v)
    weight[v] = std::exp((logits[v] - *top) / temperature);
  std::discrete_distribution<std::int32_t> pick(weight.begin(), weight.end());
  return pick(gen);
}

// Continues one prompt per row of a micro-batch for `settings.sample_chars` characters.
void sample(Trainer& trainer, Communicator& world, const Graph& g, const Corpus& corpus,
            const TrainSettings& settings, TrainResult& out) {
  const std::vector<TensorId> inputs_of = token_inputs(g);
  const TensorId logits = logits_tensor(g);
  const auto& dims = g.tensor(inputs_of[0]).shape.dims();
  const std::int64_t rows = dims[0].extent;  // (R, S)
  const std::int64_t seq = dims[1].extent;
  const std::int64_t vocab = corpus.vocab_size();
  const std::int64_t lines = std::min(settings.sample_lines, rows);
  std::vector<std::vector<std::int32_t>> text =
      corpus.prompts(lines, std::min<std::int64_t>(24, seq / 2), settings.seed);
  std::vector<std::size_t> prompt_size;
  for (const auto& p : text) prompt_size.push_back(p.size());
  std::mt19937_64 gen(settings.seed ^ 0x5eed5eedULL);
  std::vector<HostInput> inputs(2);
  inputs[0].tensor = inputs_of[0];
  inputs[1].tensor = inputs_of[1];
  inputs[1].ids.assign(static_cast<std::size_t>(rows * seq), 0);  // unused: no loss is computed
  for (std::int64_t c = 0; c < settings.sample_chars; ++c) {
    // Each row holds the last `seq` characters of its line (a shorter line, then zeros).
    inputs[0].ids.assign(static_cast<std::size_t>(rows * seq), 0);
    std::vector<std::int64_t> last(static_cast<std::size_t>(lines));
    for (std::int64_t r = 0; r < lines; ++r) {
      const auto& line = text[static_cast<std::size_t>(r)];
      const auto n = std::min<std::size_t>(line.size(), static_cast<std::size_t>(seq));
      std::copy(line.end() - static_cast<std::ptrdiff_t>(n), line.end(),
                inputs[0].ids.begin() + r * seq);
      last[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(n) - 1;
    }
    const std::vector<float> values = trainer.executor().evaluate(inputs, logits);  // (R, S, V)
    std::vector<float> next(static_cast<std::size_t>(lines));  // token ids, exact in fp32
    if (world.rank() == 0) {
      for (std::int64_t r = 0; r < lines; ++r) {
        const auto at =
            static_cast<std::size_t>((r * seq + last[static_cast<std::size_t>(r)]) * vocab);
        next[static_cast<std::size_t>(r)] = static_cast<float>(
            draw(std::span<const float>(values).subspan(at, static_cast<std::size_t>(vocab)),
                 settings.temperature, gen));
      }
    }
    world.broadcast(std::span<float>(next), 0).wait();
    for (std::int64_t r = 0; r < lines; ++r)
      text[static_cast<std::size_t>(r)].push_back(
          static_cast<std::int32_t>(next[static_cast<std::size_t>(r)]));
  }
  if (world.rank() != 0) return;
  for (std::int64_t r = 0; r < lines; ++r) {
    const auto& line = text[static_cast<std::size_t>(r)];
    std::string prompt, rest;
    for (std::size_t i = 0; i < line.size(); ++i)
      (i < prompt_size[static_cast<std::size_t>(r)] ? prompt : rest) += corpus.printable(line[i]);
    out.prompts.push_back(prompt);
    out.samples.push_back(rest);
  }
}

}  // namespace

TrainResult train(const Graph& micro_graph, const Plan& plan, const Corpus& corpus,
                  const TrainSettings& settings, const HardwareProfile& hw, std::ostream& log) {
  const int ranks = static_cast<int>(plan.mesh.num_devices());
  const std::int64_t seq = micro_graph.tensor(token_inputs(micro_graph)[0]).shape.dims()[1].extent;
  const double tokens_per_step = static_cast<double>(settings.batch * seq);
  constexpr std::size_t kAverage = 10;  // steps in the moving average of the progress line

  TrainResult out;
  out.peak_bytes.assign(static_cast<std::size_t>(ranks), 0);
  out.at_peak.assign(static_cast<std::size_t>(ranks), {});
  std::vector<std::vector<double>> rank_losses(static_cast<std::size_t>(ranks));
  std::vector<std::atomic<std::int64_t>> live_peak(static_cast<std::size_t>(ranks));

  trace::Trace traced;
  const bool tracing = !settings.trace.empty();
  run_threads(ranks, [&](Communicator& world) {
    const auto rank = static_cast<std::size_t>(world.rank());
    cpu::CpuBackend backend;
    MeshComms comms(world, plan.mesh);
    Trainer trainer(micro_graph, plan, backend, comms, hw,
                    {.seed = settings.seed,
                     .adamw = {.learning_rate = settings.learning_rate},
                     .rmsnorm = {.epsilon = settings.rmsnorm_epsilon},
                     .trace = tracing ? &traced : nullptr});
    std::int64_t first = 0;  // a resumed run continues at the checkpoint's data position
    if (!settings.resume.empty()) {
      first = load_checkpoint(trainer, settings.resume).data_position;
      if (first >= settings.steps) {
        detail::fail("carto-demo: the checkpoint '", settings.resume, "' is at step ", first,
                     "; --steps ", settings.steps, " leaves nothing to train (pass more --steps)");
      }
      if (rank == 0) {
        out.first_step = first;
        log << "resumed from " << settings.resume << " at step " << first << std::endl;
      }
    }
    const auto start = std::chrono::steady_clock::now();
    std::clock_t cpu_start = 0;  // after the first step (rank 0)
    double window_s = 0;
    std::int64_t window_steps = 0;
    for (std::int64_t s = first; s < settings.steps; ++s) {
      if (tracing && s == std::max(first, settings.steps - kTraceSteps))
        traced.rank(world.rank()).clear();  // keep the last steps only
      const StepStats st =
          trainer.step_with_stats(corpus.batch(settings.batch, seq, settings.seed, s));
      if (!settings.checkpoint.empty() &&
          ((settings.save_every > 0 && (s + 1) % settings.save_every == 0) ||
           s + 1 == settings.steps)) {
        save_checkpoint(trainer, settings.checkpoint);
        if (rank == 0)
          log << "checkpoint of step " << s + 1 << " saved to " << settings.checkpoint << std::endl;
      }
      rank_losses[rank].push_back(st.loss);
      live_peak[rank].store(st.peak_bytes);
      if (rank == 0) {
        out.losses.push_back(st.loss);
        out.step_seconds.push_back(st.seconds);
        window_s += st.seconds;
        ++window_steps;
      }
      if (!(s == first || (s + 1) % settings.log_every == 0 || s + 1 == settings.steps)) continue;
      world.barrier().wait();  // every rank's peak of this step is in
      if (rank != 0) continue;
      if (s == first) cpu_start = std::clock();
      log << "step " << std::setw(5) << s + 1 << "/" << settings.steps << "  loss " << std::fixed
          << std::setprecision(3) << st.loss << " (mean of the last "
          << std::min(kAverage, out.losses.size()) << ": " << mean_of_last(out.losses, kAverage)
          << ")  " << std::setprecision(0) << std::setw(7)
          << tokens_per_step * static_cast<double>(window_steps) / window_s << " tok/s  peak/rank";
      log.unsetf(std::ios::floatfield);
      log << std::setprecision(6);
      for (const auto& p : live_peak) log << "  " << format_bytes(p.load());
      log << std::endl;
      window_s = 0;
      window_steps = 0;
    }
    world.barrier().wait();  // every rank has finished training
    if (rank == 0 && settings.steps - first > 1) {
      out.cpu_seconds_per_rank_step = static_cast<double>(std::clock() - cpu_start) /
                                      CLOCKS_PER_SEC / static_cast<double>(ranks) /
                                      static_cast<double>(settings.steps - first - 1);
    }
    out.peak_bytes[rank] = trainer.memory().peak_bytes();
    out.at_peak[rank] = trainer.memory().at_peak();
    const auto trained = std::chrono::steady_clock::now();
    if (rank == 0) out.train_seconds = std::chrono::duration<double>(trained - start).count();
    if (settings.sample_chars > 0) sample(trainer, world, micro_graph, corpus, settings, out);
    if (rank == 0) {
      out.sample_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - trained).count();
    }
  });
  if (tracing) {
    trace::write_chrome_trace(settings.trace, traced.ranks());
    log << "\ntrace of the last " << std::min(settings.steps - out.first_step, kTraceSteps)
        << " steps written to " << settings.trace
        << " (open it in https://ui.perfetto.dev or chrome://tracing); rank 0 per step:\n";
    trace::write_op_table(log, trace::op_table(traced.rank(0), micro_graph, plan, hw));
  }
  for (const auto& losses : rank_losses) {
    for (std::size_t s = 0; s < losses.size() && s < out.losses.size(); ++s)
      out.loss_disagreement = std::max(out.loss_disagreement, std::abs(losses[s] - out.losses[s]));
  }
  return out;
}

}  // namespace demo
