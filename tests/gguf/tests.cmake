# tests/gguf/: robustness of the GGUF reader and the model loader against bad files.
#   test_gguf_corrupt  named corruptions, every metadata truncation, byte mutations (C, in-process)
#   gguf_cli_corrupt   the same files through `numallm run`: exit 1 with "error: <reason>", no signal
#   test_gguf_split    models split into parts as llama.cpp's gguf-split writes them: opened from
#                      any part, and each fault (a part missing, renamed, foreign...) named
#   gguf_split         a split model runs with the unsplit file's logits, bit for bit, on 1 and 2
#                      ranks; a missing part ends `numallm run` with a message naming it
#   fuzz_gguf          a bounded libFuzzer run (clang -fsanitize=fuzzer,address,undefined); skipped
#                      (exit 77) when clang or its fuzzer runtime is missing
nm_add_test(test_gguf_corrupt SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf_corrupt.c LIBS nm_rank LABELS gguf)
set_tests_properties(test_gguf_corrupt PROPERTIES TIMEOUT 300)

nm_add_test(test_gguf_split SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf_split.c LIBS nm_rank LABELS gguf)
set_tests_properties(test_gguf_split PROPERTIES TIMEOUT 300)
add_test(NAME gguf_split
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/split_test.sh $<TARGET_FILE:numallm> $<TARGET_FILE:test_gguf_split>
                 ${CMAKE_CURRENT_BINARY_DIR}/split_test ${NM_MPIRUN})
set_tests_properties(gguf_split PROPERTIES LABELS gguf PROCESSORS 2 TIMEOUT 300 ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
# (detect_leaks=0: Open MPI leaks inside plugins it has unloaded, as in tests/tp)

add_test(NAME gguf_cli_corrupt
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli_corrupt.sh $<TARGET_FILE:numallm>
                 $<TARGET_FILE:test_gguf_corrupt> ${CMAKE_SOURCE_DIR})
set_tests_properties(gguf_cli_corrupt PROPERTIES LABELS gguf SKIP_RETURN_CODE 77 TIMEOUT 300)

set(NM_FUZZ_SECONDS 30 CACHE STRING "Seconds of the bounded fuzz run in ctest (fuzz_gguf)")
add_test(NAME fuzz_gguf
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/fuzz.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}
                 ${NM_FUZZ_SECONDS} $<TARGET_FILE:test_gguf_corrupt>)
set_tests_properties(fuzz_gguf PROPERTIES LABELS fuzz SKIP_RETURN_CODE 77 TIMEOUT 900)
