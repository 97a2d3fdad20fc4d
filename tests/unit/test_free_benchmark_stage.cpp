// stages/stream/free_benchmark (tprobe-free-benchmark) in process, through the stage harness: the
// rows of free_benchmark records written to {dump_path}/step{N}/rank{R}/free_benchmark.csv as
// msprobe 8.3.3's DataWriter.write_data_to_csv writes them (docs/msprobe-compat.md §8.7: the header once,
// CRLF, no BOM, 0640, arrival order, an earlier run's file appended to), every record passed on,
// the line per row, and the refusals (a link, a file others may write or a folder where the csv
// goes).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "errors.h"
#include "free_benchmark/free_benchmark_stage.h"
#include "free_benchmark_record.h"
#include "stage_harness.h"
#include "test_support.h"

namespace tprobe {
namespace {

const std::string header = "rank,pert_mode,stage,step,api_name,max_rel,dtype,shape,output_index\r\n";

record session_record(const std::string &run, const std::string &dump_path) {
  record r(record_kind::session);
  r.header.run = run;
  r.header.meta = {{"task", "free_benchmark"}, {"level", "L1"}, {"framework", "pytorch"}, {"dump_path", dump_path}};
  return r;
}

free_benchmark_row make_row(const std::string &api, int64_t step, double ratio, const std::string &dtype,
                            std::vector<int64_t> shape, std::optional<int64_t> index = std::nullopt,
                            free_benchmark_row::kind verdict = free_benchmark_row::kind::ratio) {
  free_benchmark_row row;
  row.rank = 0;
  row.pert_mode = "improve_precision";
  row.stage = "forward";
  row.step = step;
  row.api_name = api;
  row.verdict = verdict;
  row.ratio = ratio;
  row.dtype = dtype;
  row.shape = std::move(shape);
  row.output_index = index;
  return row;
}

record row_record(const std::string &run, int32_t rank, const free_benchmark_row &row) {
  record_header h;
  h.run = run;
  h.rank = rank;
  h.step = row.step;
  return free_benchmark_record_make(std::move(h), row);
}

template <class... R>
std::vector<record> list_of(R &&...rs) {
  std::vector<record> v;
  (v.push_back(std::move(rs)), ...);
  return v;
}

mode_t mode_of(const std::string &path) {
  struct stat st{};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// msprobe's rows of the doc figure and of V-3 (docs/msprobe-compat.md §8.8), in two steps and two ranks.
TEST(FreeBenchmarkStage, WritesMsprobesCsvPerStepAndRankAndPassesEveryRecordOn) {
  test::temp_dir dir;
  const std::string dump = dir / "dump";
  test::stage_harness h;
  auto matmul = make_row("Torch.matmul.40.forward", 2, 1.022563696, "torch.float16", {4096, 4, 192});
  auto flip = make_row("Torch.mul.1.forward", 2, 1.0, "torch.float16", {3}, std::nullopt,
                       free_benchmark_row::kind::symbol_flipping);
  auto softmax = make_row("Functional.softmax.0.forward", 2, 1.00024998475230142425, "torch.float32", {2, 2}, 1);
  softmax.pert_mode = "bit_noise";
  auto rank1 = make_row("Torch.add.0.forward", 3, 1.5, "torch.bfloat16", {2});
  rank1.rank = 1;
  record other(record_kind::tensor);  // not a row: passed on, not written
  other.header.run = "r";
  other.header.entry = "Torch.add.0.forward";
  other.header.slot = "output.0";
  other.header.type = dtype::uint8;
  other.header.shape = {0};
  free_benchmark_stage_result res;
  const std::string log = test::capture_file_output([&](std::FILE *f) {
    const auto out = h.run(
        [&](stage_io &io) {
          free_benchmark_stage_options o;
          o.log = f;
          res = free_benchmark_stage_run(io, o);
        },
        list_of(session_record("r", dump), row_record("r", 0, matmul), std::move(other), row_record("r", 0, flip),
                row_record("r", 0, softmax), row_record("r", 1, rank1)));
    ASSERT_EQ(out.size(), 6u);  // every record, in order
    EXPECT_EQ(out[0].header.kind, record_kind::session);
    EXPECT_EQ(free_benchmark_record_read(out[1]), matmul);
    EXPECT_FALSE(free_benchmark_record_is(out[2]));
    EXPECT_EQ(free_benchmark_record_read(out[5]), rank1);
  });
  EXPECT_EQ(res.records, 6u);
  EXPECT_EQ(res.rows, 4u);
  EXPECT_EQ(res.files, 2u);
  EXPECT_EQ(res.created, 2u);
  const std::string step2 = dump + "/step2/rank0/free_benchmark.csv", step3 = dump + "/step3/rank1/free_benchmark.csv";
  EXPECT_EQ(res.csv_paths, (std::vector<std::string>{step2, step3}));
  EXPECT_EQ(test::read_file(step2),
            header + "0,improve_precision,forward,2,Torch.matmul.40.forward," +
                free_benchmark_max_rel_text(matmul) +
                ",torch.float16,\"torch.Size([4096, 4, 192])\",\r\n"
                "0,improve_precision,forward,2,Torch.mul.1.forward,symbol_flipping,torch.float16,torch.Size([3]),\r\n"
                "0,bit_noise,forward,2,Functional.softmax.0.forward," +
                free_benchmark_max_rel_text(softmax) + ",torch.float32,\"torch.Size([2, 2])\",1\r\n");
  EXPECT_EQ(test::read_file(step3), header + "1,improve_precision,forward,3,Torch.add.0.forward,0.5,torch.bfloat16,"
                                             "torch.Size([2]),\r\n");
  EXPECT_EQ(mode_of(step2), 0640u);
  EXPECT_EQ(mode_of(dump + "/step2/rank0"), 0750u);
  // One line per row, as it arrived.
  EXPECT_EQ(log, "tprobe-free-benchmark: step 2 rank 0 Torch.matmul.40.forward: max_rel " +
                     free_benchmark_max_rel_text(matmul) + " (torch.float16, torch.Size([4096, 4, 192]))\n"
                     "tprobe-free-benchmark: step 2 rank 0 Torch.mul.1.forward: max_rel symbol_flipping "
                     "(torch.float16, torch.Size([3]))\n"
                     "tprobe-free-benchmark: step 2 rank 0 Functional.softmax.0.forward: max_rel " +
                     free_benchmark_max_rel_text(softmax) + " (torch.float32, torch.Size([2, 2]), output 1)\n"
                     "tprobe-free-benchmark: step 3 rank 1 Torch.add.0.forward: max_rel 0.5 "
                     "(torch.bfloat16, torch.Size([2]))\n");
}

TEST(FreeBenchmarkStage, TheLineOfAToCpuRowAndTheFolderOfAProducerNotDistributed) {
  test::temp_dir dir;
  test::stage_harness h(false);
  auto cpu = make_row("Torch.matmul.0.forward", 0, 1.0, "torch.float32", {}, std::nullopt,
                      free_benchmark_row::kind::none);
  cpu.pert_mode = "to_cpu";
  EXPECT_EQ(free_benchmark_stage_line(cpu), "tprobe-free-benchmark: step 0 rank 0 Torch.matmul.0.forward: "
                                            "inconsistent with the CPU (to_cpu: no max_rel) (torch.float32, torch.Size([]))");
  h.run(
      [&](stage_io &io) {
        free_benchmark_stage_options o;
        o.dump_path = dir / "opt";  // the option wins over the session's
        free_benchmark_stage_run(io, o);
      },
      list_of(session_record("r", dir / "session"), row_record("r", -1, cpu)));
  // msprobe's folder "rank" when not distributed; the row's rank column says 0; to_cpu: no max_rel.
  EXPECT_EQ(test::read_file(dir / "opt/step0/rank/free_benchmark.csv"),
            header + "0,to_cpu,forward,0,Torch.matmul.0.forward,,torch.float32,torch.Size([]),\r\n");
  EXPECT_FALSE(std::filesystem::exists(dir / "session"));
}

// msprobe's write_data_to_csv: "a+" on an existing file, no second header, its mode kept.
TEST(FreeBenchmarkStage, AppendsToAnEarlierRunsFileWithoutASecondHeader) {
  test::temp_dir dir;
  const std::string csv = dir / "dump/step1/rank0/free_benchmark.csv";
  std::filesystem::create_directories(dir / "dump/step1/rank0");
  const std::string earlier = header + "0,add_noise,forward,1,Torch.add.0.forward,0.25,torch.float32,torch.Size([2]),\r\n";
  test::write_file(csv, earlier);
  ASSERT_EQ(::chmod(csv.c_str(), 0600), 0);
  auto row = make_row("Torch.sub.0.forward", 1, 0.5, "torch.float32", {2});
  test::stage_harness h(false);
  free_benchmark_stage_result res;
  h.run([&](stage_io &io) { res = free_benchmark_stage_run(io, {}); },
        list_of(session_record("r", dir / "dump"), row_record("r", 0, row)));
  EXPECT_EQ(res.files, 1u);
  EXPECT_EQ(res.created, 0u);
  EXPECT_EQ(test::read_file(csv),
            earlier + "0,improve_precision,forward,1,Torch.sub.0.forward,-0.5,torch.float32,torch.Size([2]),\r\n");
  EXPECT_EQ(mode_of(csv), 0600u);
  // An existing empty file gets the header (a csv without one names no column).
  const std::string empty = dir / "empty.csv";
  test::write_file(empty, "");
  EXPECT_FALSE(free_benchmark_csv_append(empty, "x\r\n"));
  EXPECT_EQ(test::read_file(empty), header + "x\r\n");
}

// A row before its session and a dump_path msprobe refuses end the stage: the binary's tests (e2e),
// as the harness would wait out its send deadline.
TEST(FreeBenchmarkStage, RefusesALinkAFileOthersMayWriteAndAFolder) {
  test::temp_dir dir;
  test::write_file(dir / "target.csv", "");
  std::filesystem::create_symlink(dir / "target.csv", dir / "link.csv");
  try {
    (void)free_benchmark_csv_append(dir / "link.csv", "x\r\n");
    ADD_FAILURE() << "a link was followed";
  } catch (const usage_error &e) {
    EXPECT_EQ(std::string(e.what()), dir / "link.csv" + ": is a symbolic link; refusing to follow it");
  }
  EXPECT_EQ(test::read_file(dir / "target.csv"), "");
  test::write_file(dir / "open.csv", header);
  ASSERT_EQ(::chmod((dir / "open.csv").c_str(), 0666), 0);
  EXPECT_THROW((void)free_benchmark_csv_append(dir / "open.csv", "x\r\n"), usage_error);
  std::filesystem::create_directory(dir / "folder.csv");
  EXPECT_THROW((void)free_benchmark_csv_append(dir / "folder.csv", "x\r\n"), usage_error);
}

}  // namespace
}  // namespace tprobe
