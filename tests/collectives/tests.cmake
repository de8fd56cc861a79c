# Collectives (collectives/): every operation, dtype (f32, bf16->f32, f64) and size from 1
# element to 64 MiB, exact results, for every transport with 1 to 4 ranks under mpirun
# (oversubscribed: CI has 2 cores); jobs in which one rank dies, stalls or calls the wrong
# collective must end with a message naming it, and never hang. The benchmark bench_coll is
# built here but is not a test.
nm_add_test(test_coll_reduce SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_coll_reduce.c
            LIBS nm_collectives LABELS collectives)
# Without a launcher: the single transport, which must never initialize MPI.
nm_add_test(test_coll SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_coll.c
            LIBS nm_collectives LABELS collectives ARGS --max-mib 4 --expect single)
add_test(NAME coll_big_single COMMAND test_coll --min-mib 4.5 --expect single)
set_tests_properties(test_coll coll_big_single PROPERTIES ENVIRONMENT "NM_COLL=auto")
set_tests_properties(coll_big_single PROPERTIES LABELS "collectives;slow")
add_executable(test_coll_fail ${CMAKE_CURRENT_LIST_DIR}/test_coll_fail.c)
target_link_libraries(test_coll_fail PRIVATE nm_collectives)
add_executable(bench_coll ${CMAKE_SOURCE_DIR}/tests/bench/bench_coll.c)
target_link_libraries(bench_coll PRIVATE nm_collectives)

if(NM_MPIRUN)  # tests/tests.cmake: mpirun, oversubscribed, as root where needed

  # nm_coll_mpi_test(name labels ranks transport extra-env test_coll-args...)
  # Leak checking is off under mpirun: Open MPI's own allocations (some in components it has
  # unloaded, so no suppression can name them) would fail every sanitizer run. The single-rank
  # tests above keep it on.
  function(nm_coll_mpi_test name labels ranks transport env)
    add_test(NAME ${name} COMMAND ${NM_MPIRUN} -np ${ranks} $<TARGET_FILE:test_coll> ${ARGN})
    set_tests_properties(${name} PROPERTIES LABELS "${labels}" PROCESSORS ${ranks} TIMEOUT 120
                         ENVIRONMENT "NM_COLL=${transport};ASAN_OPTIONS=detect_leaks=0;${env}")
  endfunction()
  foreach(ranks 1 2 3 4)
    foreach(transport shm mpi)
      # Up to 4 MiB here; the size just under 64 MiB in the coll_big_* entries, labelled slow:
      # tests/run.sh runs them in the Release build only.
      nm_coll_mpi_test(coll_np${ranks}_${transport} collectives ${ranks} ${transport} ""
                       --max-mib 4 --expect ${transport})
      nm_coll_mpi_test(coll_big_np${ranks}_${transport} "collectives;slow" ${ranks} ${transport}
                       "" --min-mib 4.5 --expect ${transport})
    endforeach()
  endforeach()
  # auto: one rank is single (no MPI), several on one host are shm. Small slots and one-shot
  # size put every chunking path under test with few bytes.
  nm_coll_mpi_test(coll_np1_auto collectives 1 auto "" --max-mib 1 --expect single)
  nm_coll_mpi_test(coll_np3_auto_small_slots collectives 3 auto
                   "NM_COLL_SHM_SLOT_KB=4;NM_COLL_SHM_ONESHOT_KB=1" --max-mib 1 --expect shm)
  # Non-temporal slot stores in every collective and size (the default uses them for mid-sized
  # allreduces with 4 ranks or more only, which coll_np4_shm covers), small slots for many steps.
  nm_coll_mpi_test(coll_np3_shm_nt_slot collectives 3 shm
                   "NM_COLL_SHM_HINTS=nt-slot+nt-out;NM_COLL_SHM_SLOT_KB=4" --max-mib 1
                   --expect shm)

  # nm_coll_fail_test(name ranks transport timeout mode victim pattern mpirun-args...)
  # One rank fails: the job must end, naming the rank, and not hang (run_fail.sh: within the
  # detection timeout, default 5 s, plus a slack for start-up on a loaded machine). Open MPI's
  # mpirun itself aborts the job when a rank dies of a signal; the *_own tests switch that off
  # (orte_abort_on_non_zero_status 0) so that only numallm's detection can end the job.
  function(nm_coll_fail_test name ranks transport timeout mode victim pattern)
    set(detect 5)
    set(env "NM_COLL=${transport};ASAN_OPTIONS=detect_leaks=0")
    if(timeout)
      set(detect ${timeout})
      list(APPEND env "NM_COLL_TIMEOUT_S=${timeout}")
    endif()
    add_test(NAME ${name}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_fail.sh ${detect} ${pattern}
                     ${NM_MPIRUN} ${ARGN} -np ${ranks} $<TARGET_FILE:test_coll_fail> ${mode} ${victim})
    set_tests_properties(${name} PROPERTIES LABELS collectives PROCESSORS ${ranks} TIMEOUT 150
                         ENVIRONMENT "${env}")
  endfunction()
  nm_coll_fail_test(coll_fail_kill_shm 3 shm "" kill 2 "rank 2 .*(is gone|exited on signal)")
  nm_coll_fail_test(coll_fail_kill_mpi 2 mpi "" kill 1 "rank 1 .*(made no progress|exited on signal)")
  # Only the timeout (default 5 s) can end a stalled job.
  nm_coll_fail_test(coll_fail_stall_shm 3 shm "" stall 1 "rank 1 .*made no progress")
  nm_coll_fail_test(coll_fail_stall_mpi 3 mpi 2 stall 2 "rank 2 made no progress")
  nm_coll_fail_test(coll_fail_mismatch_shm 2 shm "" mismatch 1 "rank 1 and this rank disagree")
  if(_mpiexec_version MATCHES "Open MPI|OpenRTE")
    nm_coll_fail_test(coll_fail_kill_shm_own 4 shm "" kill 3 "rank 3 \\(pid [0-9]+\\) is gone"
                      --mca orte_abort_on_non_zero_status 0)
    nm_coll_fail_test(coll_fail_kill_mpi_own 3 mpi 2 kill 0 "rank 0 made no progress"
                      --mca orte_abort_on_non_zero_status 0)
  endif()
endif()
