// The HTML report's page, its settings table and its layout view (see report.hpp; the charts are
// in report_charts.cpp).
//
// Design note on the layout view: one table row per op (a folded run of blocks shows its count);
// each input and the output is drawn as a row of boxes, one per dim, labelled with the dim's name
// and extent. A dim split over mesh axes is filled with one band per axis, in the axis's colour,
// with a divider for each shard boundary (at most 16 drawn); a Partial tensor has a dashed red
// outline and a "P(axes)" label. The moves the plan adds before an op (reshards, ZeRO regathers)
// are listed in its row with their collective, axis, phase and bytes per device.
#include "report.hpp"

#include <carto/util/units.hpp>
#include <cmath>
#include <sstream>

#include "report_parts.hpp"

namespace carto::tools {

namespace report_detail {

std::string_view axis_colour(std::size_t index) {
  static constexpr std::string_view kColours[] = {"#1f77b4", "#e6550d", "#2ca02c", "#9467bd"};
  return kColours[index % 4];
}

std::string_view category_colour(std::string_view c) {
  if (c == "parameters") return "#4c78a8";
  if (c == "gradients") return "#72b7b2";
  if (c == "optimizer states") return "#54a24b";
  if (c == "persistent states") return "#4c78a8";
  if (c == "saved activations" || c == "recompute") return "#f58518";
  if (c == "temporaries" || c == "compute") return "#e45756";
  if (c == "communication buffers" || c == "resharding") return "#b279a2";
  if (c == "all_reduce") return "#4c78a8";
  if (c == "all_gather") return "#72b7b2";
  if (c == "reduce_scatter") return "#54a24b";
  if (c == "all_to_all") return "#eeca3b";
  if (c == "zero3_gathers") return "#9d755d";
  return "#bab0ac";
}

std::string duration(double s) {
  if (s >= 1) return html::num(s, 4) + " s";
  if (s >= 1e-3) return html::num(s * 1e3, 4) + " ms";
  return html::num(s * 1e6, 4) + " us";
}

std::string svg_text(double x, double y, std::string_view text, std::string_view extra) {
  std::string out = "<text x=\"" + html::num(x, 6) + "\" y=\"" + html::num(y, 6) + "\"";
  if (!extra.empty()) out += " " + std::string(extra);
  return out + ">" + html::escape(text) + "</text>";
}

}  // namespace report_detail

namespace {

using html::escape;
using html::num;
using report_detail::axis_colour;

constexpr std::string_view kStyle = R"(
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1280px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border-bottom: 1px solid #eee; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 12px; }
.legend span { display: inline-block; margin-right: 14px; font-size: 13px; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: middle; }
.count { color: #a33; font-weight: bold; }
.ckpt { color: #666; font-size: 11px; }
.move { font-size: 11px; color: #6a3d9a; }
tr.op-row:hover { background: #fafae0; }
svg text { font-size: 10px; font-family: system-ui, sans-serif; }
)";

std::string axis_index_of(const DeviceMesh& mesh, const std::string& name, std::size_t& index) {
  for (std::size_t i = 0; i < mesh.num_axes(); ++i) {
    if (mesh.axes()[i].name.view() == name) {
      index = i;
      return name;
    }
  }
  index = 0;
  return name;
}

std::int64_t axis_size(const DeviceMesh& mesh, const std::string& name) {
  for (const MeshAxis& a : mesh.axes())
    if (a.name.view() == name) return a.size;
  return 1;
}

// One tensor as dim boxes (see the design note).
std::string tensor_svg(const TensorView& t, const DeviceMesh& mesh) {
  constexpr double kW = 54, kH = 20, kGap = 6, kTop = 12;
  const double width = std::max(60.0, static_cast<double>(t.extents.size()) * (kW + kGap) + 4);
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"tensor\" width=\"" +
                  num(width) + "\" height=\"46\" viewBox=\"0 0 " + num(width) + " 46\">";
  std::string shape;
  for (std::size_t d = 0; d < t.extents.size(); ++d)
    shape += (d ? ", " : "") + t.dim_names[d] + "=" + std::to_string(t.extents[d]);
  s += "<title>" + escape(t.role + ": " + t.spec + "  (" + shape + ")") + "</title>";
  s += report_detail::svg_text(2, 9, t.role);
  for (std::size_t d = 0; d < t.extents.size(); ++d) {
    const double x = 2 + static_cast<double>(d) * (kW + kGap);
    const std::vector<std::string>& axes = d < t.dim_axes.size() ? t.dim_axes[d] : t.dim_axes.at(0);
    if (axes.empty()) {
      s += "<rect x=\"" + num(x) + "\" y=\"" + num(kTop) + "\" width=\"" + num(kW) +
           "\" height=\"" + num(kH) + "\" fill=\"#e8e8e8\" stroke=\"#999\"/>";
    } else {
      const double band = kH / static_cast<double>(axes.size());
      for (std::size_t b = 0; b < axes.size(); ++b) {
        std::size_t index = 0;
        axis_index_of(mesh, axes[b], index);
        const double y = kTop + static_cast<double>(b) * band;
        s += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(kW) + "\" height=\"" +
             num(band) + "\" fill=\"" + std::string(axis_colour(index)) +
             "\" fill-opacity=\"0.55\" stroke=\"#555\" stroke-width=\"0.5\"/>";
        const std::int64_t shards = std::min<std::int64_t>(axis_size(mesh, axes[b]), 16);
        std::string path;
        for (std::int64_t i = 1; i < shards; ++i) {
          path += "M" + num(x + kW * static_cast<double>(i) / static_cast<double>(shards), 5) +
                  " " + num(y) + "v" + num(band);
        }
        if (!path.empty()) s += "<path d=\"" + path + "\" stroke=\"#fff\" stroke-width=\"0.8\"/>";
      }
      s += "<rect x=\"" + num(x) + "\" y=\"" + num(kTop) + "\" width=\"" + num(kW) +
           "\" height=\"" + num(kH) + "\" fill=\"none\" stroke=\"#333\"/>";
    }
    std::string label = t.dim_names[d] + " " + std::to_string(t.extents[d]);
    if (!axes.empty()) {
      label += "/";
      for (std::size_t b = 0; b < axes.size(); ++b) label += (b ? "," : "") + axes[b];
    }
    s += report_detail::svg_text(x, kTop + kH + 10, label);
  }
  if (!t.partial.empty()) {
    std::string p = "P(";
    for (std::size_t b = 0; b < t.partial.size(); ++b) p += (b ? "," : "") + t.partial[b];
    s += "<rect x=\"1\" y=\"" + num(kTop - 1) + "\" width=\"" + num(width - 2) + "\" height=\"" +
         num(kH + 2) + "\" fill=\"none\" stroke=\"#d62728\" stroke-dasharray=\"3,2\"/>";
    s += report_detail::svg_text(width - 40, 9, p + ")", "fill=\"#d62728\"");
  }
  return s + "</svg>";
}

void row(std::string& page, std::string_view key, const std::string& value_html) {
  page += "<tr><th>" + escape(key) + "</th><td>" + value_html + "</td></tr>\n";
}

void settings_section(std::string& page, const ReportInput& in, const ReportData& data) {
  const Plan& p = *in.plan;
  const HardwareProfile& hw = in.hardware;
  page += "<section id=\"settings\"><h2>Plan</h2><table>\n";
  row(page, "model", escape(in.model_description.empty() ? p.model : in.model_description));
  row(page, "global batch", std::to_string(in.global_batch) + " sequences per step");
  // Each axis spans stride * size devices (the last axis innermost): the innermost link level
  // whose domain holds them carries its collectives.
  std::string mesh;
  std::int64_t stride = 1;
  std::vector<std::string> axes(p.mesh.num_axes());
  for (std::size_t i = p.mesh.num_axes(); i-- > 0;) {
    const MeshAxis& a = p.mesh.axes()[i];
    const std::int64_t span = stride * a.size;
    std::string level = "?";
    for (const LinkLevel& l : hw.links) {
      if (l.devices == 0 || l.devices >= span) {
        level = l.name;
        break;
      }
    }
    axes[i] = "<span class=\"swatch\" style=\"background:" + std::string(axis_colour(i)) +
              "\"></span><b>" + escape(a.name.view()) + "</b> = " + std::to_string(a.size) + " (" +
              escape(level) + ")";
    stride = span;
  }
  for (std::size_t i = 0; i < axes.size(); ++i) mesh += (i ? ", " : "") + axes[i];
  row(page, "mesh", mesh + " — " + std::to_string(p.mesh.num_devices()) + " devices");
  std::string links;
  for (const LinkLevel& l : hw.links) {
    links += (links.empty() ? "" : "; ") + escape(l.name) + " " +
             (l.devices == 0 ? std::string("(all)") : std::to_string(l.devices)) + " devices, " +
             num(l.bandwidth / 1e9) + " GB/s";
  }
  row(page, "hardware",
      escape(hw.name) + (hw.description.empty() ? "" : " — " + escape(hw.description)) + "; " +
          escape(format_bytes(hw.memory_capacity)) + " per device; " +
          num(hw.peak_flops.bf16 / 1e12) + " TFLOP/s bf16; links: " + links);
  row(page, "memory budget", escape(format_bytes(in.memory_budget)) + " per device");
  row(page, "precision",
      escape(std::string(to_string_view(p.precision))) + ", gradients reduced in " +
          escape(std::string(to_string_view(p.gradient_reduction))));
  row(page, "ZeRO stage", std::to_string(p.zero_stage));
  row(page, "micro-batches", std::to_string(p.micro_batches));
  std::int64_t ckpt_groups = 0, blocks = 0;
  for (const GroupRun& r : data.runs) blocks += r.count;
  {
    std::vector<bool> seen(in.graph->groups().size(), false);
    for (std::size_t k = 0; k < p.ops.size(); ++k) {
      const std::int32_t gi = in.graph->ops()[k].group;
      if (gi >= 0 && p.ops[k].checkpointed && !seen[static_cast<std::size_t>(gi)]) {
        seen[static_cast<std::size_t>(gi)] = true;
        ++ckpt_groups;
      }
    }
  }
  row(page, "checkpointed blocks",
      std::to_string(ckpt_groups) + " of " + std::to_string(blocks) + " groups");
  row(page, "search space",
      escape(std::string(to_string_view(p.space))) + ", memory resolution ε = " + num(p.tolerance));
  row(page, "search",
      escape(report_detail::duration(p.search_time_s)) + " (" +
          std::to_string(p.configurations_searched) + " of " + std::to_string(p.configurations) +
          " configurations searched)");
  row(page, "predicted step time", escape(report_detail::duration(p.step_time_s)));
  row(page, "predicted peak memory", escape(format_bytes(p.peak_memory_bytes)) + " per device");
  page += "</table></section>\n";
}

void layout_section(std::string& page, const ReportInput& in, const ReportData& data) {
  const DeviceMesh& mesh = in.plan->mesh;
  page += "<section id=\"layout\"><h2>Layout</h2>\n<p class=\"legend\">";
  for (std::size_t i = 0; i < mesh.num_axes(); ++i) {
    page += "<span><span class=\"swatch\" style=\"background:" + std::string(axis_colour(i)) +
            "\"></span>split over " + escape(mesh.axes()[i].name.view()) + " (" +
            std::to_string(mesh.axes()[i].size) + ")</span>";
  }
  page +=
      "<span><span class=\"swatch\" style=\"background:#e8e8e8\"></span>not split</span>"
      "<span><span class=\"swatch\" style=\"border:1px dashed #d62728\"></span>Partial (a sum "
      "still to be reduced)</span></p>\n";
  page +=
      "<table><tr><th>op</th><th>strategy</th><th>inputs → output</th><th>moves before "
      "it</th></tr>\n";
  for (const LayoutRow& r : data.rows) {
    page += "<tr class=\"op-row\"><td><code>" + escape(r.name) + "</code>";
    if (r.count > 1) page += " <span class=\"count\">×" + std::to_string(r.count) + "</span>";
    if (r.checkpointed) page += "<br/><span class=\"ckpt\">checkpointed</span>";
    page += "</td><td><code>" + escape(r.strategy) + "</code></td><td>";
    for (const TensorView& t : r.tensors) page += tensor_svg(t, mesh);
    page += "</td><td>";
    for (const ReshardView& m : r.reshards) {
      page += "<div class=\"move\">" + escape(m.collective) + " over " + escape(m.axis) + ", " +
              escape(m.phase) + ", " + escape(format_bytes(m.bytes)) + ", " +
              escape(report_detail::duration(m.time_s)) + "</div>";
    }
    page += "</td></tr>\n";
  }
  page += "</table></section>\n";
}

}  // namespace

std::string render_report(const ReportInput& input) {
  const ReportData data = build_report_data(input);
  std::string page;
  page.reserve(1 << 20);
  page +=
      "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\"><head>"
      "<meta charset=\"utf-8\"/><title>" +
      escape("carto plan: " + input.plan->model) + "</title><style>" + std::string(kStyle) +
      "</style></head><body>\n";
  page += "<h1>" + escape("carto plan: " + input.plan->model) + "</h1>\n";
  settings_section(page, input, data);
  layout_section(page, input, data);
  report_detail::memory_section(page, input, data);
  report_detail::time_section(page, input, data);
  report_detail::frontier_section(page, input);
  if (input.measured != nullptr) report_detail::measured_section(page, input);
  page += "</body></html>\n";
  return page;
}

}  // namespace carto::tools
