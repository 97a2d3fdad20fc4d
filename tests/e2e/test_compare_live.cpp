// tprobe-compare-live end to end: `tprobe run` of a manifest with runs "a" and "b" (the example
// producer with different seeds) into one compare-live stage; the divergence it names must be a
// pair that compare_real_data fails on the producer's own tensors.
#include <cstring>
#include <filesystem>
#include <regex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compare/compare_metrics.h"
#include "example_model.h"
#include "pyjson.h"
#include "test_support.h"

using namespace tprobe;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

namespace {

dtype dtype_of(example::element e) {
  switch (e) {
    case example::element::float32: return dtype::float32;
    case example::element::float16: return dtype::float16;
    case example::element::bfloat16: return dtype::bfloat16;
    case example::element::int64: return dtype::int64;
    case example::element::boolean: return dtype::boolean;
  }
  return dtype::float32;
}

// `tprobe run` of a compare-live manifest around the example producer (with `producer_args`).
// run_a / run_b: extra keys of the runs' JSON objects, e.g. `, "args": ["--seed", "1"]`, or "".
// The result files go to dir/out_name.
test::process_result run_live(const test::temp_dir &dir, const std::string &run_a, const std::string &run_b,
                              const std::string &out_name, std::vector<std::string> producer_args) {
  const std::string config = dir / "config.json";
  test::write_file(config, R"({"task": "tensor", "dump_path": ")" + dir.path() + R"(/dump", "level": "L1"})");
  const std::string manifest = dir / "compare-live.json";
  test::write_file(manifest, R"({"description": "test", "runs": [{"name": "a")" + run_a + R"(},
      {"name": "b")" + run_b + R"(}], "capture": {"task": "tensor"},
      "stages": [{"name": "compare", "stage": "compare-live", "inputs": ["capture"],
                  "options": {"output-dir": ")" + dir.path() + "/" + out_name + R"("}}]})");
  std::vector<std::string> argv{test::bin("tprobe"), "run", manifest, "--config", config, "--",
                                test::bin("tprobe-example-producer")};
  argv.insert(argv.end(), producer_args.begin(), producer_args.end());
  return test::run_process(argv);
}

}  // namespace

TEST(CompareLive, two_seeds_diverge_and_the_divergence_is_named) {
  test::temp_dir dir;
  const auto r = run_live(dir, R"(, "args": ["--seed", "1"])", R"(, "args": ["--seed", "2"])", "out", {"--steps", "1"});
  // The stage exits 1 (a negative answer), and so does the launcher, the command having succeeded.
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("tprobe-compare-live: a vs b:"));

  const auto a = example::example_step(1, -1, 0), b = example::example_step(2, -1, 0);
  ASSERT_EQ(a.size(), b.size());
  std::smatch m;
  const std::regex line(R"(first divergence: step 0 rank -1 (\S+) (\S+) cosine=(\S+) max_abs_err=(\S+))");
  ASSERT_TRUE(std::regex_search(r.err, m, line))
      << r.err;
  const std::string named = m[1].str() + " " + m[2].str();
  // The named pair fails on the producer's tensors (whatever its dtype).
  bool found = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].entry + " " + a[i].slot != named) continue;
    found = true;
    const tensor_operand n{dtype_of(a[i].type), a[i].shape, a[i].data}, o{dtype_of(b[i].type), b[i].shape, b[i].data};
    EXPECT_EQ(compare_real_data(n, o).accuracy, "No") << named;
  }
  EXPECT_TRUE(found) << named;

  // Result files, one set (one step, no rank).
  size_t files = 0;
  for (const auto &f : fs::directory_iterator(dir / "out")) {
    ++files;
    if (f.path().extension() == ".json") {
      const auto doc = pyjson_load_file(f.path().string());
      EXPECT_GT(doc["failing_rows"].get<int>(), 0);
      EXPECT_EQ(doc["unmatched_rows"], 0);
    }
  }
  EXPECT_EQ(files, 4u);
}

TEST(CompareLive, same_seed_is_clean) {
  test::temp_dir dir;
  const auto r = run_live(dir, "", "", "out", {"--steps", "2"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("first divergence")));
  EXPECT_THAT(r.err, HasSubstr(", 0 failing, 0 unmatched"));
}

// The live table of two runs equals the offline compare of the same runs' dumps, rank by rank.
TEST(CompareLive, tables_equal_the_offline_compare) {
  test::temp_dir dir;
  for (const std::string seed : {"1", "2"}) {
    const std::string config = dir / ("config" + seed + ".json");
    test::write_file(config,
                     R"({"task": "tensor", "dump_path": ")" + dir.path() + "/dump" + seed + R"(", "level": "L1"})");
    const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/tensor.json",
                                      "--config", config, "--", test::bin("tprobe-example-producer"), "--steps", "1",
                                      "--world-size", "2", "--seed", seed});
    ASSERT_EQ(r.status, 0) << r.err;
  }
  // A live table with tensor data pairs by name, as its pairs were compared on arrival.
  const auto offline = test::run_process({test::bin("tprobe-compare"), dir / "dump1/step0", dir / "dump2/step0", "-o",
                                          dir / "offline", "--match", "name"});
  ASSERT_EQ(offline.status, 1) << offline.err;

  const auto live = run_live(dir, R"(, "args": ["--seed", "1"])", R"(, "args": ["--seed", "2"])", "live",
                             {"--steps", "1", "--world-size", "2"});
  EXPECT_THAT(live.err, HasSubstr("first divergence: step 0 rank "));

  const auto csv_of = [](const std::string &folder, const std::string &rank) {
    for (const auto &f : fs::directory_iterator(folder)) {
      const std::string name = f.path().filename().string();
      if (name.starts_with("compare_result_" + rank + "_") && name.ends_with(".csv")) return test::read_file(f.path());
    }
    ADD_FAILURE() << "no csv for " << rank << " in " << folder;
    return std::string();
  };
  for (const std::string rank : {"rank0", "rank1"}) {
    const std::string off = csv_of(dir / "offline", rank), on = csv_of(dir / "live", rank);
    EXPECT_FALSE(off.empty());
    EXPECT_EQ(on, off) << rank;
  }
}
