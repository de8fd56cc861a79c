# kernels/: math per ISA. ISA-specific files get their flags per file, never globally.
file(GLOB NM_KERNELS_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c)
# blocks/: one decoder + quantizer per quantized type (blocks/block.h), plain C.
file(GLOB NM_KERNELS_BLOCKS_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/blocks/*.c)
file(GLOB NM_KERNELS_AVX512_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/x86-avx512/*.c)
set(NM_AVX512_FLAGS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx512bf16;-mfma;-mf16c;-mavx2")
set_source_files_properties(${NM_KERNELS_AVX512_SRC} PROPERTIES COMPILE_OPTIONS "${NM_AVX512_FLAGS}")
# the IQ grid lookups in registers: only called where CPUID has AVX512_VBMI (dot_iq_vbmi.c;
# tests/gguf/fuzz.sh compiles the kernels itself and repeats these per-file flags)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/x86-avx512/dot_iq_vbmi.c PROPERTIES COMPILE_OPTIONS
  "${NM_AVX512_FLAGS};-mavx512vbmi")
file(GLOB NM_KERNELS_AVX2_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/x86-avx2/*.c)
set_source_files_properties(${NM_KERNELS_AVX2_SRC} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
# blocks.c repeats block_vec_dot_ref's float expression term for term: no FMA contraction
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/x86-avx2/blocks.c PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-ffp-contract=off")
# AMX: the tile kernels (amx.c, the only file with the AMX flags) and their emulation (amx_emu.c,
# AVX-512 flags only, for tests on CPUs without AMX).
set(NM_KERNELS_AMX_SRC ${CMAKE_CURRENT_LIST_DIR}/x86-amx/amx.c ${CMAKE_CURRENT_LIST_DIR}/x86-amx/amx_emu.c)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/x86-amx/amx.c PROPERTIES COMPILE_OPTIONS
  "${NM_AVX512_FLAGS};-mamx-tile;-mamx-int8;-mamx-bf16")
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/x86-amx/amx_emu.c PROPERTIES COMPILE_OPTIONS "${NM_AVX512_FLAGS}")
add_library(nm_kernels STATIC ${NM_KERNELS_SRC} ${NM_KERNELS_BLOCKS_SRC} ${NM_KERNELS_AVX512_SRC} ${NM_KERNELS_AVX2_SRC}
  ${NM_KERNELS_AMX_SRC})
target_include_directories(nm_kernels PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(nm_kernels PUBLIC Threads::Threads m)
