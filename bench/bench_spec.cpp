// Spec enumeration and validation on meshes of 1-3 axes. Counters: specs per second and the number
// of valid specs (the search walks this list for every tensor of a model).
#include <benchmark/benchmark.h>

#include <carto/spec.hpp>

namespace {

using namespace carto;

const TensorShape kActivation = parse_shape("batch=64,seq=2048,hidden=12288");
const TensorShape kWeight = parse_shape("in=12288,out=49152");

DeviceMesh mesh_of(int axes) {
  switch (axes) {
    case 1: return parse_mesh("tp=8");
    case 2: return parse_mesh("dp=8,tp=8");
    default: return parse_mesh("pp=2,dp=4,tp=8");
  }
}

void BM_EnumerateSpecs(benchmark::State& state) {
  const DeviceMesh mesh = mesh_of(static_cast<int>(state.range(0)));
  const EnumerateOptions options{.partial = state.range(1) != 0 ? PartialSpecs::include
                                                                : PartialSpecs::exclude};
  std::size_t count = 0;
  for (auto _ : state) {
    auto specs = enumerate_specs(kActivation, mesh, options);
    count = specs.size();
    benchmark::DoNotOptimize(specs.data());
  }
  state.counters["specs"] = static_cast<double>(count);
  state.counters["specs/s"] = benchmark::Counter(static_cast<double>(count * state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EnumerateSpecs)->ArgsProduct({{1, 2, 3}, {0, 1}})->ArgNames({"axes", "partial"});

void BM_ValidateSpecs(benchmark::State& state) {
  const DeviceMesh mesh = mesh_of(3);
  const auto specs = enumerate_specs(kActivation, mesh, {.partial = PartialSpecs::include});
  std::int64_t ok = 0;
  for (auto _ : state) {
    for (const ShardingSpec& s : specs) ok += validate(kActivation, s, mesh).ok() ? 1 : 0;
    benchmark::DoNotOptimize(ok);
  }
  state.counters["validations/s"] = benchmark::Counter(
      static_cast<double>(specs.size() * state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ValidateSpecs);

void BM_LocalShapeAndSlice(benchmark::State& state) {
  const DeviceMesh mesh = mesh_of(3);
  const auto specs = enumerate_specs(kWeight, mesh);
  std::int64_t sum = 0;
  for (auto _ : state) {
    for (const ShardingSpec& s : specs) {
      sum += local_shape(kWeight, s, mesh).numel();
      sum += device_slice(kWeight, s, mesh, mesh.num_devices() - 1).offset[0];
    }
    benchmark::DoNotOptimize(sum);
  }
  state.counters["specs/s"] = benchmark::Counter(
      static_cast<double>(specs.size() * state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LocalShapeAndSlice);

void BM_ParsePrint(benchmark::State& state) {
  const DeviceMesh mesh = mesh_of(3);
  const auto specs = enumerate_specs(kActivation, mesh, {.partial = PartialSpecs::include});
  std::size_t n = 0;
  for (auto _ : state) {
    for (const ShardingSpec& s : specs) n += parse_spec(to_string(s)).rank();
    benchmark::DoNotOptimize(n);
  }
  state.counters["round-trips/s"] = benchmark::Counter(
      static_cast<double>(specs.size() * state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ParsePrint);

}  // namespace

BENCHMARK_MAIN();
