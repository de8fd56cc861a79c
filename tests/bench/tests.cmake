# tests/bench/: benchmarks, plain executables (not ctest tests: timings are not assertions).
# Kernels: bench_stream (read bandwidth) and bench_gemv (kern_matmul GEMV GB/s vs stream,
# GEMM GFLOP/s); results in tests/bench/RESULTS.md.
add_executable(bench_stream ${CMAKE_CURRENT_LIST_DIR}/bench_stream.c)
target_link_libraries(bench_stream PRIVATE nm_kernels)
add_executable(bench_gemv ${CMAKE_CURRENT_LIST_DIR}/bench_gemv.c ${CMAKE_CURRENT_LIST_DIR}/bench_stream.c)
target_compile_definitions(bench_gemv PRIVATE BENCH_STREAM_NO_MAIN)
target_link_libraries(bench_gemv PRIVATE nm_kernels)
# Packed layouts (issue 4): GEMV GB/s vs stream on q_tile16/f_pair16, GEMM TFLOP/s on the VNNI
# and AMX paths vs the AMX peak, and the GEMV/GEMM switch point.
add_executable(bench_gemm ${CMAKE_CURRENT_LIST_DIR}/bench_gemm.c ${CMAKE_CURRENT_LIST_DIR}/bench_stream.c)
# the tile unit's own ceiling (amx_probe.c, AMX flags; run only where the kernels found AMX)
target_sources(bench_gemm PRIVATE ${CMAKE_CURRENT_LIST_DIR}/amx_probe.c)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/amx_probe.c PROPERTIES COMPILE_OPTIONS "-mamx-tile;-mamx-int8;-mamx-bf16")
target_compile_definitions(bench_gemm PRIVATE BENCH_STREAM_NO_MAIN)
target_link_libraries(bench_gemm PRIVATE nm_kernels)
# oneDNN as a candidate for BF16/F32 matmuls (kernels/onednn), only where oneDNN was found:
# oneDNN on the GGUF rows against kern_matmul on the planner's layout, GFLOP/s and GB/s per m.
if(NM_HAVE_DNNL)
  add_executable(bench_onednn ${CMAKE_CURRENT_LIST_DIR}/bench_onednn.c ${CMAKE_CURRENT_LIST_DIR}/bench_stream.c)
  target_compile_definitions(bench_onednn PRIVATE BENCH_STREAM_NO_MAIN)
  target_link_libraries(bench_onednn PRIVATE nm_onednn nm_kernels m)
endif()
# The reference quantizers that `numallm mkmodel` runs: ns per value per type and a hash of the
# output (a quantizer's speed-up must leave its hash as it was).
add_executable(bench_quant ${CMAKE_CURRENT_LIST_DIR}/bench_quant.c)
target_link_libraries(bench_quant PRIVATE nm_kernels m)
# Prompt attention (issue 4): op_attention_queries GFLOP/s on one thread vs the FMA peak and the
# plain-C reference.
add_executable(bench_attn ${CMAKE_CURRENT_LIST_DIR}/bench_attn.c)
target_link_libraries(bench_attn PRIVATE nm_kernels m)

# Figures, not a test: batched decode throughput over 1..64 sequences (bench_batch PRESET TYPE DIR [THREADS]).
add_executable(bench_batch ${CMAKE_CURRENT_LIST_DIR}/bench_batch.c)
target_link_libraries(bench_batch PRIVATE nm_synth_model)
