// fuzz/fuzz_plan.cpp — plan JSON on any bytes: Json::parse, then plan_from_json against the model
// of plan_model.hpp (each micro-batch count's graph) on its mesh; a plan that loads saves (to_json)
// to JSON that loads back to the same JSON.
#include <carto/search/plan_io.hpp>

#include "fuzz_support.hpp"
#include "plan_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace carto;
  const std::string_view text = fuzz::as_text(data, size);
  const auto json = fuzz::parsed([](std::string_view t) { return Json::parse(t); }, text);
  if (!json) return 0;
  static const Graph graphs[] = {fuzz::plan_graph(fuzz::kPlanBatch),
                                 fuzz::plan_graph(fuzz::kPlanBatch / 2)};
  for (const Graph& graph : graphs) {
    Plan plan;
    try {
      plan = plan_from_json(*json, graph);
    } catch (const Error&) {
      continue;
    }
    const std::string saved = to_json(plan).dump();
    try {
      const std::string again = to_json(plan_from_json(Json::parse(saved), graph)).dump();
      if (again != saved) fuzz::broken("a saved plan loads to another plan", text, saved);
    } catch (const Error& e) {
      fuzz::broken("a plan that loaded does not load again once saved", text, e.what());
    }
  }
  return 0;
}
