# Tensor-parallel invariance: tiny llama, qwen2, qwen3 and qwen3moe models in F32, Q8_0, Q4_0 and Q4_K,
# run on 1, 2, 3 and 4 ranks under mpirun, must give identical greedy tokens for 32 steps and
# logits within tolerance of the single-rank run (and of the reference: tests/model).
if(NM_MPIRUN)
  foreach(preset tiny-llama tiny-llama31 tiny-qwen2 tiny-qwen3 tiny-qwen3moe)
    foreach(type f32 q8_0 q4_0 q4_k)
      add_test(NAME tp_invariance_${preset}_${type}
               COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/invariance.sh $<TARGET_FILE:numallm> ${preset} ${type}
                       ${CMAKE_CURRENT_BINARY_DIR}/tp_tests/${preset}_${type} ${NM_MPIRUN})
      set_tests_properties(tp_invariance_${preset}_${type} PROPERTIES LABELS tp PROCESSORS 2 TIMEOUT 300
                           ENVIRONMENT "NM_PYTHON=${NM_PYTHON};ASAN_OPTIONS=detect_leaks=0")
      # (Open MPI leaks inside plugins it has unloaded: no suppression can name them.)
    endforeach()
  endforeach()
else()
  add_test(NAME tp_invariance COMMAND sh -c "echo 'skipped: no mpirun (install openmpi-bin)'; exit 77")
  set_tests_properties(tp_invariance PROPERTIES SKIP_RETURN_CODE 77 LABELS tp)
endif()
