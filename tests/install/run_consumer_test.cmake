# Installs the build tree into a fresh prefix, then builds and runs the
# consumer twice: once through find_package(chorus), once through pkg-config.
# Run with cmake -P; see tests/CMakeLists.txt for the variables it needs.

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    list(JOIN ARGV " " cmd)
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

run(${CMAKE_COMMAND} --install ${CHORUS_BUILD_DIR} --prefix ${prefix})

# 1. find_package(chorus) -> chorus::chorus
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/cmake-build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake-build)
run(${WORK_DIR}/cmake-build/consumer)

# 2. pkg-config chorus
file(GLOB_RECURSE pc_files ${prefix}/*/chorus.pc)
list(LENGTH pc_files n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one installed chorus.pc under ${prefix}, found: ${pc_files}")
endif()
get_filename_component(pc_dir ${pc_files} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
execute_process(COMMAND pkg-config --cflags --libs chorus
  RESULT_VARIABLE rc OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs chorus failed")
endif()
execute_process(COMMAND pkg-config --variable=libdir chorus
  OUTPUT_VARIABLE libdir OUTPUT_STRIP_TRAILING_WHITESPACE)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CXX_COMPILER} -std=c++20 ${CONSUMER_SOURCE_DIR}/main.cpp ${flags}
    -Wl,-rpath,${libdir} -o ${WORK_DIR}/consumer-pkgconfig)
run(${WORK_DIR}/consumer-pkgconfig)

# 3. With MPI: chorus::mpi was built above when installed; the preload
#    library must load from the prefix with nothing on LD_LIBRARY_PATH.
file(GLOB pmpi ${prefix}/*/libchorus_pmpi.so)
if(pmpi)
  if(NOT EXISTS ${WORK_DIR}/cmake-build/mpi_consumer)
    message(FATAL_ERROR "libchorus_pmpi.so is installed but chorus::mpi was not found by the consumer")
  endif()
  run(${CMAKE_COMMAND} -E env LD_PRELOAD=${pmpi} ${CMAKE_COMMAND} -E echo "libchorus_pmpi.so loads")
endif()

# 4. The perf tools: allreduce_perf and the other collectives' names (links
#    to it) run from the prefix.
if(EXISTS ${prefix}/bin/allreduce_perf)
  foreach(tool allgather_perf broadcast_perf reduce_perf reduce_scatter_perf alltoall_perf)
    execute_process(COMMAND ${prefix}/bin/${tool} -h RESULT_VARIABLE rc OUTPUT_VARIABLE usage)
    if(NOT rc EQUAL 0 OR NOT usage MATCHES "USAGE: ${tool}")
      message(FATAL_ERROR "${prefix}/bin/${tool} -h failed (${rc}): ${usage}")
    endif()
  endforeach()
endif()
