// The sections of the HTML report (report.cpp: settings and layout; report_charts.cpp: memory,
// time and frontier charts) and the small drawing helpers they share. Internal to carto-plan.
//
// Design note: each section appends well-formed XHTML to one string; every text taken from the
// plan goes through html::escape, every number through html::num, so the page parses as XML.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

void memory_section(std::string& page, const ReportInput& input, const ReportData& data);
void time_section(std::string& page, const ReportInput& input, const ReportData& data);
void frontier_section(std::string& page, const ReportInput& input);
void measured_section(std::string& page, const ReportInput& input);

}  // namespace carto::tools::report_detail
