# tests/reference: the independent float64 reference implementation (Python + numpy).
# reference_selftest checks the reference itself: GGUF parser, dequantizers, RoPE, forward pass
# against a scalar oracle, dump formats, and compare.py (checker self-test, tolerance margins).
# It exits 77 (skipped) when NM_PYTHON cannot import numpy.
# Model-vs-engine tests (model_test.sh) are registered once the engine's run/mkmodel exist.
if(NM_PYTHON)
  add_test(NAME reference_selftest COMMAND ${NM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_ref.py)
  set_tests_properties(reference_selftest PROPERTIES LABELS reference SKIP_RETURN_CODE 77)
  # The reference against llama.cpp's exact float64 logits on its own files (../shared/data/quant):
  # the block decoders, shapes and RoPE of the reference are llama.cpp's, to float32 rounding.
  add_test(NAME reference_vs_llamacpp_exact
           COMMAND ${NM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/vs_llamacpp.py ${CMAKE_SOURCE_DIR}/../shared/data/quant)
  set_tests_properties(reference_vs_llamacpp_exact PROPERTIES LABELS reference SKIP_RETURN_CODE 77)
else()
  message(STATUS "reference: no python3 found; reference_selftest not registered")
endif()
