// Training and sampling for carto-demo: one Trainer per thread rank, all ranks stepping through the
// same batches, a progress line from rank 0, then text sampled from the trained model.
//
// Design note: every rank reads the same global batch (Corpus::batch is a function of the seed and
// the step); the executor slices what each rank's strategies need. Losses and times are rank 0's;
// every rank's loss is kept too, since they must agree (the loss is one replicated scalar).
// Measured peak memory is each rank's tracker peak over the training steps (sampling comes after
// and is not counted). Sampling runs Executor::evaluate, forward only, on the logits of one
// micro-batch: each row continues one prompt; rank 0 draws the next characters and broadcasts
// them, so every rank feeds the same tokens to the next evaluation.
#pragma once

#include <carto/cost/hardware.hpp>
#include <carto/graph/graph.hpp>
#include <carto/runtime/memory.hpp>
#include <carto/search.hpp>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "corpus.hpp"

namespace demo {

struct TrainSettings {
  std::int64_t batch = 1;  // rows per step (all micro-batches)
  std::int64_t steps = 1;
  std::int64_t log_every = 1;
  float learning_rate = 1e-3f;
  std::uint64_t seed = 1;
  std::int64_t sample_chars = 0;  // per line; 0: no sampling
  std::int64_t sample_lines = 3;
  double temperature = 0.8;
  // RMSNorm's epsilon of an --arch llama run (LlamaConfig::norm_eps).
  float rmsnorm_epsilon = 1e-5f;
  // Checkpoints (carto/runtime/checkpoint.hpp): saved into `checkpoint` every `save_every` steps
  // (0: none between) and after the last; `resume` is loaded first and training continues at its
  // data position (the next step's batch).
  std::string checkpoint{};
  std::int64_t save_every = 0;
  std::string resume{};
  // --trace FILE: the last kTraceSteps steps as Chrome trace-event JSON (carto/runtime/trace.hpp),
  // and rank 0's per-op table of measured against predicted time in the log.
  std::string trace{};
};

inline constexpr std::int64_t kTraceSteps = 3;

struct TrainResult {
  std::int64_t first_step = 0;                  // 0, or the step a resumed run began at
  std::vector<double> losses;                   // per step (rank 0)
  std::vector<double> step_seconds;             // per step (rank 0)
  double loss_disagreement = 0;                 // max over steps and ranks of |loss_r - loss_0|
  std::vector<std::int64_t> peak_bytes;         // per rank, over the training steps
  std::vector<carto::MemoryBreakdown> at_peak;  // per rank: the split by kind at its peak
  std::vector<std::string> prompts;             // sampling: the prompt of each line
  std::vector<std::string> samples;             // and what the model wrote after it
  // Process CPU time (every rank's thread) per step and rank over steps 2 onwards: the time a rank
  // would take with a core of its own, which the hardware profile prices.
  double cpu_seconds_per_rank_step = 0;
  double train_seconds = 0;
  double sample_seconds = 0;
};

// Trains `settings.steps` steps of `plan` (on one thread per device of its mesh) and samples.
// Progress lines go to `log`. Throws carto::Error when a rank fails.
TrainResult train(const carto::Graph& micro_graph, const carto::Plan& plan, const Corpus& corpus,
                  const TrainSettings& settings, const carto::HardwareProfile& hw,
                  std::ostream& log);

}  // namespace demo
