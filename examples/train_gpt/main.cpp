// carto-demo — trains a character-level GPT or Llama (--arch) on the license texts every Debian
// system ships, on a simulated mesh of CPU ranks (threads of this process): it plans under a memory
// budget per rank, prints the plan with its predicted step time and peak memory, trains with a
// progress line, sets the measured peak memory and step time beside the prediction, and samples
// some text.
//
//   carto-demo [--arch gpt|llama] [--mesh 2x2] [--budget 3MiB] [--steps 200] [--json report.json]
//              ...  (see --help)
//
// --arch llama: build_llama with RMSNorm, SwiGLU (--ffn), rotary embeddings (theta 10000) and
// grouped-query attention (--kv-heads), untied head, no biases, no dropout.
//
// Files: corpus.* (the text and its batches), planning.* (the search on one mesh, plan files),
// training.* (thread ranks, Trainer, sampling), report.* (what is printed and written).
#include <carto/error.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/layers/llama.hpp>
#include <carto/runtime/checkpoint.hpp>
#include <carto/spec/text.hpp>
#include <carto/util/checked.hpp>
#include <carto/util/numbers.hpp>
#include <carto/util/units.hpp>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "corpus.hpp"
#include "planning.hpp"
#include "report.hpp"
#include "training.hpp"

namespace {

using carto::cli::UsageError;

constexpr const char* kCommand = "carto-demo";

std::vector<carto::cli::FlagSpec> flag_specs() {
  return {
      {"arch", true,
       "gpt (LayerNorm, GELU MLP, learned positions, tied head) or llama (RMSNorm, SwiGLU, rotary "
       "embeddings with theta 10000, grouped-query attention, untied head, no biases, no "
       "dropout) (default gpt)"},
      {"mesh", true, "the mesh of CPU thread ranks: 2x2, 4, 2x2x2, dp=2,tp=2 (default 2x2)"},
      {"budget", true,
       "memory budget per rank, e.g. 3MiB (default: halfway between the least memory any plan "
       "needs and the fastest plan's memory)"},
      {"steps", true, "training steps (default 200)"},
      {"layers", true, "transformer blocks (default 2)"},
      {"hidden", true, "hidden size (default 64)"},
      {"heads", true, "attention heads; they divide --hidden (default 4)"},
      {"kv-heads", true,
       "--arch llama: key/value heads; they divide --heads (default --heads / 2 when --heads is "
       "even, else --heads)"},
      {"ffn", true,
       "--arch llama: SwiGLU width (default 8/3 x --hidden rounded up to a multiple of 8: 176 "
       "for --hidden 64)"},
      {"seq", true, "context length in characters (default 64)"},
      {"batch", true, "sequences per step, all micro-batches together (default 16)"},
      {"micro-batches", true, "micro-batch counts the search tries, e.g. 1,2 (default 1)"},
      {"lr", true, "AdamW learning rate (default 0.003)"},
      {"dropout", true, "dropout probability in [0, 1); --arch gpt only (default 0)"},
      {"dtype", true,
       "fp32, or bf16: mixed precision (bf16 activations, gradients and parameter copies; fp32 "
       "master weights, AdamW state and loss) in planning and training (default fp32)"},
      {"seed", true, "seed of the parameters, the batches and the sampling (default 1)"},
      {"data", true,
       "a text file or a directory of text files (default: license texts under " +
           std::string(demo::kLicenseDir) + ")"},
      {"sample", true, "characters to sample per line after training; 0: none (default 200)"},
      {"temperature", true, "sampling temperature; 0: greedy (default 0.8)"},
      {"log-every", true, "steps between progress lines (default: steps / 10)"},
      {"tolerance", true,
       "the search's memory resolution: where tables are combined, a plan within this fraction "
       "of a faster plan's memory is pruned; 0 is exact (default 0.05)"},
      {"plan", true, "load this plan (written by --save-plan) instead of searching"},
      {"save-plan", true, "write the plan to this JSON file"},
      {"json", true, "write the run's report (plan, losses, memory, step time) to this file"},
      {"trace", true,
       "write the last 3 training steps as Chrome trace-event JSON (open in Perfetto or "
       "chrome://tracing: one track per rank) and print rank 0's per-op measured/predicted times"},
      {"checkpoint", true,
       "save the trainer's whole state into this folder after the last step (and every "
       "--save-every steps); each save replaces the previous one atomically"},
      {"save-every", true, "steps between checkpoints (needs --checkpoint)"},
      {"resume", true,
       "load this checkpoint folder first and continue at its step (another --mesh, plan or "
       "--dtype reshards it)"},
      {"help", false, "this text"},
  };
}

// A number > 0 (or >= 0 with allow_zero), from the whole text.
double number(const carto::cli::Flags& flags, const std::string& name, double fallback,
              bool allow_zero) {
  const auto text = flags.text(name);
  if (!text) return fallback;
  const std::optional<double> v = carto::parse_real(*text);
  if (!v || !(allow_zero ? *v >= 0 : *v > 0)) {
    throw UsageError(std::string(kCommand) + ": --" + name + " needs a number " +
                     (allow_zero ? ">= 0" : "> 0") + ", got '" + *text + "'");
  }
  return *v;
}

// A whole number in [0, limit], from the whole text.
std::int64_t count(const carto::cli::Flags& flags, const std::string& name, std::int64_t fallback,
                   std::int64_t limit) {
  const auto text = flags.text(name);
  if (!text) return fallback;
  const std::optional<std::int64_t> v = carto::parse_int64(*text);
  if (!v || *v < 0 || *v > limit) {
    throw UsageError(std::string(kCommand) + ": --" + name + " needs a whole number in [0, " +
                     std::to_string(limit) + "], got '" + *text + "'");
  }
  return *v;
}

// A path flag given with an empty value is a mistake, not "use the default".
void require_nonempty(const carto::cli::Flags& flags, const std::string& name) {
  if (const auto text = flags.text(name); text && text->empty()) {
    throw UsageError(std::string(kCommand) + ": --" + name + " needs a path; got ''");
  }
}

std::uint64_t seed_flag(const carto::cli::Flags& flags) {
  const auto text = flags.text("seed");
  if (!text) return 1;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc() || end != text->data() + text->size()) {
    throw UsageError(std::string(kCommand) + ": --seed needs a non-negative integer, got '" +
                     *text + "'");
  }
  return v;
}

std::vector<std::int64_t> micro_batch_flag(const carto::cli::Flags& flags) {
  const std::string text = flags.text("micro-batches").value_or("1");
  std::vector<std::int64_t> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size() || v < 1) {
      throw UsageError(std::string(kCommand) +
                       ": --micro-batches needs positive integers separated by commas (e.g. 1,2), "
                       "got '" +
                       text + "'");
    }
    out.push_back(v);
  }
  if (out.empty()) throw UsageError(std::string(kCommand) + ": --micro-batches is empty; e.g. 1,2");
  return out;
}

carto::Precision precision_flag(const carto::cli::Flags& flags) {
  const std::string text = flags.text("dtype").value_or("fp32");
  if (text == "fp32") return carto::Precision::fp32;
  if (text == "bf16") return carto::Precision::mixed_bf16;
  throw UsageError(std::string(kCommand) + ": --dtype is fp32 or bf16, got '" + text + "'");
}

// A library message without its "carto: " prefix (the demo's own messages start "carto-demo: ").
std::string without_prefix(std::string message) {
  if (message.rfind("carto: ", 0) == 0) message.erase(0, 7);
  return message;
}

// Parses a flag value with a carto parser, naming the flag when the parser rejects it.
template <class Parse>
auto parsed(const std::string& flag, const std::string& text, Parse&& parse) {
  try {
    return parse(text);
  } catch (const carto::Error& e) {
    throw UsageError(std::string(kCommand) + ": --" + flag + ": " + without_prefix(e.what()));
  }
}

int run(const std::vector<std::string>& args) {
  const carto::cli::Flags flags(kCommand, flag_specs(), args);
  if (flags.has("help")) {
    std::cout << "usage: carto-demo [flags]\n"
                 "Trains a character-level GPT (--arch gpt) or Llama (--arch llama) on a "
                 "simulated mesh of CPU thread\nranks under a memory budget per rank, and compares "
                 "measured peak memory and step time with the\nplan's prediction.\n\n"
              << flags.help();
    return 0;
  }
  const bool llama = flags.choice("arch", {"gpt", "llama"}).value_or("gpt") == "llama";
  if (!llama) {
    for (const char* flag : {"kv-heads", "ffn"}) {
      if (flags.has(flag)) {
        throw UsageError(std::string(kCommand) + ": --" + flag +
                         " applies to --arch llama only; pass --arch llama or drop --" + flag);
      }
    }
  }
  const auto wall_start = std::chrono::steady_clock::now();
  const carto::DeviceMesh mesh = parsed("mesh", flags.text("mesh").value_or("2x2"),
                                        [](const std::string& t) { return carto::parse_mesh(t); });
  // One thread per rank: a mesh of thousands would exhaust the machine, never finish.
  if (mesh.num_devices() > carto::kMaxThreadRanks) {
    throw UsageError(std::string(kCommand) + ": --mesh " + carto::to_string(mesh) + " has " +
                     std::to_string(mesh.num_devices()) + " ranks; the demo runs one thread per " +
                     "rank and takes at most " + std::to_string(carto::kMaxThreadRanks));
  }
  for (const char* flag : {"data", "plan", "save-plan", "json", "trace"})
    require_nonempty(flags, flag);
  // Output files are checked before training, which takes a while.
  if (const auto file = flags.text("save-plan")) demo::check_output(*file, "--save-plan");
  if (const auto file = flags.text("json")) demo::check_output(*file, "--json");
  if (const auto file = flags.text("trace")) demo::check_output(*file, "--trace");
  std::optional<std::int64_t> budget;
  if (const auto b = flags.text("budget"))
    budget = parsed("budget", *b, [](const std::string& t) { return carto::parse_bytes(t); });
  demo::TrainSettings settings{
      .batch = flags.positive("batch").value_or(16),
      .steps = flags.positive("steps").value_or(200),
      .learning_rate = static_cast<float>(number(flags, "lr", 3e-3, false)),
      .seed = seed_flag(flags),
      .sample_chars = count(flags, "sample", 200, 1'000'000),
      .temperature = number(flags, "temperature", 0.8, true)};
  settings.log_every =
      flags.positive("log-every").value_or(std::max<std::int64_t>(1, settings.steps / 10));
  settings.checkpoint = flags.text("checkpoint").value_or("");
  settings.save_every = flags.positive("save-every").value_or(0);
  settings.resume = flags.text("resume").value_or("");
  settings.trace = flags.text("trace").value_or("");
  if (flags.has("save-every") && settings.checkpoint.empty()) {
    throw UsageError(std::string(kCommand) + ": --save-every needs --checkpoint DIR");
  }
  if (flags.has("checkpoint")) {
    parsed("checkpoint", settings.checkpoint, [](const std::string& t) {
      carto::check_checkpoint_target(t);
      return 0;
    });
  }
  if (flags.has("resume") && settings.resume.empty()) {
    throw UsageError(std::string(kCommand) + ": --resume needs a checkpoint folder");
  }
  const double dropout = flags.probability("dropout").value_or(0.0);
  if (llama && dropout != 0) {
    throw UsageError(std::string(kCommand) + ": --dropout " + *flags.text("dropout") +
                     " does not apply to --arch llama (Llama trains without dropout); drop "
                     "--dropout or pass --arch gpt");
  }
  const double tolerance = number(flags, "tolerance", 0.05, true);
  if (tolerance >= 1) {
    throw UsageError(std::string(kCommand) + ": --tolerance needs a number in [0, 1), got '" +
                     *flags.text("tolerance") + "'");
  }
  const std::vector<std::int64_t> micro_batches = micro_batch_flag(flags);
  const carto::Precision precision = precision_flag(flags);

  const demo::Corpus corpus = demo::Corpus::load(flags.text("data").value_or(""));
  carto::GptConfig config{
      .name = llama ? "char-llama" : "char-gpt",
      .layers = flags.positive_at_most("layers", carto::kMaxLayers, "one graph holds every layer")
                    .value_or(2),
      .hidden = flags.positive("hidden").value_or(64),
      .heads = flags.positive("heads").value_or(4),
      .vocab = corpus.vocab_size(),
      .seq = flags.positive("seq").value_or(64)};
  // --arch llama: the sizes above, and the GQA, SwiGLU and rotary settings.
  std::optional<carto::LlamaConfig> llama_config;
  if (llama) {
    config.tied_lm_head = false;
    const std::int64_t heads = config.heads;
    const std::int64_t hidden = config.hidden;
    llama_config = carto::LlamaConfig{
        .name = config.name,
        .layers = config.layers,
        .hidden = hidden,
        .heads = heads,
        .kv_heads = flags.positive("kv-heads").value_or(heads % 2 == 0 ? heads / 2 : heads),
        // 8/3 hidden rounded up to a multiple of 8.
        .ffn_hidden = flags.positive("ffn").value_or(carto::checked_mul(
            hidden / 3 + (hidden % 3 != 0 ? 1 : 0), 8, "the default --ffn, 8/3 x --hidden")),
        .vocab = config.vocab,
        .seq = config.seq,
        .rope_theta = 10000.0,  // the small-model default (Llama 3's presets use 500000)
        .norm_eps = 1e-5,
        .tied_lm_head = false,
        .biases = false};
    if (auto problem = carto::check_config(*llama_config)) {
      throw UsageError(std::string(kCommand) + ": " + *problem +
                       " (--layers, --hidden, --heads, --kv-heads, --ffn, --seq)");
    }
    settings.rmsnorm_epsilon = static_cast<float>(llama_config->norm_eps);
  } else if (auto problem = carto::check_config(config)) {
    throw UsageError(std::string(kCommand) + ": " + *problem +
                     " (--layers, --hidden, --heads, --seq)");
  }
  if (corpus.size() < config.seq + 2) {
    carto::detail::fail("carto-demo: the text has ", corpus.size(), " characters; --seq ",
                        config.seq, " needs at least ", config.seq + 2,
                        ": pass a shorter --seq or more --data");
  }
  std::cout << "data: " << corpus.files().size() << " file"
            << (corpus.files().size() == 1 ? "" : "s") << ", " << corpus.size() << " characters, "
            << corpus.vocab_size() << " distinct (the vocabulary)\n";
  for (const std::string& f : corpus.files()) std::cout << "  " << f << "\n";

  const demo::MakeGraph make_graph = [&](std::int64_t micro_batch) {
    const carto::ProfileOptions options{
        .batch = micro_batch, .precision = precision, .dropout = dropout};
    return llama_config ? carto::build_llama(*llama_config, options)
                        : carto::build_gpt(config, options);
  };
  // The model's name in plan files, their check on --plan, and the report.
  std::ostringstream model_name;
  model_name << config.name << " layers=" << config.layers << " hidden=" << config.hidden
             << " heads=" << config.heads;
  if (llama_config) {
    model_name << " kv_heads=" << llama_config->kv_heads << " ffn=" << llama_config->ffn_hidden;
  }
  model_name << " vocab=" << config.vocab << " seq=" << config.seq << " batch=" << settings.batch;
  if (!llama_config) model_name << " dropout=" << dropout;
  model_name << (precision == carto::Precision::mixed_bf16 ? " dtype=bf16" : "");

  // The calibrated profile of this machine when bench_calibrate has written one
  // (cost/hardware.hpp).
  const carto::CpuProfileChoice hardware =
      carto::cpu_profile(mesh.num_devices(), std::thread::hardware_concurrency());
  demo::RunInfo info{.model = config,
                     .llama = llama_config,
                     .dropout = dropout,
                     .corpus = &corpus,
                     .hardware = hardware.profile,
                     .plan_file = flags.text("plan").value_or(""),
                     .tolerance = tolerance,
                     .cores = std::thread::hardware_concurrency()};
  {
    const carto::Graph g = make_graph(1);
    for (const carto::TensorInfo& t : g.tensors()) {
      if (t.kind == carto::TensorKind::parameter) info.parameters += t.shape.numel();
    }
  }
  std::cout << "model: " << model_name.str() << ": " << info.parameters << " parameters";
  if (llama_config) {
    std::cout << " (RMSNorm, SwiGLU, rotary theta " << llama_config->rope_theta
              << ", grouped-query attention, untied head, no biases)";
  }
  std::cout << "\n";
  std::cout << "mesh: " << mesh << ", " << mesh.num_devices() << " CPU thread rank"
            << (mesh.num_devices() == 1 ? "" : "s") << " on " << info.cores << " cores\n"
            << hardware.note << "\n\n";

  carto::Plan plan;
  if (info.plan_file.empty()) {
    info.search = demo::search_plan(make_graph,
                                    {.model = model_name.str(),
                                     .mesh = mesh,
                                     .batch = settings.batch,
                                     .micro_batches = micro_batches,
                                     .budget = budget,
                                     .tolerance = tolerance,
                                     .precision = precision},
                                    info.hardware);
    plan = info.search->plan;
  } else {
    plan = demo::load_plan(info.plan_file, model_name.str(), make_graph, mesh, settings.batch);
    if (plan.precision != precision) {
      carto::detail::fail("carto-demo: the --plan file '", info.plan_file, "' trains in ",
                          carto::to_string_view(plan.precision), " but --dtype asks for ",
                          carto::to_string_view(precision), "; run with --dtype ",
                          plan.precision == carto::Precision::fp32 ? "fp32" : "bf16");
    }
  }
  if (const auto file = flags.text("save-plan")) {
    demo::write_json(carto::to_json(plan), *file, "--save-plan");
  }
  demo::print_plan(std::cout, plan, info);
  std::cout << "\ntraining " << settings.steps << " steps of " << settings.batch << " x "
            << config.seq << " characters, AdamW lr " << settings.learning_rate << "\n";

  const carto::Graph micro_graph = make_graph(settings.batch / plan.micro_batches);
  const demo::TrainResult result =
      demo::train(micro_graph, plan, corpus, settings, info.hardware, std::cout);
  demo::print_summary(std::cout, plan, result, settings, info);
  if (const auto file = flags.text("json")) {
    demo::write_json(demo::report_json(plan, result, settings, info), *file, "--json");
    std::cout << "report written to " << *file << "\n";
  }
  std::cout << "total "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count()
            << " s\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const carto::Error& e) {
    const std::string message = e.what();
    std::cerr << (message.rfind("carto-demo: ", 0) == 0 ? message
                                                        : "carto-demo: " + without_prefix(message))
              << "\n";
    return 2;
  }
}
