#include <sys/resource.h>
#include <unistd.h>

#include <carto/util/files.hpp>
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

namespace {
// A fresh folder under the system temp dir, removed at the end of the test.
struct TempFolder {
  fs::path dir;
  TempFolder() {
    dir = fs::temp_directory_path() / ("carto_files_" + std::to_string(::getpid()) + "_" +
                                       std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    fs::create_directories(dir);
  }
  ~TempFolder() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  [[nodiscard]] std::string operator/(const std::string& name) const {
    return (dir / name).string();
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int entries(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}
}  // namespace

TEST_CASE("atomic_write replaces a file and read_file_bounded reads it back", "[util][files]") {
  TempFolder t;
  const std::string path = t / "plan.json";
  std::string bytes;
  for (int i = 0; i < 100000; ++i) bytes += static_cast<char>('a' + i % 26);
  bytes += std::string(3, '\0');  // binary content survives
  carto::atomic_write(path, bytes, "plan");
  REQUIRE(slurp(path) == bytes);
  REQUIRE(carto::read_file_bounded(path, 1 << 20, "plan file") == bytes);
  carto::atomic_write(path, "second", "plan");
  REQUIRE(carto::read_file_bounded(path, 1 << 20, "plan file") == "second");
  REQUIRE(entries(t.dir) == 1);  // no temporary file left behind
}

TEST_CASE("a write abandoned before commit leaves the old file and no temporary", "[util][files]") {
  TempFolder t;
  const std::string path = t / "out.json";
  carto::atomic_write(path, "old content", "report");
  try {
    carto::AtomicFile file(path, "report");
    file.write("half of the new con");
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  REQUIRE(slurp(path) == "old content");
  REQUIRE(entries(t.dir) == 1);
}

TEST_CASE("a write the OS refuses keeps the old file and carries the OS reason", "[util][files]") {
  TempFolder t;
  const std::string path = t / "big.bin";
  carto::atomic_write(path, "old content", "checkpoint");
  // A file size limit makes write() fail with EFBIG, as a full disk makes it fail with ENOSPC.
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 4096;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string message;
  try {
    carto::atomic_write(path, std::string(100000, 'x'), "checkpoint");
  } catch (const carto::Error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  REQUIRE_THAT(message, Catch::Contains("cannot write the checkpoint") &&
                            Catch::Contains(std::strerror(EFBIG)));
  REQUIRE(slurp(path) == "old content");
  REQUIRE(entries(t.dir) == 1);
}

TEST_CASE("output paths are checked before work starts", "[util][files]") {
  TempFolder t;
  REQUIRE_NOTHROW(carto::check_output_path(t / "new.json", "plan"));
  REQUIRE_THROWS_WITH(carto::check_output_path(t.dir.string(), "plan"),
                      Catch::Contains("is a directory"));
  REQUIRE_THROWS_WITH(carto::check_output_path(t / "missing/x.json", "plan"),
                      Catch::Contains("its folder") && Catch::Contains(std::strerror(ENOENT)));
  REQUIRE_THROWS_WITH(carto::check_output_path("", "JSON report"),
                      Catch::Contains("the JSON report path is empty"));
  REQUIRE_THROWS_WITH(carto::check_output_path("/dev/null", "plan"),
                      Catch::Contains("not a regular file"));
  REQUIRE_THROWS_WITH(carto::atomic_write(t / "missing/x.json", "x", "plan"),
                      Catch::Contains(std::strerror(ENOENT)));
}

TEST_CASE("bounded reads refuse directories, devices, large and missing files", "[util][files]") {
  TempFolder t;
  const std::string path = t / "data.txt";
  carto::atomic_write(path, std::string(100, 'd'), "data");
  REQUIRE(carto::read_file_bounded(path, 100, "data file").size() == 100);
  REQUIRE_THROWS_WITH(carto::read_file_bounded(path, 99, "data file"),
                      Catch::Contains("is 100 B; at most 99 B is accepted"));
  REQUIRE_THROWS_WITH(carto::read_file_bounded("/dev/zero", 1 << 20, "plan file"),
                      Catch::Contains("'/dev/zero' is not a regular file"));
  REQUIRE_THROWS_WITH(carto::read_file_bounded(t.dir.string(), 1 << 20, "plan file"),
                      Catch::Contains("is a directory"));
  REQUIRE_THROWS_WITH(carto::read_file_bounded(t / "none", 1 << 20, "hardware profile"),
                      Catch::Contains("cannot read the hardware profile") &&
                          Catch::Contains(std::strerror(ENOENT)));
  REQUIRE_THROWS_WITH(carto::read_file_bounded("", 1 << 20, "data file"),
                      Catch::Contains("the data file path is empty"));
  REQUIRE(carto::check_input_file(path, 1000, "data file") == 100);
}
