// fuzz/fuzz_checkpoint.cpp — parse_checkpoint_manifest on any bytes. A manifest that parses prints
// (to_json) as one that parses back to the same printed form.
#include <carto/runtime/checkpoint_format.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace carto;
  const std::string_view text = fuzz::as_text(data, size);
  const auto manifest =
      fuzz::parsed([](std::string_view t) { return parse_checkpoint_manifest(t); }, text);
  if (!manifest) return 0;
  const std::string shown = to_json(*manifest).dump();
  try {
    const std::string again = to_json(parse_checkpoint_manifest(shown)).dump();
    if (again != shown) fuzz::broken("a manifest's printed form prints differently", text, again);
  } catch (const Error& e) {
    fuzz::broken("a manifest's printed form does not parse", text, e.what());
  }
  return 0;
}
