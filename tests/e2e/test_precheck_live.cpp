// The real tprobe-precheck-live binary over real sockets: its input on tcp loopback with CurveZMQ
// (docs/network.md: the way a stage on another host is reached), a producer sending one step of
// two API calls, one of them a wrong gelu: the first API not pass on stdout, the CSV files under
// step0/rank0, exit 1; with no buffer every call is skipped and counted, exit 0. Skipped where
// LibTorch is not found (the stage is not built).
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "endpoint.h"
#include "record.h"
#include "test_support.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;

// A free loopback port, as the kernel hands one out (never a fixed one).
std::string free_tcp_endpoint() {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::rep);
  s.bind("tcp://127.0.0.1:*");
  return s.get(zmq::sockopt::last_endpoint);
}

record data(record_kind kind, const std::string &entry, const std::string &slot = "") {
  record r(kind);
  r.header.run = "e2e";
  r.header.rank = 0;
  r.header.entry = entry;
  r.header.slot = slot;
  return r;
}

record tensor(const std::string &entry, const std::string &slot, const std::vector<float> &v, bool requires_grad) {
  record r = data(record_kind::tensor, entry, slot);
  r.header.type = dtype::float32;
  r.header.shape = {static_cast<int64_t>(v.size())};
  r.header.requires_grad = requires_grad;
  r.header.flags = RECORD_FLAG_SAVE;
  const auto *p = reinterpret_cast<const std::byte *>(v.data());
  r.set_payload(std::vector<std::byte>(p, p + v.size() * sizeof(float)));
  return r;
}

// One step: Torch.add.0 (right) and Functional.gelu.0 whose device output is relu(x) * 1.5.
std::vector<record> one_step() {
  std::vector<float> x, wrong, a, b, sum;
  for (int i = 0; i < 64; ++i) {
    x.push_back(static_cast<float>(i - 32) / 8.0f);
    wrong.push_back(std::max(x.back(), 0.0f) * 1.5f);
    a.push_back(static_cast<float>(i) * 0.25f);
    b.push_back(1.0f - static_cast<float>(i) * 0.125f);
    sum.push_back(a.back() + b.back());
  }
  std::vector<record> in;
  record session = data(record_kind::session, "");
  session.header.meta = {{"task", "tensor"}, {"level", "L1"}, {"framework", "pytorch"}};
  in.push_back(std::move(session));
  in.push_back(data(record_kind::entry, "Torch.add.0.forward"));
  in.push_back(tensor("Torch.add.0.forward", "input.0", a, false));
  in.push_back(tensor("Torch.add.0.forward", "input.1", b, false));
  record alpha = data(record_kind::value, "Torch.add.0.forward", "kwargs.alpha");
  alpha.header.meta = {{"type", "int"}, {"value", 1}};
  in.push_back(std::move(alpha));
  in.push_back(tensor("Torch.add.0.forward", "output.0", sum, false));
  in.push_back(data(record_kind::entry, "Functional.gelu.0.forward"));
  in.push_back(tensor("Functional.gelu.0.forward", "input.0", x, false));
  record approximate = data(record_kind::value, "Functional.gelu.0.forward", "kwargs.approximate");
  approximate.header.meta = {{"type", "str"}, {"value", "none"}};
  in.push_back(std::move(approximate));
  in.push_back(tensor("Functional.gelu.0.forward", "output.0", wrong, false));
  record end = data(record_kind::step_end, "");
  end.header.meta = {{"barrier", 1}};
  in.push_back(std::move(end));
  return in;
}

class PrecheckLiveE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::bin("tprobe-precheck-live"))) GTEST_SKIP() << "built without LibTorch";
    keys_ = endpoint_curve_keypair();
    ::setenv("TPROBE_CURVE_SERVER_KEY", keys_.public_key.c_str(), 1);  // this process connects
  }
  void TearDown() override { ::unsetenv("TPROBE_CURVE_SERVER_KEY"); }

  // Runs the stage on a CURVE tcp input, sends one step, returns (exit status, stdout).
  std::pair<int, std::string> run(const test::temp_dir &dir, const std::vector<std::string> &options) {
    const std::string in = free_tcp_endpoint();
    std::vector<std::string> argv = {test::bin("tprobe-precheck-live"), "--input", in, "--producers", "1",
                                     "--output-dir", dir / "out"};
    argv.insert(argv.end(), options.begin(), options.end());
    test::child_process stage(argv, dir.path(), {"TPROBE_CURVE_SECRET_KEY=" + keys_.secret_key}, true);
    stage.wait_ready();
    {
      zmq::context_t ctx;
      record_sender sender(ctx, in, "e2e-producer");
      uint64_t sent = 0;
      for (auto &r : one_step()) {
        if (record_is_barrier(r.header)) EXPECT_TRUE(sender.sync(std::move(r)));  // the stage never holds a step
        else sender.send(r);
        ++sent;
      }
      sender.finish(sent, 0);
    }
    const int status = stage.wait();
    std::string out;
    for (const auto &f : test::files_in(dir.path()))
      if (f.ends_with(".err.out")) out += test::read_file(dir / f);
    EXPECT_NE(status, 111) << stage.err();
    return {status, out};
  }

  curve_keypair keys_;
};

TEST_F(PrecheckLiveE2e, NamesTheWrongKernelAndWritesTheFilesOverCurveTcp) {
  test::temp_dir dir;
  const auto [status, out] = run(dir, {"--jobs", "2"});
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("tprobe-precheck-live: first API not pass: step 0 rank 0 Functional.gelu.0 "
                     "(Functional.gelu.0.forward.output.0"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("tprobe-precheck-live: 2 APIs: 1 pass, 0 warning, 1 error, 0 SKIP; "), std::string::npos) << out;
  const std::string result = test::find_file(dir / "out/step0/rank0", "accuracy_checking_result_", ".csv");
  ASSERT_FALSE(result.empty());
  const std::string text = test::read_file(result);
  // Arrival order: add (pass), then gelu (error, no backward).
  EXPECT_NE(text.find("Torch.add.0,pass, \r\nFunctional.gelu.0,error, \r\n"), std::string::npos) << text;
  EXPECT_FALSE(test::find_file(dir / "out/step0/rank0", "accuracy_checking_details_", ".csv").empty());
}

TEST_F(PrecheckLiveE2e, WithoutBufferEveryCallIsSkippedAndSaid) {
  test::temp_dir dir;
  const auto [status, out] = run(dir, {"--max-buffer-mib", "0"});
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("tprobe-precheck-live: 0 APIs: 0 pass, 0 warning, 0 error, 0 SKIP\n"), std::string::npos) << out;
  EXPECT_NE(out.find("tprobe-precheck-live: 2 APIs not checked (fell behind"), std::string::npos) << out;
}

}  // namespace
}  // namespace tprobe
