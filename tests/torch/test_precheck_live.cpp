// tprobe-precheck-live in process (stages/stream/precheck_live/precheck_live.h), over the stage
// harness: the same records go to the writer (a dump on disk) and to the live stage, and the live
// CSV files equal tprobe-precheck's over that dump, byte for byte (one library, one entry
// builder); a wrong kernel is named as it is judged and sent downstream; rows keep the arrival
// order while a call waits for its backward; a full buffer drops whole calls and counts them.
#include <filesystem>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "precheck_live.h"
#include "precheck_files.h"
#include "precheck_run.h"
#include "stage_harness.h"
#include "test_support.h"
#include "writer/writer.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

record session_record(const std::string &dump_path) {
  record r(record_kind::session);
  r.header.run = "r0";
  r.header.meta = {{"task", "tensor"}, {"level", "L1"}, {"framework", "pytorch"}, {"dump_path", dump_path}};
  return r;
}

record entry_record(const std::string &entry) {
  record r(record_kind::entry);
  r.header.run = "r0";
  r.header.entry = entry;
  if (entry.ends_with(".forward")) r.header.meta = {{"is_recompute", false}};
  return r;
}

// A tensor as the capture sends it at task tensor: its data, to be saved (statistics left to the
// stages, as a pipeline without tprobe-stats would).
record tensor_record(const std::string &entry, const std::string &slot, const at::Tensor &t, bool requires_grad) {
  record r(record_kind::tensor);
  r.header.run = "r0";
  r.header.entry = entry;
  r.header.slot = slot;
  r.header.type = t.scalar_type() == at::kLong ? dtype::int64 : dtype::float32;
  r.header.shape = t.sizes().vec();
  r.header.requires_grad = requires_grad;
  r.header.flags = RECORD_FLAG_SAVE;
  const at::Tensor c = t.contiguous();
  const auto *p = static_cast<const std::byte *>(c.data_ptr());
  r.set_payload(std::vector<std::byte>(p, p + c.nbytes()));
  return r;
}

record value_record(const std::string &entry, const std::string &slot, json leaf) {
  record r(record_kind::value);
  r.header.run = "r0";
  r.header.entry = entry;
  r.header.slot = slot;
  r.header.meta = std::move(leaf);
  return r;
}

record step_end(int64_t step) {
  record r(record_kind::step_end);
  r.header.run = "r0";
  r.header.step = step;
  return r;
}

// One step of a small training: gelu (whose output requires grad: it waits for its backward),
// then add (no grad: handed at once), then gelu's backward. `wrong_gelu`: the device's gelu
// computes relu(x) * 1.5, as the Python test's overridden kernel does.
// `add_first`: add's call comes before gelu's.
std::vector<record> training_step(const std::string &dump_path, bool wrong_gelu, bool add_first = false) {
  at::manual_seed(0);
  const at::Tensor x = at::randn({4, 8});
  const at::Tensor y = wrong_gelu ? at::relu(x) * 1.5 : at::gelu(x);
  const at::Tensor a = at::randn({3, 5}), b = at::randn({3, 5});
  const at::Tensor gy = at::randn({4, 8});
  const at::Tensor xd = x.to(at::kDouble).requires_grad_();
  at::gelu(xd).backward(gy.to(at::kDouble));
  const at::Tensor gx = xd.grad().to(at::kFloat);
  std::vector<record> in;
  in.push_back(session_record(dump_path));
  const auto add = [&] {
    in.push_back(entry_record("Torch.add.0.forward"));
    in.push_back(tensor_record("Torch.add.0.forward", "input.0", a, false));
    in.push_back(tensor_record("Torch.add.0.forward", "input.1", b, false));
    in.push_back(value_record("Torch.add.0.forward", "kwargs.alpha", {{"type", "int"}, {"value", 1}}));
    in.push_back(tensor_record("Torch.add.0.forward", "output.0", a + b, false));
  };
  if (add_first) add();
  in.push_back(entry_record("Functional.gelu.0.forward"));
  in.push_back(tensor_record("Functional.gelu.0.forward", "input.0", x, true));
  in.push_back(value_record("Functional.gelu.0.forward", "kwargs.approximate", {{"type", "str"}, {"value", "none"}}));
  in.push_back(tensor_record("Functional.gelu.0.forward", "output.0", y, true));
  if (!add_first) add();
  in.push_back(entry_record("Functional.gelu.0.backward"));
  in.push_back(tensor_record("Functional.gelu.0.backward", "input.0", gy, false));
  in.push_back(tensor_record("Functional.gelu.0.backward", "output.0", gx, false));
  in.push_back(step_end(0));
  return in;
}

std::string only_file(const std::string &dir, const std::string &prefix) {
  const std::string f = test::find_file(dir, prefix, ".csv");
  EXPECT_FALSE(f.empty()) << "no " << prefix << "*.csv in " << dir;
  return f;
}

// The live rows, and tprobe-precheck's over the dump the writer wrote from the same records.
struct both {
  precheck_live_result live;
  std::string live_dir, offline_dir;
  std::vector<record> emitted;
};

both run_both(const test::temp_dir &dir, bool wrong_gelu, precheck_live_options o = {}) {
  const auto in = training_step(dir / "dump", wrong_gelu);
  stage_io_options writer_io;
  writer_io.decode = writer_decode_options;
  test::stage_harness writer(false, writer_io);
  (void)writer.run([](stage_io &io) { (void)writer_run(io, {}); }, in);
  both b;
  o.output_dir = dir / "live";
  test::stage_harness live;
  b.emitted = live.run([&](stage_io &io) { b.live = precheck_live_run(io, o); }, in);
  b.live_dir = dir / "live/step0/rank";
  precheck::precheck_offline_options off;
  off.dump = dir / "dump/step0/rank";
  off.output_dir = dir / "offline";
  (void)precheck::precheck_offline(off);
  b.offline_dir = dir / "offline";
  return b;
}

TEST(PrecheckLive, RowsEqualTheOfflineRowsOverTheSameRunsDump) {
  test::temp_dir dir;
  const both b = run_both(dir, false);
  EXPECT_EQ(b.live.apis, 2u);
  EXPECT_EQ(b.live.checked, 2u);
  EXPECT_EQ(b.live.fell_behind, 0u);
  EXPECT_EQ(b.live.counts.pass, 2u) << b.live.counts.first_not_pass.value_or("");
  EXPECT_FALSE(b.live.first_not_pass_line);
  EXPECT_TRUE(b.emitted.empty());
  ASSERT_EQ(b.live.folders.size(), 1u);
  for (const char *kind : {"accuracy_checking_result_", "accuracy_checking_details_"}) {
    const std::string live = test::read_file(only_file(b.live_dir, kind));
    EXPECT_EQ(live, test::read_file(only_file(b.offline_dir, kind))) << kind;
  }
  // In arrival order, gelu (which waited for its backward) before add (replayed at once), and
  // gelu's backward judged.
  const auto table = precheck::read_csv_table(only_file(b.live_dir, "accuracy_checking_result_"));
  ASSERT_EQ(table.rows.size(), 2u);
  EXPECT_EQ(table.rows[0], (std::vector<std::string>{"Functional.gelu.0", "pass", "pass"}));
  EXPECT_EQ(table.rows[1], (std::vector<std::string>{"Torch.add.0", "pass", " "}));
}

TEST(PrecheckLive, AWrongKernelIsNamedAndSentDownstream) {
  test::temp_dir dir;
  std::string named;
  precheck_live_options o;
  o.jobs = 2;
  o.on_first_not_pass = [&](int64_t, int32_t, const precheck::api_judgement &j) { named = j.result.api_name; };
  const both b = run_both(dir, true, o);
  EXPECT_EQ(named, "Functional.gelu.0");
  ASSERT_TRUE(b.live.first_not_pass_line);
  EXPECT_EQ(b.live.first_not_pass_line->rfind("step 0 rank -1 Functional.gelu.0 (Functional.gelu.0.forward.output.0", 0), 0u)
      << *b.live.first_not_pass_line;
  EXPECT_EQ(b.live.counts.error, 1u);
  EXPECT_TRUE(b.live.counts.failed());
  ASSERT_EQ(b.emitted.size(), 1u);
  const auto &m = b.emitted[0].header.meta;
  EXPECT_EQ(m["event"], "first_api_not_pass");
  EXPECT_EQ(m["api"], "Functional.gelu.0");
  EXPECT_EQ(m["line"], *b.live.first_not_pass_line);
  for (const char *kind : {"accuracy_checking_result_", "accuracy_checking_details_"})
    EXPECT_EQ(test::read_file(only_file(b.live_dir, kind)), test::read_file(only_file(b.offline_dir, kind))) << kind;
}

TEST(PrecheckLive, AFullBufferDropsWholeCallsAndCountsThem) {
  test::temp_dir dir;
  precheck_live_options o;
  o.output_dir = dir / "live";
  // add's three tensors take 3 * 60 bytes and fit; gelu's four take 4 * 128, more than the whole
  // buffer, so gelu is dropped whether or not add's replay has freed its tensors yet.
  o.max_buffer_bytes = 300;
  test::stage_harness live;
  precheck_live_result r;
  (void)live.run([&](stage_io &io) { r = precheck_live_run(io, o); }, training_step(dir / "dump", false, true));
  EXPECT_EQ(r.apis, 2u);
  EXPECT_EQ(r.fell_behind, 1u);
  EXPECT_EQ(r.checked, 1u);
  EXPECT_GT(r.peak_buffer_bytes, 0u);
  EXPECT_LE(r.peak_buffer_bytes, o.max_buffer_bytes);
  const auto table = precheck::read_csv_table(only_file(dir / "live/step0/rank", "accuracy_checking_result_"));
  ASSERT_EQ(table.rows.size(), 1u);
  EXPECT_EQ(table.rows[0][0], "Torch.add.0");
}

TEST(PrecheckLive, NothingHeldMeansEveryCallWithDataIsDropped) {
  test::temp_dir dir;
  precheck_live_options o;
  o.output_dir = dir / "live";
  o.max_buffer_bytes = 0;
  test::stage_harness live;
  precheck_live_result r;
  (void)live.run([&](stage_io &io) { r = precheck_live_run(io, o); }, training_step(dir / "dump", true));
  EXPECT_EQ(r.fell_behind, 2u);
  EXPECT_EQ(r.checked, 0u);
  EXPECT_FALSE(r.counts.failed());  // the wrong gelu was never checked
  EXPECT_EQ(r.peak_buffer_bytes, 0u);
}

}  // namespace
}  // namespace tprobe
