# kernels/: math per ISA. ISA-specific files get their flags per file, never globally.
file(GLOB NM_KERNELS_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c)
file(GLOB NM_KERNELS_AVX512_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/x86-avx512/*.c)
set_source_files_properties(${NM_KERNELS_AVX512_SRC} PROPERTIES COMPILE_OPTIONS
  "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx512bf16;-mfma;-mf16c;-mavx2")
add_library(nm_kernels STATIC ${NM_KERNELS_SRC} ${NM_KERNELS_AVX512_SRC})
target_include_directories(nm_kernels PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(nm_kernels PUBLIC Threads::Threads m)
