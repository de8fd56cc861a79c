# The whole model against the independent reference implementation (tests/reference, Python +
# numpy in float64): every tiny preset in every older weight type, and the 13 block types
# (kernels/blocks) on a dense and an MoE preset (their decoders do not depend on the
# architecture; llama.cpp's files, below, add llama and qwen2 with their real mixes). The block
# types' tests are also labelled slow: the sanitizer build skips them (tests/run.sh), since the
# decoders' own tests run there. On failure the test names the first layer that diverges.
set(NM_MODEL_PRESETS tiny-llama tiny-llama31 tiny-qwen2 tiny-qwen3 tiny-qwen3moe)
set(NM_MODEL_TYPES f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q5_k q6_k)
set(NM_MODEL_BLOCK_TYPES q5_0 q5_1 q2_k q3_k iq4_nl iq4_xs iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq1_s iq1_m)
foreach(preset ${NM_MODEL_PRESETS})
  foreach(type ${NM_MODEL_TYPES} ${NM_MODEL_BLOCK_TYPES})
    set(labels model)
    if(type IN_LIST NM_MODEL_BLOCK_TYPES)
      if(NOT preset STREQUAL "tiny-llama" AND NOT preset STREQUAL "tiny-qwen3moe")
        continue()
      endif()
      set(labels "model;slow")
    endif()
    set(name model_vs_ref_${preset}_${type})
    add_test(NAME ${name}
             COMMAND bash ${CMAKE_SOURCE_DIR}/tests/reference/model_test.sh $<TARGET_FILE:numallm>
                     ${preset} ${type} ${CMAKE_CURRENT_BINARY_DIR}/model_tests/${preset}_${type})
    set_tests_properties(${name} PROPERTIES LABELS "${labels}" SKIP_RETURN_CODE 77
                         ENVIRONMENT "NM_PYTHON=${NM_PYTHON}")
  endforeach()
endforeach()

# The F32 model with every F32 matmul of the prompt through oneDNN (rank/engine/forward.c; skipped where
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

# llama.cpp's own files in 17 of its quantization mixes (../shared/data/quant, made by
# llama-quantize with an importance matrix) against llama.cpp's logits and the exact float64
# logits: every file loads, and its logits as one prompt batch and token by token (-b 1), on 1 rank
# and (with mpirun) 2, are within tolerance of both (tests/model/quant_hub.py says how close).
set(NM_QUANT_DATA ${CMAKE_SOURCE_DIR}/../shared/data/quant)
file(GLOB NM_QUANT_FILES ${NM_QUANT_DATA}/*.gguf)
if(NM_QUANT_FILES)
  foreach(f ${NM_QUANT_FILES})
    get_filename_component(stem ${f} NAME_WE)
    add_test(NAME quant_hub_${stem}
             COMMAND ${NM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/quant_hub.py $<TARGET_FILE:numallm> ${NM_QUANT_DATA}
                     ${stem} ${CMAKE_CURRENT_BINARY_DIR}/quant_hub/${stem} ${NM_MPIRUN})
    # In the sanitizer build: one file of each family (K-quants and the 32-value fallbacks, IQ2/IQ3,
    # IQ1, IQ4); the rest are labelled slow there.
    set(labels model)
    if(NOT stem MATCHES "^q-(qwen2-hub-Q3_K_M|llama-hub-IQ2_M|llama-hub-IQ1_M|qwen2-hub-IQ4_XS)$")
      set(labels "model;slow")
    endif()
    set_tests_properties(quant_hub_${stem} PROPERTIES LABELS "${labels}" SKIP_RETURN_CODE 77 PROCESSORS 2 TIMEOUT 600
                         ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
  endforeach()
else()
  add_test(NAME quant_hub COMMAND sh -c "echo 'skipped: no files in ${NM_QUANT_DATA} (the shared data beside the repository)'; exit 77")
  set_tests_properties(quant_hub PROPERTIES SKIP_RETURN_CODE 77 LABELS model)
endif()

# Batch invariance (rank/engine/forward.h): 16 sequences batched as a server batches them (arrivals,
# decode rows next to prompt pieces, batches of 1 to 40 rows) must get every row's logits bit for
# bit as each sequence alone, and the same greedy tokens; 1 rank (label model) and 2 ranks under
# mpirun (label tp). Types: the float ones, the packed int8 ones and block types of 32 and 256 values
# (every type's kernels are checked for the same property in tests/kernels/test_fast.c); on 2
# ranks a packed, a K-quant and a block type. The block types are labelled slow (not in the
# sanitizer build).
set(NM_BATCH_TYPES f32 bf16 q8_0 q4_0 q4_k q6_k q5_0 q5_1 iq4_nl q2_k q3_k iq4_xs iq2_xxs)
set(NM_BATCH_TYPES_NP2 q4_0 q4_k q2_k q5_0 iq2_xxs)
add_executable(test_batch ${CMAKE_CURRENT_LIST_DIR}/test_batch.c)
target_link_libraries(test_batch PRIVATE nm_synth_model)
foreach(preset tiny-llama tiny-qwen2 tiny-qwen3moe)
  foreach(type ${NM_BATCH_TYPES})
    add_test(NAME batch_invariance_${preset}_${type}
             COMMAND test_batch ${preset} ${type} ${CMAKE_CURRENT_BINARY_DIR}/batch_tests)
    # In the sanitizer build: one dense, one qwen2 and one MoE preset, in three types.
    set(labels model)
    if(NOT "${preset}_${type}" MATCHES "^(tiny-llama_q4_0|tiny-qwen2_f32|tiny-qwen3moe_q4_k)$")
      set(labels "model;slow")
    endif()
    set_tests_properties(batch_invariance_${preset}_${type} PROPERTIES LABELS "${labels}" TIMEOUT 300)
    if(NM_MPIRUN AND type IN_LIST NM_BATCH_TYPES_NP2)
      add_test(NAME batch_invariance_np2_${preset}_${type}
               COMMAND ${NM_MPIRUN} -np 2 $<TARGET_FILE:test_batch> ${preset} ${type}
                       ${CMAKE_CURRENT_BINARY_DIR}/batch_tests_np2)
      set_tests_properties(batch_invariance_np2_${preset}_${type} PROPERTIES LABELS "${labels};tp" PROCESSORS 2 TIMEOUT 300
                           ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
    endif()
  endforeach()
endforeach()
