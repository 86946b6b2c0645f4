// carto-demo — for now: every valid sharding spec of a tensor on a device mesh, with the local
// shape each device holds and how many copies of each slice exist. (The training demo replaces it
// when the runtime lands.)
//
//   carto-demo [--shape batch=8,seq=1024,hidden=768] [--mesh dp=2,tp=4] [--partial] [--limit N]
#include <carto/spec.hpp>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>
#include <string_view>

namespace {

int usage(std::ostream& out, int code) {
  out << "usage: carto-demo [--shape batch=8,seq=1024,hidden=768] [--mesh dp=2,tp=4] [--partial]"
         " [--limit N]\n"
         "  prints every valid sharding spec of the tensor on the mesh with its local shape\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape_text = "batch=8,seq=1024,hidden=768";
  std::string mesh_text = "dp=2,tp=4";
  bool partial = false;
  long limit = 40;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "carto-demo: " << arg << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--shape") {
      shape_text = value();
    } else if (arg == "--mesh") {
      mesh_text = value();
    } else if (arg == "--partial") {
      partial = true;
    } else if (arg == "--limit") {
      const std::string v = value();
      char* end = nullptr;
      limit = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || limit < 0) {
        std::cerr << "carto-demo: --limit needs a non-negative integer, got '" << v << "'\n";
        return 2;
      }
    } else if (arg == "--help" || arg == "-h") {
      return usage(std::cout, 0);
    } else {
      std::cerr << "carto-demo: unknown argument '" << arg << "'\n";
      return usage(std::cerr, 2);
    }
  }

  try {
    using namespace carto;
    const TensorShape shape = parse_shape(shape_text);
    const DeviceMesh mesh = parse_mesh(mesh_text);
    const auto specs = enumerate_specs(
        shape, mesh, {.partial = partial ? PartialSpecs::include : PartialSpecs::exclude});
    std::cout << "tensor " << shape << " on mesh " << mesh << " (" << mesh.num_devices()
              << " devices): " << specs.size() << " valid specs"
              << (partial ? " (Partial included)" : "") << "\n\n";
    std::cout << std::left << std::setw(28) << "spec" << std::setw(40) << "local shape"
              << "copies of each slice\n";
    long shown = 0;
    for (const ShardingSpec& spec : specs) {
      if (shown++ == limit) {
        std::cout << "... " << specs.size() - static_cast<std::size_t>(limit)
                  << " more (--limit N shows more)\n";
        break;
      }
      std::cout << std::setw(28) << to_string(spec) << std::setw(40)
                << to_string(local_shape(shape, spec, mesh)) << replication_factor(spec, mesh)
                << (spec.is_partial() ? " (partial sums)" : "") << "\n";
    }
  } catch (const carto::Error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  return 0;
}
