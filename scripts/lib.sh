# Shared by scripts/demo and scripts/test: install missing Debian packages, configure, build.
# Sourced, not run.

# The Debian packages carto's build, tests, benchmarks and demo need.
CARTO_PACKAGES=(g++ cmake ninja-build catch2 libbenchmark-dev libboost-dev libopenblas-dev
                libopenmpi-dev openmpi-bin)

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
