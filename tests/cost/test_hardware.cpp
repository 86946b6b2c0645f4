// Hardware profiles, the axis -> link mapping, the compute roofline and the collective closed
// forms, each against hand-computed numbers whose sources are cited beside them.
#include <carto/cost.hpp>
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "cost/cost_support.hpp"

using namespace carto;
using carto::test::close;
using carto::test::error_of;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("carto_test_" + name)).string();
}

// A one-level node of `devices` devices, for mapping tests with odd node sizes.
HardwareProfile node_of(std::int64_t devices) {
  HardwareProfile hw = hardware::h100();
  hw.name = "node";
  hw.links[0].devices = devices;
  return hw;
}

// The mapping rule by brute force: walk every device's group via coordinates, and take the
// innermost level whose domain holds each member of each group.
std::size_t brute_force_level(const DeviceMesh& mesh, std::size_t axis, const HardwareProfile& hw) {
  std::size_t level = 0;
  for (std::int64_t d = 0; d < mesh.num_devices(); ++d) {
    MeshCoord c = mesh.coord(d);
    for (std::int64_t k = 0; k < mesh.axis(axis).size; ++k) {
      c[axis] = k;
      const std::int64_t e = mesh.device(c);
      std::size_t l = 0;
      while (hw.links[l].devices != 0 && d / hw.links[l].devices != e / hw.links[l].devices) ++l;
      level = std::max(level, l);
    }
  }
  return level;
}

}  // namespace

TEST_CASE("built-in profiles are valid and found by name", "[cost][hardware]") {
  for (const std::string& name : hardware_profile_names()) {
    const HardwareProfile hw = find_hardware_profile(name);
    CHECK(hw.name == name);
    CHECK_NOTHROW(check_hardware_profile(hw, name));
  }
  // Figures straight from the sources cited in hardware.hpp.
  CHECK(hardware::h100().peak_flops.of(DType::bf16) == 989e12);  // H100 SXM datasheet
  CHECK(hardware::h100().links[0].bandwidth == 370e9);           // nccl-tests #212
  CHECK(hardware::a100().links[0].bandwidth == 230e9);           // nccl-tests #149
  CHECK(hardware::h200().memory_bandwidth == 4.8e12);            // H200 datasheet
  CHECK(hardware::a100().peak_flops.of(DType::fp8_e4m3) == 0);   // A100 has no fp8

  const std::string e = error_of([] { (void)find_hardware_profile("tpu"); });
  CHECK_THAT(e, Catch::Contains("'tpu'") && Catch::Contains("h100, h200, a100, pcie, cpu") &&
                    Catch::Contains("h100x16"));
  CHECK_THAT(error_of([] { (void)find_hardware_profile("cpux2"); }), Catch::Contains("unknown"));
}

TEST_CASE("clusters of nodes joined by InfiniBand", "[cost][hardware]") {
  const HardwareProfile c = find_hardware_profile("h100x16");
  CHECK(c.name == "h100x16");
  REQUIRE(c.links.size() == 2);
  CHECK(c.links[0].name == "nvlink");
  CHECK(c.links[0].devices == 8);
  CHECK(c.links[1].name == "infiniband");
  CHECK(c.links[1].devices == 128);
  CHECK(c.links[1].bandwidth == 46e9);  // NDR 400 Gb/s per NIC, nccl-tests #290
  CHECK(c.devices() == 128);
  CHECK(hardware_for_devices(hardware::h100(), 8) == hardware::h100());
  CHECK(hardware_for_devices(hardware::h100(), 64) == find_hardware_profile("h100x8"));
  CHECK(hardware_for_devices(hardware::h100(), 65).devices() == 72);
  CHECK(hardware_for_devices(hardware::cpu(), 1000) == hardware::cpu());
}

TEST_CASE("mesh axes map onto the slowest level their groups cross", "[cost][hardware]") {
  const HardwareProfile c16 = find_hardware_profile("h100x16");  // 16 nodes of 8
  {
    const DeviceMesh m{{"dp", 16}, {"tp", 8}};  // tp innermost: one node per tp group
    CHECK(axis_link(m, "tp", c16).name == "nvlink");
    CHECK(axis_link(m, "dp", c16).name == "infiniband");
  }
  {
    const DeviceMesh m{{"tp", 8}, {"dp", 16}};  // dp innermost (16 > 8): its groups span 2 nodes
    CHECK(axis_link(m, "dp", c16).name == "infiniband");
    CHECK(axis_link(m, "tp", c16).name == "infiniband");
  }
  {
    const DeviceMesh m{{"dp", 16}, {"tp", 4}, {"sp", 2}};  // tp stride 2: ids 0,2,4,6 in node 0
    CHECK(axis_link(m, "sp", c16).name == "nvlink");
    CHECK(axis_link(m, "tp", c16).name == "nvlink");
    CHECK(axis_link(m, "dp", c16).name == "infiniband");
  }
  {
    const DeviceMesh m{{"dp", 1}, {"tp", 8}};  // a size-1 axis never communicates
    CHECK(axis_link_level(m, 0, c16) == 0);
  }
  {
    // Nodes of 4, mesh {a:2, b:3}: b's group {3,4,5} straddles nodes 0 and 1, so b is on the
    // network although its other group {0,1,2} is not.
    const HardwareProfile c = hardware::cluster(node_of(4), {.nodes = 2});
    const DeviceMesh m{{"a", 2}, {"b", 3}};
    CHECK(axis_link(m, "b", c).name == "infiniband");
    CHECK(axis_link(m, "a", c).name == "infiniband");
  }
  // The rule against a brute-force walk over every group, on many meshes and node sizes.
  for (const std::int64_t node : {1, 2, 4, 6, 8}) {
    const HardwareProfile c = hardware::cluster(node_of(node), {.nodes = 72 / node + 1});
    for (std::int64_t x = 1; x <= 4; ++x)
      for (std::int64_t y = 1; y <= 6; ++y)
        for (std::int64_t z = 1; z <= 3; ++z) {
          const DeviceMesh m{{"x", x}, {"y", y}, {"z", z}};
          for (std::size_t a = 0; a < 3; ++a) {
            INFO("node " << node << " mesh " << m << " axis " << a);
            CHECK(axis_link_level(m, a, c) == brute_force_level(m, a, c));
          }
        }
  }
  const std::string e = error_of([] {
    (void)axis_link(DeviceMesh{{"dp", 8}, {"tp", 8}}, 0, hardware::h100());
  });
  CHECK_THAT(e, Catch::Contains("64 devices") && Catch::Contains("h100x8"));
}

TEST_CASE("compute roofline", "[cost][hardware]") {
  // A bf16 GEMM of 8192^3 on H100: 2·8192^3 FLOPs at 989 TFLOP/s (datasheet) · 0.80 (MAMF table).
  const std::int64_t gemm = 2LL * 8192 * 8192 * 8192;  // 1,099,511,627,776 FLOPs
  const std::int64_t gemm_bytes = 3LL * 8192 * 8192 * 2;
  CHECK(close(
      compute_time({.flops = gemm, .bytes = gemm_bytes, .dtype = DType::bf16}, hardware::h100()),
      1099511627776.0 / 791.2e12));  // 1.3897e-3 s: compute-bound
  // A copy of 1 GB on H200: 2 GB moved at 4.8 TB/s (datasheet) · 0.9 (measured copy) = 4.32 TB/s.
  CHECK(close(
      compute_time({.flops = 0, .bytes = 2'000'000'000, .dtype = DType::bf16}, hardware::h200()),
      2e9 / 4.32e12));  // 4.63e-4 s: memory-bound
  CHECK(compute_time({.flops = 0, .bytes = 0, .dtype = DType::fp32}, hardware::a100()) == 0);
  CHECK_THAT(error_of([] {
               (void)compute_time({.flops = 1, .bytes = 1, .dtype = DType::fp8_e4m3},
                                  hardware::a100());
             }),
             Catch::Contains("a100") && Catch::Contains("fp8_e4m3"));
}

TEST_CASE("collective closed forms", "[cost][collectives]") {
  // nccl-tests doc/PERFORMANCE.md bus factors.
  CHECK(bus_factor(Collective::all_reduce, 8) == 1.75);
  CHECK(bus_factor(Collective::all_gather, 8) == 0.875);
  CHECK(bus_factor(Collective::reduce_scatter, 4) == 0.75);
  CHECK(bus_factor(Collective::all_to_all, 2) == 0.5);
  CHECK(bus_factor(Collective::broadcast, 8) == 1.0);
  CHECK(latency_steps(Collective::all_reduce, 8) == 14);
  CHECK(latency_steps(Collective::all_gather, 8) == 7);

  const LinkCost nv{.bandwidth = 370e9, .latency = 3.4e-6};  // H100 node (nccl-tests #212)
  const std::int64_t GiB = 1LL << 30;
  // All-reduce of 1 GiB over 8 H100s: 1.75 · 2^30 / 370e9 + 14 · 3.4e-6
  //   = 1879048192 / 370e9 + 47.6e-6 = 5.078508627e-3 + 4.76e-5 = 5.126108627e-3 s.
  CHECK(close(collective_time(Collective::all_reduce, 8, GiB, nv), 1879048192.0 / 370e9 + 47.6e-6));
  // All-gather of a 1 GiB output over 8: 0.875 · 2^30 / 370e9 + 7 · 3.4e-6.
  CHECK(close(collective_time(Collective::all_gather, 8, GiB, nv), 939524096.0 / 370e9 + 23.8e-6));
  // All-to-all of 256 MiB per rank over 4: 0.75 · 2^28 / 370e9 + 3 · 3.4e-6.
  CHECK(close(collective_time(Collective::all_to_all, 4, GiB / 4, nv),
              201326592.0 / 370e9 + 10.2e-6));
  // Broadcast of 1 GiB over 8: S / B + 7 hops.
  CHECK(close(collective_time(Collective::broadcast, 8, GiB, nv), 1073741824.0 / 370e9 + 23.8e-6));

  // nccl-tests' own definition read backwards: with no latency, algbw · bus factor = busbw = B.
  const LinkCost pure{.bandwidth = 46e9, .latency = 0};
  for (const Collective k : kAllCollectives) {
    for (const std::int64_t n : {2, 3, 8, 16}) {
      const double t = collective_time(k, n, GiB, pure);
      CHECK(close(static_cast<double>(GiB) / t * bus_factor(k, n), 46e9));
    }
  }
  // n = 1 costs exactly zero; all-reduce is reduce-scatter + all-gather bit for bit.
  for (const Collective k : kAllCollectives) CHECK(collective_time(k, 1, GiB, nv) == 0.0);
  for (std::int64_t bytes = 1; bytes < (1LL << 40); bytes = bytes * 7 + 3) {
    for (const std::int64_t n : {2, 3, 5, 8, 64}) {
      CHECK(collective_time(Collective::all_reduce, n, bytes, nv) ==
            collective_time(Collective::reduce_scatter, n, bytes, nv) +
                collective_time(Collective::all_gather, n, bytes, nv));
    }
  }
  // On a mesh the axis's link is used: dp of {dp:16, tp:8} on 16 H100 nodes is InfiniBand.
  const HardwareProfile c16 = find_hardware_profile("h100x16");
  const DeviceMesh m{{"dp", 16}, {"tp", 8}};
  CHECK(close(collective_time(Collective::all_reduce, m, "dp", GiB, c16),
              2.0 * 15 / 16 * 1073741824.0 / 46e9 + 30 * 14e-6));
  CHECK(close(collective_time(Collective::all_gather, m, "tp", GiB, c16),
              0.875 * 1073741824.0 / 370e9 + 7 * 3.4e-6));
}

TEST_CASE("hardware profiles round-trip through JSON files", "[cost][hardware]") {
  for (const std::string name : {"h100", "h200", "a100", "pcie", "cpu", "a100x4"}) {
    const HardwareProfile hw = find_hardware_profile(name);
    CHECK(hardware_profile_from_json(Json::parse(to_json(hw).dump()), "memory") == hw);
    const std::string path = temp_path(name + ".json");
    save_hardware_profile(hw, path);
    CHECK(load_hardware_profile(path) == hw);
    std::remove(path.c_str());
  }
  // The optional fixed cost per op pass, written only when set.
  HardwareProfile hw = hardware::cpu();
  CHECK(to_json(hw).find("op_overhead") == nullptr);
  hw.op_overhead = 2.5e-6;
  CHECK(to_json(hw).find("op_overhead") != nullptr);
  CHECK(hardware_profile_from_json(Json::parse(to_json(hw).dump()), "memory") == hw);
}

TEST_CASE("a malformed profile file names the field and the file", "[cost][hardware]") {
  const std::string path = temp_path("bad.json");
  auto load_text = [&](const std::string& text) {
    std::ofstream(path) << text;
    return error_of([&] { (void)load_hardware_profile(path); });
  };
  const Json good = to_json(hardware::cpu());
  auto without = [](Json j, const std::string& key) {
    Json::Object kept;
    for (auto& [k, v] : j.as_object())
      if (k != key) kept.emplace_back(k, v);
    return Json(kept).dump();
  };
  CHECK_THAT(load_text("{\"name\": "), Catch::Contains(path) && Catch::Contains("invalid JSON"));
  CHECK_THAT(
      load_text(without(good, "memory_bandwidth")),
      Catch::Contains(path) && Catch::Contains("'memory_bandwidth'") && Catch::Contains("missing"));
  {
    Json j = good;
    j["links"].as_array()[0]["bandwidth"] = "fast";
    CHECK_THAT(load_text(j.dump()),
               Catch::Contains("'links[0].bandwidth'") && Catch::Contains("number"));
  }
  {
    Json j = good;
    j["op_overhead"] = -1e-6;
    CHECK_THAT(load_text(j.dump()), Catch::Contains("'op_overhead'") && Catch::Contains("[0, 1)"));
  }
  {
    Json j = good;
    j["matmul_efficiency"] = 1.5;
    CHECK_THAT(load_text(j.dump()), Catch::Contains("'matmul_efficiency'") &&
                                        Catch::Contains("(0, 1]") && Catch::Contains(path));
  }
  {
    Json j = good;
    j["format"] = "something-else";
    CHECK_THAT(load_text(j.dump()), Catch::Contains("'format'"));
  }
  {
    Json j = to_json(find_hardware_profile("h100x2"));
    j["links"].as_array()[1]["devices"] = 12;  // not a multiple of the node's 8
    CHECK_THAT(load_text(j.dump()), Catch::Contains("'links[1].devices'"));
  }
  CHECK_THAT(error_of([] { (void)load_hardware_profile("/nonexistent/carto.json"); }),
             Catch::Contains("/nonexistent/carto.json"));
  std::remove(path.c_str());
}
