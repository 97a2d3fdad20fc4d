# Included by the top-level CMakeLists.txt before any target when TPROBE_BUILD_FUZZ is ON: the
# fuzz targets need every library they link (core, transport, capture, stages) compiled with
# libFuzzer's coverage instrumentation and with AddressSanitizer and UndefinedBehaviorSanitizer,
# so the whole fuzz build is. It is a separate build tree (build-fuzz/), never the product's.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "TPROBE_BUILD_FUZZ needs clang and libFuzzer (Debian: apt-get install clang): "
                      "CC=clang CXX=clang++ cmake -S . -B build-fuzz -DTPROBE_BUILD_FUZZ=ON (scripts/fuzz.sh does this)")
endif()
# -fno-sanitize-recover: a UBSan report aborts, so libFuzzer records the input as a crash.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer -g)
add_link_options(-fsanitize=address,undefined)
