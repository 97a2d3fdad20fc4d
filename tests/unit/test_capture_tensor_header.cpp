// The header every tensor capture of the C API fills alike (capture/session.h, tensor_pending):
// tprobe_capture_tensor, tprobe_capture_summary, tprobe_capture_uninitialized and
// tprobe_capture_facts put the same entry, slot (a quoted key as a path), shape, device and
// requires_grad into their records, and refuse a missing shape or a negative dimension with the
// same words, each naming its own argument, and in the same order of checks as before they shared it.
#include <cstdint>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include "capture_file_session.h"
#include "record.h"
#include "tprobe_capture.h"

using namespace tprobe;

namespace {

constexpr const char *entry = "Functional.linear.0.forward";
constexpr const char *quoted_slot = "output.'a.b'";  // a dict key with a dot: quoted, a path
const DLDataType float32{kDLFloat, 32, 1};

// The tensor records of the stream, once the session is closed.
std::vector<record> tensors(test::capture_file_session &f) {
  std::vector<record> out;
  for (record &r : f.records())
    if (r.header.kind == record_kind::tensor) out.push_back(std::move(r));
  return out;
}

tprobe_tensor_summary summary_of(const int64_t *shape, int ndim) {
  tprobe_tensor_summary s{};
  s.dtype = float32;
  s.ndim = ndim;
  s.shape = shape;
  s.device = "cuda:0";
  s.requires_grad = 1;
  s.max = s.min = s.mean = s.norm = {TPROBE_STAT_REAL, 0, 1.5};
  return s;
}

tprobe_tensor_facts facts_of(const int64_t *shape, int ndim) {
  tprobe_tensor_facts c{};
  c.dtype = "torch.float8_e4m3fn";
  c.ndim = ndim;
  c.shape = shape;
  c.device = "cuda:1";
  c.requires_grad = 1;
  return c;
}

std::string error_of(int rc) {
  EXPECT_EQ(rc, TPROBE_ERROR);
  return tprobe_last_error();
}

}  // namespace

TEST(CaptureTensorHeader, every_tensor_call_fills_entry_slot_shape_device_and_requires_grad_alike) {
  test::capture_file_session f;
  int64_t shape[2] = {2, 3};
  std::vector<float> data(6, 1.5f);
  DLTensor t{};
  t.data = data.data();
  t.device = {kDLCPU, 0};
  t.ndim = 2;
  t.dtype = float32;
  t.shape = shape;
  ASSERT_EQ(tprobe_capture_tensor(f.s, entry, quoted_slot, &t, 1), TPROBE_OK) << tprobe_last_error();
  const tprobe_tensor_summary summary = summary_of(shape, 2);
  ASSERT_EQ(tprobe_capture_summary(f.s, entry, "output.1", &summary), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_capture_uninitialized(f.s, entry, "output.2", &summary), TPROBE_OK) << tprobe_last_error();
  const tprobe_tensor_facts facts = facts_of(shape, 2);
  ASSERT_EQ(tprobe_capture_facts(f.s, entry, "output.3", &facts), TPROBE_OK) << tprobe_last_error();
  // A value of the same slot: the path its record carries is the one a tensor's must carry.
  ASSERT_EQ(tprobe_capture_value(f.s, entry, quoted_slot, "1"), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_stop(f.s), TPROBE_OK) << tprobe_last_error();

  std::vector<record> got, values;
  for (record &r : f.records()) {
    if (r.header.kind == record_kind::tensor) got.push_back(std::move(r));
    else if (r.header.kind == record_kind::value) values.push_back(std::move(r));
  }
  ASSERT_EQ(got.size(), 4u);
  ASSERT_EQ(values.size(), 1u);
  for (const record &r : got) {
    SCOPED_TRACE(r.header.slot);
    EXPECT_EQ(r.header.entry, entry);
    EXPECT_EQ(r.header.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_TRUE(r.header.requires_grad);
  }
  // The host tensor: its quoted key as a path, its statistics taken in place, on the cpu.
  EXPECT_EQ(got[0].header.slot, "output.a.b");
  ASSERT_TRUE(got[0].header.path);
  EXPECT_EQ(got[0].header.path, values[0].header.path);
  EXPECT_EQ(got[0].header.slot, values[0].header.slot);
  EXPECT_EQ(got[0].header.type, dtype::float32);
  EXPECT_EQ(got[0].header.device, "cpu");
  ASSERT_TRUE(got[0].header.stats);
  // The summary: the caller's numbers and device.
  EXPECT_EQ(got[1].header.slot, "output.1");
  EXPECT_FALSE(got[1].header.path);
  EXPECT_EQ(got[1].header.device, "cuda:0");
  ASSERT_TRUE(got[1].header.stats);
  EXPECT_EQ(got[1].header.stats->max, stat_value::of_real(1.5));
  EXPECT_EQ(got[1].header.flags & RECORD_FLAG_UNINITIALIZED, 0u);
  // The uninitialized tensor: its shape, no statistics, flagged.
  EXPECT_EQ(got[2].header.device, "cuda:0");
  EXPECT_FALSE(got[2].header.stats);
  EXPECT_NE(got[2].header.flags & RECORD_FLAG_UNINITIALIZED, 0u);
  // The facts: the framework's dtype name, no statistics.
  EXPECT_EQ(got[3].header.foreign_dtype, "torch.float8_e4m3fn");
  EXPECT_EQ(got[3].header.device, "cuda:1");
  EXPECT_FALSE(got[3].header.stats);
}

TEST(CaptureTensorHeader, a_missing_shape_or_a_negative_dimension_is_refused_in_the_same_words) {
  test::capture_file_session f;
  int64_t negative[2] = {2, -1};
  // A shape the caller did not give is named by the argument it was missing from.
  const tprobe_tensor_summary no_shape = summary_of(nullptr, 2);
  EXPECT_EQ(error_of(tprobe_capture_summary(f.s, entry, "output.0", &no_shape)),
            std::string(entry) + " output.0: summary shape is missing");
  EXPECT_EQ(error_of(tprobe_capture_uninitialized(f.s, entry, "output.0", &no_shape)),
            std::string(entry) + " output.0: shape is missing");
  const tprobe_tensor_facts no_facts_shape = facts_of(nullptr, 2);
  EXPECT_EQ(error_of(tprobe_capture_facts(f.s, entry, "output.0", &no_facts_shape)),
            std::string(entry) + " output.0: facts shape is missing");
  const tprobe_tensor_summary below_zero = summary_of(negative, -1);
  EXPECT_EQ(error_of(tprobe_capture_summary(f.s, entry, "output.0", &below_zero)),
            std::string(entry) + " output.0: summary shape is missing");

  // A negative dimension: the same words from every call.
  const std::string negative_words = std::string(entry) + " output.0: negative dimension in shape";
  const tprobe_tensor_summary summary = summary_of(negative, 2);
  EXPECT_EQ(error_of(tprobe_capture_summary(f.s, entry, "output.0", &summary)), negative_words);
  EXPECT_EQ(error_of(tprobe_capture_uninitialized(f.s, entry, "output.0", &summary)), negative_words);
  const tprobe_tensor_facts facts = facts_of(negative, 2);
  EXPECT_EQ(error_of(tprobe_capture_facts(f.s, entry, "output.0", &facts)), negative_words);
  float data[2] = {};
  DLTensor t{};
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = 2;
  t.dtype = float32;
  t.shape = negative;
  EXPECT_EQ(error_of(tprobe_capture_tensor(f.s, entry, "output.0", &t, 0)), negative_words);

  // The dtype is checked before the shape, as it was in each call before they shared the code.
  tprobe_tensor_summary both_wrong = summary_of(nullptr, 2);
  both_wrong.dtype = {kDLFloat, 8, 1};
  EXPECT_EQ(error_of(tprobe_capture_summary(f.s, entry, "output.0", &both_wrong)),
            "DLTensor dtype code 2 with 8 bits is not supported");

  // Refused calls leave nothing behind, and the session goes on.
  const tprobe_tensor_summary fine = summary_of(negative, 1);
  EXPECT_EQ(tprobe_capture_summary(f.s, entry, "output.0", &fine), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_stop(f.s), TPROBE_OK) << tprobe_last_error();
  const std::vector<record> got = tensors(f);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].header.shape, (std::vector<int64_t>{2}));
}
