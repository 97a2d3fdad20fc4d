# cmake -P test of cmake/embed_page.cmake: the parts are inlined where the page names them, the
# .cpp is rewritten only when its text changes, and a page without a part's tag fails the build.
# Run with -DSOURCE_DIR=<repo> -DWORK_DIR=<empty dir>.
include(${SOURCE_DIR}/cmake/embed_page.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
if(MISSING_TAG)  # the page forgets its script: the configure step must stop, naming the tag
  file(WRITE ${WORK_DIR}/p.html "<head><link rel=\"stylesheet\" href=\"p.css\"></head>\n")
else()
  file(WRITE ${WORK_DIR}/p.html "<head><link rel=\"stylesheet\" href=\"p.css\"></head>\n<script src=\"p.js\"></script>\n")
endif()
file(WRITE ${WORK_DIR}/p.css "b { color: red; }\n")
file(WRITE ${WORK_DIR}/p.js "const a = [1; 2]; // \\n \${x} \"q\"\n")
tprobe_embed_page(${WORK_DIR}/out.cpp HTML ${WORK_DIR}/p.html INLINE ${WORK_DIR}/p.css ${WORK_DIR}/p.js
                  NAMESPACE t FUNCTION page)
file(READ ${WORK_DIR}/out.cpp cpp)
set(expected "<head><style>\nb { color: red; }\n</style></head>\n<script>\nconst a = [1; 2]; // \\n \${x} \"q\"\n</script>\n")
string(FIND "${cpp}" "R\"TPROBE_PAGE(${expected})TPROBE_PAGE\"" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the page was not inlined as expected:\n${cpp}")
endif()
file(TIMESTAMP ${WORK_DIR}/out.cpp before "%s%f" UTC)
tprobe_embed_page(${WORK_DIR}/out.cpp HTML ${WORK_DIR}/p.html INLINE ${WORK_DIR}/p.css ${WORK_DIR}/p.js
                  NAMESPACE t FUNCTION page)
file(TIMESTAMP ${WORK_DIR}/out.cpp after "%s%f" UTC)
if(NOT before STREQUAL after)
  message(FATAL_ERROR "out.cpp was rewritten though its text did not change")
endif()
message(STATUS "embed_page: ok")
