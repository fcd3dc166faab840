# Finds what chorus builds against. Everything comes from Debian packages
# (scripts/install-deps.sh); nothing is downloaded at build time.

find_package(Threads REQUIRED)
find_package(fmt REQUIRED)       # libfmt-dev: formatting for log lines and errors
find_package(PkgConfig REQUIRED) # pkg-config: how UCX publishes itself

# Optional transports and bootstraps: ON when found, with a message either way.
# Forcing one ON that cannot be found is an error, never a silent downgrade.
macro(chorus_optional_dependency option what found hint)
  if(NOT DEFINED ${option})
    if(${found})
      set(${option} ON CACHE BOOL "${what}")
    else()
      set(${option} OFF CACHE BOOL "${what}")
      message(STATUS "chorus: ${what} not found, building without it (${hint})")
    endif()
  elseif(${option} AND NOT ${found})
    message(FATAL_ERROR "chorus: ${option}=ON but ${what} was not found (${hint})")
  endif()
endmacro()

pkg_check_modules(UCX IMPORTED_TARGET ucx)
chorus_optional_dependency(CHORUS_WITH_UCX "UCX" UCX_FOUND
  "install libucx-dev, or pass -DCHORUS_WITH_UCX=OFF")

find_package(MPI COMPONENTS C QUIET)
chorus_optional_dependency(CHORUS_WITH_MPI "MPI" MPI_C_FOUND
  "install libopenmpi-dev openmpi-bin, or pass -DCHORUS_WITH_MPI=OFF")

if(CHORUS_BUILD_TESTS)
  find_package(GTest REQUIRED)   # libgtest-dev libgmock-dev
endif()
if(CHORUS_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED) # libbenchmark-dev
endif()
