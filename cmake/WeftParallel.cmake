# Multi-process engines for tensor parallelism (docs/parallel.md), both optional:
#   WEFT_MPI=AUTO builds the MPI communicator when an MPI library is found (Debian's
#   libopenmpi-dev, installed by scripts/setup); ON makes its absence an error; OFF skips it.
#   NCCL (in /usr/local/cuda with the CUDA toolkit) is used when CUDA and MPI are both on:
#   the NCCL unique id travels over MPI, so NCCL without MPI is not built.
set(WEFT_MPI AUTO CACHE STRING "Build the MPI communicator: AUTO (when MPI is found), ON, OFF")
set_property(CACHE WEFT_MPI PROPERTY STRINGS AUTO ON OFF)
set(WEFT_HAVE_MPI OFF)
set(WEFT_HAVE_NCCL OFF)
# Under the sanitizer presets AUTO means off: Open MPI's components are dlopen'ed and keep what
# MPI_Init allocates, which LeakSanitizer reports from unloaded modules it cannot suppress.
if(NOT WEFT_MPI STREQUAL "OFF" AND NOT (WEFT_MPI STREQUAL "AUTO" AND WEFT_SANITIZE))
  # The C API through the C++ compiler (the project enables no C language); MPI's deprecated
  # C++ bindings are skipped.
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(WEFT_HAVE_MPI ON)
    set(WEFT_MPIEXEC ${MPIEXEC_EXECUTABLE})
    # How the tests launch ranks: Open MPI refuses root and more ranks than cores by default
    # (CI runs as root on 2 cores); other MPIs take no such flags.
    set(WEFT_MPIEXEC_FLAGS "")
    if(WEFT_MPIEXEC)
      execute_process(COMMAND ${WEFT_MPIEXEC} --version OUTPUT_VARIABLE weft_mpiexec_version
                      ERROR_QUIET RESULT_VARIABLE weft_mpiexec_rc)
      if(weft_mpiexec_version MATCHES "Open MPI|OpenRTE")
        set(WEFT_MPIEXEC_FLAGS --oversubscribe --allow-run-as-root)
      endif()
    endif()
  elseif(WEFT_MPI STREQUAL "ON")
    message(FATAL_ERROR "WEFT_MPI=ON but no MPI was found (install libopenmpi-dev: scripts/setup)")
  else()
    message(STATUS "No MPI found: building without multi-process tensor parallelism")
  endif()
endif()
if(WEFT_HAVE_MPI AND WEFT_HAVE_CUDA)
  find_path(WEFT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(WEFT_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(WEFT_NCCL_INCLUDE_DIR AND WEFT_NCCL_LIBRARY)
    set(WEFT_HAVE_NCCL ON)
  else()
    message(STATUS "No NCCL found next to CUDA: building without the NCCL communicator")
  endif()
endif()
