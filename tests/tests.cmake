# tests/: kernel tests against their _ref twins, GGUF robustness, collectives under mpirun, and
# the whole model against the independent reference implementation (tests/reference).
# A test that needs hardware this machine lacks exits 77, which ctest reports as skipped.
function(nm_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS "${T_LABELS}")
endfunction()

# How tests start several ranks: Open MPI's mpirun, oversubscribed (CI has 2 cores), and
# allowed to run as root where the tests run as root.
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  set(NM_MPIRUN ${MPIEXEC_EXECUTABLE})
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _mpiexec_version
                  ERROR_VARIABLE _mpiexec_version)
  if(_mpiexec_version MATCHES "Open MPI|OpenRTE")
    list(APPEND NM_MPIRUN --oversubscribe)
    execute_process(COMMAND id -u OUTPUT_VARIABLE _uid OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_uid STREQUAL "0")
      list(APPEND NM_MPIRUN --allow-run-as-root)
    endif()
  endif()
endif()

# The synthetic model that the programs driving the engine directly share (test_batch,
# bench_batch, test_gpu_stage): tests/model/synth_model.h.
add_library(nm_synth_model STATIC ${CMAKE_CURRENT_LIST_DIR}/model/synth_model.c)
target_include_directories(nm_synth_model PUBLIC ${CMAKE_CURRENT_LIST_DIR}/model)
target_link_libraries(nm_synth_model PUBLIC nm_rank)

file(GLOB NM_TEST_CMAKE CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*/tests.cmake)
foreach(f ${NM_TEST_CMAKE})
  include(${f})
endforeach()
