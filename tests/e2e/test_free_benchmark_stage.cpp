// The real tprobe-free-benchmark binary over a real socket (ipc in a temp dir, no fixed port): a
// producer sends a session and three rows of two steps; the csv files appear under the session's
// dump_path as msprobe writes them, one stderr line per row and the summary line, exit 0. A
// dump_path msprobe refuses, or a row before its session: the fatal line, exit 100. `tprobe report`
// over the stage's dump: exit 1.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "endpoint.h"
#include "errors.h"
#include "free_benchmark_record.h"
#include "record.h"
#include "test_support.h"

namespace tprobe {
namespace {

free_benchmark_row row_of(const std::string &api, int64_t step, double ratio) {
  free_benchmark_row row;
  row.pert_mode = "add_noise";
  row.stage = "forward";
  row.step = step;
  row.api_name = api;
  row.ratio = ratio;
  row.dtype = "torch.float16";
  row.shape = {4, 2};
  return row;
}

// Runs the stage, sends `dump_path`'s session and `rows` (rank 0), returns {status, stderr}.
std::pair<int, std::string> run_stage(const test::temp_dir &dir, const std::string &dump_path,
                                      const std::vector<free_benchmark_row> &rows, bool with_session = true) {
  const std::string in = test::ipc_endpoint(dir, "fuzz.in");
  test::child_process stage({test::bin("tprobe-free-benchmark"), "--input", in, "--producers", "1"}, dir.path(), {},
                            true);
  stage.wait_ready();
  {
    zmq::context_t ctx;
    record_sender sender(ctx, in, "e2e-producer");
    record session(record_kind::session);
    session.header.run = "e2e";
    session.header.rank = 0;
    session.header.meta = {{"task", "free_benchmark"}, {"dump_path", dump_path}};
    uint64_t sent = 0;
    if (with_session) sender.send(session), ++sent;
    for (const auto &row : rows) {
      record_header h;
      h.run = "e2e";
      h.rank = 0;
      h.step = row.step;
      sender.send(free_benchmark_record_make(std::move(h), row));
      ++sent;
    }
    try {
      sender.finish(sent, 0);
    } catch (const system_error &) {
      // A stage that refused the stream is gone before it answers the end: its exit says why.
    }
  }
  const int status = stage.wait();
  return {status, stage.err()};
}

TEST(FreeBenchmarkStageE2e, WritesTheCsvFilesAndALinePerRow) {
  test::temp_dir dir;
  const auto [status, err] = run_stage(dir, dir / "dump",
                                       {row_of("Torch.matmul.0.forward", 1, 1.5), row_of("Torch.add.3.forward", 1, 0.25),
                                        row_of("Torch.matmul.0.forward", 2, 3.0)});
  EXPECT_EQ(status, 0) << err;
  const std::string header = "rank,pert_mode,stage,step,api_name,max_rel,dtype,shape,output_index\r\n";
  EXPECT_EQ(test::read_file(dir / "dump/step1/rank0/free_benchmark.csv"),
            header + "0,add_noise,forward,1,Torch.matmul.0.forward,0.5,torch.float16,\"torch.Size([4, 2])\",\r\n"
                     "0,add_noise,forward,1,Torch.add.3.forward,-0.75,torch.float16,\"torch.Size([4, 2])\",\r\n");
  EXPECT_EQ(test::read_file(dir / "dump/step2/rank0/free_benchmark.csv"),
            header + "0,add_noise,forward,2,Torch.matmul.0.forward,2.0,torch.float16,\"torch.Size([4, 2])\",\r\n");
  EXPECT_NE(err.find("tprobe-free-benchmark: step 1 rank 0 Torch.matmul.0.forward: max_rel 0.5 (torch.float16, "
                     "torch.Size([4, 2]))\ntprobe-free-benchmark: step 1 rank 0 Torch.add.3.forward: max_rel -0.75"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("tprobe-free-benchmark: 3 inconsistent API calls, 2 free_benchmark.csv files (2 new), 4 records, "
                     "1 producers, 0 truncated\n"),
            std::string::npos)
      << err;
}

TEST(FreeBenchmarkStageE2e, ADumpPathMsprobeRefusesIsAUsageError) {
  test::temp_dir dir;
  const auto [status, err] = run_stage(dir, dir / "a b", {});  // refused at the session record
  EXPECT_EQ(status, 100) << err;
  EXPECT_NE(err.find("tprobe-free-benchmark: fatal: dump_path \"" + dir / "a b" +
                     "\": contains characters outside [a-zA-Z0-9_./-]"),
            std::string::npos)
      << err;
  EXPECT_FALSE(std::filesystem::exists(dir / "a b"));
}

// The stage's dump through `tprobe report`: its rows fail the verdict (exit 1); a file with its
// header alone passes (exit 0); a file cut off in mid-row alone is a usage error naming it (100).
TEST(FreeBenchmarkStageE2e, TheReportOfTheStagesDumpFails) {
  test::temp_dir dir;
  const auto [status, err] = run_stage(dir, dir / "dump",
                                       {row_of("Torch.matmul.0.forward", 1, 1.5), row_of("Torch.add.3.forward", 2, 0.25)});
  ASSERT_EQ(status, 0) << err;
  auto r = test::run_process({test::bin("tprobe"), "report", dir / "dump", "-o", dir / "r.html"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("tprobe-report: free_benchmark: FAIL: 2 inconsistent API calls in 2 free_benchmark.csv files; "
                       "first step 1 rank 0 Torch.matmul.0.forward (add_noise, max_rel 0.5, torch.float16)\n"
                       "tprobe-report: verdict: FAIL; report " + dir / "r.html"),
            std::string::npos)
      << r.out;

  const std::string header = "rank,pert_mode,stage,step,api_name,max_rel,dtype,shape,output_index\r\n";
  std::filesystem::create_directories(dir / "clean/step0/rank0");
  test::write_file(dir / "clean/step0/rank0/free_benchmark.csv", header);
  r = test::run_process({test::bin("tprobe"), "report", dir / "clean", "-o", dir / "c.html"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tprobe-report: free_benchmark: PASS: 0 inconsistent API calls in 1 free_benchmark.csv file\n"),
            std::string::npos)
      << r.out;

  std::filesystem::create_directories(dir / "cut/step0/rank0");
  const std::string cut = dir / "cut/step0/rank0/free_benchmark.csv";
  test::write_file(cut, header + "0,add_noise,forward,0,Torch.add.0.forward,0.5,torch.flo");
  r = test::run_process({test::bin("tprobe"), "report", dir / "cut", "-o", dir / "x.html"});
  EXPECT_EQ(r.status, 100) << r.out << r.err;
  EXPECT_NE(r.err.find("(not read: " + cut + ": row 2: 7 cells, not 9 (a truncated or foreign file))"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "x.html"));
}

TEST(FreeBenchmarkStageE2e, ARowBeforeItsSessionIsAUsageError) {
  test::temp_dir dir;
  const auto [status, err] = run_stage(dir, dir / "dump", {row_of("Torch.matmul.0.forward", 0, 1.5)}, false);
  EXPECT_EQ(status, 100) << err;
  EXPECT_NE(err.find("tprobe-free-benchmark: fatal: "), std::string::npos) << err;
  EXPECT_NE(err.find("free_benchmark record before its session record"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(dir / "dump"));
}

}  // namespace
}  // namespace tprobe
