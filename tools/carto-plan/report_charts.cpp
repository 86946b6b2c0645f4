// The HTML report's charts: one device's memory over the step, the step time by category, and the
// time/memory frontier (see report.hpp).
//
// Design note: charts are plain SVG in a fixed viewBox with linear axes. The memory timeline is
// reduced to at most kMaxPoints points (each the point of largest total in its bucket, so the peak
// survives) to keep a 2,000-op model's page small. Categories stack bottom-up in a fixed order:
// parameters, gradients and optimizer states (the persistent states of ZeRO's accounting), saved
// activations, temporaries, communication buffers. The frontier's labels (each plan's chosen
// point, this plan's fastest and least-memory points; every point has a hover title) are placed by
// place_labels, greedily in a fixed order of spots around each point, so that no two meet each
// other or the budget's label; a label moved off its point keeps a thin leader line to it.
#include <algorithm>
#include <array>
#include <carto/util/units.hpp>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "report_parts.hpp"

namespace carto::tools::report_detail {

namespace {

using html::escape;
using html::num;

constexpr std::size_t kMaxPoints = 800;
constexpr double kW = 960, kH = 320, kLeft = 70, kRight = 20, kTop = 20, kBottom = 40;

std::string line(double x1, double y1, double x2, double y2, std::string_view style) {
  return "<line x1=\"" + num(x1, 6) + "\" y1=\"" + num(y1, 6) + "\" x2=\"" + num(x2, 6) +
         "\" y2=\"" + num(y2, 6) + "\" " + std::string(style) + "/>";
}

std::string legend(const std::vector<std::string>& names) {
  std::string s = "<p class=\"legend\">";
  for (const std::string& n : names) {
    s += "<span><span class=\"swatch\" style=\"background:" + std::string(category_colour(n)) +
         "\"></span>" + escape(n) + "</span>";
  }
  return s + "</p>\n";
}

std::string gib(double bytes) { return num(bytes / static_cast<double>(1LL << 30), 3) + " GiB"; }

}  // namespace

namespace {
constexpr double kLabelCharWidth = 6.5;  // above the widest average glyph of 10 px system-ui
constexpr double kLabelAscent = 10, kLabelDescent = 3;
constexpr double kLabelGap = 10;  // from the point to the label's near edge
}  // namespace

LabelBox label_box(double x, double baseline, std::string_view text) {
  double chars = 0;
  for (const char c : text) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return {.x0 = x,
          .y0 = baseline - kLabelAscent,
          .x1 = x + chars * kLabelCharWidth,
          .y1 = baseline + kLabelDescent};
}

double label_baseline(const LabelBox& box) { return box.y1 - kLabelDescent; }

std::vector<LabelBox> place_labels(const std::vector<LabelAnchor>& anchors,
                                   std::vector<LabelBox> occupied, const LabelBox& area) {
  constexpr int kSteps = 40;  // up to 40 label heights up or down
  const double step = kLabelAscent + kLabelDescent + 1;
  std::vector<LabelBox> placed;
  for (const LabelAnchor& a : anchors) {
    const double width = label_box(0, 0, a.text).x1;
    std::optional<LabelBox> first, chosen;
    for (int k = 0; k <= kSteps && !chosen; ++k) {
      const double up = a.y - 4 - k * step, down = a.y + kLabelAscent + 4 + k * step;
      for (const auto& [x, baseline] : {std::pair{a.x + kLabelGap, up},
                                        {a.x + kLabelGap, down},
                                        {a.x - kLabelGap - width, up},
                                        {a.x - kLabelGap - width, down}}) {
        const LabelBox box = label_box(x, baseline, a.text);
        if (!first) first = box;
        const bool free =
            box.inside(area) && std::none_of(occupied.begin(), occupied.end(),
                                             [&](const LabelBox& o) { return box.meets(o); });
        if (free) {
          chosen = box;
          break;
        }
      }
    }
    placed.push_back(chosen.value_or(*first));
    occupied.push_back(placed.back());
  }
  return placed;
}

void memory_section(std::string& page, const ReportInput& in, const ReportData& data) {
  page += "<section id=\"memory\"><h2>Memory of one device over the step</h2>\n";
  const std::int64_t persistent = data.parameter_bytes + data.gradient_bytes + data.optimizer_bytes;
  page += "<p>One micro-batch's forward and backward pass, op by op. Persistent states: " +
          escape(format_bytes(data.parameter_bytes)) + " parameters, " +
          escape(format_bytes(data.gradient_bytes)) + " gradients, " +
          escape(format_bytes(data.optimizer_bytes)) + " optimizer states. Peak of the schedule " +
          escape(format_bytes(data.timeline_peak)) + "; the cost model's peak " +
          escape(format_bytes(data.cost_peak)) + "; budget " +
          escape(format_bytes(in.memory_budget)) + ".</p>\n";
  page += legend({"parameters", "gradients", "optimizer states", "saved activations", "temporaries",
                  "communication buffers"});
  // Reduce to at most kMaxPoints, keeping the largest total of each bucket.
  std::vector<const MemoryPoint*> points;
  const std::size_t n = data.memory.size();
  const std::size_t per = std::max<std::size_t>(1, (n + kMaxPoints - 1) / kMaxPoints);
  for (std::size_t i = 0; i < n; i += per) {
    const MemoryPoint* best = &data.memory[i];
    for (std::size_t j = i; j < std::min(n, i + per); ++j)
      if (data.memory[j].total() > best->total()) best = &data.memory[j];
    points.push_back(best);
  }
  const double top = 1.08 * static_cast<double>(std::max({in.memory_budget, data.cost_peak,
                                                          data.timeline_peak, std::int64_t{1}}));
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](std::size_t i) {
    return kLeft + (points.size() <= 1
                        ? 0.0
                        : pw * static_cast<double>(i) / static_cast<double>(points.size() - 1));
  };
  auto Y = [&](double bytes) { return kTop + ph * (1 - bytes / top); };
  page += "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" + num(kW) +
          "\" height=\"" + num(kH) + "\" viewBox=\"0 0 " + num(kW) + " " + num(kH) + "\">";
  for (int t = 0; t <= 4; ++t) {
    const double b = top * t / 4.0;
    page += line(kLeft, Y(b), kW - kRight, Y(b), "stroke=\"#eee\"");
    page += svg_text(4, Y(b) + 3, gib(b));
  }
  // Stacked bands: each category's polygon runs along its top edge and back along its bottom.
  const std::array<std::string, 6> names = {"parameters",       "gradients",
                                            "optimizer states", "saved activations",
                                            "temporaries",      "communication buffers"};
  auto part = [&](const MemoryPoint& p, std::size_t c) -> double {
    // The timeline's persistent figure is evaluate_point's; split it as ZeRO splits it.
    const double share =
        persistent > 0 ? static_cast<double>(p.persistent) / static_cast<double>(persistent) : 0.0;
    switch (c) {
      case 0: return share * static_cast<double>(data.parameter_bytes);
      case 1: return share * static_cast<double>(data.gradient_bytes);
      case 2: return share * static_cast<double>(data.optimizer_bytes);
      case 3: return static_cast<double>(p.activations);
      case 4: return static_cast<double>(p.temporaries);
      default: return static_cast<double>(p.communication);
    }
  };
  std::vector<double> below(points.size(), 0.0);
  for (std::size_t c = 0; c < names.size(); ++c) {
    std::string upper, lower;
    std::vector<double> above(points.size());
    for (std::size_t i = 0; i < points.size(); ++i) above[i] = below[i] + part(*points[i], c);
    for (std::size_t i = 0; i < points.size(); ++i)
      upper += num(X(i), 6) + "," + num(Y(above[i]), 6) + " ";
    for (std::size_t i = points.size(); i-- > 0;)
      lower += num(X(i), 6) + "," + num(Y(below[i]), 6) + " ";
    page += "<polygon points=\"" + upper + lower + "\" fill=\"" +
            std::string(category_colour(names[c])) + "\" fill-opacity=\"0.85\"><title>" +
            escape(names[c]) + "</title></polygon>";
    below = above;
  }
  const double budget_y = Y(static_cast<double>(in.memory_budget));
  page += line(kLeft, budget_y, kW - kRight, budget_y,
               "stroke=\"#d62728\" stroke-width=\"1.5\" stroke-dasharray=\"6,3\"");
  page += svg_text(kW - kRight - 150, budget_y - 4, "budget " + format_bytes(in.memory_budget),
                   "fill=\"#d62728\"");
  const double cost_y = Y(static_cast<double>(data.cost_peak));
  page += line(kLeft, cost_y, kW - kRight, cost_y, "stroke=\"#333\" stroke-dasharray=\"2,2\"");
  page += svg_text(kLeft + 4, cost_y - 4, "cost model peak " + format_bytes(data.cost_peak));
  std::size_t at = 0;
  for (std::size_t i = 0; i < points.size(); ++i)
    if (points[i]->total() > points[at]->total()) at = i;
  if (!points.empty()) {
    const double py = Y(static_cast<double>(points[at]->total()));
    page += "<circle cx=\"" + num(X(at), 6) + "\" cy=\"" + num(py, 6) +
            "\" r=\"4\" fill=\"#000\"><title>" +
            escape("peak " + format_bytes(points[at]->total()) + " at " + points[at]->label) +
            "</title></circle>";
    page += svg_text(X(at) + 6, py + 12, "peak " + format_bytes(points[at]->total()));
  }
  page += line(kLeft, kTop + ph, kW - kRight, kTop + ph, "stroke=\"#333\"");
  page += svg_text(kLeft, kH - 12, "forward →");
  page += svg_text(kW - kRight - 80, kH - 12, "← backward");
  page += "</svg></section>\n";
}

void time_section(std::string& page, const ReportInput& in, const ReportData& data) {
  const Plan& p = *in.plan;
  page += "<section id=\"time\"><h2>Step time</h2>\n<p>Predicted step " +
          escape(duration(p.step_time_s)) + ", by category:</p>\n";
  std::vector<std::string> cats;
  for (const auto& [k, v] : p.time_breakdown)
    if (v > 0) cats.push_back(k);
  for (const GroupRun& r : data.runs)
    for (const auto& [k, v] : r.time)
      if (v > 0 && std::find(cats.begin(), cats.end(), k) == cats.end()) cats.push_back(k);
  page += legend(cats);
  // The whole step as one stacked bar.
  double total = 0;
  for (const auto& [k, v] : p.time_breakdown) total += std::max(0.0, v);
  const double bar_w = kW - kLeft - kRight;
  page += "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" + num(kW) +
          "\" height=\"40\" viewBox=\"0 0 " + num(kW) + " 40\">";
  double x = kLeft;
  for (const auto& [k, v] : p.time_breakdown) {
    if (!(v > 0) || !(total > 0)) continue;
    const double w = bar_w * v / total;
    page += "<rect x=\"" + num(x, 6) + "\" y=\"6\" width=\"" + num(w, 6) +
            "\" height=\"22\" fill=\"" + std::string(category_colour(k)) + "\"><title>" +
            escape(k + ": " + duration(v)) + "</title></rect>";
    x += w;
  }
  page += svg_text(4, 21, "step") + "</svg>\n";
  page += "<table><tr><th>group</th><th>count</th>";
  for (const std::string& c : cats) page += "<th>" + escape(c) + "</th>";
  page += "<th>per group</th><th>all of them</th></tr>\n";
  for (const GroupRun& r : data.runs) {
    double sum = 0;
    page += "<tr class=\"time-row\"><td><code>" + escape(r.name) +
            "</code></td><td class=\"num\">" + std::to_string(r.count) + "</td>";
    for (const std::string& c : cats) {
      const auto it = r.time.find(c);
      const double v = it == r.time.end() ? 0.0 : it->second;
      sum += v;
      page += "<td class=\"num\">" + (v > 0 ? escape(duration(v)) : std::string("")) + "</td>";
    }
    page += "<td class=\"num\">" + escape(duration(sum)) + "</td><td class=\"num\">" +
            escape(duration(sum * static_cast<double>(r.count))) + "</td></tr>\n";
  }
  page += "<tr><th>step</th><td></td>";
  for (const std::string& c : cats) {
    const auto it = p.time_breakdown.find(c);
    page += "<td class=\"num\">" +
            (it != p.time_breakdown.end() && it->second > 0 ? escape(duration(it->second))
                                                            : std::string("")) +
            "</td>";
  }
  page += "<td></td><td class=\"num\">" + escape(duration(p.step_time_s)) + "</td></tr>\n";
  page += "</table></section>\n";
}

void frontier_section(std::string& page, const ReportInput& in) {
  const Plan& p = *in.plan;
  page += "<section id=\"frontier\"><h2>Time and memory</h2>\n";
  double t_lo = p.step_time_s, t_hi = p.step_time_s;
  double m_hi = static_cast<double>(std::max(p.peak_memory_bytes, in.memory_budget));
  auto extend = [&](const Plan& q) {
    t_lo = std::min(t_lo, q.step_time_s);
    t_hi = std::max(t_hi, q.step_time_s);
    m_hi = std::max(m_hi, static_cast<double>(q.peak_memory_bytes));
    for (const FrontierPoint& f : q.frontier) {
      t_lo = std::min(t_lo, f.time_s);
      t_hi = std::max(t_hi, f.time_s);
      m_hi = std::max(m_hi, static_cast<double>(f.peak_bytes));
    }
  };
  extend(p);
  if (in.compare != nullptr) extend(*in.compare);
  const double span = std::max(t_hi - t_lo, 1e-3 * std::max(t_hi, 1e-12));
  t_lo = std::max(0.0, t_lo - 0.05 * span);
  t_hi += 0.05 * span;
  m_hi *= 1.08;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](double t) { return kLeft + pw * (t - t_lo) / (t_hi - t_lo); };
  auto Y = [&](double b) { return kTop + ph * (1 - b / m_hi); };
  page +=
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"frontier-plot\" width=\"" +
      num(kW) + "\" height=\"" + num(kH) + "\" viewBox=\"0 0 " + num(kW) + " " + num(kH) + "\">";
  for (int t = 0; t <= 4; ++t) {
    const double b = m_hi * t / 4.0;
    page += line(kLeft, Y(b), kW - kRight, Y(b), "stroke=\"#eee\"") + svg_text(4, Y(b) + 3, gib(b));
    const double s = t_lo + (t_hi - t_lo) * t / 4.0;
    page += svg_text(X(s) - 20, kH - 22, duration(s));
  }
  page += svg_text(kW / 2 - 60, kH - 6, "step time →");
  const double by = Y(static_cast<double>(in.memory_budget));
  const std::string budget_text = "budget " + format_bytes(in.memory_budget);
  page += line(kLeft, by, kW - kRight, by, "stroke=\"#d62728\" stroke-dasharray=\"6,3\"") +
          svg_text(kW - kRight - 150, by - 4, budget_text, "fill=\"#d62728\"");
  // Labels: each plan's chosen point, and this plan's fastest and least-memory frontier points;
  // every point has its figures in a hover title. Placed so that no two meet (place_labels).
  std::vector<LabelAnchor> anchors;
  std::vector<std::string> label_colours;
  auto label = [&](double x, double y, std::string text, std::string_view colour) {
    anchors.push_back({.x = x, .y = y, .text = std::move(text)});
    label_colours.emplace_back(colour);
  };
  auto dots = [&](const Plan& q, std::string_view colour, std::string_view who) {
    for (const FrontierPoint& f : q.frontier) {
      page +=
          "<circle class=\"frontier-point\" cx=\"" + num(X(f.time_s), 6) + "\" cy=\"" +
          num(Y(static_cast<double>(f.peak_bytes)), 6) + "\" r=\"3.5\" fill=\"" +
          std::string(colour) + "\" fill-opacity=\"0.7\"><title>" +
          escape(std::string(who) + ": " + duration(f.time_s) + ", " + format_bytes(f.peak_bytes) +
                 ", mesh " + f.mesh + ", ZeRO " + std::to_string(f.zero_stage) + ", " +
                 std::to_string(f.micro_batches) + " micro-batches") +
          "</title></circle>";
    }
    const double cx = X(q.step_time_s), cy = Y(static_cast<double>(q.peak_memory_bytes));
    page += "<path class=\"chosen\" d=\"M" + num(cx, 6) + " " + num(cy - 8, 6) +
            "l8 8l-8 8l-8 -8z\" fill=\"none\" stroke=\"" + std::string(colour) +
            "\" stroke-width=\"2\"><title>" +
            escape(std::string(who) + " (chosen): " + duration(q.step_time_s) + ", " +
                   format_bytes(q.peak_memory_bytes)) +
            "</title></path>";
    label(cx, cy, std::string(who), colour);
  };
  if (in.compare != nullptr)
    dots(*in.compare, "#e6550d", in.compare_label.empty() ? "compared plan" : in.compare_label);
  dots(p, "#1f77b4", "this plan");
  if (!p.frontier.empty()) {
    auto by_time = [](const FrontierPoint& a, const FrontierPoint& b) {
      return a.time_s < b.time_s || (a.time_s == b.time_s && a.peak_bytes < b.peak_bytes);
    };
    auto by_memory = [](const FrontierPoint& a, const FrontierPoint& b) {
      return a.peak_bytes < b.peak_bytes || (a.peak_bytes == b.peak_bytes && a.time_s < b.time_s);
    };
    const FrontierPoint& fastest = *std::min_element(p.frontier.begin(), p.frontier.end(), by_time);
    const FrontierPoint& smallest =
        *std::min_element(p.frontier.begin(), p.frontier.end(), by_memory);
    auto chosen = [&](const FrontierPoint& f) {
      return f.time_s == p.step_time_s && f.peak_bytes == p.peak_memory_bytes;
    };
    if (!chosen(fastest))
      label(X(fastest.time_s), Y(static_cast<double>(fastest.peak_bytes)),
            "fastest " + duration(fastest.time_s), "#555");
    if (!chosen(smallest) && &smallest != &fastest)
      label(X(smallest.time_s), Y(static_cast<double>(smallest.peak_bytes)),
            "least memory " + format_bytes(smallest.peak_bytes), "#555");
  }
  const std::vector<LabelBox> boxes =
      place_labels(anchors, {label_box(kW - kRight - 150, by - 4, budget_text)},
                   {.x0 = kLeft, .y0 = 0, .x1 = kW, .y1 = kTop + ph});
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const LabelBox& b = boxes[i];
    const bool right = b.x0 >= anchors[i].x;
    const double ly = std::clamp(anchors[i].y, b.y0, b.y1);
    page += line(anchors[i].x, anchors[i].y, right ? b.x0 : b.x1, ly,
                 "stroke=\"" + label_colours[i] + "\" stroke-width=\"0.5\"");
    page += svg_text(b.x0, label_baseline(b), anchors[i].text,
                     "class=\"frontier-label\" fill=\"" + label_colours[i] + "\"");
  }
  page += line(kLeft, kTop + ph, kW - kRight, kTop + ph, "stroke=\"#333\"") + "</svg>\n";
  // The plans side by side.
  page += "<table id=\"comparison\"><tr><th></th><th>this plan</th>";
  if (in.compare != nullptr)
    page += "<th class=\"compare\">" +
            escape(in.compare_label.empty() ? "compared plan" : in.compare_label) + "</th>";
  page += "</tr>\n";
  auto cells = [&](std::string_view key, auto get) {
    page += "<tr><th>" + escape(key) + "</th><td>" + escape(get(p)) + "</td>";
    if (in.compare != nullptr) page += "<td>" + escape(get(*in.compare)) + "</td>";
    page += "</tr>\n";
  };
  cells("step time", [](const Plan& q) { return duration(q.step_time_s); });
  cells("peak memory", [](const Plan& q) { return format_bytes(q.peak_memory_bytes); });
  cells("mesh", [](const Plan& q) {
    std::string s;
    for (const MeshAxis& a : q.mesh.axes())
      s += (s.empty() ? "" : ", ") + std::string(a.name.view()) + "=" + std::to_string(a.size);
    return s;
  });
  cells("ZeRO stage", [](const Plan& q) { return std::to_string(q.zero_stage); });
  cells("micro-batches", [](const Plan& q) { return std::to_string(q.micro_batches); });
  cells("frontier points", [](const Plan& q) { return std::to_string(q.frontier.size()); });
  page += "</table></section>\n";
}

}  // namespace carto::tools::report_detail
