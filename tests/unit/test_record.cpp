// The record itself (transport/record.cpp): round trips as frames, payloads raw and LZ4, reuse,
// and the frames that do not make a record. Its header, meta, batches, stacks and files have
// test files of their own (test_record_header.cpp, test_record_meta.cpp, …).
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
