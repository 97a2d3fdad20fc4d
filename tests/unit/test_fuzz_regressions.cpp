// Replays every input of tests/fuzz/corpus/<target>/ and tests/fuzz/regressions/<target>/ through
// the fuzz targets' entry functions (tests/fuzz/fuzz_entries.h) in the normal build, so that a
// crash a fuzzer once found stays fixed without clang or libFuzzer. A regression input is the
// file libFuzzer saved (crash-*, oom-*, timeout-*), kept byte for byte.
#include <algorithm>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fuzz_entries.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace tprobe;

namespace tprobe::fuzz {
// gtest names a failing parameter by this, not by its bytes.
void PrintTo(const fuzz_target &target, std::ostream *os) { *os << target.name; }
}  // namespace tprobe::fuzz

namespace {

// Regular files of `dir` in name order; none when the folder does not exist (a target without
// regressions).
std::vector<fs::path> inputs_in(const fs::path &dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto &e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

size_t replay(const fuzz::fuzz_target &target, const fs::path &dir) {
  const auto files = inputs_in(dir);
  for (const auto &file : files) {
    const std::string bytes = test::read_file(file.string());
    try {
      target.entry({reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()});
    } catch (const std::exception &e) {
      ADD_FAILURE() << "fuzz target " << target.name << " fails on " << file.string() << ": " << e.what();
    }
  }
  return files.size();
}

class FuzzInputs : public testing::TestWithParam<fuzz::fuzz_target> {};

}  // namespace

TEST_P(FuzzInputs, corpus_and_regressions_pass) {
  const fs::path root = fs::path(test::source_dir()) / "tests" / "fuzz";
  const fuzz::fuzz_target &target = GetParam();
  // Every target ships seeds: an empty corpus would mean the folder moved and nothing ran.
  EXPECT_GT(replay(target, root / "corpus" / target.name), 0u) << "no seeds in tests/fuzz/corpus/" << target.name;
  replay(target, root / "regressions" / target.name);
}

INSTANTIATE_TEST_SUITE_P(Fuzz, FuzzInputs, testing::ValuesIn(fuzz::fuzz_targets().begin(), fuzz::fuzz_targets().end()),
                         [](const testing::TestParamInfo<fuzz::fuzz_target> &info) {
                           return std::string(info.param.name);
                         });
