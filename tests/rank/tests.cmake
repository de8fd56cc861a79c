# Unit tests of rank/ parts that the model-level tests cannot pin down precisely.
nm_add_test(test_sampler SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sampler.c LIBS nm_rank LABELS rank)
nm_add_test(test_shard SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shard.c LIBS nm_rank LABELS rank)
nm_add_test(test_locality SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_locality.c LIBS nm_rank LABELS rank)
