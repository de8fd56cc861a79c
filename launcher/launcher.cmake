# launcher/: the numallm command (run, mkmodel, topo, ...). Everything but main.c is the library
# nm_launcher, so that tests can call the planner and the subcommands.
file(GLOB NM_LAUNCHER_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c)
list(REMOVE_ITEM NM_LAUNCHER_SRC ${CMAKE_CURRENT_LIST_DIR}/main.c)
# hwloc reads the machine's topology (or a recorded/synthetic one) for the rank plan.
if(NOT HWLOC_LIB OR NOT HWLOC_INC)
  message(FATAL_ERROR "numallm: hwloc not found: install libhwloc-dev (launcher/setup.sh)")
endif()
add_library(nm_launcher STATIC ${NM_LAUNCHER_SRC})
target_include_directories(nm_launcher PUBLIC ${CMAKE_CURRENT_LIST_DIR} ${HWLOC_INC})
target_link_libraries(nm_launcher PUBLIC nm_rank ${HWLOC_LIB})
add_executable(numallm ${CMAKE_CURRENT_LIST_DIR}/main.c)
target_link_libraries(numallm PRIVATE nm_launcher)
