# Tokenizers: the Unicode tables behind the pre-tokenizers are generated at build time from
# Python's unicodedata (rank/text/gen_unicode_tables.py), never written by hand.
if(NOT NM_PYTHON)
  message(FATAL_ERROR "rank/text/tokenizer.cmake: no python3 found (NM_PYTHON); it generates the Unicode "
                      "tables of the tokenizers. Install python3 (Debian: apt-get install python3).")
endif()
set(NM_UNICODE_TABLES ${CMAKE_BINARY_DIR}/generated/unicode_tables.h)
add_custom_command(
  OUTPUT ${NM_UNICODE_TABLES}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/generated
  COMMAND ${NM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/gen_unicode_tables.py ${NM_UNICODE_TABLES}
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/gen_unicode_tables.py
  COMMENT "Generating Unicode tables for the tokenizers (${NM_PYTHON})"
  VERBATIM)
target_sources(nm_rank PRIVATE ${NM_UNICODE_TABLES})
target_include_directories(nm_rank PRIVATE ${CMAKE_BINARY_DIR}/generated)
