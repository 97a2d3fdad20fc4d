// End-to-end tests of tprobe-compare on tensor files it cannot read (docs/stages/compare.md, "Tensor
// files that cannot be read: error rows"): never a pass about data that was not read. Two equal
// one-entry dumps, then one side's output tensor broken in one way per case (garbage, truncated, a
// directory, a symbolic link, big-endian, object dtype, a shape other than dump.json's, missing):
// the binary exits 1, the csv row carries the side, file and reason, the JSON counts it, stderr
// says so and the advisor names it. And output names: compares into one folder in the same second
// keep each other's files.
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "npy.h"
#include "pyjson.h"
#include "test_support.h"

namespace tprobe {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const std::vector<float> input_data{1, 2, 3, 4};
const std::vector<float> output_data{0.5f, 1, 1.5f, 2};
const char *const input_name = "Functional.linear.0.forward.input.0";
const char *const output_name = "Functional.linear.0.forward.output.0";

std::string tensor_path(const std::string &dump_dir, const std::string &name) {
  return dump_dir + "/dump_tensor_data/" + name + ".npy";
}

void write_npy(const std::string &path, const std::vector<float> &data, const std::vector<int64_t> &shape) {
  npy_write(path, dtype::float32, shape, std::as_bytes(std::span(data)));
}

// A one-entry tensor dump at `dir`: input and output float32 [4], as tprobe and msprobe write it.
void write_dump(const std::string &dir) {
  fs::create_directories(dir + "/dump_tensor_data");
  write_npy(tensor_path(dir, input_name), input_data, {4});
  write_npy(tensor_path(dir, output_name), output_data, {4});
  const auto leaf = [](const char *name) {
    return fmt::format(R"({{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": 4.0, "Min": 0.5,
      "Mean": 1.5, "Norm": 2.0, "requires_grad": false, "data_name": "{}.npy"}})",
                       name);
  };
  test::write_file(dir + "/dump.json",
                   fmt::format(R"({{"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": null,
 "data": {{"Functional.linear.0.forward": {{"input_args": [{}], "input_kwargs": {{}}, "output": [{}]}}}}}})",
                               leaf(input_name), leaf(output_name)));
}

// An .npy file with any header dict (numpy's layout: version 1.0, padded to 64 bytes).
void write_npy_with_header(const std::string &path, const std::string &dict, const std::string &data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string file = std::string("\x93NUMPY\x01\x00", 8);
  file.push_back(static_cast<char>(header.size() & 0xff));
  file.push_back(static_cast<char>(header.size() >> 8));
  test::write_file(path, file + header + data);
}

std::string big_endian_bytes(const std::vector<float> &values) {
  std::string out;
  for (const float v : values) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((bits >> shift) & 0xff));
  }
  return out;
}

test::process_result compare(const std::vector<std::string> &args) {
  std::vector<std::string> argv{test::bin("tprobe-compare")};
  argv.insert(argv.end(), args.begin(), args.end());
  return test::run_process(argv);
}

using test::files_in;
using test::find_file;

std::string joined(const std::vector<std::string> &v) {
  std::string s;
  for (const auto &x : v) s += x + " ";
  return s;
}

// The csv line of row `name`.
std::string csv_row(const std::string &csv, const std::string &name) {
  for (size_t at = 0; at < csv.size();) {
    const size_t end = csv.find('\n', at);
    const std::string line = csv.substr(at, end - at);
    if (line.starts_with(name + ",")) return line;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return {};
}

struct broken_case {
  const char *what;
  const char *side;                                  // "npu" or "bench": whose output file is broken
  std::function<void(const std::string &)> breakit;  // given the output tensor's path
  const char *reason;                                // expected in Err_message
  bool read = false;                                 // read but not comparable: msprobe's "Data is unreadable."
};

std::vector<broken_case> broken_cases() {
  return {
      {"garbage", "bench", [](const std::string &p) { test::write_file(p, "this is not a numpy file, just text\n"); },
       "not a valid .npy file: missing the \\x93NUMPY magic"},
      {"truncated", "bench",
       [](const std::string &p) {
         const std::string whole = test::read_file(p);
         test::write_file(p, whole.substr(0, whole.size() - 12));
       },
       "not a valid .npy file: truncated data: the header promises 16 bytes, the file holds 4"},
      {"directory", "bench",
       [](const std::string &p) {
         fs::remove(p);
         fs::create_directory(p);
       },
       "is not a regular file"},
      {"symlink", "bench",
       [](const std::string &p) {
         // The link's target holds exactly the data of the other side: following it would pass.
         const std::string target = p + ".real";
         fs::rename(p, target);
         fs::create_symlink(target, p);
       },
       "is a symbolic link; refusing to follow it"},
      {"big-endian", "bench",
       [](const std::string &p) {
         write_npy_with_header(p, "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }",
                               big_endian_bytes(output_data));
       },
       "dtype '>f4' cannot be compared (only little-endian numeric dtypes are read)", true},
      {"object dtype", "bench",
       [](const std::string &p) {
         write_npy_with_header(p, "{'descr': '|O', 'fortran_order': False, 'shape': (4,), }", std::string(32, '\0'));
       },
       "object arrays (descr '|O') are not supported"},
      {"shape mismatch", "bench", [](const std::string &p) { write_npy(p, output_data, {2, 2}); },
       "the file holds shape [2, 2], ", true},
      {"missing", "bench", [](const std::string &p) { fs::remove(p); }, "unable to open: No such file or directory"},
      {"missing NPU file", "npu", [](const std::string &p) { fs::remove(p); },
       "unable to open: No such file or directory"},
  };
}

TEST(CompareErrors, UnreadableTensorFileIsAnErrorRowAndExitsOne) {
  for (const auto &c : broken_cases()) {
    SCOPED_TRACE(c.what);
    test::temp_dir t;
    write_dump(t / "npu");
    write_dump(t / "bench");
    const std::string broken = tensor_path(t / c.side, output_name);
    c.breakit(broken);
    const auto r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "out"});
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("2 rows (0 failing, 0 unmatched, 1 not compared)"));
    EXPECT_THAT(r.err, HasSubstr(fmt::format("1 row could not be compared (tensor files not read); first: line 1, {}: ",
                                             output_name)));

    const std::string side = std::string(c.side) == "npu" ? "NPU" : "bench";
    const std::string message =
        c.read ? fmt::format("Data is unreadable. Cannot read {} tensor {}: {}", side, broken, c.reason)
                : fmt::format("Dump file: {} not found or read failed. Cannot read {} tensor: {}", broken, side, c.reason);
    const std::string csv = test::read_file(find_file(t / "out", "compare_result_", ".csv"));
    const std::string row = csv_row(csv, output_name);
    EXPECT_THAT(row, HasSubstr(",unsupported,unsupported,unsupported,unsupported,unsupported,unsupported,")) << row;
    EXPECT_THAT(row, HasSubstr(",None,")) << row;
    EXPECT_THAT(row, HasSubstr(message)) << row;  // (quoted when the reason holds a comma)
    EXPECT_THAT(csv_row(csv, input_name), HasSubstr(",Yes,,"));  // the readable row is compared as before

    const auto doc = pyjson_parse(test::read_file(find_file(t / "out", "compare_result_", ".json")), "json");
    EXPECT_EQ(doc.value("error_rows", -1), 1);
    EXPECT_EQ(doc["failing_rows"], 0);
    EXPECT_THAT(doc["rows"][1][24].get<std::string>(), HasSubstr(message));

    const std::string advisor = test::read_file(find_file(t / "out", "advisor_", ".txt"));
    EXPECT_THAT(advisor, HasSubstr(fmt::format("Line: 1\nSuspect Nodes: {}\nExpert Advice: 1 row could not be compared",
                                               output_name)));
    EXPECT_THAT(advisor, HasSubstr(message));
    EXPECT_THAT(advisor, Not(HasSubstr("meets the accuracy requirements")));
  }
}

// With a failing row too, the advisor keeps msprobe's suspect and advice and still names the error rows.
TEST(CompareErrors, FailingRowAndErrorRowAreBothReported) {
  test::temp_dir t;
  write_dump(t / "npu");
  write_dump(t / "bench");
  write_npy(tensor_path(t / "bench", input_name), {4, 3, 2, 1}, {4});
  fs::remove(tensor_path(t / "bench", output_name));
  const auto r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "out"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("2 rows (1 failing, 0 unmatched, 1 not compared)"));
  const std::string advisor = test::read_file(find_file(t / "out", "advisor_", ".txt"));
  EXPECT_THAT(advisor, HasSubstr(fmt::format("Line: 0\nSuspect Nodes: {}\nExpert Advice: 1. Analyze the model", input_name)));
  EXPECT_THAT(advisor, HasSubstr(fmt::format("\n1 row could not be compared (a tensor file could not be read): nothing "
                                             "is known about their data. The first is line 1, {}: Dump file: {}",
                                             output_name, tensor_path(t / "bench", output_name))));
}

// Result names of two compares run back to back, the second in the same second as the first.
// Retried with a fresh folder when the clock ticked between them (that pair proves nothing).
TEST(CompareErrors, TwoComparesInOneSecondKeepBothResults) {
  bool same_second = false;
  for (int attempt = 0; attempt < 5 && !same_second; ++attempt) {
    test::temp_dir t;
    write_dump(t / "npu");
    write_dump(t / "bench");
    for (int run = 0; run < 2; ++run) {
      const auto r = compare({t / "npu/dump.json", t / "bench/dump.json", "-o", t / "out"});
      ASSERT_EQ(r.status, 0) << r.err;
    }
    const auto files = files_in(t / "out");
    ASSERT_EQ(files.size(), 8u) << joined(files);
    const std::string first = find_file(t / "out", "compare_result_", ".xlsx");
    const std::string ts = fs::path(first).stem().string().substr(std::string("compare_result_").size(), 14);
    same_second = !find_file(t / "out", "compare_result_" + ts + "_1", ".xlsx").empty();
    if (!same_second) continue;
    std::vector<std::string> names;
    for (const std::string &stamp : {ts, ts + "_1"})
      for (const std::string &name : {"compare_result_" + stamp + ".xlsx", "compare_result_" + stamp + ".csv",
                                     "compare_result_" + stamp + ".json", "advisor_" + stamp + ".txt"})
        names.push_back(name);
    EXPECT_EQ(std::set<std::string>(files.begin(), files.end()), std::set<std::string>(names.begin(), names.end()));
    for (const std::string &name : names) {
      const std::string path = t / ("out/" + name);
      struct stat st {};
      ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
      EXPECT_GT(st.st_size, 0) << path;  // written, not just claimed
      EXPECT_EQ(st.st_mode & 0777, 0640u) << path;
    }
  }
  EXPECT_TRUE(same_second) << "five attempts all crossed a second boundary";
}

// Four compares started together into one folder: each claims its own names (O_EXCL), none is lost.
TEST(CompareErrors, ConcurrentComparesIntoOneFolderKeepAllResults) {
  test::temp_dir t;
  write_dump(t / "npu");
  write_dump(t / "bench");
  fs::create_directories(t / "out");
  std::vector<std::unique_ptr<test::child_process>> children;
  for (int k = 0; k < 4; ++k) {
    const std::string logs = t / fmt::format("log{}", k);
    fs::create_directories(logs);
    children.push_back(std::make_unique<test::child_process>(
        std::vector<std::string>{test::bin("tprobe-compare"), t / "npu/dump.json", t / "bench/dump.json", "-o",
                                 t / "out", "--threads", "1"},
        logs));
  }
  for (auto &c : children) EXPECT_EQ(c->wait(), 0) << c->err();
  const auto files = files_in(t / "out");
  EXPECT_EQ(files.size(), 16u) << joined(files);
  std::set<std::string> advisors;
  for (const auto &f : files)
    if (f.starts_with("advisor_")) advisors.insert(f);
  EXPECT_EQ(advisors.size(), 4u);
}

}  // namespace
}  // namespace tprobe
