# tests/kernels/: the kernels against their _ref twins and hand-pinned values (ctest -L kernels).
set(NM_KTEST_DIR ${CMAKE_CURRENT_LIST_DIR})
nm_add_test(test_kernels_pool SOURCES ${NM_KTEST_DIR}/test_pool.c LIBS nm_kernels LABELS kernels)
nm_add_test(test_kernels_types SOURCES ${NM_KTEST_DIR}/test_types.c LIBS nm_kernels LABELS kernels)
nm_add_test(test_kernels_dequant SOURCES ${NM_KTEST_DIR}/test_dequant.c LIBS nm_kernels LABELS kernels)
nm_add_test(test_kernels_quant SOURCES ${NM_KTEST_DIR}/test_quant.c LIBS nm_kernels LABELS kernels)
# The block decoder interface's types (kernels/blocks): hand-pinned blocks, codec round trips,
# vec_dot_ref against float64.
nm_add_test(test_kernels_blocks SOURCES ${NM_KTEST_DIR}/test_blocks.c LIBS nm_kernels LABELS kernels)
nm_add_test(test_kernels_fast SOURCES ${NM_KTEST_DIR}/test_fast.c LIBS nm_kernels LABELS kernels)
# the IQ types' gather kernels too where AVX512_VBMI replaces them (skips elsewhere)
add_test(NAME test_kernels_fast_iq_gather COMMAND test_kernels_fast --iq-gather)
set_tests_properties(test_kernels_fast_iq_gather PROPERTIES SKIP_RETURN_CODE 77 LABELS kernels)
nm_add_test(test_kernels_matmul SOURCES ${NM_KTEST_DIR}/test_matmul.c LIBS nm_kernels LABELS kernels)
nm_add_test(test_kernels_checker SOURCES ${NM_KTEST_DIR}/test_checker.c LIBS nm_kernels LABELS kernels)
# kern_matmul again with the reference path forced (NM_ISA=ref): the fallback must be right too.
add_test(NAME test_kernels_matmul_isa_ref COMMAND test_kernels_matmul)
set_tests_properties(test_kernels_matmul_isa_ref PROPERTIES ENVIRONMENT NM_ISA=ref
                     SKIP_RETURN_CODE 77 LABELS kernels)
# Packed layouts (issue 4): unpack vs GGUF source, every kernel path vs kern_matmul_ref, bit
# exactness across paths, slices and chunks; the AMX tile algorithm on emulated tiles.
nm_add_test(test_kernels_layout SOURCES ${NM_KTEST_DIR}/test_layout.c LIBS nm_kernels LABELS kernels)
nm_add_test(test_kernels_attn_queries SOURCES ${NM_KTEST_DIR}/test_attn_queries.c LIBS nm_kernels LABELS kernels)
nm_add_test(test_kernels_packed SOURCES ${NM_KTEST_DIR}/test_packed.c LIBS nm_kernels LABELS kernels)
# The real AMX tile path only (exit 77 with a message where the CPU or OS has no AMX).
add_test(NAME test_kernels_amx COMMAND test_kernels_packed --amx-only)
set_tests_properties(test_kernels_amx PROPERTIES SKIP_RETURN_CODE 77 LABELS kernels)
# oneDNN as a matmul candidate (kernels/onednn; exit 77 with a message in a build without oneDNN):
# against kern_matmul_ref, and the check that it reads the GGUF rows in place or refuses.
if(TARGET nm_onednn)
  nm_add_test(test_kernels_onednn SOURCES ${NM_KTEST_DIR}/test_onednn.c LIBS nm_onednn nm_kernels LABELS kernels)
endif()
# The grid block types (IQ1_S/IQ1_M, IQ2_XXS/IQ2_XS/IQ2_S, IQ3_XXS/IQ3_S; issue 15): codebook
# digests, hand-built blocks, every grid entry, quantizer round trip, vec_dot_ref.
nm_add_test(test_kernels_blocks_iq SOURCES ${NM_KTEST_DIR}/test_blocks_iq.c LIBS nm_kernels LABELS kernels)
