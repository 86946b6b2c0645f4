// Replays every hostile input of issue 16 against carto-plan and carto-demo: each must end with
// exit code 2 and one message that names the cause (never a crash, a hang, a wrong figure or a
// silent success), and files carto writes must be replaced atomically. The carto-demo cases run
// when the demo is built (CARTO_DEMO_PATH).
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <carto/util/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

namespace {

struct Run {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line with a 120 s guard: a hang ends as exit code 124 and fails the case.
Run shell(const std::string& line) {
  const std::string command = "timeout 120 sh -c '" + line + "' 2>&1";
  Run r;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    r.output.append(buffer.data(), n);
  }
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kPlan = CARTO_PLAN_PATH;
#ifdef CARTO_DEMO_PATH
// A tiny demo run: one block, one step, no sampling; kTinyDemo on two thread ranks.
const std::string kTinyDemoAnyMesh =
    std::string(CARTO_DEMO_PATH) +
    " --layers 1 --hidden 32 --heads 2 --seq 16 --batch 8 --steps 1 --sample 0";
const std::string kTinyDemo = kTinyDemoAnyMesh + " --mesh 2";
#endif
const std::string kTinyModel = " --layers 1 --hidden 64 --heads 4 --vocab 128 --seq 16";

// Expects exit code 2 and an output holding every one of `causes`.
void refused(const std::string& line, std::initializer_list<std::string> causes) {
  INFO("command: " << line);
  const Run r = shell(line);
  INFO("output: " << r.output);
  CHECK(r.code == 2);
  for (const std::string& cause : causes) CHECK_THAT(r.output, Catch::Contains(cause));
}

struct Folder {
  fs::path dir = fs::temp_directory_path() / ("carto_hostile_" + std::to_string(::getpid()));
  Folder() { fs::create_directories(dir); }
  ~Folder() {
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
[[maybe_unused]] void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("sizes that overflow int64 are errors naming the count", "[tools][hostile]") {
  // 175B parameters x 4096 x 2048 tokens x 8 FLOPs is about 1.2e22 FLOPs: beyond int64.
  refused(kPlan + " profile --model gpt3-175b --batch 4096 --recompute full", {"overflows"});
  refused(kPlan + " profile --model gpt3-175b --batch 8192 --recompute full --json", {"overflows"});
  for (const char* flag : {"--vocab", "--seq", "--batch"}) {
    refused(kPlan + " profile --model gpt2-124m " + flag + " 9223372036854775807", {"overflows"});
  }
  refused(kPlan + " profile --model gpt2-124m --hidden 1099511627776 --heads 1", {"overflows"});
  // A hidden size whose block widths wrap: the cause is named, not a negative extent.
  refused(kPlan + " profile --layers 1 --vocab 64 --seq 16 --heads 1 --hidden 4611686018427387904",
          {"3 * hidden (the fused QKV) exceeds 2^63-1"});
  refused(kPlan + " profile --layers 1 --vocab 64 --seq 16 --heads 2 --hidden 2305843009213693952",
          {"ffn_ratio * hidden (the MLP) exceeds 2^63-1"});
  // Llama: the fused QKV (heads + 2 kv_heads) * head_dim of llama3-8b (32 heads, 8 kv_heads) at a
  // hidden of 3 * 2^61 is 9 * 2^60; the table and activation counts overflow as counts.
  for (const char* command : {" profile", " plan --devices 2"}) {
    refused(kPlan + command + " --model llama3-8b --hidden 6917529027641081856",
            {"hidden is 6917529027641081856", "(the fused QKV) exceeds 2^63-1"});
  }
  refused(kPlan + " profile --model llama3-8b --hidden 4611686018427387904",
          {"128256 * 4611686018427387904", "overflows"});
  for (const char* flag : {"--vocab", "--seq", "--batch"}) {
    refused(kPlan + " profile --model llama3-8b " + flag + " 9223372036854775807",
            {"9223372036854775807", "overflows"});
  }
  refused(kPlan +
              " reshard --shape 4294967296,4294967296,4294967296 --from R,R,R --to \"S(x),R,R\" "
              "--mesh x=2",
          {"overflows"});
  refused(kPlan + " reshard --shape 8,8 --from R,R --to R,R --mesh x=4294967296,y=4294967296",
          {"more than 1048576"});
  refused(kPlan + " reshard --shape 8,8 --from R,R --to R,R --mesh x=4294967296",
          {"more than 1048576"});
  refused(kPlan + " strategies --model gpt2-124m --mesh x=4294967296,y=4294967296",
          {"more than 1048576"});
  refused(kPlan + " profile --model gpt2-124m --layers 2147483648", {"at most 10000"});
  refused(kPlan + " profile --model gpt2-124m --layers 10000000", {"--layers", "at most 10000"});
  refused(kPlan + " plan --model gpt2-124m --devices 4294967296", {"--devices", "at most 1048576"});
  refused(kPlan + " plan --model gpt2-124m --devices 9223372036854775807",
          {"--devices", "at most 1048576"});
}

TEST_CASE("reads are bounded to regular files of a stated size", "[tools][hostile]") {
  Folder f;
  refused(kPlan + " plan --model gpt2-124m --devices 8 --hardware /dev/zero",
          {"/dev/zero", "not a regular file"});
  refused(kPlan + " plan --model gpt2-124m --devices 8 --hardware " + f.dir.string() + "/",
          {"is a directory"});
  // carto-plan report reads a plan file, --compare and --measured through the same bound.
  const std::string plan = f / "plan.json";
  const Run made = shell(kPlan + " plan" + kTinyModel + " --devices 2 --memory 1GiB --out " + plan);
  INFO(made.output);
  REQUIRE(made.code == 0);
  const std::string report = kPlan + " report" + kTinyModel + " -o " + (f / "report.html") + " ";
  refused(report + "/dev/zero", {"the plan file '/dev/zero' is not a regular file"});
  refused(report + f.dir.string(), {"the plan file", "is a directory"});
  refused(report + plan + " --compare /dev/zero", {"the plan file '/dev/zero'", "not a regular"});
  refused(report + plan + " --measured /dev/zero",
          {"the --measured training report '/dev/zero' is not a regular file"});
  refused(report + plan + " --measured " + f.dir.string(),
          {"--measured training report", "is a directory"});
  const std::string huge = f / "huge.json";  // sparse: 65 MiB, no disk used
  std::ofstream(huge).close();
  fs::resize_file(huge, std::uintmax_t{65} << 20);
  refused(report + huge, {"the plan file", "is 65.00 MiB; at most 64.00 MiB is accepted"});
  refused(report + plan + " --measured " + huge,
          {"--measured training report", "is 65.00 MiB; at most 64.00 MiB is accepted"});
  CHECK_FALSE(fs::exists(f / "report.html"));
#ifdef CARTO_DEMO_PATH
  refused(kTinyDemo + " --plan /dev/zero", {"/dev/zero", "not a regular file"});
  refused(kTinyDemo + " --data /dev/zero", {"/dev/zero", "not a regular file"});
  refused(kTinyDemo + " --plan " + f.dir.string(), {"is a directory"});
  refused(kTinyDemo + " --plan \"\"", {"--plan needs a path"});
  refused(kTinyDemo + " --data \"\"", {"--data needs a path"});
  write(f / "empty.txt", "");
  refused(kTinyDemo + " --data " + (f / "empty.txt"), {"is empty"});
#endif
}

#ifdef CARTO_DEMO_PATH
TEST_CASE("a plan file is range-checked and its strategy indices must match its text",
          "[tools][hostile]") {
  Folder f;
  const std::string saved = f / "plan.json";
  const Run made = shell(kTinyDemo + " --save-plan " + saved);
  INFO(made.output);
  REQUIRE(made.code == 0);
  const carto::Json original = carto::Json::parse(slurp(saved));
  auto edited = [&](const std::string& name, auto&& edit) {
    carto::Json j = original;
    edit(j);
    write(f / name, j.dump(2));
    return f / name;
  };
  // Every strategy_index set to 0, text untouched: it would print one plan and run another.
  bool any_nonzero = false;
  for (const carto::Json& op : original.find("ops")->as_array()) {
    any_nonzero = any_nonzero || op.find("strategy_index")->as_int() != 0;
  }
  REQUIRE(any_nonzero);
  refused(kTinyDemo + " --plan " +
              edited("zero_indices.json",
                     [](carto::Json& j) {
                       for (carto::Json& op : j["ops"].as_array())
                         op["strategy_index"] = std::int64_t{0};
                     }),
          {"does not match its strategy_index"});
  refused(
      kTinyDemo + " --plan " +
          edited("negative_peak.json",
                 [](carto::Json& j) { j["predicted"]["peak_memory_bytes"] = std::int64_t{-5}; }),
      {"predicted.peak_memory_bytes", "-5"});
  refused(kTinyDemo + " --plan " +
              edited("negative_time.json",
                     [](carto::Json& j) { j["predicted"]["step_time_s"] = -1.0; }),
          {"predicted.step_time_s"});
  refused(kTinyDemo + " --plan " +
              edited("bad_axis.json",
                     [](carto::Json& j) { j["ops"].as_array()[0]["output_spec"] = "S(zz),R,R"; }),
          {"ops[0].output_spec"});
  refused(kTinyDemo + " --plan " +
              edited("zero_stage.json",
                     [](carto::Json& j) { j["zero_stage"] = std::int64_t{4294967296}; }),
          {"zero_stage", "4294967296", "[0, 3]"});
  refused(
      kTinyDemo + " --plan " +
          edited("micro_zero.json", [](carto::Json& j) { j["micro_batches"] = std::int64_t{0}; }),
      {"micro_batches", "at least 1"});
  refused(kTinyDemo + " --plan " +
              edited("index_minus_one.json",
                     [](carto::Json& j) {
                       j["ops"].as_array()[0]["strategy_index"] = std::int64_t{-1};
                     }),
          {"ops[0].strategy_index", "is -1"});
  // 1e309 is beyond a double: refused where it is read, not carried as inf into training.
  std::string text = slurp(saved);
  const std::string key = "\"step_time_s\": ";
  const std::size_t at = text.find(key);
  REQUIRE(at != std::string::npos);
  text.replace(at + key.size(), text.find_first_of(",\n", at) - at - key.size(), "1e309");
  write(f / "inf.json", text);
  refused(kTinyDemo + " --plan " + (f / "inf.json"), {"within the range of a double"});
}
#endif

TEST_CASE("writes are atomic and output paths are checked before the work", "[tools][hostile]") {
  Folder f;
  const std::string plan = kPlan + " plan" + kTinyModel + " --devices 2 --memory 1GiB";
  refused(plan + " --out " + f.dir.string(), {"--out", "is a directory"});
  refused(plan + " --out " + (f / "missing/plan.json"), {"--out", "No such file or directory"});
#ifdef CARTO_DEMO_PATH
  refused(kTinyDemo + " --json " + f.dir.string(), {"--json", "is a directory"});
  refused(kTinyDemo + " --save-plan " + (f / "missing/plan.json"),
          {"--save-plan", "No such file or directory"});
#endif
  // A write the OS refuses (a file size limit of 1 KiB stands for a full disk): the old file
  // survives whole and the message carries the OS reason.
  const std::string out = f / "plan.json";
  const Run first = shell(plan + " --out " + out);
  INFO(first.output);
  REQUIRE(first.code == 0);
  const std::string old = slurp(out);
  REQUIRE(old.size() > 1024);
  REQUIRE_NOTHROW(carto::Json::parse(old));
  refused("trap \"\" XFSZ; ulimit -f 1; " + plan + " --out " + out, {"File too large"});
  CHECK(slurp(out) == old);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(f.dir)) ++entries;
  CHECK(entries == 1);  // no temporary left behind
}

TEST_CASE("time limits and rank counts are honoured", "[tools][hostile]") {
  refused(kPlan + " plan --model gpt2-124m --layers 100000 --devices 8 --time-limit 5",
          {"at most 10000"});
  // Thousands of layers on 64 devices: far more than a second of search. The limit ends it.
  refused(kPlan + " plan --model gpt3-175b --layers 4000 --devices 64 --time-limit 1",
          {"time limit"});
  const Run huge_limit =
      shell(kPlan + " plan" + kTinyModel + " --devices 2 --memory 1GiB --time-limit 1e10");
  INFO(huge_limit.output);
  CHECK(huge_limit.code == 0);
  refused(kPlan + " plan" + kTinyModel + " --devices 2 --time-limit 1e400", {"--time-limit"});
#ifdef CARTO_DEMO_PATH
  refused(kTinyDemoAnyMesh + " --mesh 100000", {"at most 256"});
  refused(kTinyDemoAnyMesh + " --mesh 1000", {"at most 256"});
#endif
}

TEST_CASE("smaller cases: one number parser, ranges, node sizes, long specs", "[tools][hostile]") {
#ifdef CARTO_DEMO_PATH
  refused(kTinyDemo + " --tolerance 1.5", {"--tolerance", "[0, 1)"});
  refused(kTinyDemo + " --sample 1e30", {"--sample"});
#endif
  refused(kPlan + " plan --model gpt2-124m --gpus-per-node 3 --devices 4",
          {"--gpus-per-node 3 does not divide --devices 4"});
  // Spaces on either side of a number are refused alike.
  refused(kPlan + " plan" + kTinyModel + " --devices 2 --tolerance \" 0.1\"", {"--tolerance"});
  refused(kPlan + " plan" + kTinyModel + " --devices 2 --tolerance \"0.1 \"", {"--tolerance"});
#ifdef CARTO_DEMO_PATH
  refused(kTinyDemo + " --lr \" 0.1\"", {"--lr"});
  refused(kTinyDemo + " --lr \"0.1 \"", {"--lr"});
#endif
  // A 100 KB bad spec is quoted around the error, not echoed in full.
  const std::string spec = "R," + std::string(100000, 'Q');
  const Run r = shell(kPlan + " reshard --shape 8,8 --from " + spec + " --to R,R --mesh x=2");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("100002 characters"));
  CHECK(r.output.size() < 1000);
}
