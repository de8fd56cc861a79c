# tests/tokenizer: conformance with llama.cpp's tokenizer vectors, pre-tokenizer splits against
# Python's `regex` module, round trips, streaming decoding, chat templates, `numallm tokenize`.
set(NM_TOK_DATA ${CMAKE_SOURCE_DIR}/../shared/data/tokenizer)
set(NM_TOK_VOCABS gpt-2 llama-spm phi-3 deepseek-llm falcon starcoder)

nm_add_test(test_tok_vectors SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tok_vectors.c
            LIBS nm_rank LABELS tokenizer ARGS ${NM_TOK_DATA} gpt-2)
foreach(v ${NM_TOK_VOCABS})
  if(NOT v STREQUAL "gpt-2")
    add_test(NAME test_tok_vectors_${v} COMMAND test_tok_vectors ${NM_TOK_DATA} ${v})
    set_tests_properties(test_tok_vectors_${v} PROPERTIES SKIP_RETURN_CODE 77 LABELS tokenizer)
  endif()
endforeach()

add_executable(tok_pretok_tool ${CMAKE_CURRENT_LIST_DIR}/tok_pretok_tool.c)
target_link_libraries(tok_pretok_tool PRIVATE nm_rank)
add_test(NAME test_tok_pretok_vs_regex
         COMMAND ${NM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/pretok_vs_regex.py $<TARGET_FILE:tok_pretok_tool>
                 --inp-dir ${NM_TOK_DATA})
set_tests_properties(test_tok_pretok_vs_regex PROPERTIES SKIP_RETURN_CODE 77 LABELS tokenizer)

add_executable(test_tok_roundtrip ${CMAKE_CURRENT_LIST_DIR}/test_tok_roundtrip.c)
target_link_libraries(test_tok_roundtrip PRIVATE nm_rank)
foreach(v ${NM_TOK_VOCABS})
  add_test(NAME test_tok_roundtrip_${v} COMMAND test_tok_roundtrip ${NM_TOK_DATA} ${v})
  set_tests_properties(test_tok_roundtrip_${v} PROPERTIES SKIP_RETURN_CODE 77 LABELS tokenizer)
endforeach()

nm_add_test(test_tok_stream SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tok_stream.c
            LIBS nm_rank LABELS tokenizer ARGS ${NM_TOK_DATA})
