# numallm serve end to end (tests/serve/serve_test.sh): the real server on a loopback port, a tiny
# model, curl as the client; 1 rank in-process and 2 ranks under mpirun. Skipped (77) without
# the shared tokenizer data, curl, or a numallm built with serve.
add_test(NAME serve_e2e
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/serve_test.sh $<TARGET_FILE:numallm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/serve_tests/np1 1)
set_tests_properties(serve_e2e PROPERTIES LABELS serve SKIP_RETURN_CODE 77 TIMEOUT 600
                     ENVIRONMENT "NM_PYTHON=${NM_PYTHON}")
if(NM_MPIRUN)
  add_test(NAME serve_e2e_np2
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/serve_test.sh $<TARGET_FILE:numallm> ${CMAKE_SOURCE_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/serve_tests/np2 2 ${NM_MPIRUN})
  set_tests_properties(serve_e2e_np2 PROPERTIES LABELS "serve;tp" SKIP_RETURN_CODE 77 TIMEOUT 600 PROCESSORS 2
                       ENVIRONMENT "NM_PYTHON=${NM_PYTHON};ASAN_OPTIONS=detect_leaks=0")
endif()

# OpenAI's official JavaScript client (npm package openai, installed once into the user's cache)
# against numallm serve, 1 and 2 ranks. Skipped (77) without node/npm or the npm registry.
add_test(NAME serve_openai_js
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/openai_js_test.sh $<TARGET_FILE:numallm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/serve_tests/openai_js_np1 1)
set_tests_properties(serve_openai_js PROPERTIES LABELS serve SKIP_RETURN_CODE 77 TIMEOUT 900
                     ENVIRONMENT "NM_PYTHON=${NM_PYTHON}")
if(NM_MPIRUN)
  add_test(NAME serve_openai_js_np2
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/openai_js_test.sh $<TARGET_FILE:numallm> ${CMAKE_SOURCE_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/serve_tests/openai_js_np2 2 ${NM_MPIRUN})
  set_tests_properties(serve_openai_js_np2 PROPERTIES LABELS "serve;tp" SKIP_RETURN_CODE 77 TIMEOUT 900 PROCESSORS 2
                       ENVIRONMENT "NM_PYTHON=${NM_PYTHON};ASAN_OPTIONS=detect_leaks=0")
endif()

# The load generator (tests/bench/load_serve.py) briefly against a tiny model: its figures are
# sane (no errors, tokens counted = requests x output length); the figures are not asserted.
add_test(NAME serve_load_generator
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/bench/load_serve_test.sh $<TARGET_FILE:numallm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/serve_tests/load)
set_tests_properties(serve_load_generator PROPERTIES LABELS "serve;bench" SKIP_RETURN_CODE 77 TIMEOUT 600
                     ENVIRONMENT "NM_PYTHON=${NM_PYTHON}")

# GET /health answers 503 with a JSON error while the model loads (a 0.26 GiB synthetic
# qwen2.5-0.5b), then 200.
add_test(NAME serve_health_loading
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/health_test.sh $<TARGET_FILE:numallm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/serve_tests/health)
set_tests_properties(serve_health_loading PROPERTIES LABELS serve SKIP_RETURN_CODE 77 TIMEOUT 900
                     ENVIRONMENT "NM_PYTHON=${NM_PYTHON}")

# A short soak (tests/serve/soak.py): 16 clients for 60 s, every response checked against its
# prompt's answer alone, RSS flat, no error. tests/bench/RESULTS.md has the long run.
add_test(NAME serve_soak
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/soak_test.sh $<TARGET_FILE:numallm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/serve_tests/soak 16 60)
set_tests_properties(serve_soak PROPERTIES LABELS "serve;slow" SKIP_RETURN_CODE 77 TIMEOUT 900
                     ENVIRONMENT "NM_PYTHON=${NM_PYTHON}")
