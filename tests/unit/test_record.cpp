// The wire-format ladder: empty, small, large, LZ4, truncated, wrong version, corrupt; the same
// for batches; then the record file framing.
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
#include "test_support.h"

using namespace tprobe;

namespace {

record tensor_record(std::vector<int64_t> shape, dtype t = dtype::float32) {
  record r(record_kind::tensor);
  r.header.run = "run1";
  r.header.rank = 3;
  r.header.step = 7;
  r.header.seq = 42;
  r.header.entry = "Functional.linear.0.forward";
  r.header.slot = "input.0";
  r.header.type = t;
  r.header.shape = std::move(shape);
  r.header.requires_grad = true;
  r.header.flags = RECORD_FLAG_SAVE;
  const size_t n = r.header.element_count() * dtype_size(t);
  std::vector<std::byte> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::byte>(i * 31 + 7);
  r.set_payload(std::move(bytes));
  return r;
}

record round_trip(const record &r) {
  auto frames = record_encode(r);
  // Copy the frames, as a socket would deliver them.
  std::vector<zmq::message_t> received;
  for (auto &f : frames) received.emplace_back(f.data(), f.size());
  return record_decode(received);
}

std::vector<std::byte> header_bytes(const record_header &h) {
  auto m = record_header_encode(h);
  const auto *p = static_cast<const std::byte *>(m.data());
  return {p, p + m.size()};
}

}  // namespace

TEST(Record, empty_payload_round_trips) {
  record r = tensor_record({0, 4});
  ASSERT_TRUE(r.has_payload());
  EXPECT_EQ(r.header.length, 0u);
  record back = round_trip(r);
  EXPECT_TRUE(back.has_payload());
  EXPECT_EQ(back.payload_bytes().size(), 0u);
  EXPECT_EQ(back.header.shape, (std::vector<int64_t>{0, 4}));
}

// A spent record reused (the capture's queue hands its records back) is a new record in every
// field: what a stage reads of the next record is never what the last one left.
TEST(Record, reuse_as_leaves_nothing_of_the_record_before) {
  // A new field of record_header changes its size: reset it in record::reuse_as, then here.
  static_assert(sizeof(record_header) == 560, "record_header changed: does record::reuse_as reset the new field?");
  record r = tensor_record({2, 3});
  auto &h = r.header;
  h.path = std::vector<record_path_element>{int64_t{1}, std::string("key")};
  h.foreign_dtype = "torch.float8_e4m3fn";
  h.device = "cuda:1";
  h.tensor_type = "torch.nn.parameter.Parameter";
  h.codec = record_codec::lz4;
  h.shm = record_shm_ref{"/proc/1/fd/3", 9, 64};
  tensor_stats st;
  st.max = stat_value::of_real(1.0);
  st.nan_count = 2;
  h.stats = st;
  h.meta = {{"stack_id", 3}};
  h.meta_msgpack = "\x81\xa1k\x01";
  const size_t entry_capacity = h.entry.capacity();
  r.reuse_as(record_kind::value);

  const record_header fresh = record_header_of(record_kind::value);
  EXPECT_EQ(h.kind, fresh.kind);
  EXPECT_EQ(h.run, fresh.run);
  EXPECT_EQ(h.rank, fresh.rank);
  EXPECT_EQ(h.step, fresh.step);
  EXPECT_EQ(h.seq, fresh.seq);
  EXPECT_EQ(h.entry, fresh.entry);
  EXPECT_EQ(h.slot, fresh.slot);
  EXPECT_EQ(h.path, fresh.path);
  EXPECT_EQ(h.type, fresh.type);
  EXPECT_EQ(h.shape, fresh.shape);
  EXPECT_EQ(h.foreign_dtype, fresh.foreign_dtype);
  EXPECT_EQ(h.device, fresh.device);
  EXPECT_EQ(h.requires_grad, fresh.requires_grad);
  EXPECT_EQ(h.tensor_type, fresh.tensor_type);
  EXPECT_EQ(h.flags, fresh.flags);
  EXPECT_EQ(h.codec, fresh.codec);
  EXPECT_EQ(h.length, fresh.length);
  EXPECT_EQ(h.stored, fresh.stored);
  EXPECT_FALSE(h.shm.has_value());
  EXPECT_EQ(h.stats, fresh.stats);
  EXPECT_EQ(h.meta, fresh.meta);
  EXPECT_EQ(h.meta_msgpack, fresh.meta_msgpack);
  EXPECT_FALSE(r.has_payload());
  EXPECT_EQ(r.payload_frame(), nullptr);
  EXPECT_EQ(header_bytes(h), header_bytes(fresh));
  // What reuse is for: the entry name's storage stays for the next record's.
  EXPECT_EQ(h.entry.capacity(), entry_capacity);

  // Filled again as a tensor, it encodes as a record made new.
  r.reuse_as(record_kind::tensor);
  record made(record_kind::tensor);
  for (record *x : {&r, &made}) {
    x->header.entry = "Tensor.add_.3.forward";
    x->header.slot = "output.0";
    x->header.shape = {4};
  }
  EXPECT_EQ(header_bytes(r.header), header_bytes(made.header));
}

// A tensor tprobe cannot read travels as its facts: foreign_dtype instead of dtype, no payload,
// no stats; one that claims data or statistics as well is malformed.
TEST(Record, foreign_dtype_tensor_round_trips_as_facts) {
  record r(record_kind::tensor);
  r.header.entry = "Torch.to.0.forward";
  r.header.slot = "output.0";
  r.header.foreign_dtype = "torch.float8_e4m3fn";
  r.header.shape = {2, 3};
  r.header.requires_grad = true;
  record back = round_trip(r);
  EXPECT_EQ(back.header.foreign_dtype, "torch.float8_e4m3fn");
  EXPECT_EQ(back.header.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(back.header.requires_grad);
  EXPECT_FALSE(back.has_payload());
  EXPECT_FALSE(back.header.stats);

  r.header.stats = tensor_stats{};
  EXPECT_THROW(round_trip(r), framing_error);
  r.header.stats.reset();
  r.set_payload(std::vector<std::byte>(6));
  EXPECT_THROW(round_trip(r), framing_error);
}

TEST(Record, header_only_record_has_one_frame) {
  record r(record_kind::entry);
  r.header.entry = "Module.conv1.Conv2d.forward.0";
  r.header.meta = {{"parent", nullptr}, {"stack", {"File a.py, line 1, in f, \n x()"}}, {"is_recompute", false}};
  auto frames = record_encode(r);
  ASSERT_EQ(frames.size(), 1u);
  record back = round_trip(r);
  EXPECT_EQ(back.header.kind, record_kind::entry);
  EXPECT_FALSE(back.has_payload());
  EXPECT_EQ(back.header.meta, r.header.meta);
}

TEST(Record, small_payload_keeps_every_field) {
  record r = tensor_record({2, 3});
  tensor_stats s;
  s.max = stat_value::of_real(1.5);
  s.min = stat_value::of_int(-2);
  s.mean = stat_value::of_bool(true);
  s.norm = stat_value::none();
  s.nan_count = 1;
  s.inf_count = 2;
  s.crc32 = 0xdeadbeef;
  r.header.stats = s;
  r.header.path = std::vector<record_path_element>{int64_t{1}, std::string("key")};
  r.header.tensor_type = "torch.Tensor";
  r.header.device = "cuda:1";
  record back = round_trip(r);
  const auto &h = back.header;
  EXPECT_EQ(h.kind, record_kind::tensor);
  EXPECT_EQ(h.run, "run1");
  EXPECT_EQ(h.rank, 3);
  EXPECT_EQ(h.step, 7);
  EXPECT_EQ(h.seq, 42u);
  EXPECT_EQ(h.entry, "Functional.linear.0.forward");
  EXPECT_EQ(h.slot, "input.0");
  EXPECT_EQ(h.type, dtype::float32);
  EXPECT_EQ(h.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.device, "cuda:1");
  EXPECT_TRUE(h.requires_grad);
  EXPECT_EQ(h.tensor_type, "torch.Tensor");
  EXPECT_EQ(h.flags, RECORD_FLAG_SAVE);
  ASSERT_TRUE(h.stats.has_value());
  EXPECT_EQ(*h.stats, s);
  ASSERT_TRUE(h.path.has_value());
  EXPECT_EQ(*h.path, *r.header.path);
  auto a = r.payload_bytes(), b = back.payload_bytes();
  ASSERT_EQ(a.size(), 24u);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0);
}

TEST(Record, integral_and_negative_zero_floats_stay_floats) {
  record r = tensor_record({2});
  tensor_stats s;
  s.max = stat_value::of_real(2.0);
  s.min = stat_value::of_real(-0.0);
  s.mean = stat_value::of_real(std::nan(""));
  s.norm = stat_value::of_real(-INFINITY);
  r.header.stats = s;
  r.header.meta = {{"value", 3.0}};
  record back = round_trip(r);
  ASSERT_TRUE(back.header.stats);
  EXPECT_EQ(back.header.stats->max.k, stat_value::kind::real);
  EXPECT_EQ(back.header.stats->max.real, 2.0);
  EXPECT_EQ(back.header.stats->min.k, stat_value::kind::real);
  EXPECT_TRUE(std::signbit(back.header.stats->min.real));
  EXPECT_TRUE(std::isnan(back.header.stats->mean.real));
  EXPECT_EQ(back.header.stats->norm.real, -INFINITY);
  EXPECT_TRUE(back.header.meta["value"].is_number_float());
}

TEST(Record, large_payload_round_trips) {
  record r = tensor_record({4096, 1024});  // 16 MiB
  record back = round_trip(r);
  auto a = r.payload_bytes(), b = back.payload_bytes();
  ASSERT_EQ(b.size(), size_t{16} << 20);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0);
}

TEST(Record, lz4_payload_round_trips_and_shrinks) {
  record r = tensor_record({1 << 16});
  std::vector<std::byte> zeros(r.header.length, std::byte{0});
  for (size_t i = 0; i < zeros.size(); i += 97) zeros[i] = std::byte{1};
  auto packed = record_payload_lz4(zeros);
  ASSERT_TRUE(packed.has_value());
  EXPECT_LT(packed->size(), zeros.size() / 4);
  const uint64_t length = zeros.size();
  r.header.codec = record_codec::lz4;
  r.set_payload_frame(std::move(*packed));
  r.header.length = length;
  record back = round_trip(r);
  EXPECT_EQ(back.header.codec, record_codec::lz4);
  auto b = back.payload_bytes();
  ASSERT_EQ(b.size(), zeros.size());
  EXPECT_EQ(std::memcmp(b.data(), zeros.data(), b.size()), 0);
}

TEST(Record, incompressible_payload_is_not_lz4) {
  std::vector<std::byte> noise(4096);
  uint32_t x = 12345;
  for (auto &b : noise) b = static_cast<std::byte>((x = x * 1664525u + 1013904223u) >> 24);
  EXPECT_FALSE(record_payload_lz4(noise).has_value());
}

// A meta given as JSON text is sent as the value the text holds: decoded, it is that tree.
TEST(Record, meta_given_as_json_text_arrives_as_its_value) {
  const std::vector<std::string> texts = {
      R"({"type":"float","value":2.0})",
      R"({"type":"int","value":-9223372036854775808,"u":18446744073709551615})",
      R"({"n":[1,-2,{"a":null,"b":[true,false]}],"s":"q\"uote \u00e9","e":{},"l":[],"d":{"d":{"d":[[[]]]}}})",
      R"([1.5e300,-0.0,0.1])", R"("just text")", "7", "null",
      // a key given twice: as the tree has it, in its first place with its last value
      R"({"k":1,"j":2,"k":3})"};
  for (const auto &text : texts) {
    record_header h = record_header_of(record_kind::value);
    h.entry = "Torch.add.0.forward";
    h.slot = "kwargs.alpha";
    h.meta = record_meta_text(text);
    const record_header back = record_header_decode(header_bytes(h));
    const auto expected = nlohmann::ordered_json::parse(text);
    EXPECT_EQ(back.meta, expected) << text;
    EXPECT_EQ(back.meta.dump(), expected.dump()) << text;  // floats stay floats, order kept
  }
  // Counts past a byte and past two (every container is written with a 4-byte count): an array
  // of 70,000, a map of 300 keys. (A map that large would take the decoder's tree seconds.)
  std::string big = "[";
  for (int i = 0; i < 70000; ++i) big += (i ? "," : "") + std::to_string(i);
  big += "]";
  record_header h = record_header_of(record_kind::value);
  h.meta = record_meta_text(big);
  const auto back = record_header_decode(header_bytes(h)).meta;
  ASSERT_EQ(back.size(), 70000u);
  EXPECT_EQ(back[69999], 69999);
  std::string keys = "{";
  for (int i = 0; i < 300; ++i) keys += (i ? ",\"" : "\"") + std::to_string(i) + "\":" + std::to_string(i);
  keys += "}";
  h.meta = record_meta_text(keys);
  EXPECT_EQ(record_header_decode(header_bytes(h)).meta, nlohmann::ordered_json::parse(keys));
  // Not JSON: encoding says so, and the next header encodes as if nothing happened.
  h.meta = record_meta_text(R"({"type":"int","value":)");
  EXPECT_THROW((void)record_header_encode(h), std::invalid_argument);
  h.meta = record_meta_text("[1] 2");
  EXPECT_THROW((void)record_header_encode(h), std::invalid_argument);
  EXPECT_EQ(record_header_decode(header_bytes(tensor_record({2}).header)).shape, (std::vector<int64_t>{2}));
  // Only a whole meta may be text.
  h.meta = {{"inner", record_meta_text("1")}};
  EXPECT_THROW((void)record_header_encode(h), std::logic_error);
}

TEST(Record, truncated_header_is_rejected) {
  auto bytes = header_bytes(tensor_record({2}).header);
  for (size_t cut : {size_t{0}, size_t{3}, bytes.size() / 2, bytes.size() - 1}) {
    std::span<const std::byte> part(bytes.data(), cut);
    EXPECT_THROW(record_header_decode(part), framing_error) << "cut at " << cut;
  }
}

TEST(Record, truncated_payload_is_rejected) {
  record r = tensor_record({8});
  auto frames = record_encode(r);
  std::vector<zmq::message_t> received;
  received.emplace_back(frames[0].data(), frames[0].size());
  received.emplace_back(frames[1].data(), frames[1].size() - 1);
  try {
    record_decode(received);
    FAIL() << "accepted a truncated payload";
  } catch (const framing_error &e) {
    EXPECT_NE(std::string(e.what()).find("Functional.linear.0.forward"), std::string::npos) << e.what();
  }
}

TEST(Record, missing_payload_frame_is_rejected) {
  record r = tensor_record({8});
  auto frames = record_encode(r);
  std::vector<zmq::message_t> received;
  received.emplace_back(frames[0].data(), frames[0].size());
  EXPECT_THROW(record_decode(received), framing_error);
}

TEST(Record, wrong_major_version_is_rejected_naming_it) {
  auto bytes = header_bytes(tensor_record({2}).header);
  bytes[2] = std::byte{RECORD_VERSION_MAJOR + 1};
  try {
    record_header_decode(bytes);
    FAIL();
  } catch (const framing_error &e) {
    EXPECT_NE(std::string(e.what()).find("major version 2"), std::string::npos) << e.what();
  }
}

TEST(Record, newer_minor_version_with_unknown_keys_is_accepted) {
  auto bytes = header_bytes(record_header_of(record_kind::flush));
  bytes[3] = std::byte{RECORD_VERSION_MINOR + 1};
  EXPECT_EQ(record_header_decode(bytes).kind, record_kind::flush);
}

TEST(Record, bad_magic_is_rejected) {
  auto bytes = header_bytes(tensor_record({2}).header);
  bytes[0] = std::byte{'X'};
  EXPECT_THROW(record_header_decode(bytes), framing_error);
}

TEST(Record, corrupt_msgpack_is_rejected) {
  auto bytes = header_bytes(tensor_record({2}).header);
  for (size_t i = RECORD_PREFIX_SIZE; i < bytes.size(); ++i) bytes[i] = std::byte{0xc1};  // never-used byte
  EXPECT_THROW(record_header_decode(bytes), framing_error);
}

TEST(Record, corrupt_lz4_block_is_rejected) {
  record r = tensor_record({1 << 14});
  std::vector<std::byte> data(r.header.length, std::byte{7});
  auto packed = record_payload_lz4(data);
  ASSERT_TRUE(packed);
  std::vector<char> broken(static_cast<char *>(packed->data()), static_cast<char *>(packed->data()) + packed->size());
  for (size_t i = 0; i < broken.size(); ++i) broken[i] = static_cast<char>(0xff);
  r.header.codec = record_codec::lz4;
  r.set_payload_frame(zmq::message_t(broken.data(), broken.size()));
  r.header.length = data.size();
  record back = round_trip(r);
  EXPECT_THROW(back.payload_bytes(), framing_error);
}

TEST(Record, shape_and_length_must_agree) {
  record r = tensor_record({4});
  r.header.shape = {5};
  EXPECT_THROW(round_trip(r), framing_error);
}

TEST(Record, unknown_kind_and_dtype_are_rejected) {
  // A header written by hand: kind "bogus".
  auto bytes = header_bytes(record_header_of(record_kind::flush));
  std::string s(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  const auto pos = s.find("flush");
  ASSERT_NE(pos, std::string::npos);
  s.replace(pos, 5, "bogus");
  std::vector<std::byte> bad(reinterpret_cast<const std::byte *>(s.data()),
                             reinterpret_cast<const std::byte *>(s.data()) + s.size());
  EXPECT_THROW(record_header_decode(bad), framing_error);
}

// ---- batches (record.h section 4): the same ladder ----

namespace {

zmq::message_t batch_of_all(const std::vector<record> &records) {
  record_batch_builder b;
  for (const auto &r : records) b.append(record_encode(r));
  auto frame = b.take();
  return zmq::message_t(frame.data(), frame.size());  // as a socket delivers it
}

// Records are move-only: a batch of temporaries.
template <class... R>
zmq::message_t batch_of(R &&...rs) {
  std::vector<record> records;
  (records.push_back(std::move(rs)), ...);
  return batch_of_all(records);
}

std::vector<std::byte> bytes_of(const zmq::message_t &m) {
  const auto *p = static_cast<const std::byte *>(m.data());
  return {p, p + m.size()};
}

zmq::message_t message_of(const std::vector<std::byte> &bytes) { return zmq::message_t(bytes.data(), bytes.size()); }

void expect_same(const record &a, const record &b) {
  EXPECT_EQ(a.header.kind, b.header.kind);
  EXPECT_EQ(a.header.seq, b.header.seq);
  EXPECT_EQ(a.header.entry, b.header.entry);
  EXPECT_EQ(a.header.slot, b.header.slot);
  EXPECT_EQ(a.header.shape, b.header.shape);
  EXPECT_EQ(a.header.codec, b.header.codec);
  EXPECT_EQ(a.header.length, b.header.length);
  EXPECT_EQ(a.header.meta, b.header.meta);
  ASSERT_EQ(a.has_payload(), b.has_payload());
  if (a.has_payload()) {
    auto x = a.payload_bytes(), y = b.payload_bytes();
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0);
  }
}

}  // namespace

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

namespace {

record entry_with_stack(const std::string &run, uint64_t id, const nlohmann::ordered_json *lines) {
  return test::stack_entry_record(run, id, id, lines);
}

}  // namespace

TEST(RecordStacks, a_link_that_takes_references_sends_the_lines_once_per_id) {
  const nlohmann::ordered_json a = {"File a.py, line 1, in f", "File a.py, line 9, in main"};
  const nlohmann::ordered_json b = {"File b.py, line 2, in g"};
  stack_book_define("stacks-run-1", 1, a);
  stack_book_define("stacks-run-1", 2, b);
  stack_link link;
  // A reference its link never defined gets the lines from the book; then goes as it is.
  auto first = link.adapt(entry_with_stack("stacks-run-1", 1, nullptr).header, true);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->meta["stack"], a);
  EXPECT_EQ(first->meta["stack_id"], 1);
  EXPECT_FALSE(link.adapt(entry_with_stack("stacks-run-1", 1, nullptr).header, true));
  // Lines it defined already are taken out; lines of a new id go as they are.
  auto again = link.adapt(entry_with_stack("stacks-run-1", 1, &a).header, true);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->meta.contains("stack"));
  EXPECT_FALSE(link.adapt(entry_with_stack("stacks-run-1", 2, &b).header, true));
  EXPECT_FALSE(link.adapt(entry_with_stack("stacks-run-1", 2, nullptr).header, true));
  // Ids are per run: the same number in another run is another stack.
  stack_book_define("stacks-run-2", 1, b);
  auto other = link.adapt(entry_with_stack("stacks-run-2", 1, nullptr).header, true);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->meta["stack"], b);
  // A record without an id, or not an entry, is never touched.
  record plain(record_kind::entry);
  plain.header.meta = {{"stack", a}};
  EXPECT_FALSE(link.adapt(plain.header, true));
  EXPECT_FALSE(link.adapt(record_header_of(record_kind::value), true));
}

TEST(RecordStacks, a_consumer_without_references_gets_the_lines_every_time) {
  const nlohmann::ordered_json a = {"File c.py, line 3, in h"};
  stack_book_define("stacks-run-3", 5, a);
  stack_link link;
  for (int i = 0; i < 3; ++i) {
    auto out = link.adapt(entry_with_stack("stacks-run-3", 5, nullptr).header, false);
    ASSERT_TRUE(out);
    EXPECT_EQ(out->meta["stack"], a);
    EXPECT_FALSE(link.adapt(entry_with_stack("stacks-run-3", 5, &a).header, false));
  }
}

TEST(RecordStacks, lines_are_found_in_the_record_or_the_book) {
  const nlohmann::ordered_json a = {"File d.py, line 4, in k"};
  record with = entry_with_stack("stacks-run-4", 3, &a);
  EXPECT_EQ(*record_stack_lines(with.header), a);
  EXPECT_EQ(record_stack_id(with.header), 3u);
  record by_id = entry_with_stack("stacks-run-4", 3, nullptr);
  EXPECT_EQ(record_stack_lines(by_id.header), nullptr);  // nobody defined it yet
  stack_book_define("stacks-run-4", 3, a);
  ASSERT_NE(record_stack_lines(by_id.header), nullptr);
  EXPECT_EQ(*record_stack_lines(by_id.header), a);
  // A reference nobody defined cannot be sent: the stream would be broken.
  stack_link link;
  EXPECT_THROW(link.adapt(entry_with_stack("stacks-run-4", 99, nullptr).header, true), framing_error);
  // The id survives the wire.
  auto frames = record_encode(by_id);
  const record decoded = record_decode(frames);
  EXPECT_EQ(record_stack_id(decoded.header), 3u);
}

TEST(RecordFile, round_trips_a_stream) {
  test::temp_dir dir;
  const std::string path = dir / "stream.tpr";
  {
    record_file_writer w(path);
    w.write(tensor_record({2, 2}));
    record v(record_kind::value);
    v.header.entry = "Tensor.__add__.0.forward";
    v.header.slot = "input.1";
    v.header.meta = {{"type", "int"}, {"value", 1}};
    w.write(v);
    w.close();
  }
  record_file_reader rd(path);
  auto a = rd.read();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->header.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a->payload_bytes().size(), 16u);
  auto b = rd.read();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->header.meta["value"], 1);
  EXPECT_FALSE(rd.read());
}

TEST(RecordFile, truncated_file_names_the_offset) {
  test::temp_dir dir;
  const std::string path = dir / "stream.tpr";
  {
    record_file_writer w(path);
    w.write(tensor_record({64}));
    w.close();
  }
  std::string content = test::read_file(path);
  test::write_file(path, content.substr(0, content.size() - 10));
  record_file_reader rd(path);
  try {
    rd.read();
    FAIL();
  } catch (const framing_error &e) {
    EXPECT_NE(std::string(e.what()).find("byte 16"), std::string::npos) << e.what();
  }
}

TEST(RecordFile, not_a_record_file) {
  test::temp_dir dir;
  test::write_file(dir / "x", "hello world, not records");
  EXPECT_THROW(record_file_reader(dir / "x"), framing_error);
  EXPECT_THROW(record_file_reader(dir / "missing"), system_error);
}

// A frame length is checked against the file before anything is allocated: a 1 TB length used to
// reach zmq_msg_init_size and fail with ENOMEM ("Cannot allocate memory", exit 111), where a
// corrupt file is an input error (framing_error, exit 100) naming the file and the offset.
TEST(RecordFile, huge_frame_length_is_corrupt_input_not_an_allocation) {
  test::temp_dir dir;
  const std::string path = dir / "huge.tpr";
  for (const uint64_t claimed : {uint64_t{1} << 40, uint64_t{64} << 20, ~uint64_t{0}}) {
    std::string content(RECORD_FILE_MAGIC);
    content.push_back('\x01');  // one frame
    content.append(reinterpret_cast<const char *>(&claimed), sizeof claimed);
    content.append("TP\x01\x00", 4);
    test::write_file(path, content);
    record_file_reader rd(path);
    try {
      rd.read();
      FAIL() << "a " << claimed << "-byte frame in a " << content.size() << "-byte file was read";
    } catch (const framing_error &e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find("record at byte 16"), std::string::npos) << what;
      EXPECT_NE(what.find("only 4 bytes are left"), std::string::npos) << what;
    }
  }
}

// The reader measures the file only when a frame would end past what it measured last: a file
// still being written (a recording read while the run goes on) is read as far as it has grown,
// and a frame longer than what is left is still caught after good records.
TEST(RecordFile, a_growing_file_is_read_as_it_grows_and_a_late_bad_length_is_still_caught) {
  test::temp_dir dir;
  // Each record alone in a file, to splice them (a record file is the magic, then records).
  const auto record_bytes = [&](std::vector<int64_t> shape) {
    const std::string path = dir / "one.tpr";
    {
      record_file_writer w(path);
      w.write(tensor_record(std::move(shape)));
      w.close();
    }
    return test::read_file(path).substr(RECORD_FILE_MAGIC.size());
  };
  const std::string magic(RECORD_FILE_MAGIC);
  const std::string small = record_bytes({4}), large = record_bytes({256});
  std::string bad = record_bytes({8});
  const uint64_t claimed = 4096;  // its header frame's length, past the end of the file
  std::memcpy(bad.data() + 1, &claimed, sizeof claimed);

  const std::string path = dir / "stream.tpr";
  test::write_file(path, magic + small + large + bad);
  record_file_reader rd(path);
  for (const int64_t n : {4, 256}) {
    const auto r = rd.read();
    ASSERT_TRUE(r) << n;
    EXPECT_EQ(r->header.shape, (std::vector<int64_t>{n}));
  }
  try {
    rd.read();
    FAIL() << "a 4096-byte frame at the end of the file was read";
  } catch (const framing_error &e) {
    EXPECT_NE(std::string(e.what()).find("bytes are left in the file"), std::string::npos) << e.what();
  }

  // A record appended after the reader measured the file is read, not taken for a bad length.
  test::write_file(path, magic + small);
  record_file_reader tail(path);
  ASSERT_TRUE(tail.read());
  {
    std::ofstream f(path, std::ios::binary | std::ios::app);
    f << large;
  }
  const auto appended = tail.read();
  ASSERT_TRUE(appended);
  EXPECT_EQ(appended->header.shape, (std::vector<int64_t>{256}));
}

// The fuzzer ran out of file descriptors: a reader whose constructor threw on a bad magic never
// closed its file, so a stage rejecting many files would end in EMFILE.
TEST(RecordFile, rejected_file_is_closed) {
  test::temp_dir dir;
  test::write_file(dir / "x", "hello world, not records");
  auto lowest_free_fd = [] {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::close(fd);
    return fd;
  };
  const int before = lowest_free_fd();
  ASSERT_GE(before, 0);
  for (int i = 0; i < 3; ++i) EXPECT_THROW(record_file_reader(dir / "x"), framing_error);
  const int after = lowest_free_fd();
  EXPECT_EQ(after, before) << "record_file_reader left a descriptor open";
}

// ---- a batch seen without decoding it (record.h section 4, record_batch_glance) ----

namespace {

// A header frame from msgpack written by `pack` (the "TP" prefix of this build's version).
template <class Pack>
std::vector<std::byte> raw_header(Pack &&pack) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> p(buffer);
  pack(p);
  std::vector<std::byte> out = {std::byte{'T'}, std::byte{'P'}, std::byte{RECORD_VERSION_MAJOR},
                                std::byte{RECORD_VERSION_MINOR}};
  const auto *b = reinterpret_cast<const std::byte *>(buffer.data());
  out.insert(out.end(), b, b + buffer.size());
  return out;
}

// A batch frame of one record given as its header bytes (and no payload).
zmq::message_t batch_of_header(const std::vector<std::byte> &header) {
  std::vector<std::byte> bytes = {std::byte{'T'}, std::byte{'B'}, std::byte{RECORD_VERSION_MAJOR},
                                  std::byte{RECORD_VERSION_MINOR}};
  const auto length = static_cast<uint32_t>(header.size());
  const auto *l = reinterpret_cast<const std::byte *>(&length);
  bytes.insert(bytes.end(), l, l + 4);
  bytes.insert(bytes.end(), header.begin(), header.end());
  return message_of(bytes);
}

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

TEST(RecordGlance, sees_what_the_decoder_sees) {
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

TEST(RecordGlance, a_key_given_twice_counts_by_its_last_value_as_the_decoder_counts_it) {
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

TEST(RecordGlance, rejects_what_the_decoder_rejects_in_the_keys_it_reads) {
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

TEST(RecordGlance, nesting_is_bounded_where_the_decoder_bounds_it) {
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

// ---- the decoder's reading of each key (record.h section 2), as hand-written msgpack ----

TEST(RecordDecode, signed_formats_of_non_negative_numbers_are_unsigned_integers) {
  // msgpack allows 5 as int8 (0xd0 0x05); a writer other than msgpack-c's may choose it.
  const auto header = raw_header([](auto &p) {
    p.pack_map(4), p.pack("kind"), p.pack("flush");
    p.pack("flags"), p.pack_fix_int8(5);
    p.pack("seq"), p.pack_fix_int16(7);
    p.pack("step"), p.pack_fix_int64(-2);
  });
  const record_header h = record_header_decode(header);
  EXPECT_EQ(h.flags, 5u);
  EXPECT_EQ(h.seq, 7u);
  EXPECT_EQ(h.step, -2);
  // The glance reads them as the decoder does (it refused the flags as "not an unsigned int").
  const auto frame = batch_of_header(header);
  std::vector<record_glance> glances;
  record_batch_glance(frame, glances);
  ASSERT_EQ(glances.size(), 1u);
  EXPECT_EQ(glances[0].flags, 5u);
}

TEST(RecordDecode, a_key_given_twice_counts_by_its_last_value) {
  const record_header h = record_header_decode(raw_header([](auto &p) {
    p.pack_map(6), p.pack("kind"), p.pack("tensor"), p.pack("dtype"), p.pack("float32");
    p.pack("shape"), p.pack_array(2), p.pack(2), p.pack(3);
    p.pack("shape"), p.pack_array(1), p.pack(4);
    p.pack("meta"), p.pack_map(1), p.pack("a"), p.pack(1);
    p.pack("meta"), p.pack_array(1), p.pack("b");
  }));
  EXPECT_EQ(h.shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(h.meta, nlohmann::ordered_json::array({"b"}));
}

TEST(RecordDecode, meta_keeps_every_msgpack_type_and_order) {
  const std::vector<uint8_t> blob = {0, 1, 255};
  const record_header h = record_header_decode(raw_header([&](auto &p) {
    p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta");
    p.pack_map(9);
    p.pack("z"), p.pack_nil();
    p.pack("y"), p.pack(true);
    p.pack("x"), p.pack(uint64_t{18446744073709551615u});
    p.pack("w"), p.pack(int64_t{-9223372036854775807 - 1});
    p.pack("v"), p.pack(0.25f);
    p.pack("u"), p.pack_bin_body("\xcb\x80\0\0\0\0\0\0\0", 9);  // float64 -0.0 (msgpack-c would pack 0)
    p.pack("t"), p.pack_bin(3), p.pack_bin_body(reinterpret_cast<const char *>(blob.data()), 3);
    p.pack("s"), p.pack_array(3), p.pack("a"), p.pack_map(1), p.pack("k"), p.pack_array(0), p.pack_map(0);
    p.pack("z"), p.pack("last");  // a key given twice keeps its place and takes the last value
  }));
  nlohmann::ordered_json expected = nlohmann::ordered_json::object();
  expected["z"] = "last";
  expected["y"] = true;
  expected["x"] = uint64_t{18446744073709551615u};
  expected["w"] = int64_t{-9223372036854775807 - 1};
  expected["v"] = 0.25;
  expected["u"] = -0.0;
  expected["t"] = nlohmann::ordered_json::binary(blob);
  expected["s"] = nlohmann::ordered_json::array(
      {"a", nlohmann::ordered_json{{"k", nlohmann::ordered_json::array()}}, nlohmann::ordered_json::object()});
  EXPECT_EQ(h.meta, expected);
  EXPECT_TRUE(h.meta["u"].is_number_float());
  EXPECT_TRUE(std::signbit(h.meta["u"].get<double>()));
  EXPECT_TRUE(h.meta["x"].is_number_unsigned());
}

TEST(RecordDecode, an_unknown_key_is_passed_over_whatever_it_holds) {
  const record_header h = record_header_decode(raw_header([](auto &p) {
    p.pack_map(3), p.pack("kind"), p.pack("flush");
    // A newer minor's key: a map with container keys and an ext, none of which this build reads.
    p.pack("future"), p.pack_map(2), p.pack_array(1), p.pack_map(0), p.pack_ext(1, 1), p.pack_ext_body("x", 1);
    p.pack(3), p.pack_array(1), p.pack_nil();
    p.pack("seq"), p.pack(9);
  }));
  EXPECT_EQ(h.kind, record_kind::flush);
  EXPECT_EQ(h.seq, 9u);
}

TEST(RecordDecode, a_mistyped_value_is_named_by_its_key) {
  const auto message = [](auto &&pack) {
    try {
      (void)record_header_decode(raw_header(pack));
    } catch (const framing_error &e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const auto with_kind = [&](auto &&rest) {
    return message([&](auto &p) {
      p.pack_map(2), p.pack("kind"), p.pack("tensor");
      rest(p);
    });
  };
  EXPECT_EQ(with_kind([](auto &p) { p.pack("shape"), p.pack_map(0); }), "header key \"shape\" is not an array");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("shape"), p.pack_array(1), p.pack(-1); }),
            "header key \"shape\" is not an array of non-negative ints");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("shape"), p.pack_array(1), p.pack_array(0); }),
            "header key \"shape\" is not an integer");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("path"), p.pack_array(1), p.pack(1.5); }),
            "header key \"path\" is not an integer");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("rank"), p.pack(int64_t{1} << 40); }),
            "header key \"rank\" is not a rank (-1 or a non-negative int32)");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("step"), p.pack(uint64_t{1} << 63); }), "header key \"step\" is not an int64");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("seq"), p.pack_array(0); }), "header key \"seq\" is not an unsigned integer");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("entry"), p.pack(3); }), "header key \"entry\" is not a string");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("requires_grad"), p.pack(1); }), "header key \"requires_grad\" is not a bool");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("stats"), p.pack_map(1), p.pack("max"), p.pack_array(0); }),
            "header key \"stats.max\" is not nil, a bool or a number");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("stats"), p.pack_map(1), p.pack(1), p.pack(2); }),
            "header key \"stats\" is not a map with string keys");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("stats"), p.pack_map(1), p.pack("crc32"), p.pack(uint64_t{1} << 33); }),
            "header key \"stats.crc32\" is not a 32-bit value");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("shm"), p.pack_map(1), p.pack("id"), p.pack("one"); }),
            "header key \"shm.id\" is not an unsigned integer");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("shm"), p.pack_map(1), p.pack("id"), p.pack(1); }),
            "header key \"shm\" is not a map of path, id and offset");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("meta"), p.pack_map(1), p.pack(1), p.pack(2); }),
            "meta map key is not a string");
  EXPECT_EQ(with_kind([](auto &p) { p.pack("meta"), p.pack_array(1), p.pack_ext(1, 1), p.pack_ext_body("x", 1); }),
            "meta holds a msgpack ext value, which tprobe does not use");
  EXPECT_EQ(message([](auto &p) { p.pack_map(1), p.pack_array(0), p.pack(1); }),
            "header map has a key that is not a string");
  EXPECT_EQ(message([](auto &p) { p.pack(1); }), "header is not a msgpack map");
  EXPECT_EQ(message([](auto &p) { p.pack_map(2), p.pack("kind"); }), "header is not valid msgpack (insufficient bytes)");
}

// The header reader checks every byte count before it reads (record.h section 2): a count or a
// length larger than what follows, and the byte msgpack never uses (0xc1), are bad msgpack
// wherever they are, even inside a key this build passes over.
TEST(RecordDecode, counts_beyond_the_frame_and_the_unused_byte_are_bad_msgpack) {
  const auto message = [](std::vector<std::byte> header) {
    try {
      (void)record_header_decode(header);
    } catch (const framing_error &e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const auto flush_then = [](std::initializer_list<uint8_t> bytes) {
    auto header = raw_header([](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("flush"), p.pack("future"); });
    for (uint8_t b : bytes) header.push_back(std::byte{b});
    return header;
  };
  EXPECT_EQ(message(flush_then({0xc0})), "accepted");
  // 0xc1 as the unknown key's value, inside an array there, and as a meta value.
  EXPECT_EQ(message(flush_then({0xc1})), "header is not valid msgpack (parse error)");
  EXPECT_EQ(message(flush_then({0x92, 0xc0, 0xc1})), "header is not valid msgpack (parse error)");
  auto meta = raw_header([](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_array(1); });
  meta.push_back(std::byte{0xc1});
  EXPECT_EQ(message(meta), "header is not valid msgpack (parse error)");
  // An array32 of 2^32-1 elements, a map32 of as many pairs, a str32 and a bin32 of 4 GiB, and
  // an ext32: each announced in a few bytes, and refused without reading past the frame.
  for (auto bytes : {std::initializer_list<uint8_t>{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0},
                     std::initializer_list<uint8_t>{0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0},
                     std::initializer_list<uint8_t>{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'},
                     std::initializer_list<uint8_t>{0xc6, 0xff, 0xff, 0xff, 0xff, 'a'},
                     std::initializer_list<uint8_t>{0xc9, 0xff, 0xff, 0xff, 0xff, 1, 'a'},
                     std::initializer_list<uint8_t>{0xd8, 1, 'a'}}) {
    EXPECT_EQ(message(flush_then(bytes)), "header is not valid msgpack (insufficient bytes)");
  }
  // The same counts in meta, which builds what it reads.
  auto big_meta = raw_header([](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"); });
  for (uint8_t b : {0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0}) big_meta.push_back(std::byte{b});
  EXPECT_EQ(message(big_meta), "header is not valid msgpack (insufficient bytes)");
  // A fixext 16 with its 16 bytes is whole, and an unknown key may hold it.
  EXPECT_EQ(message(flush_then({0xd8, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})), "accepted");
}

// The header encoder packs a plain meta text (the captures' values) without nlohmann's parse:
// its bytes must be the general path's, and a text the general path refuses must be refused.
TEST(RecordMetaText, plain_texts_pack_as_nlohmanns_parse_packs_them) {
  std::vector<std::string> texts = {
      R"({"type": "float", "value": 0.9})", R"({"type": "int", "value": -3})", R"({"type": "bool", "value": true})",
      R"({"type": "slice", "value": [1, null, -1]})", R"([{"type":"int","value":2},{"type":"bool","value":false}])",
      "null", "true", "false", "0", "-0", "7", "-7", "0.5", "-2.5e-3", "1E5", "1e+5", "2.0", "-0.0",
      "123456789012345678", "-123456789012345678", "1234567890123456789", "18446744073709551615",
      "18446744073709551616", "-9223372036854775808", "-9223372036854775809", "1e400", "-1e400", "5e-324",
      "1e-400", "0.1000000000000000055511151231257827", "{}", "[]", " { } ", "[[[]]]", "{\"a\":{\"b\":[]}}",
      "{\"a\":1,\"a\":2}", "\"\"", "\"plain\"", "\"esc\\\"aped\"", "\"tab\\t\"", "\"\\u00e9\"", "\"\xc3\xa9\"",
      "\xef\xbb\xbf{}", " \t\r\n[1,\n 2]\n", "",
      "{", "}", "[1,]", "[,1]", "01", "-01", "1.", ".5", "+1", "-", "1e", "1e+", "tru", "nul", "nulls", "[1 2]",
      "{\"a\" 1}", "{\"a\":1,}", "{1:2}", "\"abc", "1 2", "{}x", "\"a\x01\"", "[" + std::string(100, '['),
      std::string(70, '[') + std::string(70, ']'), "// c\n1", "NaN", "Infinity",
      "-Infinity", R"({"type": "float", "value": -Infinity})", "[NaN,Infinity,-Infinity]",
      R"({"s": "\u00e9", "v": NaN})", "-Inf", "nan", "-NaN", "Infinityx", "[NaN"};
  // Random values, and each cut or with a byte changed.
  std::mt19937 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::function<std::string(int)> random_value = [&](int depth) -> std::string {
    const std::string space[] = {"", " ", "\n", "\t "};
    switch (depth > 3 ? pick(5) : pick(7)) {
      case 0: return std::to_string(static_cast<int64_t>(rng()) - (int64_t{1} << 31));
      case 1: return fmt::format("{}", std::ldexp(static_cast<double>(rng()), pick(200) - 100));
      case 2: return std::string("\"") + "abc xyz_.0"[pick(10)] + "\"";
      case 3: return pick(2) ? "true" : "null";
      case 4: return std::to_string(rng()) + std::to_string(rng());  // up to 20 digits
      case 5: {
        std::string a = "[" + space[pick(4)];
        for (int i = pick(4); i > 0; --i) a += random_value(depth + 1) + (i > 1 ? "," + space[pick(4)] : "");
        return a + space[pick(4)] + "]";
      }
      default: {
        std::string o = "{";
        for (int i = pick(4); i > 0; --i)
          o += space[pick(4)] + "\"k" + std::to_string(pick(3)) + "\"" + space[pick(4)] + ":" + random_value(depth + 1) +
               (i > 1 ? "," : "");
        return o + "}";
      }
    }
  };
  for (int i = 0; i < 3000; ++i) {
    std::string t = random_value(0);
    texts.push_back(t);
    if (!t.empty()) {
      std::string cut = t.substr(0, static_cast<size_t>(pick(static_cast<int>(t.size()))));
      texts.push_back(cut);
      t[static_cast<size_t>(pick(static_cast<int>(t.size())))] = "{}[],:\"-.e0 x"[pick(13)];
      texts.push_back(t);
    }
  }
  size_t valid = 0;
  for (const auto &t : texts) {
    std::optional<std::string> general;
    try {
      general = record_meta_text_msgpack(t, true);
    } catch (const std::invalid_argument &) {
    }
    if (general) {
      ++valid;
      EXPECT_EQ(record_meta_text_msgpack(t), *general) << t;
    } else {
      EXPECT_THROW(record_meta_text_msgpack(t), std::invalid_argument) << t;
    }
  }
  EXPECT_GT(valid, 3000u);  // both kinds were tried
  EXPECT_LT(valid, texts.size() - 1000);
}

// Non-finite reals travel as Python's json writes them (NaN, Infinity, -Infinity tokens, the
// value leaves' form): packed as float64 by both paths, decoded as the IEEE values.
TEST(RecordMetaText, python_non_finite_tokens_pack_as_doubles) {
  for (const bool general : {false, true}) {
    record_header h;
    h.kind = record_kind::value;
    h.meta = record_meta_text(general ? R"({"s": "\u00e9", "value": [NaN, Infinity, -Infinity]})"
                                      : R"({"s": "e", "value": [NaN, Infinity, -Infinity]})");
    const auto v = record_header_decode(header_bytes(h)).meta["value"];
    ASSERT_EQ(v.size(), 3u);
    EXPECT_TRUE(std::isnan(v[0].get<double>()));
    EXPECT_EQ(v[1].get<double>(), std::numeric_limits<double>::infinity());
    EXPECT_EQ(v[2].get<double>(), -std::numeric_limits<double>::infinity());
  }
}

// ---- a value record's meta kept as its msgpack bytes (record_decode_options) ----

namespace {

// One header decoded as the writer decodes it (value_meta_as_msgpack) and as every other stage
// does, from the same bytes.
struct decoded_both_ways {
  record raw, tree;
};
decoded_both_ways decode_both_ways(const std::vector<std::byte> &header) {
  decoded_both_ways d;
  std::vector<zmq::message_t> frames;
  frames.push_back(message_of(header));
  record_decode(frames, d.raw, record_decode_options{.value_meta_as_msgpack = true});
  frames.clear();
  frames.push_back(message_of(header));
  record_decode(frames, d.tree);
  return d;
}

// A random msgpack value of every format a meta may hold: `plain` turns false where it packs what
// the decoder must still build as a tree (a key given twice, bin, more than 16 keys).
template <class Packer>
void pack_random_meta(Packer &p, std::mt19937 &rng, int depth, bool &plain) {
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int kind = depth >= 4 ? pick(9) : pick(12);
  switch (kind) {
    case 0: p.pack_nil(); return;
    case 1: p.pack(pick(2) == 1); return;
    case 2: {  // unsigned of every width, and the signed formats msgpack-c never writes for them
      const uint64_t widths[] = {0, 127, 128, 255, 65535, 65536, 4294967295u, 4294967296u, UINT64_MAX};
      const uint64_t v = widths[pick(9)] - static_cast<uint64_t>(pick(2));
      if (pick(3) == 0 && v <= static_cast<uint64_t>(INT64_MAX)) {
        const char b[9] = {'\xd3', static_cast<char>(v >> 56), static_cast<char>(v >> 48), static_cast<char>(v >> 40),
                           static_cast<char>(v >> 32), static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                           static_cast<char>(v >> 8), static_cast<char>(v)};
        p.pack_bin_body(b, 9);  // raw bytes: an int64 format holding a non-negative number
      } else {
        p.pack(v);
      }
      return;
    }
    case 3: {
      const int64_t widths[] = {-1, -32, -33, -128, -129, -32768, -32769, INT32_MIN, int64_t{INT32_MIN} - 1, INT64_MIN};
      p.pack(widths[pick(10)]);
      return;
    }
    case 4: {
      const double reals[] = {0.0, -0.0, 0.1, 1e16, 1e-5, 123456.789, 5e-324, 1.7976931348623157e308,
                              std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                              -std::numeric_limits<double>::infinity(), -2.5};
      const double d = reals[pick(12)];
      if (pick(2)) {
        p.pack_float(static_cast<float>(d));
      } else {
        uint64_t bits;
        std::memcpy(&bits, &d, 8);
        char b[9] = {'\xcb'};
        for (int i = 0; i < 8; ++i) b[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
        p.pack_bin_body(b, 9);  // float64 as it is: msgpack-c packs integral doubles as integers
      }
      return;
    }
    case 5: case 6: {
      const char *texts[] = {"", "int", "a \"quoted\" \\ path\n\t", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                             "bad \xff byte", "\x01\x1f control", "torch.float32"};
      const std::string s = texts[pick(7)];
      p.pack(s);
      return;
    }
    case 7: {
      plain = false;
      p.pack_bin(2), p.pack_bin_body("\x00\x01", 2);
      return;
    }
    case 8: {  // an empty container
      if (pick(2)) p.pack_array(0);
      else p.pack_map(0);
      return;
    }
    case 9: case 10: {
      const int n = pick(5);
      p.pack_array(static_cast<uint32_t>(n));
      for (int i = 0; i < n; ++i) pack_random_meta(p, rng, depth + 1, plain);
      return;
    }
    default: {
      const int n = pick(6) == 0 ? 17 + pick(3) : pick(5);
      if (n > 16) plain = false;
      p.pack_map(static_cast<uint32_t>(n));
      std::vector<std::string> keys;
      for (int i = 0; i < n; ++i) {
        std::string key = pick(8) == 0 && !keys.empty() ? keys[static_cast<size_t>(pick(static_cast<int>(keys.size())))]
                                                         : fmt::format("k{}\xc3\xa9", i);
        if (std::find(keys.begin(), keys.end(), key) != keys.end()) plain = false;
        keys.push_back(key);
        p.pack(key);
        pack_random_meta(p, rng, depth + 1, plain);
      }
      return;
    }
  }
}

}  // namespace

// The writer renders a value's meta from its bytes: what it writes must be what the tree every
// other stage builds of the same bytes renders to, at every indent and depth, and the bytes must
// travel on as the same meta.
TEST(RecordDecode, a_value_meta_kept_as_bytes_renders_as_its_tree) {
  std::mt19937 rng(16);
  int kept_as_bytes = 0, built_as_trees = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    bool plain = true;
    const auto header = raw_header([&](auto &p) {
      p.pack_map(3), p.pack("kind"), p.pack("value"), p.pack("entry"), p.pack("Torch.add.0.forward");
      p.pack("meta");
      pack_random_meta(p, rng, 0, plain);
    });
    SCOPED_TRACE(trial);
    const auto d = decode_both_ways(header);
    ASSERT_TRUE(d.tree.header.meta_msgpack.empty());
    if (plain) {
      ASSERT_FALSE(d.raw.header.meta_msgpack.empty());
      ASSERT_TRUE(d.raw.header.meta.is_null());
      ++kept_as_bytes;
    } else {
      ASSERT_TRUE(d.raw.header.meta_msgpack.empty());
      ASSERT_EQ(header_bytes(d.raw.header), header_bytes(d.tree.header));  // NaN != NaN in a tree
      ++built_as_trees;
    }
    for (const int indent : {1, -1, 0, 2}) {
      const int level = static_cast<int>(rng() % 5);
      std::string from_bytes = "prefix", from_tree = "prefix";
      try {
        pyjson_dump_append(from_tree, d.tree.header.meta, indent, level);
      } catch (const usage_error &) {  // bin has no JSON text: the bytes are not kept for it
        ASSERT_FALSE(plain);
        EXPECT_THROW(record_meta_pyjson_append(from_bytes, d.raw.header, indent, level), usage_error);
        continue;
      }
      record_meta_pyjson_append(from_bytes, d.raw.header, indent, level);
      ASSERT_EQ(from_bytes, from_tree) << "indent " << indent << " level " << level;
    }
    // Passed on, the bytes are the same meta to the next stage.
    std::vector<zmq::message_t> frames = record_encode(d.raw);
    const record again = record_decode(frames);
    ASSERT_EQ(header_bytes(again.header), header_bytes(d.tree.header));
  }
  EXPECT_GT(kept_as_bytes, 1000);
  EXPECT_GT(built_as_trees, 100);
}

// What the bytes cannot stand for is built as a tree: another kind's meta, a barrier's, a meta
// read before the kind, and one whose kind a later key changed.
TEST(RecordDecode, a_meta_kept_as_bytes_only_where_the_tree_would_say_the_same) {
  const auto value_meta = [](auto &p) { p.pack_map(2), p.pack("type"), p.pack("int"), p.pack("value"), p.pack(3); };
  {
    const auto d = decode_both_ways(raw_header([&](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), value_meta(p); }));
    EXPECT_FALSE(d.raw.header.meta_msgpack.empty());
  }
  {
    const auto d = decode_both_ways(raw_header([&](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("entry"), p.pack("meta"), value_meta(p); }));
    EXPECT_TRUE(d.raw.header.meta_msgpack.empty());
    EXPECT_EQ(d.raw.header.meta, d.tree.header.meta);
  }
  {
    const auto d = decode_both_ways(raw_header([&](auto &p) {
      p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_map(1), p.pack("barrier"), p.pack(7);
    }));
    EXPECT_TRUE(d.raw.header.meta_msgpack.empty());
    EXPECT_TRUE(record_is_barrier(d.raw.header));
  }
  {
    const auto d = decode_both_ways(raw_header([&](auto &p) { p.pack_map(2), p.pack("meta"), value_meta(p), p.pack("kind"), p.pack("value"); }));
    EXPECT_TRUE(d.raw.header.meta_msgpack.empty());
    EXPECT_EQ(d.raw.header.meta, d.tree.header.meta);
  }
  {
    const auto d = decode_both_ways(raw_header([&](auto &p) {
      p.pack_map(3), p.pack("kind"), p.pack("value"), p.pack("meta"), value_meta(p), p.pack("kind"), p.pack("entry");
    }));
    EXPECT_EQ(d.raw.header.kind, record_kind::entry);
    EXPECT_TRUE(d.raw.header.meta_msgpack.empty());
    EXPECT_EQ(d.raw.header.meta, d.tree.header.meta);
  }
  {  // meta given twice: the last one counts, whichever form the first was kept in
    const auto d = decode_both_ways(raw_header([&](auto &p) {
      p.pack_map(3), p.pack("kind"), p.pack("value"), p.pack("meta"), value_meta(p);
      p.pack("meta"), p.pack_map(2), p.pack("a"), p.pack(1), p.pack("a"), p.pack(2);
    }));
    EXPECT_TRUE(d.raw.header.meta_msgpack.empty());
    EXPECT_EQ(d.raw.header.meta, d.tree.header.meta);
    const auto e = decode_both_ways(raw_header([&](auto &p) {
      p.pack_map(3), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_map(2), p.pack("a"), p.pack(1), p.pack("a"), p.pack(2);
      p.pack("meta"), value_meta(p);
    }));
    EXPECT_FALSE(e.raw.header.meta_msgpack.empty());
    EXPECT_TRUE(e.raw.header.meta.is_null());
  }
}

// A broken meta is named the same either way.
TEST(RecordDecode, a_broken_meta_is_named_alike_kept_as_bytes_or_not) {
  const auto message = [](const std::vector<std::byte> &header, bool as_bytes) {
    std::vector<zmq::message_t> frames;
    frames.push_back(message_of(header));
    record r;
    try {
      record_decode(frames, r, record_decode_options{.value_meta_as_msgpack = as_bytes});
    } catch (const framing_error &e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::vector<std::vector<std::byte>> broken = {
      raw_header([](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_map(1), p.pack("e"), p.pack_ext(1, 1), p.pack_ext_body("x", 1); }),
      raw_header([](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_map(1), p.pack(5), p.pack(1); }),
      raw_header([](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_array(3), p.pack(1); }),
      raw_header([](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_bin_body("\xc1", 1); }),
  };
  for (const auto &header : broken) {
    const std::string as_tree = message(header, false);
    EXPECT_NE(as_tree, "accepted");
    EXPECT_EQ(message(header, true), as_tree);
  }
}
