// The HTML report's "measured" section: a training run of the plan (carto-demo's --json report)
// beside what the plan predicted — each rank's peak memory, the step time — and the loss curve.
//
// Design note: the prediction shown is the plan's own (Plan::peak_memory_bytes, step_time_s), the
// figures the search chose it by, so the ratios are the cost model's error on this run. Bars share
// one scale per chart (the largest of measured, predicted and the budget); the loss curve is a
// polyline over the steps on a linear axis from 0 to the largest loss. Measurements are read from
// the run's JSON with every member checked, so a wrong file is an error naming the member.
#include <algorithm>
#include <carto/util/units.hpp>
#include <cmath>

#include "report_parts.hpp"

namespace carto::tools {

namespace {

[[noreturn]] void bad(const std::string& source, std::string_view what) {
  detail::fail("the training report '", source, "' ", what,
               " (expected carto-demo's --json report, format carto-demo-report/1)");
}

const Json& member(const Json& j, std::string_view key, const std::string& source,
                   std::string_view path) {
  const Json* m = j.is_object() ? j.find(key) : nullptr;
  if (m == nullptr) bad(source, "has no member " + std::string(path));
  return *m;
}

std::vector<double> numbers(const Json& j, const std::string& source, std::string_view path) {
  if (!j.is_array()) bad(source, "has no array " + std::string(path));
  std::vector<double> out;
  for (const Json& v : j.as_array()) {
    if (!v.is_number() || !std::isfinite(v.as_double()))
      bad(source, "has a value in " + std::string(path) + " that is not a finite number");
    out.push_back(v.as_double());
  }
  return out;
}

}  // namespace

Measurements measurements_from_json(const Json& run, const std::string& source) {
  const Json& format = member(run, "format", source, "'format'");
  if (!format.is_string() || format.as_string() != "carto-demo-report/1")
    bad(source, "has format " + (format.is_string() ? "'" + format.as_string() + "'" : "?"));
  Measurements m;
  m.source = source;
  const Json& training = member(run, "training", source, "'training'");
  m.losses =
      numbers(member(training, "losses", source, "'training.losses'"), source, "'training.losses'");
  m.step_seconds = numbers(member(training, "step_seconds", source, "'training.step_seconds'"),
                           source, "'training.step_seconds'");
  if (m.losses.empty()) bad(source, "records no training step");
  const Json& ranks =
      member(member(run, "memory", source, "'memory'"), "ranks", source, "'memory.ranks'");
  if (!ranks.is_array() || ranks.as_array().empty()) bad(source, "has no ranks in 'memory.ranks'");
  for (const Json& r : ranks.as_array()) {
    const Json& peak =
        member(r, "measured_peak_bytes", source, "'memory.ranks[].measured_peak_bytes'");
    if (!peak.is_int() || peak.as_int() <= 0)
      bad(source, "has a measured_peak_bytes that is not a positive integer");
    m.peak_bytes.push_back(peak.as_int());
  }
  const Json& step = member(member(run, "step_time", source, "'step_time'"), "measured_s", source,
                            "'step_time.measured_s'");
  if (!step.is_number() || !(step.as_double() > 0))
    bad(source, "has a step_time.measured_s that is not a positive number");
  m.step_s = step.as_double();
  if (const Json* hw = run.find("hardware_profile"); hw != nullptr && hw->is_string())
    m.hardware = hw->as_string();
  return m;
}

namespace report_detail {

namespace {

using html::escape;
using html::num;

constexpr double kW = 960, kLeft = 70, kRight = 20;

std::string ratio(double measured, double predicted) {
  return predicted > 0 ? num(measured / predicted, 3) : std::string("-");
}

// One horizontal bar of `value` on a scale of `top`, with its label after it.
std::string bar(double y, double value, double top, std::string_view colour, std::string_view label,
                std::string_view title) {
  const double w = (kW - kLeft - kRight - 170) * value / top;
  return "<rect class=\"measured-bar\" x=\"" + num(kLeft, 6) + "\" y=\"" + num(y, 6) +
         "\" width=\"" + num(std::max(w, 0.5), 6) + "\" height=\"14\" fill=\"" +
         std::string(colour) + "\"><title>" + escape(title) + "</title></rect>" +
         svg_text(kLeft + w + 6, y + 11, label);
}

void memory_bars(std::string& page, const ReportInput& in, const Measurements& m) {
  const Plan& p = *in.plan;
  double top = static_cast<double>(std::max(p.peak_memory_bytes, in.memory_budget));
  for (const std::int64_t b : m.peak_bytes) top = std::max(top, static_cast<double>(b));
  const double h = 30 + 20 * static_cast<double>(m.peak_bytes.size() + 1);
  page +=
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"measured-memory\" width=\"" +
      num(kW) + "\" height=\"" + num(h) + "\" viewBox=\"0 0 " + num(kW) + " " + num(h) + "\">";
  page += svg_text(4, 21, "predicted");
  page += bar(10, static_cast<double>(p.peak_memory_bytes), top, "#9ecae1",
              format_bytes(p.peak_memory_bytes), "predicted peak per device");
  for (std::size_t r = 0; r < m.peak_bytes.size(); ++r) {
    const double y = 30 + 20 * static_cast<double>(r);
    const auto b = static_cast<double>(m.peak_bytes[r]);
    page += svg_text(4, y + 11, "rank " + std::to_string(r));
    page += bar(y, b, top, "#1f77b4",
                format_bytes(m.peak_bytes[r]) + " (" +
                    ratio(b, static_cast<double>(p.peak_memory_bytes)) + " of predicted)",
                "rank " + std::to_string(r) + " measured peak");
  }
  const double bx =
      kLeft + (kW - kLeft - kRight - 170) * static_cast<double>(in.memory_budget) / top;
  page += "<line x1=\"" + num(bx, 6) + "\" y1=\"4\" x2=\"" + num(bx, 6) + "\" y2=\"" +
          num(h - 4, 6) + "\" stroke=\"#d62728\" stroke-dasharray=\"6,3\"/>" +
          svg_text(bx + 4, h - 6, "budget " + format_bytes(in.memory_budget), "fill=\"#d62728\"");
  page += "</svg>\n";
}

void loss_curve(std::string& page, const std::vector<double>& losses) {
  constexpr double kH = 260, kTop = 16, kBottom = 36;
  const double top = 1.05 * std::max(*std::max_element(losses.begin(), losses.end()), 1e-9);
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  const std::size_t n = losses.size();
  auto X = [&](std::size_t i) {
    return kLeft + (n <= 1 ? 0.0 : pw * static_cast<double>(i) / static_cast<double>(n - 1));
  };
  auto Y = [&](double l) { return kTop + ph * (1 - std::max(l, 0.0) / top); };
  page += "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"loss-curve\" width=\"" +
          num(kW) + "\" height=\"" + num(kH) + "\" viewBox=\"0 0 " + num(kW) + " " + num(kH) +
          "\">";
  for (int t = 0; t <= 4; ++t) {
    const double l = top * t / 4.0;
    page += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(Y(l), 6) + "\" x2=\"" + num(kW - kRight) +
            "\" y2=\"" + num(Y(l), 6) + "\" stroke=\"#eee\"/>" + svg_text(4, Y(l) + 3, num(l, 3));
  }
  std::string points;
  for (std::size_t i = 0; i < n; ++i) points += num(X(i), 6) + "," + num(Y(losses[i]), 6) + " ";
  page += "<polyline points=\"" + points +
          "\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\"><title>" +
          escape("loss " + num(losses.front(), 4) + " at step 1 → " + num(losses.back(), 4) +
                 " at step " + std::to_string(n)) +
          "</title></polyline>";
  page += svg_text(kLeft, kH - 8, "step 1") +
          svg_text(kW - kRight - 60, kH - 8, "step " + std::to_string(n)) +
          svg_text(kW / 2 - 30, kH - 8, "loss per step");
  page += "</svg>\n";
}

}  // namespace

void measured_section(std::string& page, const ReportInput& in) {
  const Measurements& m = *in.measured;
  const Plan& p = *in.plan;
  page += "<section id=\"measured\"><h2>Measured in training</h2>\n<p>" +
          escape("From " + m.source + ": " + std::to_string(m.losses.size()) + " steps on " +
                 std::to_string(m.peak_bytes.size()) + " ranks" +
                 (m.hardware.empty() ? ""
                                     : ", predicted under hardware profile '" + m.hardware + "'")) +
          ".</p>\n";
  page +=
      "<table id=\"measured-table\"><tr><th></th><th>measured</th><th>predicted</th>"
      "<th>measured / predicted</th></tr>\n";
  for (std::size_t r = 0; r < m.peak_bytes.size(); ++r) {
    page += "<tr class=\"measured-rank\"><th>peak memory, rank " + std::to_string(r) +
            "</th><td class=\"num\">" + escape(format_bytes(m.peak_bytes[r])) +
            "</td><td class=\"num\">" + escape(format_bytes(p.peak_memory_bytes)) +
            "</td><td class=\"num\">" +
            ratio(static_cast<double>(m.peak_bytes[r]), static_cast<double>(p.peak_memory_bytes)) +
            "</td></tr>\n";
  }
  page += "<tr><th>step time</th><td class=\"num\">" + escape(duration(m.step_s)) +
          "</td><td class=\"num\">" + escape(duration(p.step_time_s)) + "</td><td class=\"num\">" +
          ratio(m.step_s, p.step_time_s) + "</td></tr>\n";
  page += "<tr><th>loss</th><td class=\"num\">" +
          escape(num(m.losses.front(), 4) + " → " + num(m.losses.back(), 4)) +
          "</td><td></td><td></td></tr>\n</table>\n";
  memory_bars(page, in, m);
  loss_curve(page, m.losses);
  page += "</section>\n";
}

}  // namespace report_detail

}  // namespace carto::tools
