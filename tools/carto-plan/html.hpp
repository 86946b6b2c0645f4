// Text helpers of carto-plan's HTML report: escaping for XML/HTML text and attribute values, short
// number forms for labels, and writing a file atomically.
//
// Design note: every piece of text the report takes from a plan (op names, strategies, specs) goes
// through escape() so that the page and its inline SVG stay well-formed XML. write_file_atomically
// writes to a temporary file beside the target and renames it over the target, so that a reader
// never sees half a report; a failure is a carto::Error naming the path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace carto::tools::html {

// & < > " ' as entities; every other character as is.
std::string escape(std::string_view text);

// A number with at most `digits` significant digits, no exponent for ordinary magnitudes: "12.5".
std::string num(double value, int digits = 4);

// Writes `text` to `path` through `path`.tmp.<pid> in the same directory, then renames it.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace carto::tools::html
