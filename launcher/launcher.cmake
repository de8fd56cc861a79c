# launcher/: the numallm command (run, mkmodel, ...).
file(GLOB NM_LAUNCHER_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c)
add_executable(numallm ${NM_LAUNCHER_SRC})
target_link_libraries(numallm PRIVATE nm_rank)
