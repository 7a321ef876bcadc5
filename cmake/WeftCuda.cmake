# WEFT_CUDA=AUTO builds the CUDA backend whenever nvcc is found (it is on every machine we
# use, CI included), so CUDA code is always compiled; tests that need a GPU skip at run time.
set(WEFT_HAVE_CUDA OFF)
if(NOT WEFT_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper (H100/H200) is the target; sm_90a is added per file where wgmma is used.
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 knows no CUDA20 dialect for nvcc; .cu files keep to C++17 (they include no
    # Weft headers that need C++20).
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(WEFT_HAVE_CUDA ON)
  elseif(WEFT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "WEFT_CUDA=ON but no CUDA compiler was found (looked for nvcc on PATH and /usr/local/cuda/bin/nvcc)")
  else()
    message(STATUS "No CUDA compiler found: building without the CUDA backend")
  endif()
endif()
