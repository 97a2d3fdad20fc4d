// record_fill_missing_stats (stages/common/record_leaf.h): the one statistics path of the stages
// (tprobe-stats, the writer, precheck-live). What it fills, what it leaves, --recompute, the CRC-32
// a record's flag asks for, a runner's parts, and a payload whose size is not the shape's.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "errors.h"
#include "record_leaf.h"
#include "record_test_support.h"
#include "tensor_stats.h"

namespace {

using namespace tprobe;
using record_test::tensor_record;

// A float32 tensor of `n` elements i * 0.5 - 3.
record float_record(size_t n) {
  record r = tensor_record({static_cast<int64_t>(n)});
  std::vector<std::byte> bytes(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(i) * 0.5f - 3.0f;
    std::memcpy(bytes.data() + 4 * i, &v, 4);
  }
  r.set_payload(std::move(bytes));
  return r;
}

tensor_stats core_stats(const record &r, stats_options o) {
  const auto bytes = r.payload_bytes();
  return tensor_stats_compute(bytes.data(), r.header.type, r.header.element_count(), r.header.shape.empty(), o);
}

// Runs the parts in reverse order, on this thread: the statistics must not depend on the order.
struct reverse_runner final : parallel_runner {
  size_t runs = 0;
  void run(size_t parts, void (*part)(void *, size_t), void *context) override {
    ++runs;
    for (size_t i = parts; i-- > 0;) part(context, i);
  }
};

}  // namespace

TEST(RecordFillStats, fills_missing_statistics_with_cores_computation) {
  record r = float_record(100);
  ASSERT_TRUE(record_fill_missing_stats(r, {}));
  ASSERT_TRUE(r.header.stats);
  EXPECT_EQ(*r.header.stats, core_stats(r, {}));
  EXPECT_FALSE(r.header.stats->crc32);
  EXPECT_EQ(r.header.stats->max, core_stats(r, {}).max);
}

TEST(RecordFillStats, leaves_complete_statistics_unless_recomputing) {
  record r = float_record(100);
  tensor_stats given = core_stats(r, {});
  given.nan_count = 99;  // not what the payload says: only a recompute replaces it
  r.header.stats = given;
  EXPECT_FALSE(record_fill_missing_stats(r, {}));
  EXPECT_EQ(r.header.stats->nan_count, 99u);
  EXPECT_TRUE(record_fill_missing_stats(r, {}, {.recompute = true}));
  EXPECT_EQ(*r.header.stats, core_stats(r, {}));
}

TEST(RecordFillStats, crc32_flag_makes_statistics_without_it_incomplete) {
  record r = float_record(100);
  r.header.flags |= RECORD_FLAG_CRC32;
  r.header.stats = core_stats(r, {});
  ASSERT_TRUE(record_fill_missing_stats(r, {}));
  stats_options with_crc;
  with_crc.crc32 = true;
  EXPECT_EQ(*r.header.stats, core_stats(r, with_crc));
  ASSERT_TRUE(r.header.stats->crc32);
  EXPECT_FALSE(record_fill_missing_stats(r, {}));  // complete now
}

TEST(RecordFillStats, session_options_reach_the_computation) {
  record r = tensor_record({3000}, dtype::bfloat16);
  stats_options high;
  high.high_precision = true;
  ASSERT_TRUE(record_fill_missing_stats(r, high));
  EXPECT_EQ(*r.header.stats, core_stats(r, high));
  record low = tensor_record({3000}, dtype::bfloat16);
  ASSERT_TRUE(record_fill_missing_stats(low, {}));
  EXPECT_EQ(*low.header.stats, core_stats(low, {}));
}

TEST(RecordFillStats, runner_reads_the_parts_and_gives_the_same_statistics) {
  const size_t n = 3 * stats_part_bytes / 4 + 17;  // more than one part of float32
  record alone = float_record(n), parted = float_record(n);
  reverse_runner runner;
  ASSERT_TRUE(record_fill_missing_stats(alone, {}));
  ASSERT_TRUE(record_fill_missing_stats(parted, {}, {.recompute = false, .runner = &runner}));
  EXPECT_GT(runner.runs, 0u);
  EXPECT_EQ(*alone.header.stats, *parted.header.stats);
}

TEST(RecordFillStats, no_payload_or_foreign_dtype_is_left_alone) {
  record r = float_record(10);
  r.drop_payload();
  EXPECT_FALSE(record_fill_missing_stats(r, {}, {.recompute = true}));
  EXPECT_FALSE(r.header.stats);
  record foreign = float_record(10);
  foreign.header.foreign_dtype = "torch.float8_e4m3fn";
  EXPECT_FALSE(record_fill_missing_stats(foreign, {}));
  EXPECT_FALSE(foreign.header.stats);
}

TEST(RecordFillStats, payload_of_the_wrong_size_is_a_framing_error) {
  record r = float_record(10);
  r.header.shape = {11};
  EXPECT_THROW(record_fill_missing_stats(r, {}), framing_error);
}
