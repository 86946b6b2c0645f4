#include "report.hpp"

#include <algorithm>
#include <carto/runtime/memory.hpp>
#include <carto/util/units.hpp>
#include <cmath>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>

namespace demo {

using carto::format_bytes;
using carto::Json;

namespace {

constexpr std::size_t kAverage = 10;  // steps averaged at each end of the loss curve

std::string milliseconds(double s) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(s < 0.01 ? 3 : 1) << s * 1e3 << " ms";
  return out.str();
}

std::string fixed(double v, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << v;
  return out.str();
}

double mean(const std::vector<double>& v, std::size_t begin, std::size_t end) {
  double sum = 0;
  for (std::size_t i = begin; i < end; ++i) sum += v[i];
  return end > begin ? sum / static_cast<double>(end - begin) : 0;
}

// The group name of an op name: "block.3" of "block.3.einsum0".
std::string group_of(const std::string& op) { return op.substr(0, op.rfind('.')); }

}  // namespace

double measured_step_seconds(const TrainResult& result) {
  const std::vector<double>& s = result.step_seconds;
  return s.size() > 1 ? mean(s, 1, s.size()) : mean(s, 0, s.size());
}

void print_plan(std::ostream& out, const carto::Plan& plan, const RunInfo& info) {
  out << "plan: mesh " << plan.mesh << ", "
      << (plan.precision == carto::Precision::fp32
              ? std::string("fp32")
              : "mixed bf16 (gradients reduced in " +
                    std::string(carto::to_string_view(plan.gradient_reduction)) + ")")
      << ", ZeRO stage " << plan.zero_stage << ", " << plan.micro_batches << " micro-batch"
      << (plan.micro_batches == 1 ? "" : "es");
  if (info.search) {
    out << " (searched in " << fixed(plan.search_time_s, 1)
        << " s over ZeRO stages 0-3 and the micro-batch counts on this mesh, "
        << carto::to_string_view(plan.space) << " search space)\n";
    if (info.tolerance > 0) {
      out << "  memory resolution " << fixed(info.tolerance, 3)
          << ": where tables are combined, plans within that fraction of a faster plan's memory "
             "were pruned (--tolerance 0: exact)\n";
    }
    const PlanChoice& c = *info.search;
    out << "  budget " << format_bytes(c.budget) << " per rank ("
        << (c.default_budget ? "default: halfway between the least memory any plan needs and "
                               "the fastest plan's; "
                             : "--budget; ")
        << "the least memory any plan needs is " << format_bytes(c.least_bytes)
        << ", the fastest plan needs " << format_bytes(c.fastest_bytes) << " and takes "
        << milliseconds(c.fastest_time_s) << ")\n";
  } else {
    out << " (loaded from " << info.plan_file << ")\n";
  }
  out << "  predicted step time " << milliseconds(plan.step_time_s) << " under hardware profile '"
      << info.hardware.name << "':";
  for (const auto& [what, s] : plan.time_breakdown) {
    if (s > 0) out << " " << what << " " << milliseconds(s) << ",";
  }
  out << "\n  predicted peak memory " << format_bytes(plan.peak_memory_bytes) << " per rank:";
  for (const auto& [what, bytes] : plan.memory_breakdown) {
    out << " " << what << " " << format_bytes(bytes) << ",";
  }
  out << "\n  op strategies, [input specs] -> output spec:\n";
  // Block k's strategies by position; a block equal to block.0 is folded into one line.
  std::map<std::string, std::vector<std::string>> blocks;
  for (const carto::PlanOp& op : plan.ops) blocks[group_of(op.name)].push_back(op.strategy);
  std::size_t width = 0;
  for (const carto::PlanOp& op : plan.ops) width = std::max(width, op.name.size());
  std::string folded_group;
  for (const carto::PlanOp& op : plan.ops) {
    const std::string group = group_of(op.name);
    if (group.rfind("block.", 0) == 0 && group != "block.0" && blocks[group] == blocks["block.0"]) {
      if (group != folded_group) out << "    " << group << ": the same as block.0\n";
      folded_group = group;
      continue;
    }
    out << "    " << std::left << std::setw(static_cast<int>(width)) << op.name << std::right
        << "  " << op.strategy << (op.checkpointed ? "  [checkpointed]" : "") << "\n";
  }
}

void print_summary(std::ostream& out, const carto::Plan& plan, const TrainResult& result,
                   const TrainSettings& settings, const RunInfo& info) {
  const std::vector<double>& loss = result.losses;
  if (loss.empty()) return;
  const std::size_t n = loss.size(), k = std::min(kAverage, n);
  out << "\nloss: " << fixed(loss.front(), 3) << " at step " << result.first_step + 1 << " -> "
      << fixed(loss.back(), 3) << " at step " << result.first_step + static_cast<std::int64_t>(n)
      << "; mean of the first " << k << " steps " << fixed(mean(loss, 0, k), 3) << ", of the last "
      << k << " " << fixed(mean(loss, n - k, n), 3)
      << " (uniform guessing: " << fixed(std::log(static_cast<double>(info.model.vocab)), 3)
      << ")\n";
  if (result.loss_disagreement == 0) {
    out << "every rank computed the same loss at every step\n";
  } else {
    out << "the ranks' losses differ by up to " << result.loss_disagreement
        << " (they should be one replicated value)\n";
  }

  out << "\npeak memory per rank, over the training steps:\n"
      << "  rank  measured     predicted    measured/predicted\n";
  for (std::size_t r = 0; r < result.peak_bytes.size(); ++r) {
    out << "  " << std::left << std::setw(6) << r << std::setw(13)
        << format_bytes(result.peak_bytes[r]) << std::setw(13)
        << format_bytes(plan.peak_memory_bytes) << std::right
        << fixed(static_cast<double>(result.peak_bytes[r]) /
                     static_cast<double>(plan.peak_memory_bytes),
                 3)
        << "\n";
  }
  out << "  rank 0 at its peak: " << result.at_peak.front() << " (bytes)\n";
  if (plan.precision == carto::Precision::mixed_bf16) {
    out << "  (measured includes the CPU kernels' fp32 staging of bf16 operands during a call, "
           "which the plan, priced for a GPU, does not count)\n";
  }

  const double measured = measured_step_seconds(result);
  const std::size_t ranks = result.peak_bytes.size();
  out << "\nstep time: measured " << milliseconds(measured) << " (mean of steps "
      << (n > 1 ? "2-" : "1-") << n << "), predicted " << milliseconds(plan.step_time_s)
      << " under hardware profile '" << info.hardware.name << "': measured/predicted "
      << fixed(measured / plan.step_time_s, 2) << "\n";
  if (result.cpu_seconds_per_rank_step > 0) {
    out << "  CPU time per rank and step (process CPU time of steps 2-" << n << " / " << ranks
        << (ranks == 1 ? " rank): " : " ranks): ") << milliseconds(result.cpu_seconds_per_rank_step)
        << ", measured/predicted " << fixed(result.cpu_seconds_per_rank_step / plan.step_time_s, 2)
        << "\n";
  }
  if (info.cores > 0 && ranks > info.cores) {
    out << "  (" << ranks << " thread ranks share " << info.cores
        << " cores here; the profile prices every rank as if it had a core of its own)\n";
  }
  out << "throughput: " << fixed(static_cast<double>(settings.batch * info.model.seq) / measured, 0)
      << " tokens/s; training took " << fixed(result.train_seconds, 1) << " s\n";

  if (result.samples.empty()) return;
  out << "\nsamples ("
      << (settings.temperature > 0 ? "temperature " + fixed(settings.temperature, 2)
                                   : std::string("greedy"))
      << ", seed " << settings.seed << "; the prompt in [brackets]):\n";
  for (std::size_t i = 0; i < result.samples.size(); ++i) {
    std::istringstream lines("[" + result.prompts[i] + "]" + result.samples[i]);
    for (std::string line; std::getline(lines, line);) out << "  | " << line << "\n";
    out << "\n";
  }
}

Json report_json(const carto::Plan& plan, const TrainResult& result, const TrainSettings& settings,
                 const RunInfo& info) {
  Json j;
  j["format"] = "carto-demo-report/1";
  Json& model = j["model"];
  model["name"] = plan.model;
  model["architecture"] = std::string(info.llama ? "llama" : "gpt");
  model["layers"] = info.model.layers;
  model["hidden"] = info.model.hidden;
  model["heads"] = info.model.heads;
  model["vocab"] = info.model.vocab;
  model["seq"] = info.model.seq;
  if (info.llama) {
    model["kv_heads"] = info.llama->kv_heads;
    model["ffn_hidden"] = info.llama->ffn_hidden;
    model["rope_theta"] = info.llama->rope_theta;
    model["norm_eps"] = info.llama->norm_eps;
    model["tied_lm_head"] = info.llama->tied_lm_head;
  }
  model["batch"] = settings.batch;
  model["dropout"] = info.dropout;
  model["precision"] = std::string(carto::to_string_view(plan.precision));
  model["parameters"] = info.parameters;
  j["data"]["files"] = Json::array();
  for (const std::string& f : info.corpus->files()) j["data"]["files"].push_back(f);
  j["data"]["characters"] = info.corpus->size();
  j["hardware_profile"] = info.hardware.name;
  j["plan_source"] = info.search ? std::string("search") : info.plan_file;
  if (info.search) {
    j["budget_bytes"] = info.search->budget;
    j["budget_is_default"] = info.search->default_budget;
    j["least_memory_any_plan_needs_bytes"] = info.search->least_bytes;
    j["fastest_plan_bytes"] = info.search->fastest_bytes;
    j["dp_tolerance"] = info.tolerance;
  }
  j["plan"] = carto::to_json(plan);

  Json& t = j["training"];
  t["steps"] = settings.steps;
  t["first_step"] = result.first_step;  // a resumed run's losses begin after it
  t["learning_rate"] = static_cast<double>(settings.learning_rate);
  t["seed"] = static_cast<std::int64_t>(settings.seed);
  t["losses"] = Json::array();
  for (const double l : result.losses) t["losses"].push_back(l);
  t["step_seconds"] = Json::array();
  for (const double s : result.step_seconds) t["step_seconds"].push_back(s);
  t["loss_disagreement_between_ranks"] = result.loss_disagreement;
  t["train_seconds"] = result.train_seconds;
  t["sample_seconds"] = result.sample_seconds;

  Json& mem = j["memory"];
  mem["predicted_peak_bytes"] = plan.peak_memory_bytes;
  mem["ranks"] = Json::array();
  for (std::size_t r = 0; r < result.peak_bytes.size(); ++r) {
    Json rank;
    rank["rank"] = static_cast<std::int64_t>(r);
    rank["measured_peak_bytes"] = result.peak_bytes[r];
    rank["predicted_peak_bytes"] = plan.peak_memory_bytes;
    for (const carto::MemoryKind kind : carto::kAllMemoryKinds)
      rank["measured_at_peak"][std::string(to_string_view(kind))] = result.at_peak[r][kind];
    mem["ranks"].push_back(rank);
  }
  const double measured = measured_step_seconds(result);
  j["step_time"]["predicted_s"] = plan.step_time_s;
  j["step_time"]["measured_s"] = measured;
  j["step_time"]["measured_over_predicted"] = measured / plan.step_time_s;
  j["step_time"]["cpu_per_rank_s"] = result.cpu_seconds_per_rank_step;
  j["step_time"]["tokens_per_second"] =
      static_cast<double>(settings.batch * info.model.seq) / measured;

  j["samples"] = Json::array();
  for (std::size_t i = 0; i < result.samples.size(); ++i) {
    Json s;
    s["prompt"] = result.prompts[i];
    s["text"] = result.samples[i];
    j["samples"].push_back(s);
  }
  return j;
}

}  // namespace demo
