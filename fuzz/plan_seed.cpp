// fuzz/plan_seed.cpp — writes the seed plans of fuzz/corpus/plan/ (how they were made; not a
// fuzzer): the fastest plan of plan_model.hpp's model on 2 devices and on a 2x2 mesh.
// Built with g++ or clang++ (14 or later), from the repository root:
//   g++ -std=c++20 -O1 -Iinclude fuzz/plan_seed.cpp -o /tmp/plan_seed
//   /tmp/plan_seed 2 > fuzz/corpus/plan/gpt-2.json;  /tmp/plan_seed 4 > fuzz/corpus/plan/gpt-4.json
#include <carto/search.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "plan_model.hpp"

int main(int argc, char** argv) {
  using namespace carto;
  const std::int64_t devices = argc > 1 ? std::atoll(argv[1]) : 2;
  try {
    const SearchOptions options{.precision = Precision::fp32,
                                .dropout_masks = DropoutMasks::regenerated,
                                .micro_batches = {1, 2}};
    const Plan plan = search(fuzz::plan_graph, fuzz::kPlanModel.name, fuzz::kPlanBatch, devices,
                             hardware::cpu(), options);
    std::cout << to_json(plan).dump(2) << "\n";
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
