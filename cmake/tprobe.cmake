# Helpers so that adding a stage is one line here and there (style lesson 2).

# Warnings for our own targets only: third-party headers come in as SYSTEM includes.
function(tprobe_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
endfunction()

# A tprobe-<verb> binary: its library sources join tprobe_stages (so tests call its run() in
# process), MAIN becomes build/bin/tprobe-<verb>, which `tprobe <verb>` runs, and the tests depend
# on it (TPROBE_BINARY_TARGETS). The three helpers below say which kind of binary it is.
function(_tprobe_add_binary verb)
  cmake_parse_arguments(S "" "MAIN" "LIBRARY;DEPS" ${ARGN})
  if(S_LIBRARY)
    target_sources(tprobe_stages PRIVATE ${S_LIBRARY})
  endif()
  if(S_DEPS)
    target_link_libraries(tprobe_stages PUBLIC ${S_DEPS})
  endif()
  add_executable(tprobe-${verb} ${S_MAIN})
  target_link_libraries(tprobe-${verb} PRIVATE tprobe::stages)
  tprobe_warnings(tprobe-${verb})
  set_property(GLOBAL APPEND PROPERTY TPROBE_BINARY_TARGETS tprobe-${verb})
endfunction()

# tprobe_add_stage(<verb> LIBRARY <sources…> MAIN <main.cpp> [DEPS <targets…>])
# A stage of a pipeline (stages/stream/<stage>/): reads records on --input, writes --output.
function(tprobe_add_stage verb)
  _tprobe_add_binary(${verb} ${ARGN})
endfunction()

# tprobe_add_tool(<verb> LIBRARY <sources…> MAIN <main.cpp> [DEPS <targets…>])
# An offline tool over files (tools/<tool>/): no stream; only its folder and its contract differ.
function(tprobe_add_tool verb)
  _tprobe_add_binary(${verb} ${ARGN})
endfunction()

# tprobe_add_launcher(<verb> LIBRARY <sources…> MAIN <main.cpp>)
# The launcher (launcher/run/): starts the stages of a manifest and the training command.
function(tprobe_add_launcher verb)
  _tprobe_add_binary(${verb} ${ARGN})
endfunction()

# tprobe_add_test(<name> SOURCES <…> LABEL unit|e2e [TIMEOUT s] [DEPS …])
# Every test gets a hermetic temp dir and the bin dir of this build (never a guessed path).
function(tprobe_add_test name)
  cmake_parse_arguments(T "" "LABEL;TIMEOUT" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE GTest::gmock GTest::gtest GTest::gtest_main ${T_DEPS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  # Tests keep their own asserts on; library code keeps NDEBUG for LibTorch's sake.
  target_compile_options(${name} PRIVATE -UNDEBUG)
  tprobe_warnings(${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES
    LABELS "${T_LABEL}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "TPROBE_BIN_DIR=${PROJECT_BINARY_DIR}/bin;TPROBE_SOURCE_DIR=${PROJECT_SOURCE_DIR};TPROBE_TEST_TMP=${PROJECT_BINARY_DIR}/test-tmp;HOME=${PROJECT_BINARY_DIR}/test-tmp")
endfunction()
