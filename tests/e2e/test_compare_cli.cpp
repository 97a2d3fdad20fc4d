// End-to-end tests of the tprobe-compare binary (docs/stages/compare.md): exit codes 0 / 1 / 100 /
// 111, one-line fatal messages naming the input, the four result files, step folders paired by rank
// position, msprobe-format dumps (NaN tokens), a data mapping file, missing tensor files, and the
// `tprobe compare` dispatcher. Every input is written by the test (dump.json text, .npy via npy.h).
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "npy.h"
#include "pyjson.h"
#include "test_support.h"

namespace tprobe {
namespace {

namespace fs = std::filesystem;

// A one-entry tensor dump at `dir` whose input and output are float32 [4] tensors.
void write_tensor_dump(const std::string &dir, const std::vector<float> &in, const std::vector<float> &out,
                       bool write_output_file = true) {
  fs::create_directories(dir + "/dump_tensor_data");
  const std::vector<int64_t> shape{4};
  npy_write(dir + "/dump_tensor_data/Functional.linear.0.forward.input.0.npy", dtype::float32, shape,
            std::as_bytes(std::span(in)));
  if (write_output_file)
    npy_write(dir + "/dump_tensor_data/Functional.linear.0.forward.output.0.npy", dtype::float32, shape,
              std::as_bytes(std::span(out)));
  const auto leaf = [](const char *slot) {
    return fmt::format(R"({{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": 1.0, "Min": NaN,
      "Mean": Infinity, "Norm": -Infinity, "requires_grad": true, "data_name": "Functional.linear.0.forward.{}.npy"}})",
                       slot);
  };
  test::write_file(dir + "/dump.json",
                   fmt::format(R"({{"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": null,
 "data": {{"Functional.linear.0.forward": {{"input_args": [{}], "input_kwargs": {{}}, "output": [{}]}}}}}})",
                               leaf("input.0"), leaf("output.0")));
}

using test::files_in;
using test::find_file;

test::process_result compare(const std::vector<std::string> &args) {
  std::vector<std::string> argv{test::bin("tprobe-compare")};
  argv.insert(argv.end(), args.begin(), args.end());
  return test::run_process(argv);
}

size_t lines(const std::string &s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST(CompareCli, CleanCompareExitsZeroAndWritesFourFiles) {
  test::temp_dir t;
  write_tensor_dump(t / "npu", {1, 2, 3, 4}, {0.5f, 1, 1.5f, 2});
  write_tensor_dump(t / "bench", {1, 2, 3, 4}, {0.5f, 1, 1.5f, 2});
  const auto r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "out"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto files = files_in(t / "out");
  ASSERT_EQ(files.size(), 4u);
  const std::string xlsx = find_file(t / "out", "compare_result_", ".xlsx");
  ASSERT_FALSE(xlsx.empty());
  EXPECT_EQ(test::read_file(xlsx).substr(0, 2), "PK");  // a zip container
  struct stat st {};
  ASSERT_EQ(::stat(xlsx.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  const std::string csv = test::read_file(find_file(t / "out", "compare_result_", ".csv"));
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "NPU Name,Bench Name,NPU Dtype,Bench Dtype,NPU Tensor Shape,Bench Tensor Shape,NPU Requires_grad,Bench "
            "Requires_grad,Cosine,EucDist,MaxAbsErr,MaxRelativeErr,One Thousandth Err Ratio,Five Thousandths Err "
            "Ratio,NPU max,NPU min,NPU mean,NPU l2norm,Bench max,Bench min,Bench mean,Bench l2norm,Requires_grad "
            "Consistent,Accuracy Reached or Not,Err_message,Data_name,Match");  // Match: --match auto (the default)
  EXPECT_NE(csv.find("Functional.linear.0.forward.input.0,Functional.linear.0.forward.input.0,torch.float32,torch.float32,"
                     "[4],[4],True,True,1.0,0.0,0.0,0.0,1.0,1.0,1.0,Nan,inf,-inf,1.0,Nan,inf,-inf,True,Yes,,"),
            std::string::npos)
      << csv;
  EXPECT_EQ(test::read_file(find_file(t / "out", "advisor_", ".txt")),
            "Line: NA\nSuspect Nodes: NA\nExpert Advice: All data in comparison result meets the accuracy requirements.\n");
  const auto doc = pyjson_parse(test::read_file(find_file(t / "out", "compare_result_", ".json")), "json");
  EXPECT_EQ(doc["mode"], "all");
  EXPECT_EQ(doc["rows"].size(), 2u);
  EXPECT_EQ(doc["failing_rows"], 0);
  EXPECT_EQ(doc["rows"][0][23], "Yes");
}

TEST(CompareCli, FailingRowExitsOneAndTheDispatcherRunsIt) {
  test::temp_dir t;
  write_tensor_dump(t / "npu", {1, 2, 3, 4}, {1, 2, 3, 4});
  write_tensor_dump(t / "bench", {1, 2, 3, 4}, {4, 3, 2, 1});
  const auto r = test::run_process({test::bin("tprobe"), "compare", t / "npu/dump.json", t / "bench/dump.json", "-o",
                                    t / "out", "--highlight"});
  ASSERT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("1 failing"), std::string::npos) << r.err;
  EXPECT_EQ(test::read_file(find_file(t / "out", "advisor_", ".txt")),
            "Line: 1\nSuspect Nodes: Functional.linear.0.forward.output.0\nExpert Advice: This is a forward API "
            "computation error. Check the computation implementation.\n");
  const auto doc = pyjson_parse(test::read_file(find_file(t / "out", "compare_result_", ".json")), "json");
  EXPECT_EQ(doc["rows"][1][23], "No");
  EXPECT_EQ(doc["highlight"].size(), 2u);
  EXPECT_EQ(doc["advisor"]["line"], "1");
}

TEST(CompareCli, BadUsageExits100) {
  test::temp_dir t;
  write_tensor_dump(t / "npu", {1, 2, 3, 4}, {1, 2, 3, 4});
  fs::create_directories(t / "step");
  for (const auto &args : std::vector<std::vector<std::string>>{
           {},
           {t / "npu/dump.json", t / "npu/dump.json"},                                 // no -o
           {t / "npu/dump.json", t / "npu/dump.json", "-o", t / "out", "--no-such"},   // unknown option
           {t / "npu/dump.json", t / "step", "-o", t / "out"},                         // one rank vs a step folder
           {t / "npu/dump.json", t / "npu/dump.json", "-o", t / "o u t"},              // msprobe's path rule
           {t / "npu/dump.json", t / "npu/dump.json", "-o", t / "out", "--threads", "-2"}}) {
    const auto r = compare(args);
    std::string joined;
    for (const auto &a : args) joined += a + " ";
    EXPECT_EQ(r.status, 100) << joined << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_EQ(r.err.rfind("tprobe-compare: fatal: ", 0), 0u) << r.err;
  }
}

TEST(CompareCli, MissingOrBadDumpJsonIsOneLineNamingTheFile) {
  test::temp_dir t;
  write_tensor_dump(t / "bench", {1, 2, 3, 4}, {1, 2, 3, 4});
  auto r = compare({t / "nope/dump.json", t / "bench/dump.json", "-o", t / "out"});
  EXPECT_EQ(r.status, 111);
  EXPECT_EQ(r.err, "tprobe-compare: fatal: unable to open " + (t / "nope/dump.json") + ": No such file or directory\n");

  fs::create_directories(t / "bad");
  test::write_file(t / "bad/dump.json", "{\"task\": \"tensor\", \"data\": {\n");
  r = compare({t / "bad/dump.json", t / "bench/dump.json", "-o", t / "out"});
  EXPECT_EQ(r.status, 100);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(t / "bad/dump.json"), std::string::npos) << r.err;

  test::write_file(t / "bad/dump.json", R"({"data": {}})");
  r = compare({t / "bad/dump.json", t / "bench/dump.json", "-o", t / "out"});
  EXPECT_EQ(r.status, 100);
  EXPECT_EQ(r.err, "tprobe-compare: fatal: NPU dump " + (t / "bad/dump.json") + ": 'task' is missing or empty\n");
}

TEST(CompareCli, MissingTensorFileIsReportedInItsRow) {
  test::temp_dir t;
  write_tensor_dump(t / "npu", {1, 2, 3, 4}, {1, 2, 3, 4}, /*write_output_file=*/false);
  write_tensor_dump(t / "bench", {1, 2, 3, 4}, {1, 2, 3, 4});
  const auto r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "out"});
  ASSERT_EQ(r.status, 1) << r.err;  // an error row: not a pass (tests/e2e/test_compare_errors.cpp has every kind)
  const auto doc = pyjson_parse(test::read_file(find_file(t / "out", "compare_result_", ".json")), "json");
  EXPECT_EQ(doc["rows"][1][8], "unsupported");
  EXPECT_EQ(doc["rows"][1][23], "None");
  const std::string path = (t / "npu") + "/dump_tensor_data/Functional.linear.0.forward.output.0.npy";
  EXPECT_EQ(doc["rows"][1][24], "Dump file: " + path +
                                    " not found or read failed. Cannot read NPU tensor: unable to open: No such file or "
                                    "directory.");
  EXPECT_EQ(doc.value("error_rows", -1), 1);
  EXPECT_NE(r.err.find("warning: cannot read NPU tensor " + path + ": unable to open: No such file or directory"),
            std::string::npos)
      << r.err;
}

// msprobe's statistics dump, written as Python's json.dump(indent=1) writes NaN and Infinity.
const char *const msprobe_statistics = R"({
 "task": "statistics",
 "level": "L1",
 "framework": "pytorch",
 "dump_data_dir": null,
 "data": {
  "Functional.conv2d.0.forward": {
   "input_args": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.float32",
     "shape": [
      2,
      3
     ],
     "Max": %s,
     "Min": -Infinity,
     "Mean": NaN,
     "Norm": 5.0,
     "requires_grad": false
    },
    {
     "type": "int",
     "value": 1
    }
   ],
   "input_kwargs": {},
   "output": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.float32",
     "shape": [
      2,
      3
     ],
     "Max": %s,
     "Min": 0.0,
     "Mean": 1.0,
     "Norm": 2.0,
     "requires_grad": false
    }
   ]
  }
 }
})";

std::string statistics_dump(const char *in_max, const char *out_max) {
  std::string s = msprobe_statistics;
  s.replace(s.find("%s"), 2, in_max);
  s.replace(s.find("%s"), 2, out_max);
  return s;
}

TEST(CompareCli, StepFoldersArePairedByRankPosition) {
  test::temp_dir t;
  for (const auto &[dir, out_max] : std::vector<std::pair<std::string, const char *>>{
           {"npu/step0/rank0", "3.0"}, {"npu/step0/rank1", "3.0"}, {"bench/step0/rank4", "3.0"}, {"bench/step0/rank7", "1.0"}}) {
    fs::create_directories(t / dir);
    test::write_file(t / (dir + "/dump.json"), statistics_dump("Infinity", out_max));
  }
  const auto r = compare({t / "npu/step0", t / "bench/step0", "-o", t / "out"});
  ASSERT_EQ(r.status, 1) << r.err;  // rank1 vs rank7: Max 3.0 vs 1.0 is a Warning
  const std::string rank0 = find_file(t / "out", "compare_result_rank0_", ".json");
  const std::string rank1 = find_file(t / "out", "compare_result_rank1_", ".json");
  ASSERT_FALSE(rank0.empty());
  ASSERT_FALSE(rank1.empty());
  EXPECT_FALSE(find_file(t / "out", "advisor_rank1_", ".txt").empty());
  const auto d0 = pyjson_parse(test::read_file(rank0), "json"), d1 = pyjson_parse(test::read_file(rank1), "json");
  EXPECT_EQ(d0["mode"], "summary");
  EXPECT_EQ(d0["rank"], "rank0");
  EXPECT_EQ(d0["failing_rows"], 0);
  EXPECT_EQ(d1["failing_rows"], 1);
  EXPECT_EQ(d0["rows"][0][8], "Nan");  // inf − inf
  EXPECT_EQ(d0["rows"][0][10], "Nan");  // Mean NaN shown as "Nan"
  EXPECT_EQ(d0["rows"][0][18], "Nan");  // NPU mean
  EXPECT_EQ(d1["rows"][2][12], "200.0%");

  fs::create_directories(t / "npu/step0/notes");
  const auto bad = compare({t / "npu/step0", t / "bench/step0", "-o", t / "out"});
  EXPECT_EQ(bad.status, 100);
  EXPECT_NE(bad.err.find("contains 'notes'"), std::string::npos) << bad.err;
}

TEST(CompareCli, MappingFileAndFuzzyMatch) {
  test::temp_dir t;
  fs::create_directories(t / "npu");
  fs::create_directories(t / "bench");
  test::write_file(t / "npu/dump.json", statistics_dump("1.0", "1.0"));
  std::string bench = statistics_dump("1.0", "1.0");
  bench.replace(bench.find("conv2d.0"), 8, "conv2d.5");
  test::write_file(t / "bench/dump.json", bench);
  auto r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "exact", "--match", "name"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = pyjson_parse(test::read_file(find_file(t / "exact", "compare_result_", ".json")), "json");
  EXPECT_EQ(doc["unmatched_rows"], 3);
  EXPECT_EQ(doc["match"], "name");
  EXPECT_EQ(doc["columns"].back(), "Err_message");  // msprobe's columns, no Match
  // The default pairs the call whatever its counter.
  r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "auto"});
  ASSERT_EQ(r.status, 0) << r.err;
  doc = pyjson_parse(test::read_file(find_file(t / "auto", "compare_result_", ".json")), "json");
  EXPECT_EQ(doc["unmatched_rows"], 0);
  EXPECT_EQ(doc["paired_by_alignment"], 3);
  EXPECT_EQ(doc["columns"].back(), "Match");

  r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "fuzzy", "--fuzzy-match"});
  ASSERT_EQ(r.status, 0) << r.err;
  doc = pyjson_parse(test::read_file(find_file(t / "fuzzy", "compare_result_", ".json")), "json");
  EXPECT_EQ(doc["unmatched_rows"], 0);

  test::write_file(t / "map.yaml",
                   "# NPU name: bench name\n"
                   "Functional.conv2d.0.forward.output.0: Functional.conv2d.5.forward.output.0\n"
                   "'Functional.conv2d.0.forward.input.0': \"Functional.conv2d.5.forward.input.0\"\n");
  r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "mapped", "--mapping", t / "map.yaml"});
  ASSERT_EQ(r.status, 0) << r.err;
  doc = pyjson_parse(test::read_file(find_file(t / "mapped", "compare_result_", ".json")), "json");
  EXPECT_EQ(doc["unmatched_rows"], 1);  // input.1 is not in the mapping
  EXPECT_EQ(doc["rows"][2][1], "Functional.conv2d.5.forward.output.0");

  test::write_file(t / "bad.yaml", "just text\n");
  r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "bad", "--mapping", t / "bad.yaml"});
  EXPECT_EQ(r.status, 100);
  EXPECT_EQ(r.err, "tprobe-compare: fatal: mapping " + (t / "bad.yaml") + " line 1: expected 'npu name: bench name'\n");
}

// msprobe's command line with tprobe in msprobe's place (issue 60): `-hl` printed help and exited
// 0 without comparing, so a CI gate passed. Every msprobe flag does what msprobe's does, or is
// refused in one line; an unknown flag names tprobe's forms.
TEST(CompareCli, MsprobesCommandLineHabits) {
  test::temp_dir t;
  write_tensor_dump(t / "npu", {1, 2, 3, 4}, {1, 2, 3, 4});
  write_tensor_dump(t / "bench", {1, 2, 3, 4}, {4, 3, 2, 1});
  test::write_file(t / "npu/stack.json",
                   R"J({"0": [["Functional.linear.0.forward"], ["File train.py, line 9, in step, \n y = linear(x)"]]})J");
  test::write_file(t / "compare.json",
                   fmt::format(R"({{"npu_path": "{}", "bench_path": "{}", "stack_path": "{}", "is_print_compare_log": true}})",
                               t / "npu/dump.json", t / "bench/dump.json", t / "npu/stack.json"));
  // msprobe -f pytorch compare -i compare.json -o out -s -hl
  auto r = test::run_process(
      {test::bin("tprobe"), "-f", "pytorch", "compare", "-i", t / "compare.json", "-o", t / "hl", "-s", "-hl"});
  ASSERT_EQ(r.status, 1) << r.err;  // compared, and the reversed output fails
  auto doc = pyjson_parse(test::read_file(find_file(t / "hl", "compare_result_", ".json")), "json");
  EXPECT_EQ(doc["highlight"].size(), 2u);
  EXPECT_EQ(doc["columns"][25], "NPU_Stack_Info");
  // The long spellings, -f pytorch after the verb, -fm, -c.
  r = compare({"--input_path", t / "compare.json", "--output_path", t / "long", "--stack_mode", "--highlight",
               "-f", "pytorch", "-fm", "-c"});
  ASSERT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(find_file(t / "long", "advisor_", ".txt").empty());
  // -dm: msprobe's data mapping.
  test::write_file(t / "map.yaml", "Functional.linear.0.forward.output.0: Functional.linear.0.forward.input.0\n");
  r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "dm", "-dm", t / "map.yaml"});
  ASSERT_EQ(r.status, 0) << r.err;  // output [1,2,3,4] paired with bench input [1,2,3,4]
  // Refused, one line each, exit 100.
  for (const auto &[args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"-i", t / "compare.json", "-o", t / "x", "-da"}, "msprobe's -da is not built in tprobe"},
           {{"-i", t / "compare.json", "-o", t / "x", "-lm", "l.yaml"}, "msprobe's -lm is not built in tprobe"},
           {{"-i", t / "compare.json", "-o", t / "x", "-f", "mindspore"}, "only --framework pytorch is taken"},
           {{"-i", t / "compare.json", "-o", t / "x", "--bogus"},
            "unknown option \"--bogus\"; its options are"},
           {{"-i", t / "compare.json", t / "npu/dump.json", "-o", t / "x"}, "not both"},
           {{"-i", t / "missing.json", "-o", t / "x"}, "missing.json"}}) {
    r = compare(args);
    EXPECT_EQ(r.status, message == "missing.json" ? 111 : 100) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
  test::write_file(t / "bad.json", R"({"npu_path": "a", "bench": "b"})");
  r = compare({"-i", t / "bad.json", "-o", t / "x"});
  EXPECT_EQ(r.status, 100);
  EXPECT_NE(r.err.find("unknown key \"bench\""), std::string::npos) << r.err;
  r = test::run_process({test::bin("tprobe"), "-f", "mindspore", "compare"});
  EXPECT_EQ(r.status, 100);
  EXPECT_NE(r.err.find("only -f pytorch is taken"), std::string::npos) << r.err;
}

TEST(CompareCli, StackModeNeedsStackJson) {
  test::temp_dir t;
  write_tensor_dump(t / "npu", {1, 2, 3, 4}, {1, 2, 3, 4});
  write_tensor_dump(t / "bench", {1, 2, 3, 4}, {1, 2, 3, 4});
  auto r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "out", "--stack-mode"});
  EXPECT_EQ(r.status, 100);
  EXPECT_NE(r.err.find("no stack.json beside the NPU dump"), std::string::npos) << r.err;
  test::write_file(t / "npu/stack.json",
                   R"J({"0": [["Functional.linear.0.forward"], ["File train.py, line 9, in step, \n y = linear(x)"]]})J");
  r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "out", "--stack-mode"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto doc = pyjson_parse(test::read_file(find_file(t / "out", "compare_result_", ".json")), "json");
  EXPECT_EQ(doc["columns"][25], "NPU_Stack_Info");
  EXPECT_EQ(doc["rows"][0][25], "['File train.py, line 9, in step, \\n y = linear(x)']");
}

bool python_has_torch() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

// msprobe's PyTorch dumps hold .pt files (torch.save). A LibTorch build reads them (bf16 as float32);
// one without LibTorch stops with a one-line error naming the file.
TEST(CompareCli, PtTensors) {
  test::temp_dir t;
  write_tensor_dump(t / "npu", {1, 2, 3, 4}, {1, 2, 3, 4});
  write_tensor_dump(t / "bench", {1, 2, 3, 4}, {1, 2, 3, 4.5f});
  std::string text = test::read_file(t / "npu/dump.json");
  for (size_t p; (p = text.find(".npy")) != std::string::npos;) text.replace(p, 4, ".pt");
  test::write_file(t / "npu/dump.json", text);
  test::write_file(t / "npu/dump_tensor_data/Functional.linear.0.forward.input.0.pt", "not a zip");
  auto r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "out", "--threads", "1"});
  if (r.err.find("built with LibTorch") != std::string::npos) {
    EXPECT_EQ(r.status, 100);
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(t / "npu/dump_tensor_data/Functional.linear.0.forward.input.0.pt"), std::string::npos) << r.err;
    return;
  }
  // This tprobe-compare reads .pt: a broken file is an error row (exit 1), real ones compare.
  ASSERT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("not a readable torch.save file"), std::string::npos) << r.err;
  if (!python_has_torch()) GTEST_SKIP() << "no /usr/bin/python3 with torch to write .pt files";
  const std::string script = fmt::format(
      "import torch; d='{}/dump_tensor_data/Functional.linear.0.forward.'; "
      "torch.save(torch.tensor([1, 2, 3, 4], dtype=torch.bfloat16), d + 'input.0.pt'); "
      "torch.save(torch.tensor([1, 2, 3, 4], dtype=torch.float32), d + 'output.0.pt')",
      t / "npu");
  ASSERT_EQ(test::run_process({"/usr/bin/python3", "-c", script}).status, 0);
  r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "out2"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto doc = pyjson_parse(test::read_file(find_file(t / "out2", "compare_result_", ".json")), "json");
  EXPECT_EQ(doc["rows"][0][8], 1.0);  // bf16 [1,2,3,4] loaded as float32 against the same
  EXPECT_EQ(doc["rows"][0][24], "");
  EXPECT_EQ(doc["rows"][1][10], 0.5);  // MaxAbsErr against [1,2,3,4.5]
}

TEST(CompareCli, RankFoldersAndDumpJsonMixOnEitherSide) {
  // Users pass rank folders to msprobe's compare all the time (issue 12, item 5).
  test::temp_dir t;
  for (const auto &dir : {"npu/step0/rank0", "bench/step0/rank0"}) {
    fs::create_directories(t / dir);
    test::write_file(t / (std::string(dir) + "/dump.json"), statistics_dump("Infinity", "3.0"));
    test::write_file(t / (std::string(dir) + "/stack.json"), "{}");
  }
  const std::vector<std::pair<std::string, std::string>> pairs{
      {t / "npu/step0/rank0", t / "bench/step0/rank0"},
      {t / "npu/step0/rank0/", t / "bench/step0/rank0/dump.json"},
      {t / "npu/step0/rank0/dump.json", t / "bench/step0/rank0"},
  };
  for (size_t i = 0; i < pairs.size(); ++i) {
    const std::string out = t / ("out" + std::to_string(i));
    const auto r = compare({pairs[i].first, pairs[i].second, "-o", out});
    EXPECT_EQ(r.status, 0) << pairs[i].first << " vs " << pairs[i].second << "\n" << r.err;
    EXPECT_EQ(files_in(out).size(), 4u) << r.err;
  }
  EXPECT_FALSE(find_file(t / "out0", "compare_result_rank0_", ".csv").empty());  // named by the rank folder
  const auto mixed = compare({t / "npu/step0", t / "bench/step0/rank0", "-o", t / "out9"});
  EXPECT_EQ(mixed.status, 100);
  EXPECT_NE(mixed.err.find("a step folder pairs only with a step folder"), std::string::npos) << mixed.err;
}

}  // namespace
}  // namespace tprobe
