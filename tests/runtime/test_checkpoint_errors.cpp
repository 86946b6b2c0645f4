// Checkpoint integrity: CRC-32 against its published check value and a bit-at-a-time reference;
// the manifest parser on a real manifest and on broken ones (each error names the field); a
// truncated, corrupted, missing or foreign file is a clear error; a target that is not a
// checkpoint is never replaced; and the writer killed (SIGKILL, a forked child) at each stage of a
// save and at random times leaves the previous checkpoint loadable and whole.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "runtime/test_checkpoint_cases.hpp"

using namespace carto;
using namespace carto::testing;
using Catch::Contains;

namespace {

// The textbook bitwise CRC-32 (reflected, polynomial 0xEDB88320): an independent reference.
std::uint32_t crc32_bitwise(const std::vector<std::byte>& data) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::byte b : data) {
    c ^= static_cast<std::uint32_t>(b);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A saved checkpoint of 2 steps of a 2x2 fp32 plan, and what it holds.
struct Saved {
  Graph g = ckpt_graph(Precision::fp32);
  Plan plan = random_plan(g, "x=2,y=2", 61, 1, Precision::fp32);
  std::string folder, dir;
  CkptRun run;
  explicit Saved(const std::string& name) : folder(scratch_folder(name)), dir(folder + "/ckpt") {
    run = ckpt_run(g, plan, {.first = 0, .steps = 2, .save = dir});
  }
  ~Saved() { std::filesystem::remove_all(folder); }
  Saved(const Saved&) = delete;
  Saved& operator=(const Saved&) = delete;
  [[nodiscard]] CkptRun load() const { return ckpt_run(g, plan, {.first = 2, .load = dir}); }
};

// Runs `body` in a forked child; returns its wait status (the child never returns to the tests).
int in_child(const std::function<void()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      body();
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("CRC-32: the check value and a bitwise reference") {
  const std::string check = "123456789";
  CHECK(crc32(std::as_bytes(std::span<const char>(check))) == 0xCBF43926u);
  CHECK(crc32({}) == 0u);
  std::mt19937 gen(5);
  std::vector<std::byte> data(10007);
  for (std::byte& b : data) b = static_cast<std::byte>(gen() & 0xffu);
  Crc32 pieces;  // fed in uneven pieces
  pieces.update(std::span<const std::byte>(data).first(13));
  pieces.update(std::span<const std::byte>(data).subspan(13));
  CHECK(pieces.value() == crc32_bitwise(data));
  CHECK(crc32(data) == crc32_bitwise(data));
}

TEST_CASE("the manifest parser reads a real manifest and names the field of a broken one") {
  const Saved s("manifest");
  const std::string text = read_text(s.dir + "/manifest.json");
  const CheckpointManifest m = parse_checkpoint_manifest(text);
  CHECK(m.step == 2);
  CHECK(m.data_position == 2);
  CHECK(m.seed == 77);
  CHECK(m.zero_stage == 1);
  CHECK(m.mesh == parse_mesh("x=2,y=2"));
  CHECK(m.ranks.size() == 4);
  CHECK(m.parameters.size() == parameter_shapes(s.g).size());
  CHECK(to_json(m).dump(1) + "\n" == text);  // it reads back what was written
  auto broken = [&](const std::string& from, const std::string& to) {
    const std::size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    std::string t = text;
    t.replace(at, from.size(), to);
    return t;
  };
  struct Case {
    std::string from, to, message;
  };
  const std::vector<Case> cases = {
      {"\"format\": \"carto-checkpoint/1\"", "\"format\": \"carto-plan/1\"", "field 'format'"},
      {"\"format\"", "\"formats\"", "field 'format' is missing"},
      {"\"zero_stage\": 1", "\"zero_stage\": 4", "field 'zero_stage' is 4"},
      {"\"zero_stage\": 1", "\"zero_stage\": 1.5", "field 'zero_stage'"},
      {"\"mesh\": \"x=2,y=2\"", "\"mesh\": \"x=0\"", "field 'mesh'"},
      {"\"mesh\": \"x=2,y=2\"", "\"mesh\": \"x=2,y=1\"", "field 'ranks' has 4 entries"},
      {"\"step\": 2", "\"step\": -1", "field 'step' is -1"},
      {"\"seed\": \"77\"", "\"seed\": \"77x\"", "field 'seed'"},
      {"\"precision\": \"fp32\"", "\"precision\": \"fp64\"", "field 'precision'"},
      {"\"file\": \"rank-00001.bin\"", "\"file\": \"../rank-00001.bin\"", "ranks[1].file"},
      {"\"crc32\": \"", "\"crc32\": \"z", "ranks[0].crc32"},
      {"\"shape\": \"", "\"shape\": \"q=3,", "parameters[0]"},
      {"\"fingerprint\": \"", "\"fingerprint\": \"0", "field 'fingerprint'"},
  };
  for (const Case& c : cases) {
    INFO(c.from << " -> " << c.to);
    CHECK_THROWS_WITH(parse_checkpoint_manifest(broken(c.from, c.to)), Contains(c.message));
  }
  // A piece past its file's end, and one past its rank's local tensor.
  CheckpointManifest past = m;
  past.ranks[0].pieces.back().offset = past.ranks[0].bytes;
  past.ranks[0].pieces.back().count = 1;
  CHECK_THROWS_WITH(parse_checkpoint_manifest(to_json(past).dump()), Contains("ends at byte"));
  CheckpointManifest big = m;
  big.ranks[1].pieces[0].count = 1'000'000;
  CHECK_THROWS_WITH(parse_checkpoint_manifest(to_json(big).dump()), Contains("ranks[1].pieces[0]"));
  CHECK_THROWS_WITH(parse_checkpoint_manifest(text.substr(0, text.size() / 2)),
                    Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_checkpoint_manifest(""), Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_checkpoint_manifest("[1]"), Contains("must be an object"));
}

TEST_CASE("a truncated, corrupted, missing or foreign checkpoint is a clear error") {
  const Saved s("broken");
  const std::string file = s.dir + "/rank-00002.bin";
  const std::string good = read_text(file);
  CHECK(s.load().params == s.run.params);  // the intact checkpoint loads

  write_text(file, good.substr(0, good.size() - 1));
  CHECK_THROWS_WITH(s.load(), Contains("truncated") && Contains("rank-00002.bin"));
  std::string flipped = good;
  flipped[good.size() / 2] = static_cast<char>(flipped[good.size() / 2] ^ 0x10);
  write_text(file, flipped);
  CHECK_THROWS_WITH(s.load(), Contains("corrupted") && Contains("CRC-32"));
  std::filesystem::remove(file);
  CHECK_THROWS_WITH(s.load(), Contains("rank-00002.bin"));
  write_text(file, good);
  CHECK(s.load().params == s.run.params);

  // Another model: a wider GPT.
  const Graph other =
      build_gpt({.name = "other", .layers = 2, .hidden = 48, .heads = 4, .vocab = 40, .seq = 16},
                {.batch = kCkptBatch, .precision = Precision::fp32});
  const Plan plan = random_plan(other, "x=2,y=2", 62, 0, Precision::fp32);
  CHECK_THROWS_WITH(ckpt_run(other, plan, {.load = s.dir}), Contains("another model"));

  const std::string manifest = read_text(s.dir + "/manifest.json");
  write_text(s.dir + "/manifest.json", "{\"format\": \"carto-checkpoint/1\"}");
  CHECK_THROWS_WITH(s.load(), Contains("field 'model' is missing"));
  std::filesystem::remove(s.dir + "/manifest.json");
  CHECK_THROWS_WITH(s.load(), Contains("manifest"));
  write_text(s.dir + "/manifest.json", manifest);
  CHECK_THROWS_WITH(ckpt_run(s.g, s.plan, {.load = s.folder + "/absent"}),
                    Contains("not a checkpoint folder"));

  // A target that is not a checkpoint folder is refused and left as it was.
  const std::string precious = s.folder + "/precious";
  std::filesystem::create_directories(precious);
  write_text(precious + "/notes.txt", "keep me");
  CHECK_THROWS_WITH(ckpt_run(s.g, s.plan, {.save = precious}), Contains("not a checkpoint folder"));
  CHECK(read_text(precious + "/notes.txt") == "keep me");
  write_text(s.folder + "/plain", "a file");
  CHECK_THROWS_WITH(ckpt_run(s.g, s.plan, {.save = s.folder + "/plain"}),
                    Contains("not a checkpoint folder"));
  CHECK(read_text(s.folder + "/plain") == "a file");
}

TEST_CASE("the previous checkpoint survives the writer killed in the middle of a save") {
  const Saved s("crash");
  const std::string partial = s.folder + "/.ckpt.partial";
  for (const char* stage : {"prepared", "rank_file", "manifest"}) {
    INFO("killed after stage " << stage);
    const int status = in_child([&] {
      CkptSteps how{.first = 0, .steps = 3, .save = s.dir};
      how.save_options.after_stage = [&](std::string_view at) {
        if (at == stage) ::kill(::getpid(), SIGKILL);
      };
      ckpt_run(s.g, s.plan, how);
    });
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    CHECK(std::filesystem::exists(partial));  // the unfinished save is beside it
    const CkptRun loaded = s.load();
    CHECK(loaded.loaded.step == 2);  // the previous checkpoint, whole
    CHECK(loaded.params == s.run.params);
  }
  // Killed at random times while it saves again and again: whatever is there loads.
  std::mt19937 gen(7);
  for (int trial = 0; trial < 3; ++trial) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (int round = 0; round < 1000; ++round)
        ckpt_run(s.g, s.plan, {.first = 0, .steps = 1, .save = s.dir});
      ::_exit(0);
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 400)(gen)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const CkptRun loaded = s.load();
    CHECK((loaded.loaded.step == 1 || loaded.loaded.step == 2));
  }
  // A completed save replaces the checkpoint and removes the stale partial folder.
  CHECK(in_child([&] { ckpt_run(s.g, s.plan, {.first = 0, .steps = 3, .save = s.dir}); }) == 0);
  CHECK_FALSE(std::filesystem::exists(partial));
  CHECK(s.load().loaded.step == 3);
}
