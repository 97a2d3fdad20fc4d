// tprobe-compare-live in-process: records of runs "a" and "b" go through a stage_io (read from a
// record file, offline = online), the stage's output is a record file read back here.
#include <cmath>
#include <cstring>
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compare_live/compare_live.h"
#include "compare/compare_metrics.h"
#include "pyjson.h"
#include "test_support.h"

using namespace tprobe;
using json = nlohmann::ordered_json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

record session(const std::string &run, const std::string &label) {
  record r(record_kind::session);
  r.header.run = run;
  r.header.meta = {{"task", "tensor"}, {"framework", "pytorch"}, {"label", label}};
  return r;
}

record tensor(const std::string &run, int64_t step, const std::string &entry, const std::string &slot,
              const std::vector<float> &v, bool payload = true) {
  record r(record_kind::tensor);
  r.header.run = run;
  r.header.step = step;
  r.header.entry = entry;
  r.header.slot = slot;
  r.header.type = dtype::float32;
  r.header.shape = {static_cast<int64_t>(v.size())};
  std::vector<std::byte> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  r.header.stats = tensor_stats_compute(bytes.data(), dtype::float32, v.size(), false, {});
  if (payload) r.set_payload(std::move(bytes));
  return r;
}

tensor_operand operand(const std::vector<float> &v) {
  return {dtype::float32, {static_cast<int64_t>(v.size())},
          std::span<const std::byte>(reinterpret_cast<const std::byte *>(v.data()), v.size() * 4)};
}

struct outcome {
  compare_live_result result;
  std::vector<record> sent;
};

outcome run_live(const test::temp_dir &dir, const std::vector<record> &in, compare_live_options o) {
  {
    record_file_writer w(dir / "in.records");
    for (const auto &r : in) w.write(r);
    w.write(record(record_kind::eos));
    w.close();
  }
  outcome out;
  {
    zmq::context_t ctx;
    stage_io_options io_options;
    io_options.input = dir / "in.records";
    io_options.outputs = {dir / "out.records"};
    stage_io io(ctx, io_options);
    out.result = compare_live_run(io, o);
  }
  record_file_reader reader(dir / "out.records");
  while (auto r = reader.read()) out.sent.push_back(std::move(*r));
  return out;
}

const std::vector<float> X1{1, 2, 3, 4}, X1b{1, 2, 3, 4.1f};  // Accuracy Yes (docs/msprobe-compat.md §4.6)
const std::vector<float> X2{1, 2}, X2b{1, -1};                 // Accuracy No
const std::vector<float> X3{0.5f, -0.5f, 2, 8};

// Run a sends entries in call order; run b sends the same entries in reverse, interleaved.
std::vector<record> two_runs() {
  std::vector<record> in;  // records are move-only: no initializer list
  in.push_back(session("ra", "a"));
  in.push_back(tensor("ra", 0, "Functional.linear.0.forward", "output.0", X1));
  in.push_back(session("rb", "b"));
  in.push_back(tensor("rb", 0, "Functional.relu.0.forward", "output.0", X3));
  in.push_back(tensor("ra", 0, "Functional.gelu.0.forward", "output.0", X2));
  in.push_back(tensor("rb", 0, "Functional.gelu.0.forward", "output.0", X2b));
  in.push_back(tensor("ra", 0, "Functional.relu.0.forward", "output.0", X3));
  in.push_back(tensor("rb", 0, "Functional.linear.0.forward", "output.0", X1b));
  return in;
}

json result_json(const compare_live_result &r) {
  for (const auto &f : r.files)
    if (f.ends_with(".json")) return pyjson_load_file(f);
  ADD_FAILURE() << "no json result file";
  return {};
}

size_t column(const json &doc, const std::string &name) {
  const auto &c = doc["columns"];
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i] == name) return i;
  ADD_FAILURE() << "no column " << name;
  return 0;
}

}  // namespace

TEST(CompareLive, aligns_out_of_order_and_reports_the_first_divergence) {
  test::temp_dir dir;
  compare_live_options o;
  o.output_dir = dir / "out";
  const auto out = run_live(dir, two_runs(), o);
  const auto &r = out.result;
  EXPECT_EQ(r.npu_label, "a");
  EXPECT_EQ(r.bench_label, "b");
  EXPECT_EQ(r.tensors, 6u);
  EXPECT_EQ(r.pairs, 3u);
  EXPECT_EQ(r.real_data_pairs, 3u);
  EXPECT_EQ(r.stats_only_rows, 0u);
  EXPECT_EQ(r.unmatched, 0u);
  EXPECT_EQ(r.rows, 3u);
  EXPECT_EQ(r.failing, 1u);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->entry, "Functional.gelu.0.forward");
  EXPECT_EQ(r.first_divergence->slot, "output.0");
  EXPECT_EQ(r.first_divergence->cosine, "-0.316227766017");
  EXPECT_EQ(r.first_divergence->max_abs_err, "3.0");
  EXPECT_EQ(r.first_divergence->accuracy, "No");

  // Downstream: the divergence record (sent when found) and a summary record.
  ASSERT_EQ(out.sent.size(), 3u);  // value, value, eos
  EXPECT_EQ(out.sent[0].header.kind, record_kind::value);
  EXPECT_EQ(out.sent[0].header.meta["event"], "first_divergence");
  EXPECT_EQ(out.sent[0].header.entry, "Functional.gelu.0.forward");
  EXPECT_EQ(out.sent[0].header.meta["cosine"], "-0.316227766017");
  EXPECT_EQ(out.sent[1].header.meta["event"], "compare_live_summary");
  EXPECT_EQ(out.sent[1].header.meta["failing"], 1);
  EXPECT_EQ(out.sent[2].header.kind, record_kind::eos);

  // Four result files; the table's metrics are compare_real_data's on the same tensors.
  ASSERT_EQ(r.files.size(), 4u);
  for (const auto &f : r.files) EXPECT_TRUE(fs::exists(f)) << f;
  EXPECT_THAT(r.files[0], HasSubstr("/compare_result_"));
  const json doc = result_json(r);
  ASSERT_EQ(doc["rows"].size(), 3u);
  const size_t name = column(doc, "NPU Name"), cos = column(doc, "Cosine"), mae = column(doc, "MaxAbsErr"),
               mre = column(doc, "MaxRelativeErr"), acc = column(doc, "Accuracy Reached or Not");
  const std::vector<std::pair<std::vector<float>, std::vector<float>>> pairs{{X1, X1b}, {X2, X2b}, {X3, X3}};
  const std::vector<std::string> names{"Functional.linear.0.forward.output.0", "Functional.gelu.0.forward.output.0",
                                       "Functional.relu.0.forward.output.0"};
  for (size_t i = 0; i < 3; ++i) {
    const json &row = doc["rows"][i];
    EXPECT_EQ(row[name], names[i]);  // NPU (run a) order
    const auto expect = compare_real_data(operand(pairs[i].first), operand(pairs[i].second));
    EXPECT_EQ(row[cos].get<double>(), expect.metrics[METRIC_COSINE].number()) << names[i];
    EXPECT_EQ(row[mae].get<double>(), expect.metrics[METRIC_MAX_ABS_ERR].number()) << names[i];
    EXPECT_EQ(row[mre].get<double>(), expect.metrics[METRIC_MAX_RELATIVE_ERR].number()) << names[i];
    EXPECT_EQ(row[acc], expect.accuracy) << names[i];
  }
  EXPECT_EQ(doc["failing_rows"], 1);
  EXPECT_THAT(test::read_file(r.files[3]), HasSubstr("Line: 1"));
}

TEST(CompareLive, npu_label_can_be_chosen) {
  test::temp_dir dir;
  compare_live_options o;
  o.npu = "b";
  const auto r = run_live(dir, two_runs(), o).result;
  EXPECT_EQ(r.npu_label, "b");
  EXPECT_EQ(r.bench_label, "a");
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->entry, "Functional.gelu.0.forward");
  EXPECT_TRUE(r.files.empty());  // no output dir: no files
  EXPECT_EQ(r.failing, 1u);
}

TEST(CompareLive, buffer_limit_compares_by_statistics_and_counts_it) {
  test::temp_dir dir;
  compare_live_options o;
  o.output_dir = dir / "out";
  o.max_buffer_bytes = 4;  // one float: every waiting payload (8 or 16 bytes) is dropped at once
  const auto out = run_live(dir, two_runs(), o);
  const auto &r = out.result;
  EXPECT_EQ(r.pairs, 3u);
  EXPECT_EQ(r.real_data_pairs, 0u);
  EXPECT_EQ(r.stats_only_rows, 3u);
  ASSERT_TRUE(r.first_divergence);  // gelu: Min 1 vs -1: |2| / 1 > 0.5, Warning
  EXPECT_TRUE(r.first_divergence->by_statistics);
  EXPECT_EQ(r.first_divergence->entry, "Functional.gelu.0.forward");
  const json doc = result_json(r);
  const size_t err = column(doc, "Err_message");
  for (const auto &row : doc["rows"]) EXPECT_THAT(row[err].get<std::string>(), HasSubstr("compared by statistics"));
  EXPECT_EQ(out.sent[1].header.meta["stats_only_rows"], 3);
}

TEST(CompareLive, entries_on_one_side_are_unmatched) {
  test::temp_dir dir;
  compare_live_options o;
  o.output_dir = dir / "out";
  auto in = two_runs();
  in.push_back(tensor("ra", 0, "Functional.only_a.0.forward", "output.0", X3));
  in.push_back(tensor("rb", 0, "Functional.only_b.0.forward", "output.0", X3));
  in.push_back(tensor("ra", 1, "Functional.linear.0.forward", "output.0", X1));  // step 1: a only
  const auto r = run_live(dir, in, o).result;
  EXPECT_EQ(r.unmatched, 3u);
  ASSERT_EQ(r.unmatched_names.size(), 3u);
  EXPECT_EQ(r.unmatched_names[0], "step 0 rank -1 Functional.only_a.0.forward.output.0 (only in a)");
  EXPECT_EQ(r.unmatched_names[1], "step 0 rank -1 Functional.only_b.0.forward.output.0 (only in b)");
  // Two steps: one file set per step; NPU-only rows are in the table, bench-only rows are not.
  EXPECT_EQ(r.rows, 5u);
  ASSERT_EQ(r.files.size(), 8u);
  EXPECT_THAT(r.files[0], HasSubstr("compare_result_step0_"));
  EXPECT_THAT(r.files[4], HasSubstr("compare_result_step1_"));
  const json doc = result_json(r);
  const size_t bench = column(doc, "Bench Name"), err = column(doc, "Err_message");
  ASSERT_EQ(doc["rows"].size(), 4u);
  EXPECT_EQ(doc["rows"][3][bench], "N/A");
  // msprobe's mode-all wording for an unmatched tensor row (docs/msprobe-compat.md §4.5).
  EXPECT_EQ(doc["rows"][3][err], "Requires_grad inconsistent. Bench api/module unmatched.");
  EXPECT_EQ(doc["unmatched_rows"], 1);
}

TEST(CompareLive, clean_runs_have_no_divergence) {
  test::temp_dir dir;
  compare_live_options o;
  std::vector<record> in;
  in.push_back(session("ra", "a"));
  in.push_back(session("rb", "b"));
  in.push_back(tensor("ra", 0, "Functional.linear.0.forward", "output.0", X3));
  in.push_back(tensor("rb", 0, "Functional.linear.0.forward", "output.0", X3, false));
  const auto r = run_live(dir, in, o).result;  // b has statistics only: compared by statistics
  EXPECT_EQ(r.pairs, 1u);
  EXPECT_EQ(r.real_data_pairs, 0u);
  EXPECT_FALSE(r.first_divergence);
  EXPECT_EQ(r.failing, 0u);
}
