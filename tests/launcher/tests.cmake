# Launcher (launcher/): topology, rank plan and mpirun command line on synthetic topologies and
# on the servers of configs/, launch_decide end to end (in-process, --dry-run, exec of mpirun),
# and the start-up checks (rank/model/checks.c). All labelled "launcher"; about 20 s in all, most of
# it in launcher_ompi_binding (one mpirun per configuration).
#
# launch_cmd stands in for `numallm run` and `numallm topo` until main.c and cmd_run.c call the
# launcher: it parses the launcher's flags, calls launch_decide, and runs the start-up checks as
# a rank will.
add_executable(launch_cmd ${CMAKE_CURRENT_LIST_DIR}/launch_cmd_main.c)
target_link_libraries(launch_cmd PRIVATE nm_launcher)

nm_add_test(test_plan SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_plan.c LIBS nm_launcher LABELS launcher)
nm_add_test(test_checks SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_checks.c LIBS nm_rank LABELS launcher)

function(nm_launcher_script_test name script)
  add_test(NAME ${name} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/${script} $<TARGET_FILE:launch_cmd>)
  set_tests_properties(${name} PROPERTIES LABELS launcher SKIP_RETURN_CODE 77 TIMEOUT 120)
endfunction()
# configs/NAME.xml -> the output recorded in configs/NAME.expected (golden.sh --update rewrites).
nm_launcher_script_test(launcher_configs golden.sh)
# Open MPI, given each configs/ topology, binds ranks to exactly the plan's CPUs.
nm_launcher_script_test(launcher_ompi_binding ompi_binding.sh)
nm_launcher_script_test(launcher_e2e launch_e2e.sh)
# The real launch binds two ranks to this machine's two cores.
set_tests_properties(launcher_e2e PROPERTIES PROCESSORS 2)
