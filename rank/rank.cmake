# rank/: one process's model, a folder per concern:
#   model/   GGUF reading and writing, the configuration and its checks, the tensor-parallel
#            shards, the weights in the rank's node memory, synthetic models (mkmodel);
#   engine/  the forward pass, the KV cache, sampling, the GPU stage and the pipeline to it,
#            inspection dumps;
#   text/    tokenizers, Unicode tables, chat templates.
set(NM_RANK_DIRS ${CMAKE_CURRENT_LIST_DIR}/model ${CMAKE_CURRENT_LIST_DIR}/engine ${CMAKE_CURRENT_LIST_DIR}/text)
set(NM_RANK_SRC)
foreach(d ${NM_RANK_DIRS})
  file(GLOB s CONFIGURE_DEPENDS ${d}/*.c)
  list(APPEND NM_RANK_SRC ${s})
endforeach()
add_library(nm_rank STATIC ${NM_RANK_SRC})
target_include_directories(nm_rank PUBLIC ${NM_RANK_DIRS})
target_link_libraries(nm_rank PUBLIC nm_kernels nm_onednn nm_collectives)
include(${CMAKE_CURRENT_LIST_DIR}/text/tokenizer.cmake)
if(NUMA_LIB AND NUMA_INC)
  target_link_libraries(nm_rank PUBLIC ${NUMA_LIB})
  target_include_directories(nm_rank PUBLIC ${NUMA_INC})
  target_compile_definitions(nm_rank PUBLIC NM_HAVE_NUMA=1)
else()
  message(STATUS "numallm: libnuma not found; weights will not be bound to NUMA nodes")
endif()
