# collectives/: moving activations between ranks (single / shared memory / MPI).
file(GLOB NM_COLL_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c)
add_library(nm_collectives STATIC ${NM_COLL_SRC})
target_include_directories(nm_collectives PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(nm_collectives PUBLIC nm_kernels)
# The rank-order sum once more with AVX-512, flags on that file only (chosen at run time).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(NM_COLL_AVX512_SRC ${CMAKE_CURRENT_LIST_DIR}/x86-avx512/coll_reduce_avx512.c)
  set_source_files_properties(${NM_COLL_AVX512_SRC} PROPERTIES COMPILE_OPTIONS
    "-mavx512f;-mavx512bw;-mavx512vl;-mprefer-vector-width=512")
  target_sources(nm_collectives PRIVATE ${NM_COLL_AVX512_SRC})
  target_compile_definitions(nm_collectives PRIVATE NM_COLL_HAVE_AVX512=1)
  # Non-temporal stores for the shm transport's cache hints (coll_cache.c); SSE2, no flags.
  target_sources(nm_collectives PRIVATE ${CMAKE_CURRENT_LIST_DIR}/x86/coll_cache_x86.c)
  target_compile_definitions(nm_collectives PRIVATE NM_COLL_HAVE_X86_CACHE=1)
endif()
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
