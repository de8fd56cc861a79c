# tests/tokenizer: conformance with llama.cpp's tokenizer vectors, pre-tokenizer splits against
# Python's `regex` module, round trips, streaming decoding, special tokens, synthetic
# vocabularies and error messages, chat templates, `numallm tokenize`. All labelled "tokenizer".
# Tests that need ../shared/data/tokenizer exit 77 (skipped) with a message when it is missing.
set(NM_TOK_DATA ${CMAKE_SOURCE_DIR}/../shared/data/tokenizer)
set(NM_TOK_VOCABS gpt-2 llama-spm phi-3 deepseek-llm falcon starcoder)

function(nm_tok_test name)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS tokenizer)
endfunction()

# Conformance: every vector of every vocabulary file, one test per file.
add_executable(test_tok_vectors ${CMAKE_CURRENT_LIST_DIR}/test_tok_vectors.c)
target_link_libraries(test_tok_vectors PRIVATE nm_rank)
foreach(v ${NM_TOK_VOCABS})
  nm_tok_test(test_tok_vectors_${v} test_tok_vectors ${NM_TOK_DATA} ${v})
endforeach()
# The checker's self-test: GPT-2's vocabulary against StarCoder's vectors must fail.
if(EXISTS ${NM_TOK_DATA}/ggml-vocab-gpt-2.gguf AND EXISTS ${NM_TOK_DATA}/ggml-vocab-starcoder.gguf.inp)
  set(mismatch ${CMAKE_CURRENT_BINARY_DIR}/tok_selftest)
  file(MAKE_DIRECTORY ${mismatch})
  file(CREATE_LINK ${NM_TOK_DATA}/ggml-vocab-gpt-2.gguf ${mismatch}/ggml-vocab-mismatch.gguf SYMBOLIC)
  file(CREATE_LINK ${NM_TOK_DATA}/ggml-vocab-starcoder.gguf.inp ${mismatch}/ggml-vocab-mismatch.gguf.inp SYMBOLIC)
  file(CREATE_LINK ${NM_TOK_DATA}/ggml-vocab-starcoder.gguf.out ${mismatch}/ggml-vocab-mismatch.gguf.out SYMBOLIC)
  nm_tok_test(test_tok_vectors_selftest test_tok_vectors ${mismatch} mismatch)
  set_tests_properties(test_tok_vectors_selftest PROPERTIES WILL_FAIL TRUE)
endif()

# Pre-tokenizers and Unicode tables against Python's `regex` (llama-bpe, qwen2 and the others).
add_executable(tok_pretok_tool ${CMAKE_CURRENT_LIST_DIR}/tok_pretok_tool.c)
target_link_libraries(tok_pretok_tool PRIVATE nm_rank)
nm_tok_test(test_tok_pretok_vs_regex ${NM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/pretok_vs_regex.py
            $<TARGET_FILE:tok_pretok_tool> --inp-dir ${NM_TOK_DATA})

# Round trips over the whole vocabulary and random text, per file.
add_executable(test_tok_roundtrip ${CMAKE_CURRENT_LIST_DIR}/test_tok_roundtrip.c)
target_link_libraries(test_tok_roundtrip PRIVATE nm_rank)
foreach(v ${NM_TOK_VOCABS})
  nm_tok_test(test_tok_roundtrip_${v} test_tok_roundtrip ${NM_TOK_DATA} ${v})
endforeach()

nm_add_test(test_tok_stream SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tok_stream.c
            LIBS nm_rank LABELS tokenizer ARGS ${NM_TOK_DATA})
nm_add_test(test_tok_special SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tok_special.c
            LIBS nm_rank LABELS tokenizer ARGS ${NM_TOK_DATA})
nm_add_test(test_tok_synthetic SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tok_synthetic.c
            LIBS nm_rank LABELS tokenizer ARGS ${CMAKE_CURRENT_BINARY_DIR})
nm_add_test(test_chat SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_chat.c LIBS nm_rank LABELS tokenizer ARGS ${NM_TOK_DATA})

# `numallm tokenize`, built alone from launcher/cmd_tokenize.c.
add_executable(tok_cmd ${CMAKE_CURRENT_LIST_DIR}/tok_cmd_main.c)
target_include_directories(tok_cmd PRIVATE ${CMAKE_SOURCE_DIR}/launcher)
target_link_libraries(tok_cmd PRIVATE nm_launcher)
nm_tok_test(test_tok_cmd_usage tok_cmd --bogus)
set_tests_properties(test_tok_cmd_usage PROPERTIES WILL_FAIL TRUE)
nm_tok_test(test_tok_cmd_missing_model tok_cmd -m ${CMAKE_CURRENT_BINARY_DIR}/no-such-model.gguf -p x)
set_tests_properties(test_tok_cmd_missing_model PROPERTIES WILL_FAIL TRUE)
if(EXISTS ${NM_TOK_DATA}/ggml-vocab-llama-spm.gguf AND EXISTS ${NM_TOK_DATA}/ggml-vocab-gpt-2.gguf)
  nm_tok_test(test_tok_cmd_ids tok_cmd -m ${NM_TOK_DATA}/ggml-vocab-gpt-2.gguf -p "Hello world" --ids-only)
  set_tests_properties(test_tok_cmd_ids PROPERTIES PASS_REGULAR_EXPRESSION "\\[15496, 995\\]\n")
  nm_tok_test(test_tok_cmd_pieces tok_cmd -m ${NM_TOK_DATA}/ggml-vocab-llama-spm.gguf -p "Hello world")
  set_tests_properties(test_tok_cmd_pieces PROPERTIES PASS_REGULAR_EXPRESSION
                       "1 -> '<s>'\n 15043 -> ' Hello'\n  3186 -> ' world'\n3 tokens")
  nm_tok_test(test_tok_cmd_special tok_cmd -m ${NM_TOK_DATA}/ggml-vocab-llama-spm.gguf
              -p "</s><s>" --parse-special --no-bos --ids-only)
  set_tests_properties(test_tok_cmd_special PROPERTIES PASS_REGULAR_EXPRESSION "\\[2, 1\\]\n")
endif()
