# launcher/: the numallm command. Here: main.c, the flag helpers (cli) and the commands that
# evaluate a model (run, perplexity, tokenize, mkmodel, and the session they open); cluster/: the
# topology, the rank plan and the mpirun job built from it (and `numallm topo`); bench/: `numallm
# bench` and its worker ranks; serve/: `numallm serve`. Everything but main.c is the library
# nm_launcher, so that tests can call the planner and the subcommands.
file(GLOB NM_LAUNCHER_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c ${CMAKE_CURRENT_LIST_DIR}/cluster/*.c
     ${CMAKE_CURRENT_LIST_DIR}/bench/*.c)
list(REMOVE_ITEM NM_LAUNCHER_SRC ${CMAKE_CURRENT_LIST_DIR}/main.c)
# hwloc reads the machine's topology (or a recorded/synthetic one) for the rank plan.
if(NOT HWLOC_LIB OR NOT HWLOC_INC)
  message(FATAL_ERROR "numallm: hwloc not found: install libhwloc-dev (launcher/setup.sh)")
endif()
# numallm serve (launcher/serve/): HTTP from libmicrohttpd, JSON from jansson. Without them the
# command is built as a stub that says what to install, and tests/serve skips.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(NM_MHD QUIET IMPORTED_TARGET libmicrohttpd)
  pkg_check_modules(NM_JANSSON QUIET IMPORTED_TARGET jansson)
endif()
if(NM_MHD_FOUND AND NM_JANSSON_FOUND)
  set(NM_SERVE ON)
  file(GLOB NM_SERVE_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/serve/*.c)
  list(REMOVE_ITEM NM_SERVE_SRC ${CMAKE_CURRENT_LIST_DIR}/serve/serve_none.c)
else()
  set(NM_SERVE OFF)
  set(NM_SERVE_SRC ${CMAKE_CURRENT_LIST_DIR}/serve/serve_none.c)
  message(STATUS "numallm: libmicrohttpd or jansson not found: numallm serve is not built "
                 "(launcher/setup.sh installs libmicrohttpd-dev and libjansson-dev)")
endif()
add_library(nm_launcher STATIC ${NM_LAUNCHER_SRC} ${NM_SERVE_SRC})
target_include_directories(nm_launcher PUBLIC ${CMAKE_CURRENT_LIST_DIR} ${CMAKE_CURRENT_LIST_DIR}/cluster
                                              ${CMAKE_CURRENT_LIST_DIR}/bench ${HWLOC_INC})
target_link_libraries(nm_launcher PUBLIC nm_rank ${HWLOC_LIB})
if(NM_SERVE)
  target_link_libraries(nm_launcher PRIVATE PkgConfig::NM_MHD PkgConfig::NM_JANSSON)
endif()
add_executable(numallm ${CMAKE_CURRENT_LIST_DIR}/main.c)
target_link_libraries(numallm PRIVATE nm_launcher)
