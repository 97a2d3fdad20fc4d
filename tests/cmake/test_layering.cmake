# cmake -P test of the layers (docs/architecture.md): each layer includes only its own headers and
# those of the layers below it, by name, so a wrong dependency fails here with the file and the
# header named, before it becomes a link-time surprise.
#   core/       nothing of tprobe's above it (it is linked into the training process)
#   transport/  core/
#   capture/    core/, transport/ (and capture/torch/ LibTorch)
#   stages/, tools/, launcher/   core/, transport/, stages/common: never the capture, whose
#               config parser and records live in core/ and transport/ for them
#   capture/tprobe_capture.h     no ZeroMQ, msgpack or LZ4: the public C header stays free of them
# Run with -DSOURCE_DIR=<repo>.
cmake_minimum_required(VERSION 3.20)
function(headers_of out)
  set(names "")
  foreach(dir IN LISTS ARGN)
    file(GLOB_RECURSE found RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${dir}/*.h ${SOURCE_DIR}/${dir}/*.hpp)
    foreach(f IN LISTS found)
      get_filename_component(name ${f} NAME)
      list(APPEND names ${name})
    endforeach()
  endforeach()
  set(${out} ${names} PARENT_SCOPE)
endfunction()

set(problems "")
# check(<layer dirs> FORBID <dirs whose headers it must not include>)
function(check)
  cmake_parse_arguments(C "" "" "LAYER;FORBID;ALLOW" ${ARGN})
  headers_of(forbidden ${C_FORBID})
  headers_of(own ${C_LAYER} ${C_ALLOW})
  list(REMOVE_ITEM forbidden ${own})  # a name both above and here is the layer's own
  foreach(dir IN LISTS C_LAYER)
    file(GLOB_RECURSE sources ${SOURCE_DIR}/${dir}/*.h ${SOURCE_DIR}/${dir}/*.hpp ${SOURCE_DIR}/${dir}/*.cpp)
    foreach(src IN LISTS sources)
      file(STRINGS ${src} includes REGEX "^#include \"[^\"]+\"")
      foreach(line IN LISTS includes)
        string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header "${line}")
        get_filename_component(name ${header} NAME)
        if(name IN_LIST forbidden)
          file(RELATIVE_PATH rel ${SOURCE_DIR} ${src})
          set(problems "${problems}\n  ${rel}: includes ${header}, a header of a layer above ${dir}/ (${C_FORBID})")
        endif()
      endforeach()
    endforeach()
  endforeach()
  set(problems "${problems}" PARENT_SCOPE)
endfunction()

check(LAYER core FORBID transport capture stages tools launcher)
check(LAYER transport FORBID capture stages tools launcher)
check(LAYER capture FORBID stages tools launcher)
check(LAYER stages tools launcher FORBID capture)

file(STRINGS ${SOURCE_DIR}/capture/tprobe_capture.h public REGEX "^#include")
foreach(line IN LISTS public)
  if(line MATCHES "zmq|msgpack|lz4")
    set(problems "${problems}\n  capture/tprobe_capture.h: ${line}: the public C header must not need ZeroMQ, msgpack or LZ4")
  endif()
endforeach()

if(problems)
  message(FATAL_ERROR "layering broken:${problems}")
endif()
message(STATUS "layering: ok")
