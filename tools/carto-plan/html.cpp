// Escaping, number labels and atomic file writes for the HTML report (see html.hpp).
#include "html.hpp"

#include <unistd.h>

#include <carto/error.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace carto::tools::html {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double value, int digits) {
  std::ostringstream s;
  s.precision(digits);
  s << value;
  return s.str();
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream file(temp, std::ios::binary | std::ios::trunc);
    if (!file.good()) {
      detail::fail("cannot write the report: cannot create '", temp, "' (does the directory of '",
                   path, "' exist and is it writable?)");
    }
    file.write(text.data(), static_cast<std::streamsize>(text.size()));
    file.flush();
    if (!file.good()) {
      file.close();
      std::remove(temp.c_str());
      detail::fail("cannot write the report to '", temp, "' (disk full or no permission?)");
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temp.c_str());
    detail::fail("cannot write the report: renaming '", temp, "' to '", path, "' failed: ", why);
  }
}

}  // namespace carto::tools::html
