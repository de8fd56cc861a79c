# The whole model against the independent reference implementation (tests/reference, Python +
# numpy in float64): every tiny preset in every supported weight type. On failure the test
# names the first layer that diverges.
set(NM_MODEL_PRESETS tiny-llama tiny-llama31 tiny-qwen2 tiny-qwen3 tiny-qwen3moe)
set(NM_MODEL_TYPES f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q5_k q6_k)
foreach(preset ${NM_MODEL_PRESETS})
  foreach(type ${NM_MODEL_TYPES})
    set(name model_vs_ref_${preset}_${type})
    add_test(NAME ${name}
             COMMAND bash ${CMAKE_SOURCE_DIR}/tests/reference/model_test.sh $<TARGET_FILE:numallm>
                     ${preset} ${type} ${CMAKE_CURRENT_BINARY_DIR}/model_tests/${preset}_${type})
    set_tests_properties(${name} PROPERTIES LABELS model SKIP_RETURN_CODE 77
                         ENVIRONMENT "NM_PYTHON=${NM_PYTHON}")
  endforeach()
endforeach()

# The F32 model with every F32 matmul of the prompt through oneDNN (rank/forward.c; skipped where
# numallm was built without oneDNN).
foreach(preset tiny-llama tiny-qwen3moe)
  add_test(NAME model_vs_ref_${preset}_f32_onednn
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/reference/model_test.sh $<TARGET_FILE:numallm>
                   ${preset} f32 ${CMAKE_CURRENT_BINARY_DIR}/model_tests/${preset}_f32_onednn)
  set_tests_properties(model_vs_ref_${preset}_f32_onednn PROPERTIES LABELS model SKIP_RETURN_CODE 77
                       ENVIRONMENT "NM_PYTHON=${NM_PYTHON};NM_ONEDNN=force")
endforeach()

# numallm perplexity against llama.cpp's method written independently over the reference logits.
add_test(NAME perplexity_vs_reference
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/ppl_test.sh $<TARGET_FILE:numallm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/ppl_test)
set_tests_properties(perplexity_vs_reference PROPERTIES LABELS model SKIP_RETURN_CODE 77
                     ENVIRONMENT "NM_PYTHON=${NM_PYTHON}")

# --chat: three turns on standard input; each later turn must reuse the conversation so far from
# the KV cache and evaluate only its new tokens.
add_test(NAME chat_keeps_kv_cache
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/chat_test.sh $<TARGET_FILE:numallm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/chat_test)
set_tests_properties(chat_keeps_kv_cache PROPERTIES LABELS model SKIP_RETURN_CODE 77)

# Batch invariance (rank/forward.h): 16 sequences batched as a server batches them (arrivals,
# decode rows next to prompt pieces, batches of 1 to 40 rows) must get every row's logits bit for
# bit as each sequence alone, and the same greedy tokens; 1 rank (label model) and 2 ranks under
# mpirun (label tp).
add_executable(test_batch ${CMAKE_CURRENT_LIST_DIR}/test_batch.c)
target_link_libraries(test_batch PRIVATE nm_rank)
foreach(preset tiny-llama tiny-qwen2 tiny-qwen3moe)
  foreach(type ${NM_MODEL_TYPES})
    add_test(NAME batch_invariance_${preset}_${type}
             COMMAND test_batch ${preset} ${type} ${CMAKE_CURRENT_BINARY_DIR}/batch_tests)
    set_tests_properties(batch_invariance_${preset}_${type} PROPERTIES LABELS model TIMEOUT 300)
    if(NM_MPIRUN)
      add_test(NAME batch_invariance_np2_${preset}_${type}
               COMMAND ${NM_MPIRUN} -np 2 $<TARGET_FILE:test_batch> ${preset} ${type}
                       ${CMAKE_CURRENT_BINARY_DIR}/batch_tests_np2)
      set_tests_properties(batch_invariance_np2_${preset}_${type} PROPERTIES LABELS tp PROCESSORS 2 TIMEOUT 300
                           ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
    endif()
  endforeach()
endforeach()
