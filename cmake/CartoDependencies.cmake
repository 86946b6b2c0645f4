# Dependencies of carto and the optional backends.
#
# CARTO_ENABLE_CUDA / CARTO_ENABLE_NCCL / CARTO_ENABLE_MPI take AUTO (default: on when found), ON
# (a fatal error naming the missing piece when it is absent) or OFF. The configure summary says which
# are on. Nothing is silently dropped: ON either works or stops the configure.

include(CheckLanguage)

# Inside another project (add_subdirectory(carto)) they default to OFF: nothing is probed unless
# the parent asks for it with ON or AUTO.
set(_carto_backend_default AUTO)
if(NOT CARTO_TOP_LEVEL)
  set(_carto_backend_default OFF)
endif()
foreach(backend CUDA NCCL MPI)
  set(CARTO_ENABLE_${backend} ${_carto_backend_default} CACHE STRING
      "Build the ${backend} parts of carto: AUTO, ON or OFF")
  set_property(CACHE CARTO_ENABLE_${backend} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${CARTO_ENABLE_${backend}}" _value)
  if(NOT _value MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "CARTO_ENABLE_${backend} is '${CARTO_ENABLE_${backend}}'; use AUTO, ON or OFF")
  endif()
  set(CARTO_ENABLE_${backend}_MODE ${_value})
endforeach()

# ---- a folder of gathered dependencies (scripts/gather-gpu-deps) -------------------------------------
# For machines without the Debian packages (the GPU machines): CARTO_DEPS_DIR names a CMake prefix
# made by scripts/gather-gpu-deps (Catch2 v2, Boost.Hana, Google Benchmark, OpenBLAS in Debian's
# layout). It is searched first, and each package's config folder in it is named to find_package.
set(CARTO_DEPS_DIR "" CACHE PATH "A prefix made by scripts/gather-gpu-deps, searched first for Catch2, Boost, benchmark and OpenBLAS")
if(CARTO_DEPS_DIR)
  if(NOT EXISTS "${CARTO_DEPS_DIR}/include/boost/hana.hpp")
    message(FATAL_ERROR "CARTO_DEPS_DIR=${CARTO_DEPS_DIR} is not a folder made by scripts/gather-gpu-deps "
                        "(it has no include/boost/hana.hpp); run scripts/gather-gpu-deps on a Debian machine")
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${CARTO_DEPS_DIR}")
  file(GLOB _carto_dep_configs LIST_DIRECTORIES true
       "${CARTO_DEPS_DIR}/lib/cmake/*" "${CARTO_DEPS_DIR}/lib/*/cmake/*")
  foreach(_dir IN LISTS _carto_dep_configs)
    if(IS_DIRECTORY "${_dir}")
      get_filename_component(_name "${_dir}" NAME)
      string(REGEX REPLACE "-[0-9.]+$" "" _name "${_name}")  # Boost-1.74.0 -> Boost
      if(NOT ${_name}_DIR)
        set(${_name}_DIR "${_dir}" CACHE PATH "The ${_name} CMake config, from CARTO_DEPS_DIR" FORCE)
      endif()
    endif()
  endforeach()
endif()

# Boost.Hana (header-only) for heterogeneous compile-time sequences in host-only headers.
find_package(Boost 1.71 CONFIG COMPONENTS headers)
if(NOT Boost_FOUND)
  message(FATAL_ERROR "carto needs Boost.Hana (Boost >= 1.71 headers); on Debian: apt-get install libboost-dev")
endif()

# ---- CUDA --------------------------------------------------------------------------------------------
set(CARTO_HAS_CUDA OFF)
set(CARTO_CUDA_WHY "disabled (CARTO_ENABLE_CUDA=OFF)")
if(NOT CARTO_ENABLE_CUDA_MODE STREQUAL "OFF")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    # CMake 3.25 knows nvcc's -std flags up to C++17; nvcc >= 12 takes -std=c++20, which carto's
    # C++20 headers need (carto::core's cxx_std_20 applies to CUDA sources too).
    if(CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA" AND NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION
       AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublas AND TARGET CUDA::cublasLt)
    set(CARTO_HAS_CUDA ON)
    set(CARTO_CUDA_WHY "nvcc ${CMAKE_CUDA_COMPILER_VERSION}, cuBLAS and cuBLASLt found")
  else()
    set(_missing "")
    if(NOT CMAKE_CUDA_COMPILER)
      set(_missing "the CUDA compiler nvcc (put it on PATH or set CMAKE_CUDA_COMPILER)")
    elseif(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cublas OR NOT TARGET CUDA::cublasLt)
      set(_missing "the CUDA Toolkit's cuBLAS and cuBLASLt libraries")
    endif()
    if(CARTO_ENABLE_CUDA_MODE STREQUAL "ON")
      message(FATAL_ERROR "CARTO_ENABLE_CUDA=ON but ${_missing} was not found")
    endif()
    set(CARTO_CUDA_WHY "not found: ${_missing}")
  endif()
endif()

# ---- NCCL (needs CUDA) --------------------------------------------------------------------------------
set(CARTO_HAS_NCCL OFF)
set(CARTO_NCCL_WHY "disabled (CARTO_ENABLE_NCCL=OFF)")
if(NOT CARTO_ENABLE_NCCL_MODE STREQUAL "OFF")
  find_path(CARTO_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  find_library(CARTO_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
  if(CARTO_HAS_CUDA AND CARTO_NCCL_INCLUDE_DIR AND CARTO_NCCL_LIBRARY)
    set(CARTO_HAS_NCCL ON)
    set(CARTO_NCCL_WHY "${CARTO_NCCL_LIBRARY}")
    add_library(carto_nccl_lib UNKNOWN IMPORTED)
    set_target_properties(carto_nccl_lib PROPERTIES IMPORTED_LOCATION ${CARTO_NCCL_LIBRARY}
                          INTERFACE_INCLUDE_DIRECTORIES ${CARTO_NCCL_INCLUDE_DIR})
  else()
    if(NOT CARTO_HAS_CUDA)
      set(_missing "CUDA (NCCL needs the CUDA backend: ${CARTO_CUDA_WHY})")
    elseif(NOT CARTO_NCCL_INCLUDE_DIR)
      set(_missing "nccl.h (set NCCL_HOME)")
    else()
      set(_missing "libnccl (set NCCL_HOME)")
    endif()
    if(CARTO_ENABLE_NCCL_MODE STREQUAL "ON")
      message(FATAL_ERROR "CARTO_ENABLE_NCCL=ON but ${_missing} was not found")
    endif()
    set(CARTO_NCCL_WHY "not found: ${_missing}")
  endif()
endif()

# ---- MPI ----------------------------------------------------------------------------------------------
set(CARTO_HAS_MPI OFF)
set(CARTO_MPI_WHY "disabled (CARTO_ENABLE_MPI=OFF)")
if(NOT CARTO_ENABLE_MPI_MODE STREQUAL "OFF")
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(CARTO_HAS_MPI ON)
    set(CARTO_MPI_WHY "MPI ${MPI_CXX_VERSION}, ${MPIEXEC_EXECUTABLE}")
  else()
    if(CARTO_ENABLE_MPI_MODE STREQUAL "ON")
      message(FATAL_ERROR "CARTO_ENABLE_MPI=ON but no MPI C++ library was found; on Debian: apt-get install libopenmpi-dev openmpi-bin")
    endif()
    set(CARTO_MPI_WHY "not found: an MPI C++ library (Debian: libopenmpi-dev openmpi-bin)")
  endif()
endif()

# ---- OpenBLAS (the CPU backend, carto::cpu) ------------------------------------------------------------
# The CPU backend is the default runtime, so it is on unless turned off; when it is on, a missing
# OpenBLAS stops the configure (Debian's OpenBLAS installs a CMake config without targets: the
# variables OpenBLAS_INCLUDE_DIRS and OpenBLAS_LIBRARIES; other installs are found by file).
option(CARTO_ENABLE_CPU "Build the CPU backend carto::cpu (needs OpenBLAS)" ON)
set(CARTO_HAS_CPU OFF)
set(CARTO_CPU_WHY "disabled (CARTO_ENABLE_CPU=OFF)")
if(CARTO_ENABLE_CPU)
  if(NOT CARTO_DEPS_DIR)  # a gathered folder holds the library and cblas.h, found by file below
    find_package(OpenBLAS CONFIG QUIET)
  endif()
  if(OpenBLAS_FOUND AND OpenBLAS_INCLUDE_DIRS AND OpenBLAS_LIBRARIES)
    set(CARTO_OPENBLAS_INCLUDE_DIR ${OpenBLAS_INCLUDE_DIRS})
    set(CARTO_OPENBLAS_LIBRARY ${OpenBLAS_LIBRARIES})
  else()
    find_path(CARTO_OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas)
    find_library(CARTO_OPENBLAS_LIBRARY openblas)
  endif()
  if(CARTO_OPENBLAS_INCLUDE_DIR AND CARTO_OPENBLAS_LIBRARY)
    set(CARTO_HAS_CPU ON)
    set(CARTO_CPU_WHY "OpenBLAS ${OpenBLAS_VERSION} ${CARTO_OPENBLAS_LIBRARY}")
  else()
    message(FATAL_ERROR "CARTO_ENABLE_CPU=ON but OpenBLAS (cblas.h and libopenblas) was not found; "
                        "on Debian: apt-get install libopenblas-dev (or configure with -DCARTO_ENABLE_CPU=OFF)")
  endif()
endif()

function(carto_print_summary)
  message(STATUS "carto ${PROJECT_VERSION} configuration:")
  message(STATUS "  carto::core (host-only headers): on")
  message(STATUS "  tests: ${CARTO_BUILD_TESTS}   benchmarks: ${CARTO_BUILD_BENCH}   examples: ${CARTO_BUILD_EXAMPLES}")
  message(STATUS "  CPU backend carto::cpu: ${CARTO_HAS_CPU} — ${CARTO_CPU_WHY}")
  message(STATUS "  CUDA (${CARTO_ENABLE_CUDA_MODE}): ${CARTO_HAS_CUDA} — ${CARTO_CUDA_WHY}")
  message(STATUS "  NCCL (${CARTO_ENABLE_NCCL_MODE}): ${CARTO_HAS_NCCL} — ${CARTO_NCCL_WHY}")
  message(STATUS "  MPI  (${CARTO_ENABLE_MPI_MODE}): ${CARTO_HAS_MPI} — ${CARTO_MPI_WHY}")
  if(CARTO_DEPS_DIR)
    message(STATUS "  gathered dependencies (CARTO_DEPS_DIR): ${CARTO_DEPS_DIR}")
  endif()
  if(CARTO_HAS_MPI)
    message(STATUS "  carto::mpi (MpiComm, ranks as MPI processes): ON")
  endif()
  if(TARGET carto_cuda)
    get_target_property(_carto_cuda_archs carto_cuda CUDA_ARCHITECTURES)
    message(STATUS "  carto::cuda (CudaBackend: cuBLASLt + kernels/cuda, CUDA_ARCHITECTURES ${_carto_cuda_archs}): ON")
  endif()
endfunction()
