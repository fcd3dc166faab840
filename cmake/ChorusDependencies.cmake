# Finds what chorus builds against. Everything comes from Debian packages
# (scripts/install-deps.sh); nothing is downloaded at build time.

find_package(Threads REQUIRED)
find_package(fmt REQUIRED)       # libfmt-dev: formatting for log lines and errors
find_package(PkgConfig REQUIRED) # pkg-config: how UCX publishes itself
find_package(OpenSSL REQUIRED COMPONENTS Crypto) # libssl-dev: HMAC-SHA256 for the job secret

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

# Python: the module (chorus._chorus) needs pybind11 and Python's headers;
# the torch backend (chorus._torch) needs PyTorch. On Debian, `python3` on
# PATH may be an interpreter that cannot see Debian's packages, so the
# interpreter is the first of /usr/bin/python3 and PATH's python3 that can
# import torch (else the first that exists); CHORUS_PYTHON overrides.
set(CHORUS_PYTHON "" CACHE FILEPATH
  "Python interpreter for the chorus module and torch backend (default: one that has torch)")
if(NOT CHORUS_PYTHON)
  find_program(_chorus_path_python python3 NO_CACHE)
  set(_chorus_first_python "")
  foreach(_py IN ITEMS /usr/bin/python3 ${_chorus_path_python})
    if(NOT EXISTS "${_py}")
      continue()
    endif()
    if(NOT _chorus_first_python)
      set(_chorus_first_python "${_py}")
    endif()
    execute_process(COMMAND "${_py}" -c "import torch" RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
    if(_rc EQUAL 0)
      set(CHORUS_PYTHON "${_py}" CACHE FILEPATH "" FORCE)
      break()
    endif()
  endforeach()
  if(NOT CHORUS_PYTHON AND _chorus_first_python)
    set(CHORUS_PYTHON "${_chorus_first_python}" CACHE FILEPATH "" FORCE)
  endif()
endif()

set(_chorus_python_found FALSE)
# A sanitized extension cannot load into an unsanitized interpreter.
if(CHORUS_PYTHON AND NOT CHORUS_SANITIZE)
  set(Python3_EXECUTABLE "${CHORUS_PYTHON}")
  find_package(Python3 QUIET COMPONENTS Interpreter Development.Module)
  find_package(pybind11 CONFIG QUIET)
  if(Python3_Development.Module_FOUND AND pybind11_FOUND)
    set(_chorus_python_found TRUE)
  endif()
endif()
chorus_optional_dependency(CHORUS_WITH_PYTHON "the Python module (pybind11, Python headers)"
  _chorus_python_found "install pybind11-dev python3-dev, or pass -DCHORUS_WITH_PYTHON=OFF")

# PyTorch: its headers and libraries, as the interpreter's torch reports them
# (no find_package(Torch): its CMake config drags in CUDA probing).
set(_chorus_torch_found FALSE)
if(CHORUS_WITH_PYTHON)
  execute_process(
    COMMAND "${CHORUS_PYTHON}" -c
      "import os, torch; d = os.path.dirname(torch.__file__); print(os.path.join(d, 'include'), os.path.join(d, 'include', 'torch', 'csrc', 'api', 'include'), sep=';', end='|'); print(os.path.join(d, 'lib'), int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.__version__, sep='|', end='')"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _torch_info ERROR_QUIET)
  if(_rc EQUAL 0)
    string(REPLACE "|" ";" _torch_info "${_torch_info}")
    list(GET _torch_info 0 _torch_include0)
    list(GET _torch_info 1 _torch_include1)
    list(GET _torch_info 2 CHORUS_TORCH_LIBRARY_DIR)
    list(GET _torch_info 3 CHORUS_TORCH_CXX11_ABI)
    list(GET _torch_info 4 CHORUS_TORCH_VERSION)
    set(CHORUS_TORCH_INCLUDE_DIRS "${_torch_include0};${_torch_include1}")
    if(EXISTS "${_torch_include0}/torch/csrc/distributed/c10d/ProcessGroup.hpp")
      set(_chorus_torch_found TRUE)
    endif()
  endif()
endif()
chorus_optional_dependency(CHORUS_WITH_TORCH "PyTorch (c10d headers)" _chorus_torch_found
  "install python3-torch libtorch-dev, or pass -DCHORUS_WITH_TORCH=OFF")
