# cmake -P test: the device path's statistics kernel (capture/torch/segment_kernel.h) as NVRTC
# reads it (__CUDACC_RTC__, no standard headers) compiles to PTX, here with clang's CUDA front end
# and NVPTX target (no CUDA toolkit on this machine): the branches only a GPU compiles are
# checked on every machine, and the entry point the driver looks up (segment_engine.cpp) exists,
# unmangled, with its block barrier. scripts/test.sh installs clang.
# Run with -DSOURCE_DIR=<repo> -DWORK_DIR=<scratch directory>.
find_program(CLANGXX NAMES clang++ clang++-14 clang++-15 clang++-16)
if(NOT CLANGXX)
  message(FATAL_ERROR "segment kernel: no clang++ (apt-get install clang; scripts/test.sh does)")
endif()
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(
  COMMAND ${CLANGXX} -x cuda --cuda-device-only --cuda-gpu-arch=sm_70 -nocudainc -nocudalib -std=c++17 -O2
          -D__CUDACC_RTC__ -include ${SOURCE_DIR}/tests/support/cuda_device_shim.h -Wall -Werror
          -Wno-unknown-cuda-version -S -o ${WORK_DIR}/segment_kernel.ptx ${SOURCE_DIR}/capture/torch/segment_kernel.h
  RESULT_VARIABLE status ERROR_VARIABLE errors)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "segment kernel: clang cannot compile it as CUDA device code:\n${errors}")
endif()
file(READ ${WORK_DIR}/segment_kernel.ptx ptx)
foreach(expected ".visible .entry tprobe_segment_statistics(" "bar.sync")
  string(FIND "${ptx}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "segment kernel: the PTX has no \"${expected}\"")
  endif()
endforeach()
message(STATUS "segment kernel: compiles to PTX, entry tprobe_segment_statistics")
