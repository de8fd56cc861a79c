# numallm bench (launcher/bench/cmd_bench.c): a tiny model benchmarked with few repetitions, checking
# behaviour, never timings: md, csv, json, jsonl and sql parse, the JSON carries every column of
# the markdown table with the same figures, -ngl > 0 rows are skipped with a message, the plot is
# well-formed SVG, bad flags get clear errors; and, under mpirun, 1 and 2 ranks with scaling
# efficiency, and the collectives benchmark through the same launcher. About 10 s in all.
add_test(NAME bench_cli_formats
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bench_cli.sh formats $<TARGET_FILE:numallm>
                 ${CMAKE_CURRENT_BINARY_DIR}/bench_cli/formats)
add_test(NAME bench_cli_errors
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bench_cli.sh errors $<TARGET_FILE:numallm>
                 ${CMAKE_CURRENT_BINARY_DIR}/bench_cli/errors)
set_tests_properties(bench_cli_formats bench_cli_errors PROPERTIES LABELS bench SKIP_RETURN_CODE 77 TIMEOUT 120
                     ENVIRONMENT "NM_PYTHON=${NM_PYTHON}")
if(NM_MPIRUN)
  add_test(NAME bench_cli_mpi
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bench_cli.sh mpi $<TARGET_FILE:numallm>
                   ${CMAKE_CURRENT_BINARY_DIR}/bench_cli/mpi ${NM_MPIRUN})
  # Leak checking is off under mpirun, as for the collectives' tests: Open MPI's own allocations.
  set_tests_properties(bench_cli_mpi PROPERTIES LABELS bench SKIP_RETURN_CODE 77 TIMEOUT 120 PROCESSORS 2
                       ENVIRONMENT "NM_PYTHON=${NM_PYTHON};ASAN_OPTIONS=detect_leaks=0")
else()
  add_test(NAME bench_cli_mpi COMMAND sh -c "echo 'skipped: no mpirun (install openmpi-bin)'; exit 77")
  set_tests_properties(bench_cli_mpi PROPERTIES SKIP_RETURN_CODE 77 LABELS bench)
endif()
