# collectives/: moving activations between ranks (single / shared memory / MPI).
file(GLOB NM_COLL_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c)
add_library(nm_collectives STATIC ${NM_COLL_SRC})
target_include_directories(nm_collectives PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(nm_collectives PUBLIC nm_kernels)
if(MPI_C_FOUND)
  target_link_libraries(nm_collectives PUBLIC MPI::MPI_C)
  target_compile_definitions(nm_collectives PUBLIC NM_HAVE_MPI=1)
endif()
# libnuma places each rank's shared-memory slots on its own node; without it they stay where
# the kernel puts them (reported at start-up).
if(NUMA_LIB AND NUMA_INC)
  target_include_directories(nm_collectives PRIVATE ${NUMA_INC})
  target_link_libraries(nm_collectives PRIVATE ${NUMA_LIB})
  target_compile_definitions(nm_collectives PRIVATE NM_HAVE_NUMA=1)
endif()
target_link_libraries(nm_collectives PRIVATE rt)   # shm_open on older glibc
