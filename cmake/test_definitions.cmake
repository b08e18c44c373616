# kvrun_test_definitions(target binary): the compile definitions of every test executable —
# where the real GGUF fixtures are by default (KVRUN_FIXTURES; the environment variable overrides
# it at test time), the tests' own data (tests/data), and the kvrun binary the CLI tests run
# (`binary`; a placeholder name in builds without one).
function(kvrun_test_definitions target binary)
  target_compile_definitions(${target} PRIVATE
    KVRUN_FIXTURES_DEFAULT="${KVRUN_FIXTURES}"
    KVRUN_TEST_DATA="${CMAKE_SOURCE_DIR}/tests/data"
    KVRUN_BINARY="${binary}")
endfunction()
