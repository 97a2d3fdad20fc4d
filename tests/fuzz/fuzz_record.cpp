// libFuzzer target "record": the entry function lives in fuzz_entries.cpp so that the replay test of
// the normal build (tests/unit/test_fuzz_regressions.cpp) runs exactly the same code.
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tprobe::fuzz::fuzz_record({data, size});
  return 0;
}
