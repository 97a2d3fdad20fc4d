// record_test_support.h: what the record codec's tests (test_record*.cpp, one file per concern
// of transport/record.h) build their records and frames with: a tensor record, a round trip as a
// socket delivers it, header and batch frames from records or from hand-written msgpack.
#pragma once

#include <cstring>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <msgpack.hpp>

#include "record.h"

namespace record_test {

using namespace tprobe;

inline record tensor_record(std::vector<int64_t> shape, dtype t = dtype::float32) {
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

inline record round_trip(const record &r) {
  auto frames = record_encode(r);
  // Copy the frames, as a socket would deliver them.
  std::vector<zmq::message_t> received;
  for (auto &f : frames) received.emplace_back(f.data(), f.size());
  return record_decode(received);
}

inline std::vector<std::byte> header_bytes(const record_header &h) {
  auto m = record_header_encode(h);
  const auto *p = static_cast<const std::byte *>(m.data());
  return {p, p + m.size()};
}

inline zmq::message_t batch_of_all(const std::vector<record> &records) {
  record_batch_builder b;
  for (const auto &r : records) b.append(record_encode(r));
  auto frame = b.take();
  return zmq::message_t(frame.data(), frame.size());  // as a socket delivers it
}

// Records are move-only: a batch of temporaries.
template <class... R>
inline zmq::message_t batch_of(R &&...rs) {
  std::vector<record> records;
  (records.push_back(std::move(rs)), ...);
  return batch_of_all(records);
}

inline std::vector<std::byte> bytes_of(const zmq::message_t &m) {
  const auto *p = static_cast<const std::byte *>(m.data());
  return {p, p + m.size()};
}

inline zmq::message_t message_of(const std::vector<std::byte> &bytes) { return zmq::message_t(bytes.data(), bytes.size()); }

inline void expect_same(const record &a, const record &b) {
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

// A header frame from msgpack written by `pack` (the "TP" prefix of this build's version).
template <class Pack>
inline std::vector<std::byte> raw_header(Pack &&pack) {
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
inline zmq::message_t batch_of_header(const std::vector<std::byte> &header) {
  std::vector<std::byte> bytes = {std::byte{'T'}, std::byte{'B'}, std::byte{RECORD_VERSION_MAJOR},
                                  std::byte{RECORD_VERSION_MINOR}};
  const auto length = static_cast<uint32_t>(header.size());
  const auto *l = reinterpret_cast<const std::byte *>(&length);
  bytes.insert(bytes.end(), l, l + 4);
  bytes.insert(bytes.end(), header.begin(), header.end());
  return message_of(bytes);
}

}  // namespace record_test
