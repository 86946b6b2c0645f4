# Shared by scripts/demo and scripts/test: install missing Debian packages, configure, build.
# Sourced, not run.

# The Debian packages carto's build, tests, benchmarks and demo need (chromium and python3: the
# `browser` tests render the HTML plan report headless).
CARTO_PACKAGES=(g++ cmake ninja-build catch2 libbenchmark-dev libboost-dev libopenblas-dev
                libopenmpi-dev openmpi-bin chromium python3)

carto_install_packages() {
  local missing=()
  local pkg
  for pkg in "${CARTO_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "carto: these Debian packages are missing: ${missing[*]}" >&2
    echo "carto: install them as root with:" >&2
    echo "  apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "carto: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Configures build/ once (Ninja, Release: what users build) and builds what is asked (default:
# everything). CARTO_STRICT=1 (scripts/test: developers and CI) makes warnings errors, also in a
# build/ configured before without it.
carto_build() {
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  CARTO_BUILD_DIR="${CARTO_BUILD_DIR:-$root/build}"
  local strict=()
  [ "${CARTO_STRICT:-0}" = 1 ] && strict=(-DCARTO_WARNINGS_AS_ERRORS=ON)
  if [ ! -f "$CARTO_BUILD_DIR/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$CARTO_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${strict[@]}" \
      ${CARTO_CMAKE_ARGS:-}
  elif [ ${#strict[@]} -gt 0 ]; then
    cmake -S "$root" -B "$CARTO_BUILD_DIR" "${strict[@]}" >/dev/null
  fi
  cmake --build "$CARTO_BUILD_DIR" --parallel "${CARTO_JOBS:-$(nproc)}" "$@"
}

# ---- sanitizers (scripts/test --sanitize) -----------------------------------------------------------
# What each sanitizer build compiles and runs: the host core and the runtime on thread ranks, never
# CUDA, MPI or benchmarks. address,undefined: every host and CPU-backend test; thread: the thread
# communicator, resharding and the executor on thread ranks, and the CPU backend's worker teams
# (test_cpu_threads: kernels split over several threads, no GEMM, whose OpenBLAS threads TSan
# cannot see).
CARTO_SANITIZE_TESTS_ADDRESS=(test_spec test_util test_profile test_cost test_search test_dp
                              test_llama test_rng test_bf16 test_memory test_comm test_kernels
                              test_reshard_exec test_executor test_executor_llama test_weights
                              test_cpu_threads)
CARTO_SANITIZE_TESTS_THREAD=(test_comm test_reshard_exec test_executor test_cpu_threads)

# carto_sanitize_build LIST: configures build-sanitize-<LIST with ',' as '-'> (Debug at -O1 with
# -fsanitize=LIST, libstdc++'s assertions, no CUDA, no MPI, no benchmarks) and builds the test
# executables of that sanitizer. Sets CARTO_BUILD_DIR and CARTO_SANITIZE_TESTS.
carto_sanitize_build() {
  local list="$1" root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  case "$list" in
    address|undefined|address,undefined|undefined,address)
      CARTO_SANITIZE_TESTS=("${CARTO_SANITIZE_TESTS_ADDRESS[@]}") ;;
    thread) CARTO_SANITIZE_TESTS=("${CARTO_SANITIZE_TESTS_THREAD[@]}") ;;
    *) echo "carto: --sanitize takes address,undefined or thread (one build each), got '$list'" >&2
       exit 2 ;;
  esac
  CARTO_BUILD_DIR="${CARTO_BUILD_DIR:-$root/build-sanitize-${list//,/-}}"
  local flags="-fsanitize=$list -fno-sanitize-recover=all -fno-omit-frame-pointer -D_GLIBCXX_ASSERTIONS"
  # The vector clones' ifunc resolvers run while the dynamic loader relocates, before TSan's
  # runtime is up, and crash instrumented: under TSan the kernels keep their baseline build.
  [ "$list" = thread ] && flags="$flags -DCARTO_VECTOR_CLONES="
  if [ ! -f "$CARTO_BUILD_DIR/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$CARTO_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
      -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DCMAKE_CXX_FLAGS="$flags" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$list" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=$list" \
      -DCARTO_ENABLE_CUDA=OFF -DCARTO_ENABLE_NCCL=OFF -DCARTO_ENABLE_MPI=OFF \
      -DCARTO_BUILD_BENCH=OFF -DCARTO_BUILD_EXAMPLES=OFF ${CARTO_CMAKE_ARGS:-}
  fi
  cmake --build "$CARTO_BUILD_DIR" --parallel "${CARTO_JOBS:-$(nproc)}" --target \
    "${CARTO_SANITIZE_TESTS[@]}"
}

# ---- fuzzers (scripts/test --fuzz) ------------------------------------------------------------------
# clang and its libFuzzer runtime, installed only for --fuzz.
CARTO_FUZZ_PACKAGES=(clang-14 libclang-rt-14-dev)

carto_install_fuzz_packages() {
  local saved=("${CARTO_PACKAGES[@]}")
  CARTO_PACKAGES=("${CARTO_FUZZ_PACKAGES[@]}")
  carto_install_packages
  CARTO_PACKAGES=("${saved[@]}")
}

# Configures build-fuzz/ (clang++-14, -O1, only the fuzz targets) and builds them.
carto_fuzz_build() {
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  CARTO_FUZZ_DIR="${CARTO_FUZZ_DIR:-$root/build-fuzz}"
  if [ ! -f "$CARTO_FUZZ_DIR/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$CARTO_FUZZ_DIR" -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 \
      -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DCARTO_BUILD_FUZZERS=ON \
      -DCARTO_BUILD_TESTS=OFF -DCARTO_BUILD_BENCH=OFF -DCARTO_BUILD_EXAMPLES=OFF \
      -DCARTO_ENABLE_CUDA=OFF -DCARTO_ENABLE_NCCL=OFF -DCARTO_ENABLE_MPI=OFF -DCARTO_ENABLE_CPU=OFF
  fi
  cmake --build "$CARTO_FUZZ_DIR" --parallel "${CARTO_JOBS:-$(nproc)}" --target carto_fuzzers
}

# carto_fuzz_run SECONDS: runs every fuzz target for SECONDS from fuzz/corpus/<name>/ (new inputs
# go to a scratch corpus in the build folder, never into the tree). A crash, sanitizer report,
# broken round trip, hang (-timeout) or memory blow-up (-rss_limit_mb) fails, naming the input.
carto_fuzz_run() {
  local seconds="$1" root name work failed=()
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  for name in spec mesh shape units plan checkpoint; do
    work="$CARTO_FUZZ_DIR/run/$name"
    rm -rf "$work" && mkdir -p "$work/corpus"
    echo "carto: fuzz_$name for $seconds s from fuzz/corpus/$name/"
    if ! "$CARTO_FUZZ_DIR/fuzz/fuzz_$name" -max_total_time="$seconds" -timeout=10 \
         -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$work/" \
         "$work/corpus" "$root/fuzz/corpus/$name" > "$work/log" 2>&1; then
      tail -n 40 "$work/log"
      for f in "$work"/crash-* "$work"/timeout-* "$work"/oom-* "$work"/leak-*; do
        [ -f "$f" ] && { echo "carto: fuzz_$name finding $f:"; od -c "$f" | head -n 20; }
      done
      failed+=("$name")
    else
      grep -E "^stat::number_of_executed_units|^Done" "$work/log" | tr '\n' ' '
      echo
    fi
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "carto: fuzz targets with findings: ${failed[*]} (logs in $CARTO_FUZZ_DIR/run/)" >&2
    return 1
  fi
}
