// Batches (transport/record_batch.cpp, record.h section 4): the wire ladder again for batch
// frames, the builder and its buffers, what may join a batch, and a batch glanced at without
// decoding it (record_batch_glance), held to what the decoder sees.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <msgpack.hpp>

#include "errors.h"
#include "pyjson.h"
#include "record.h"
#include "record_test_support.h"
#include "test_support.h"

using namespace tprobe;
using namespace record_test;

// ---- batches (record.h section 4): the same ladder ----


TEST(RecordBatch, empty_batch_holds_no_records) {
  record_batch_builder b;
  EXPECT_TRUE(b.empty());
  auto frame = b.take();
  EXPECT_EQ(frame.size(), 4u);  // the prefix alone
  EXPECT_TRUE(record_frame_is_batch(frame));
  EXPECT_TRUE(record_batch_decode(frame).empty());
}

TEST(RecordBatch, small_records_keep_every_field_and_their_order) {
  record value(record_kind::value);
  value.header.entry = "Functional.add.0.forward";
  value.header.slot = "input.1";
  value.header.seq = 2;
  value.header.meta = {{"type", "int"}, {"value", 1}};
  record empty = tensor_record({0});  // a payload of 0 bytes is still a payload
  empty.header.seq = 3;
  record entry(record_kind::entry);
  entry.header.entry = "Functional.add.0.forward";
  entry.header.seq = 4;
  std::vector<record> records;
  records.push_back(tensor_record({2, 3}));
  records.push_back(std::move(value));
  records.push_back(std::move(empty));
  records.push_back(std::move(entry));
  records.push_back(tensor_record({5}, dtype::int64));
  auto frame = batch_of_all(records);
  EXPECT_FALSE(record_frame_is_batch(record_header_encode(records[0].header)));  // a single record is not
  auto back = record_batch_decode(frame);
  ASSERT_EQ(back.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) expect_same(records[i], back[i]);
  EXPECT_TRUE(back[2].has_payload());
  EXPECT_EQ(back[2].payload_bytes().size(), 0u);
}

// A freed batch's buffer comes back for a later batch (record_batch.cpp, batch_buffer_pool): memory
// already mapped, instead of an arena top glibc gives back and faults in again. Reused with no
// trace of the batch it held.
TEST(RecordBatch, a_freed_batch_buffer_is_reused_and_holds_only_the_new_batch) {
  record_batch_builder b;
  std::vector<record> first;
  first.push_back(tensor_record({64}));
  first.push_back(tensor_record({3}, dtype::int64));
  for (const auto &r : first) b.append(record_encode(r));
  const void *first_memory = nullptr;
  {
    auto frame = b.take();
    first_memory = frame.data();
    ASSERT_EQ(record_batch_decode(frame).size(), 2u);
  }  // freed: its buffer goes back to the pool
  // Without the pool, malloc would hand the freed buffer to the next block this size: this one.
  std::vector<std::byte> squatter;
  squatter.reserve(RECORD_BATCH_BYTES + RECORD_BATCH_RECORD_MAX);
  EXPECT_NE(static_cast<const void *>(squatter.data()), first_memory);
  std::vector<record> second;
  second.push_back(tensor_record({5}));
  b.append(record_encode(second[0]));
  auto held = b.take();  // the builder's buffer, taken before the first batch was freed
  b.append(record_encode(second[0]));
  auto frame = b.take();  // the builder started over on the first batch's buffer
  EXPECT_EQ(frame.data(), first_memory);
  auto back = record_batch_decode(frame);
  ASSERT_EQ(back.size(), 1u);
  expect_same(second[0], back[0]);
  ASSERT_EQ(record_batch_decode(held).size(), 1u);
}

TEST(RecordBatch, large_batch_round_trips) {
  std::vector<record> records;
  size_t bytes = 0;
  for (uint64_t i = 0; bytes < 4 * RECORD_BATCH_BYTES; ++i) {
    records.push_back(tensor_record({static_cast<int64_t>(1 + i % 700)}));
    records.back().header.seq = i + 1;
    bytes += records.back().header.length;
  }
  auto back = record_batch_decode(batch_of_all(records));
  ASSERT_EQ(back.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) expect_same(records[i], back[i]);
}

TEST(RecordBatch, lz4_payload_in_a_batch_decodes) {
  record r = tensor_record({4096});
  std::vector<std::byte> zeros(r.header.length, std::byte{0});
  auto packed = record_payload_lz4(zeros);
  ASSERT_TRUE(packed.has_value());
  r.header.codec = record_codec::lz4;
  r.set_payload_frame(std::move(*packed));
  r.header.length = zeros.size();
  auto back = record_batch_decode(batch_of(tensor_record({3}), std::move(r)));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].header.codec, record_codec::lz4);
  auto b = back[1].payload_bytes();
  ASSERT_EQ(b.size(), zeros.size());
  EXPECT_EQ(std::memcmp(b.data(), zeros.data(), b.size()), 0);
}

TEST(RecordBatch, truncated_batch_is_rejected_at_every_cut) {
  const auto bytes = bytes_of(batch_of(tensor_record({4}), tensor_record({3})));
  const size_t first_end = 4 + 4 + header_bytes(tensor_record({4}).header).size() + 16;
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    if (cut == 4 || cut == first_end) continue;  // a whole batch of 0 and of 1 record
    std::vector<std::byte> part(bytes.begin(), bytes.begin() + static_cast<long>(cut));
    EXPECT_THROW(record_batch_decode(message_of(part)), framing_error) << "cut at " << cut;
  }
  std::vector<std::byte> one(bytes.begin(), bytes.begin() + static_cast<long>(first_end));
  EXPECT_EQ(record_batch_decode(message_of(one)).size(), 1u);
}

TEST(RecordBatch, wrong_major_version_is_rejected_naming_it) {
  auto bytes = bytes_of(batch_of(tensor_record({2})));
  bytes[2] = std::byte{RECORD_VERSION_MAJOR + 1};
  try {
    record_batch_decode(message_of(bytes));
    FAIL() << "accepted";
  } catch (const framing_error &e) {
    EXPECT_NE(std::string(e.what()).find("major version 2"), std::string::npos) << e.what();
  }
  bytes = bytes_of(batch_of(tensor_record({2})));
  bytes[3] = std::byte{RECORD_VERSION_MINOR + 5};  // a newer minor of the same major is read
  EXPECT_EQ(record_batch_decode(message_of(bytes)).size(), 1u);
}

TEST(RecordBatch, a_record_appended_as_it_is_encoded_is_the_bytes_of_its_frames) {
  record value(record_kind::value);
  value.header.entry = "Torch.add.0.forward";
  value.header.slot = "kwargs.alpha";
  value.header.meta = record_meta_text(R"({"type":"int","value":1})");
  record_batch_builder direct, framed;
  for (const record *r : {&value, &value}) {
    ASSERT_TRUE(direct.append(*r));
    framed.append(record_encode(*r));
  }
  record small = tensor_record({16});
  ASSERT_TRUE(direct.append(small));
  framed.append(record_encode(small));
  EXPECT_EQ(direct.records(), 3u);
  EXPECT_EQ(bytes_of(direct.take()), bytes_of(framed.take()));
  // Too large for a batch (a payload, or a header, past RECORD_BATCH_RECORD_MAX): refused, and
  // the batch stays as it was.
  ASSERT_TRUE(direct.append(small));
  const size_t before = direct.bytes();
  EXPECT_FALSE(direct.append(tensor_record({4096})));
  record wordy(record_kind::value);
  wordy.header.meta = {{"text", std::string(RECORD_BATCH_RECORD_MAX, 'x')}};
  EXPECT_FALSE(direct.append(wordy));
  EXPECT_EQ(direct.bytes(), before);
  EXPECT_EQ(direct.records(), 1u);
  const auto decoded = record_batch_decode(direct.take());
  ASSERT_EQ(decoded.size(), 1u);
  expect_same(decoded[0], small);
  EXPECT_THROW((void)direct.append(record(record_kind::eos)), std::logic_error);
}

TEST(RecordBatch, decoding_into_a_vector_appends_or_leaves_it_as_it_was) {
  std::vector<record> out;
  out.push_back(tensor_record({3}));
  record_batch_decode(batch_of(tensor_record({4}), record(record_kind::flush)), out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].header.shape, (std::vector<int64_t>{3}));
  expect_same(out[1], tensor_record({4}));
  EXPECT_EQ(out[2].header.kind, record_kind::flush);
  // A batch whose second record is cut short: the first is not kept either.
  auto bytes = bytes_of(batch_of(tensor_record({4}), tensor_record({5})));
  bytes.resize(bytes.size() - 3);
  EXPECT_THROW(record_batch_decode(message_of(bytes), out), framing_error);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].header.kind, record_kind::flush);
}

// A stage decodes every batch into the records of the batch before (stage_io::next): a record
// decoded where a longer, fuller one was is the record a new decode makes.
TEST(RecordBatch, decoding_into_used_records_leaves_nothing_of_them) {
  auto full = [] {
    record r = tensor_record({2, 3});
    r.header.meta = {{"stack_id", 7}, {"parent", "Module.fc.Linear.forward.0"}};
    tensor_stats st;
    st.max = stat_value::of_real(3.0);
    r.header.stats = st;
    r.header.device = "cuda:0";
    return r;
  };
  auto value = [] {
    record r(record_kind::value);
    r.header.entry = "Functional.add.0.forward";
    r.header.slot = "input.1";
    r.header.meta = {{"type", "int"}, {"value", 1}};
    return r;
  };
  auto small = [] {
    record r(record_kind::entry);
    r.header.entry = "Torch.add.0.forward";
    return r;
  };
  std::vector<record> out;
  size_t used = 0;
  record_batch_decode(batch_of(full(), full(), full()), out, used);
  ASSERT_EQ(used, 3u);
  used = 0;  // the stage is done with them
  record_batch_decode(batch_of(small(), value()), out, used);
  ASSERT_EQ(used, 2u);
  ASSERT_EQ(out.size(), 3u);  // the third stays, a spare
  expect_same(out[0], small());
  expect_same(out[1], value());
  EXPECT_FALSE(out[0].has_payload());
  EXPECT_FALSE(out[0].header.stats.has_value());
  EXPECT_EQ(out[0].header.device, "cpu");
  EXPECT_EQ(header_bytes(out[0].header), header_bytes(small().header));
  EXPECT_EQ(header_bytes(out[1].header), header_bytes(value().header));
  // A rejected batch leaves `used` as it was.
  auto bytes = bytes_of(batch_of(tensor_record({4}), tensor_record({5})));
  bytes.resize(bytes.size() - 3);
  EXPECT_THROW(record_batch_decode(message_of(bytes), out, used), framing_error);
  EXPECT_EQ(used, 2u);
  expect_same(out[1], value());
}

TEST(RecordBatch, corrupt_batch_is_rejected) {
  const auto good = bytes_of(batch_of(tensor_record({2}), tensor_record({2})));
  {  // a header length past the end
    auto bytes = good;
    const uint32_t huge = 0xfffffff0u;
    std::memcpy(bytes.data() + 4, &huge, 4);
    EXPECT_THROW(record_batch_decode(message_of(bytes)), framing_error);
  }
  {  // the header's bytes are not a header
    auto bytes = good;
    bytes[8] = std::byte{'X'};
    EXPECT_THROW(record_batch_decode(message_of(bytes)), framing_error);
  }
  {  // trailing bytes that are no record
    auto bytes = good;
    bytes.push_back(std::byte{1});
    EXPECT_THROW(record_batch_decode(message_of(bytes)), framing_error);
  }
  {  // not a batch at all
    auto bytes = good;
    bytes[1] = std::byte{'Q'};
    EXPECT_THROW(record_batch_decode(message_of(bytes)), framing_error);
  }
  // Bytes mangled anywhere: an error or records, never a crash (the fuzzer goes further).
  for (size_t i = 0; i < good.size(); i += 3) {
    auto bytes = good;
    bytes[i] = static_cast<std::byte>(static_cast<unsigned>(bytes[i]) ^ 0x5a);
    try {
      (void)record_batch_decode(message_of(bytes));
    } catch (const framing_error &) {
    }
  }
}

TEST(RecordBatch, control_barriers_and_references_travel_alone) {
  for (auto kind : {record_kind::hello, record_kind::ack, record_kind::eos, record_kind::final, record_kind::synced,
                    record_kind::control}) {
    EXPECT_FALSE(record_batchable(record_header_of(kind))) << record_kind_name(kind);
    EXPECT_THROW(record_batch_decode(batch_of(record(kind))), framing_error) << record_kind_name(kind);
  }
  record barrier(record_kind::step_end);
  barrier.header.meta = {{"barrier", 7}};
  EXPECT_FALSE(record_batchable(barrier.header));
  EXPECT_THROW(record_batch_decode(batch_of(std::move(barrier))), framing_error);
  record_header by_reference = tensor_record({2}).header;
  by_reference.stored.reset();
  by_reference.shm = record_shm_ref{"/proc/1/fd/3", 1, 0};
  EXPECT_FALSE(record_batchable(by_reference));
  for (auto kind : {record_kind::session, record_kind::tensor, record_kind::value, record_kind::entry,
                    record_kind::flush, record_kind::step_end})
    EXPECT_TRUE(record_batchable(record_header_of(kind))) << record_kind_name(kind);
}

// ---- a batch seen without decoding it (record.h section 4, record_batch_glance) ----


namespace {

void expect_glance_matches(const record_glance &g, const record &r) {
  const auto &h = r.header;
  SCOPED_TRACE(r.describe());
  EXPECT_EQ(g.kind, h.kind);
  EXPECT_EQ(g.run, h.run);
  EXPECT_EQ(g.flags, h.flags);
  EXPECT_EQ(g.length, h.length);
  EXPECT_EQ(g.has_payload, h.stored.has_value());
  EXPECT_EQ(g.has_stats, h.stats.has_value());
  EXPECT_EQ(g.has_crc32, h.stats && h.stats->crc32.has_value());
  EXPECT_EQ(g.stack_id, record_stack_id(h));
  const auto stack = h.meta.is_object() ? h.meta.find("stack") : h.meta.end();
  EXPECT_EQ(g.has_stack_lines, h.meta.is_object() && stack != h.meta.end() && stack->is_array());
}

}  // namespace

TEST(RecordBatch, glance_sees_what_the_decoder_sees) {
  std::vector<record> records;
  records.push_back(record(record_kind::session));
  records.back().header.meta = {{"task", "statistics"}, {"precision", "high"}};
  records.push_back(tensor_record({3}));  // saved payload, no statistics
  record complete = tensor_record({2, 2});
  complete.drop_payload();
  complete.header.flags = RECORD_FLAG_CRC32;
  complete.header.stats = tensor_stats{};
  complete.header.stats->crc32 = 0xdeadbeefu;
  records.push_back(std::move(complete));
  record numbers_only = tensor_record({4});
  numbers_only.drop_payload();
  numbers_only.header.flags = 0;
  numbers_only.header.stats = tensor_stats{};
  records.push_back(std::move(numbers_only));
  record value(record_kind::value);
  value.header.run = "another-run";
  value.header.meta = {{"type", "int"}, {"value", 1}, {"nested", {{"stack", "not lines"}, {"stack_id", -1}}}};
  records.push_back(std::move(value));
  const nlohmann::ordered_json lines = {"File a.py, line 1, in f"};
  records.push_back(test::stack_entry_record("run1", 5, 9, &lines));
  records.push_back(test::stack_entry_record("run1", 6, 9, nullptr));
  records.push_back(record(record_kind::flush));
  records.push_back(record(record_kind::step_end));
  const auto frame = batch_of_all(records);
  std::vector<record_glance> glances;
  record_batch_glance(frame, glances);
  const auto decoded = record_batch_decode(frame);
  ASSERT_EQ(glances.size(), records.size());
  ASSERT_EQ(decoded.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) expect_glance_matches(glances[i], decoded[i]);
  EXPECT_TRUE(glances[5].has_stack_lines);
  EXPECT_EQ(glances[6].stack_id, std::optional<uint64_t>(9));
  // An empty batch: no records; the vector is cleared first.
  record_batch_glance(batch_of_all({}), glances);
  EXPECT_TRUE(glances.empty());
}

TEST(RecordBatch, glance_a_key_given_twice_counts_by_its_last_value_as_the_decoder_counts_it) {
  const auto header = raw_header([](auto &p) {
    p.pack_map(4);
    p.pack("kind"), p.pack("entry");
    p.pack("meta"), p.pack_map(2), p.pack("stack"), p.pack_array(0), p.pack("stack_id"), p.pack(3);
    p.pack("kind"), p.pack("entry");
    p.pack("meta"), p.pack_map(2), p.pack("stack"), p.pack("text"), p.pack("stack_id"), p.pack(4);
  });
  const auto frame = batch_of_header(header);
  std::vector<record_glance> glances;
  record_batch_glance(frame, glances);
  const auto decoded = record_batch_decode(frame);
  ASSERT_EQ(glances.size(), 1u);
  expect_glance_matches(glances[0], decoded[0]);
  EXPECT_FALSE(glances[0].has_stack_lines);
  EXPECT_EQ(glances[0].stack_id, std::optional<uint64_t>(4));
}

TEST(RecordBatch, glance_rejects_what_the_decoder_rejects_in_the_keys_it_reads) {
  std::vector<record_glance> glances;
  const auto rejected = [&](const zmq::message_t &frame, const char *what) {
    EXPECT_THROW(record_batch_glance(frame, glances), framing_error) << what;
    EXPECT_THROW(record_batch_decode(frame), framing_error) << what;
  };
  for (auto kind : {record_kind::hello, record_kind::ack, record_kind::eos, record_kind::final, record_kind::synced,
                    record_kind::control})
    rejected(batch_of(record(kind)), "a control record");
  record barrier(record_kind::step_end);
  barrier.header.meta = {{"barrier", 7}};
  rejected(batch_of(std::move(barrier)), "a barrier");
  record_header by_reference = tensor_record({2}).header;
  by_reference.stored.reset();
  by_reference.shm = record_shm_ref{"/proc/1/fd/3", 1, 0};
  rejected(batch_of_header(header_bytes(by_reference)), "a payload by reference");
  rejected(batch_of_header(raw_header([](auto &p) { p.pack_array(1), p.pack("kind"); })), "not a map");
  rejected(batch_of_header(raw_header([](auto &p) { p.pack_map(1), p.pack(1), p.pack("tensor"); })),
           "a key that is not a string");
  rejected(batch_of_header(raw_header([](auto &p) { p.pack_map(1), p.pack("kind"), p.pack(3); })),
           "a kind that is not a string");
  rejected(batch_of_header(raw_header([](auto &p) { p.pack_map(1), p.pack("kind"), p.pack("gossip"); })),
           "an unknown kind");
  rejected(batch_of_header(raw_header([](auto &p) { p.pack_map(1), p.pack("run"), p.pack("r"); })), "no kind");
  rejected(batch_of_header(raw_header([](auto &p) {
             p.pack_map(2), p.pack("kind"), p.pack("flush"), p.pack("flags"), p.pack(uint64_t{1} << 40);
           })),
           "flags past 32 bits");
  rejected(batch_of_header(raw_header([](auto &p) {
             p.pack_map(2), p.pack("kind"), p.pack("flush"), p.pack("stored"), p.pack(-1);
           })),
           "a negative payload size");
  {  // bytes after the header's map
    auto header = header_bytes(record_header_of(record_kind::flush));
    header.push_back(std::byte{0xc0});
    rejected(batch_of_header(header), "trailing bytes");
  }
  // Cut anywhere but between records, a batch is rejected by both.
  const auto good = bytes_of(batch_of(tensor_record({4}), record(record_kind::flush)));
  const size_t first_end = 4 + 4 + header_bytes(tensor_record({4}).header).size() + 16;
  for (size_t cut = 5; cut < good.size(); ++cut)
    if (cut != first_end)
      rejected(message_of({good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)}), "a truncated batch");
  // Bytes mangled anywhere: an error or glances, never a crash (the fuzzer goes further).
  for (size_t i = 0; i < good.size(); ++i) {
    auto bytes = good;
    bytes[i] = static_cast<std::byte>(static_cast<unsigned>(bytes[i]) ^ 0x5a);
    try {
      record_batch_glance(message_of(bytes), glances);
    } catch (const framing_error &) {
    }
  }
}

TEST(RecordBatch, glance_nesting_is_bounded_where_the_decoder_bounds_it) {
  // meta nested `levels` arrays deep: accepted by both or rejected by both, at the bound too.
  for (size_t levels : {size_t{10}, RECORD_HEADER_MAX_DEPTH - 3, RECORD_HEADER_MAX_DEPTH - 2,
                        RECORD_HEADER_MAX_DEPTH - 1, RECORD_HEADER_MAX_DEPTH, size_t{100000}}) {
    const auto frame = batch_of_header(raw_header([&](auto &p) {
      p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta");
      for (size_t i = 0; i < levels; ++i) p.pack_array(1);
      p.pack_nil();
    }));
    std::vector<record_glance> glances;
    bool decoded = true, glanced = true;
    try {
      (void)record_batch_decode(frame);
    } catch (const framing_error &) {
      decoded = false;
    }
    try {
      record_batch_glance(frame, glances);
    } catch (const framing_error &) {
      glanced = false;
    }
    EXPECT_EQ(glanced, decoded) << levels << " levels";
    if (levels == 100000) EXPECT_FALSE(glanced);
    if (levels == 10) EXPECT_TRUE(glanced);
  }
}
