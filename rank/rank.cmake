# rank/: one process's model: GGUF reading, configuration, weights, forward pass, sampling.
file(GLOB NM_RANK_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c)
add_library(nm_rank STATIC ${NM_RANK_SRC})
target_include_directories(nm_rank PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(nm_rank PUBLIC nm_kernels nm_collectives)
include(${CMAKE_CURRENT_LIST_DIR}/tokenizer.cmake)
