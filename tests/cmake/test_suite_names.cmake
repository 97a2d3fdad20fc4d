# cmake -P test: every GoogleTest suite is named in one style, PascalCase (TEST(MonitorStage, …),
# TEST_F(Network, …)), so that `ctest -R`/--gtest_filter patterns and reports read alike.
# Run with -DSOURCE_DIR=<repo>.
file(GLOB_RECURSE sources ${SOURCE_DIR}/tests/*.cpp)
set(problems "")
foreach(src IN LISTS sources)
  file(STRINGS ${src} lines REGEX "^(TEST|TEST_F|TEST_P|TYPED_TEST)\\(")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[A-Z_]+\\(([A-Za-z0-9_]+),.*" "\\1" suite "${line}")
    if(NOT suite MATCHES "^[A-Z][A-Za-z0-9]*$")
      file(RELATIVE_PATH rel ${SOURCE_DIR} ${src})
      set(problems "${problems}\n  ${rel}: suite \"${suite}\" is not PascalCase")
    endif()
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "test suite names:${problems}")
endif()
message(STATUS "test suite names: ok")
