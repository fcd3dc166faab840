# Build options and the flags every chorus target shares.

option(CHORUS_BUILD_TESTS "Build the test suite" ON)
option(CHORUS_BUILD_BENCHMARKS "Build the benchmarks (needs Google Benchmark)" ON)
option(CHORUS_BUILD_EXAMPLES "Build the examples" ON)
set(CHORUS_SANITIZE "" CACHE STRING
  "Sanitizers for every target: '' (none), 'address;undefined', or 'thread'")

# Warnings and sanitizers travel through this interface target so that the
# installed package never carries them to users.
add_library(chorus_build_flags INTERFACE)
target_compile_options(chorus_build_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra -Wpedantic>)

if(CHORUS_SANITIZE)
  set(_known address undefined thread)
  foreach(_s IN LISTS CHORUS_SANITIZE)
    if(NOT _s IN_LIST _known)
      message(FATAL_ERROR "CHORUS_SANITIZE: unknown sanitizer '${_s}'. "
        "Use 'address;undefined' or 'thread'.")
    endif()
  endforeach()
  if("thread" IN_LIST CHORUS_SANITIZE AND "address" IN_LIST CHORUS_SANITIZE)
    message(FATAL_ERROR "CHORUS_SANITIZE: 'thread' and 'address' cannot be combined; "
      "build them in two build directories.")
  endif()
  list(JOIN CHORUS_SANITIZE "," _sanitizers)
  target_compile_options(chorus_build_flags INTERFACE
    -fsanitize=${_sanitizers} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(chorus_build_flags INTERFACE -fsanitize=${_sanitizers})
endif()
