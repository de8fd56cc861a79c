# tests/gguf/: robustness of the GGUF reader and the model loader against bad files.
#   test_gguf_corrupt  named corruptions, every metadata truncation, byte mutations (C, in-process)
#   gguf_cli_corrupt   the same files through `numallm run`: exit 1 with "error: <reason>", no signal
#   fuzz_gguf          a bounded libFuzzer run (clang -fsanitize=fuzzer,address,undefined); skipped
#                      (exit 77) when clang or its fuzzer runtime is missing
nm_add_test(test_gguf_corrupt SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf_corrupt.c LIBS nm_rank LABELS gguf)
set_tests_properties(test_gguf_corrupt PROPERTIES TIMEOUT 300)

add_test(NAME gguf_cli_corrupt
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli_corrupt.sh $<TARGET_FILE:numallm>
                 $<TARGET_FILE:test_gguf_corrupt> ${CMAKE_SOURCE_DIR})
set_tests_properties(gguf_cli_corrupt PROPERTIES LABELS gguf SKIP_RETURN_CODE 77 TIMEOUT 300)

set(NM_FUZZ_SECONDS 30 CACHE STRING "Seconds of the bounded fuzz run in ctest (fuzz_gguf)")
add_test(NAME fuzz_gguf
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/fuzz.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}
                 ${NM_FUZZ_SECONDS} $<TARGET_FILE:test_gguf_corrupt>)
set_tests_properties(fuzz_gguf PROPERTIES LABELS fuzz SKIP_RETURN_CODE 77 TIMEOUT 900)
