# Teaches CMake < 3.26 that nvcc >= 12 compiles C++20 (-std=c++20), so that the compile
# feature cuda_std_20 (required by zeppelin::cuda) and CUDA_STANDARD 20 work there; CMake
# 3.25 (Debian 12) knows cuda_std_20 but no flag for it, and stops with "requires the
# language dialect CUDA20". Without the feature nvcc would compile .cu files as C++17.
# Run in the directory scope that enables CUDA, after enable_language(CUDA): zeppelin's top
# level, and zeppelin-config.cmake (installed next to it) when the consumer has CUDA enabled.
# A no-op on CMake versions that already know the flag, and for other CUDA compilers.
if(CMAKE_CUDA_COMPILER_LOADED AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
   AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0
   AND NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
endif()
