# ctest driver (cmake -P): installs the build in BUILD_DIR into WORK_DIR/prefix, then configures, builds and runs
# the consumer project in SOURCE_DIR against it. Optional: GENERATOR, CXX_COMPILER, BUILD_TYPE, CUDA_ROOT (where
# find_dependency(CUDAToolkit) of the exported package looks, for a CUDA build).
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "run.cmake: ${var} is not set")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${what}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc})")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
run_step("install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")

# What else the install holds: the command line's example case files, and where the PyTorch extension was built the
# Python package with _C.so, imported here from outside the source tree.
load_cache("${BUILD_DIR}" READ_WITH_PREFIX built_ FUSEOPS_BUILD_TOOLS FUSEOPS_BUILD_TORCH FUSEOPS_PYTHON
           FUSEOPS_PYTHON_INSTALL_DIR)
if(built_FUSEOPS_BUILD_TOOLS AND NOT EXISTS "${WORK_DIR}/prefix/share/fuseops/cases/llama3-8b.yaml")
  message(FATAL_ERROR "the install has no share/fuseops/cases/llama3-8b.yaml")
endif()
foreach(doc README.md docs/cases.md docs/ops/gdn.md docs/ops/rope.md bench/results/h200/gdn.md)
  if(NOT EXISTS "${WORK_DIR}/prefix/share/doc/fuseops/${doc}")
    message(FATAL_ERROR "the install has no share/doc/fuseops/${doc}")
  endif()
endforeach()
if(built_FUSEOPS_BUILD_TORCH AND built_FUSEOPS_PYTHON_INSTALL_DIR)  # (set where the extension target exists)
  set(site "${WORK_DIR}/prefix/${built_FUSEOPS_PYTHON_INSTALL_DIR}")
  run_step("import the installed Python package" ${CMAKE_COMMAND} -E chdir "${WORK_DIR}"
           ${CMAKE_COMMAND} -E env "PYTHONPATH=${site}" "${built_FUSEOPS_PYTHON}" -c
           "import torch, fuseops\nassert fuseops.__file__.startswith('${site}'), fuseops.__file__\n\
y = fuseops.silu_and_mul(torch.ones(2, 8))\nassert y.shape == (2, 4), y.shape\nprint(fuseops.__file__)")
  # (newlines, not semicolons: run_step passes its command through a CMake list)
endif()

set(args -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
if(GENERATOR)
  list(APPEND args -G "${GENERATOR}")
endif()
if(CXX_COMPILER)
  list(APPEND args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(BUILD_TYPE)
  list(APPEND args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
if(CUDA_ROOT)
  list(APPEND args "-DCUDAToolkit_ROOT=${CUDA_ROOT}")
endif()
run_step("configure the consumer" ${CMAKE_COMMAND} ${args})
run_step("build the consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run_step("run the consumer" "${WORK_DIR}/build/fuseops_consumer")
