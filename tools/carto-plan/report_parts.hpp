// The sections of the HTML report (report.cpp: settings and layout; report_charts.cpp: memory,
// time and frontier charts) and the small drawing helpers they share. Internal to carto-plan.
//
// Design note: each section appends well-formed XHTML to one string; every text taken from the
// plan goes through html::escape, every number through html::num, so the page parses as XML.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "html.hpp"
#include "report.hpp"

namespace carto::tools::report_detail {

// The colour of mesh axis `index` (the plan's mesh order); the same in every section.
std::string_view axis_colour(std::size_t index);
// The colour of a memory or time category.
std::string_view category_colour(std::string_view category);

// "12.5 ms", "1.25 s", "80 us".
std::string duration(double seconds);

// <text> at (x, y) with the escaped `text`; `extra` holds further attributes.
std::string svg_text(double x, double y, std::string_view text, std::string_view extra = "");

// ---- chart labels that do not overlap ----
// A label's box in chart coordinates: [x0, x1] x [y0, y1], y down.
struct LabelBox {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  [[nodiscard]] bool meets(const LabelBox& o) const {
    return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1;
  }
  [[nodiscard]] bool inside(const LabelBox& o) const {
    return x0 >= o.x0 && x1 <= o.x1 && y0 >= o.y0 && y1 <= o.y1;
  }
};
// The box of an SVG label drawn at (x, baseline) in the charts' 10 px font: a generous width per
// character (UTF-8 code points), so a real glyph run stays inside it.
LabelBox label_box(double x, double baseline, std::string_view text);
// The baseline of a label whose box is `box` (label_box's inverse in y).
double label_baseline(const LabelBox& box);
struct LabelAnchor {
  double x = 0, y = 0;  // the point labelled
  std::string text;
};
// Places each label near its point, in order: the first of a fixed sequence of spots (right of the
// point above, right below, left above, left below, then the same one label height further up or
// down, step by step) whose box lies inside `area` and meets no box of `occupied` nor any label
// placed before it. When no spot is free the first is taken (so the result is always one box per
// anchor). Deterministic: the same anchors give the same boxes.
std::vector<LabelBox> place_labels(const std::vector<LabelAnchor>& anchors,
                                   std::vector<LabelBox> occupied, const LabelBox& area);

void memory_section(std::string& page, const ReportInput& input, const ReportData& data);
void time_section(std::string& page, const ReportInput& input, const ReportData& data);
void frontier_section(std::string& page, const ReportInput& input);
void measured_section(std::string& page, const ReportInput& input);

}  // namespace carto::tools::report_detail
