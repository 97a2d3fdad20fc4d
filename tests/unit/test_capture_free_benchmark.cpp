// Task free_benchmark through the capture's C API (tprobe_capture.h): tprobe_fuzz_query answers
// as dump entries are gated (started, rank, step) and by the section's scope or list; a row given
// to tprobe_capture_fuzz_row travels as a free_benchmark record (transport/free_benchmark_record.h)
// with the session's rank (0 when not distributed), the config's pert_mode and the current step.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "free_benchmark_record.h"
#include "record.h"
#include "test_support.h"
#include "tprobe_capture.h"

using namespace tprobe;

namespace {

// A session on a record file with task free_benchmark; `section` is the "free_benchmark" object,
// `common` more top-level keys after a comma.
struct fuzz_session {
  test::temp_dir dir;
  std::string stream = dir / "capture.tpr";
  tprobe_session *s = nullptr;

  fuzz_session(const std::string &section, const std::string &common, int rank = -1, const char *task = "free_benchmark") {
    const std::string config = dir / "config.json";
    test::write_file(config, std::string(R"({"task": ")") + task + R"(", "level": "L1", "dump_path": ")" + (dir / "dump") +
                                 R"(", "free_benchmark": )" + section + (common.empty() ? "" : ", " + common) + "}");
    tprobe_open_options o = tprobe_open_options_default();
    o.endpoint = stream.c_str();
    o.rank = rank;
    EXPECT_EQ(tprobe_session_open(config.c_str(), &o, &s), TPROBE_OK) << tprobe_last_error();
  }
  ~fuzz_session() { tprobe_session_close(s); }
  fuzz_session(const fuzz_session &) = delete;
  fuzz_session &operator=(const fuzz_session &) = delete;

  int query(const char *api) { return tprobe_fuzz_query(s, api); }

  std::vector<free_benchmark_row> rows() {
    EXPECT_EQ(tprobe_session_close(s), TPROBE_OK) << tprobe_last_error();
    s = nullptr;
    std::vector<free_benchmark_row> out;
    record_file_reader reader(stream);
    while (auto r = reader.read())
      if (free_benchmark_record_is(*r)) out.push_back(free_benchmark_record_read(*r));
    return out;
  }
};

tprobe_fuzz_row fuzz_row(const char *api, int verdict, double ratio, const char *dtype, const std::vector<int64_t> &shape,
                         int64_t output_index) {
  tprobe_fuzz_row r{};
  r.api_name = api;
  r.stage = "forward";
  r.verdict = verdict;
  r.ratio = ratio;
  r.dtype = dtype;
  r.ndim = static_cast<int>(shape.size());
  r.shape = shape.data();
  r.output_index = output_index;
  return r;
}

}  // namespace

TEST(CaptureFreeBenchmark, query_follows_start_step_and_list_and_rows_arrive_filled_in) {
  fuzz_session f(R"({"list": ["add"], "pert_mode": "add_noise"})", R"("step": [1, 2])");
  // Not started yet.
  EXPECT_EQ(f.query("Torch.add.0.forward"), TPROBE_SKIPPED);
  ASSERT_EQ(tprobe_start(f.s), TPROBE_OK) << tprobe_last_error();
  EXPECT_EQ(f.query("Torch.add.0.forward"), TPROBE_SKIPPED);  // step 0 is not configured
  ASSERT_EQ(tprobe_step(f.s), TPROBE_OK) << tprobe_last_error();
  EXPECT_EQ(f.query("Torch.add.0.forward"), TPROBE_OK) << tprobe_last_error();
  EXPECT_EQ(f.query("Tensor.__add__.3.forward"), TPROBE_OK);  // list: a substring
  EXPECT_EQ(f.query("Torch.mul.0.forward"), TPROBE_SKIPPED);
  EXPECT_EQ(f.query(""), TPROBE_ERROR);

  const std::vector<int64_t> shape{2, 3}, scalar{};
  auto row = fuzz_row("Torch.add.0.forward", TPROBE_FUZZ_RATIO, 1.004049780885728493, "torch.float16", shape, -1);
  ASSERT_EQ(tprobe_capture_fuzz_row(f.s, &row), TPROBE_OK) << tprobe_last_error();
  auto flip = fuzz_row("Torch.add.1.forward", TPROBE_FUZZ_SYMBOL_FLIPPING, 0, "torch.float32", scalar, 1);
  ASSERT_EQ(tprobe_capture_fuzz_row(f.s, &flip), TPROBE_OK) << tprobe_last_error();
  auto other = fuzz_row("Torch.mul.0.forward", TPROBE_FUZZ_RATIO, 2.0, "torch.float32", shape, -1);
  EXPECT_EQ(tprobe_capture_fuzz_row(f.s, &other), TPROBE_SKIPPED);
  // Malformed rows are refused at the call.
  auto bad = row;
  bad.stage = "sideways";
  EXPECT_EQ(tprobe_capture_fuzz_row(f.s, &bad), TPROBE_ERROR);
  EXPECT_NE(std::string(tprobe_last_error()).find("stage \"sideways\""), std::string::npos) << tprobe_last_error();
  bad = row;
  bad.verdict = 7;
  EXPECT_EQ(tprobe_capture_fuzz_row(f.s, &bad), TPROBE_ERROR);
  bad = row;
  bad.shape = nullptr;
  EXPECT_EQ(tprobe_capture_fuzz_row(f.s, &bad), TPROBE_ERROR);
  EXPECT_EQ(tprobe_capture_fuzz_row(f.s, nullptr), TPROBE_ERROR);

  ASSERT_EQ(tprobe_step(f.s), TPROBE_OK);  // step 2
  auto step2 = fuzz_row("Functional.add.0.backward", TPROBE_FUZZ_NO_RATIO, 0, nullptr, scalar, 0);
  step2.stage = "backward";
  ASSERT_EQ(tprobe_capture_fuzz_row(f.s, &step2), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_stop(f.s), TPROBE_OK);
  EXPECT_EQ(tprobe_capture_fuzz_row(f.s, &row), TPROBE_SKIPPED);  // stopped

  const auto rows = f.rows();
  ASSERT_EQ(rows.size(), 3u);
  free_benchmark_row want;
  want.rank = 0;  // not distributed
  want.pert_mode = "add_noise";
  want.stage = "forward";
  want.step = 1;
  want.api_name = "Torch.add.0.forward";
  want.ratio = 1.004049780885728493;
  want.dtype = "torch.float16";
  want.shape = shape;
  EXPECT_EQ(rows[0], want);
  EXPECT_EQ(free_benchmark_csv_line(rows[0]),
            "0,add_noise,forward,1,Torch.add.0.forward,0.004049780885728493,torch.float16,\"torch.Size([2, 3])\",\r\n");
  EXPECT_EQ(rows[1].verdict, free_benchmark_row::kind::symbol_flipping);
  EXPECT_EQ(rows[1].output_index, 1);
  EXPECT_TRUE(rows[1].shape.empty());
  EXPECT_EQ(rows[2].step, 2);
  EXPECT_EQ(rows[2].stage, "backward");
  EXPECT_EQ(rows[2].verdict, free_benchmark_row::kind::none);
  EXPECT_EQ(rows[2].dtype, "");
  EXPECT_EQ(free_benchmark_csv_line(rows[2]), "0,add_noise,backward,2,Functional.add.0.backward,,,,0\r\n");
}

TEST(CaptureFreeBenchmark, scope_names_exact_calls_and_rank_is_the_sessions) {
  fuzz_session f(R"({"scope": ["Torch.add.0.forward", "Torch.mul.2.forward"]})", R"("rank": [3])", 3);
  ASSERT_EQ(tprobe_start(f.s), TPROBE_OK) << tprobe_last_error();
  EXPECT_EQ(f.query("Torch.add.0.forward"), TPROBE_OK) << tprobe_last_error();
  EXPECT_EQ(f.query("Torch.mul.2.forward"), TPROBE_OK);
  EXPECT_EQ(f.query("Torch.add.1.forward"), TPROBE_SKIPPED);
  EXPECT_EQ(f.query("Torch.add.0.backward"), TPROBE_SKIPPED);
  const std::vector<int64_t> shape{4};
  auto row = fuzz_row("Torch.mul.2.forward", TPROBE_FUZZ_RATIO, 1.5, "torch.bfloat16", shape, -1);
  ASSERT_EQ(tprobe_capture_fuzz_row(f.s, &row), TPROBE_OK) << tprobe_last_error();
  const auto rows = f.rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].rank, 3);
  EXPECT_EQ(rows[0].pert_mode, "improve_precision");
  EXPECT_EQ(rows[0].step, 0);
  EXPECT_FALSE(rows[0].output_index.has_value());
}

TEST(CaptureFreeBenchmark, another_rank_or_task_fuzzes_nothing) {
  {
    fuzz_session f("{}", R"("rank": [1])", 0);
    ASSERT_EQ(tprobe_start(f.s), TPROBE_OK) << tprobe_last_error();
    EXPECT_EQ(f.query("Torch.add.0.forward"), TPROBE_SKIPPED);
  }
  {
    fuzz_session f("{}", R"("statistics": {})", -1, "statistics");
    ASSERT_EQ(tprobe_start(f.s), TPROBE_OK) << tprobe_last_error();
    EXPECT_EQ(f.query("Torch.add.0.forward"), TPROBE_SKIPPED);
    const std::vector<int64_t> shape{1};
    auto row = fuzz_row("Torch.add.0.forward", TPROBE_FUZZ_RATIO, 1.5, "torch.float32", shape, -1);
    EXPECT_EQ(tprobe_capture_fuzz_row(f.s, &row), TPROBE_SKIPPED);
    EXPECT_TRUE(f.rows().empty());
  }
  {
    fuzz_session f("{}", "");
    ASSERT_EQ(tprobe_start(f.s), TPROBE_OK) << tprobe_last_error();
    EXPECT_EQ(f.query("Anything.0.forward"), TPROBE_OK) << tprobe_last_error();  // no scope, no list
  }
}

// Backward fuzzing chooses calls by their backward name (a list such as ["backward"] matches every
// one); their rows carry the forward name, as msprobe's do, and are accepted by the same choice.
TEST(CaptureFreeBenchmark, backward_rows_are_chosen_by_their_backward_name) {
  fuzz_session f(R"({"fuzz_stage": "backward", "list": ["backward"]})", "");
  ASSERT_EQ(tprobe_start(f.s), TPROBE_OK) << tprobe_last_error();
  EXPECT_EQ(f.query("Torch.matmul.0.backward"), TPROBE_OK) << tprobe_last_error();
  EXPECT_EQ(f.query("Torch.matmul.0.forward"), TPROBE_SKIPPED);
  const std::vector<int64_t> shape{2};
  auto row = fuzz_row("Torch.matmul.0.forward", TPROBE_FUZZ_RATIO, 1.25, "torch.float32", shape, 0);
  row.stage = "backward";
  ASSERT_EQ(tprobe_capture_fuzz_row(f.s, &row), TPROBE_OK) << tprobe_last_error();
  auto forward = fuzz_row("Torch.matmul.0.forward", TPROBE_FUZZ_RATIO, 1.25, "torch.float32", shape, -1);
  EXPECT_EQ(tprobe_capture_fuzz_row(f.s, &forward), TPROBE_SKIPPED);  // a forward row is not what was asked
  const auto rows = f.rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].api_name, "Torch.matmul.0.forward");
  EXPECT_EQ(rows[0].stage, "backward");
}
