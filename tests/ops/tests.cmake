# Forward-pass operations that have a fast twin: attention (AVX-512) against op_attention_head_ref.
nm_add_test(test_attention SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_attention.c LIBS nm_kernels LABELS kernels)
