// The header codec (transport/record_header.cpp, record.h sections 1 and 2): every field
// through the wire, the ladder of broken headers, and the decoder's reading of each key from
// hand-written msgpack.
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

// A tensor tprobe cannot read travels as its facts: foreign_dtype instead of dtype, no payload,
// no stats; one that claims data or statistics as well is malformed.
TEST(RecordHeader, foreign_dtype_tensor_round_trips_as_facts) {
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

TEST(RecordHeader, small_payload_keeps_every_field) {
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

TEST(RecordHeader, integral_and_negative_zero_floats_stay_floats) {
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

TEST(RecordHeader, truncated_header_is_rejected) {
  auto bytes = header_bytes(tensor_record({2}).header);
  for (size_t cut : {size_t{0}, size_t{3}, bytes.size() / 2, bytes.size() - 1}) {
    std::span<const std::byte> part(bytes.data(), cut);
    EXPECT_THROW(record_header_decode(part), framing_error) << "cut at " << cut;
  }
}

TEST(RecordHeader, wrong_major_version_is_rejected_naming_it) {
  auto bytes = header_bytes(tensor_record({2}).header);
  bytes[2] = std::byte{RECORD_VERSION_MAJOR + 1};
  try {
    record_header_decode(bytes);
    FAIL();
  } catch (const framing_error &e) {
    EXPECT_NE(std::string(e.what()).find("major version 2"), std::string::npos) << e.what();
  }
}

TEST(RecordHeader, newer_minor_version_with_unknown_keys_is_accepted) {
  auto bytes = header_bytes(record_header_of(record_kind::flush));
  bytes[3] = std::byte{RECORD_VERSION_MINOR + 1};
  EXPECT_EQ(record_header_decode(bytes).kind, record_kind::flush);
}

TEST(RecordHeader, bad_magic_is_rejected) {
  auto bytes = header_bytes(tensor_record({2}).header);
  bytes[0] = std::byte{'X'};
  EXPECT_THROW(record_header_decode(bytes), framing_error);
}

TEST(RecordHeader, corrupt_msgpack_is_rejected) {
  auto bytes = header_bytes(tensor_record({2}).header);
  for (size_t i = RECORD_PREFIX_SIZE; i < bytes.size(); ++i) bytes[i] = std::byte{0xc1};  // never-used byte
  EXPECT_THROW(record_header_decode(bytes), framing_error);
}

TEST(RecordHeader, shape_and_length_must_agree) {
  record r = tensor_record({4});
  r.header.shape = {5};
  EXPECT_THROW(round_trip(r), framing_error);
}

TEST(RecordHeader, unknown_kind_and_dtype_are_rejected) {
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

// ---- the decoder's reading of each key (record.h section 2), as hand-written msgpack ----

TEST(RecordHeader, signed_formats_of_non_negative_numbers_are_unsigned_integers) {
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

TEST(RecordHeader, a_key_given_twice_counts_by_its_last_value) {
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

TEST(RecordHeader, meta_keeps_every_msgpack_type_and_order) {
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

TEST(RecordHeader, an_unknown_key_is_passed_over_whatever_it_holds) {
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

TEST(RecordHeader, a_mistyped_value_is_named_by_its_key) {
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
TEST(RecordHeader, counts_beyond_the_frame_and_the_unused_byte_are_bad_msgpack) {
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
