# Every third-party package Precast uses, all from Debian packages (tools/setup.sh installs them).

find_package(yaml-cpp REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
find_package(Boost 1.74 REQUIRED COMPONENTS program_options serialization)
find_package(Threads REQUIRED)
# libcrypto for SHA-256 (compiler/artifact/Sha256.h): it uses the CPU's SHA extensions when present.
find_package(OpenSSL 3.0 REQUIRED COMPONENTS Crypto)

# LLVM 19: the version file matches major.minor, so ask for 19.1 (TOOLCHAIN.md).
find_package(LLVM 19.1 REQUIRED CONFIG HINTS /usr/lib/llvm-19/lib/cmake/llvm)
message(STATUS "LLVM ${LLVM_PACKAGE_VERSION} from ${LLVM_DIR}")
set(PRECAST_LLVM_TOOLS_DIR "${LLVM_TOOLS_BINARY_DIR}")

find_package(OpenBLAS CONFIG QUIET)
if(NOT OpenBLAS_FOUND)
  find_library(OpenBLAS_LIBRARIES NAMES openblas REQUIRED)
  set(OpenBLAS_INCLUDE_DIRS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas)
endif()
add_library(precast_openblas INTERFACE)
target_include_directories(precast_openblas INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(precast_openblas INTERFACE ${OpenBLAS_LIBRARIES})

find_package(MPI COMPONENTS CXX QUIET)

if(PRECAST_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(PRECAST_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
