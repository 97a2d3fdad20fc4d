// The wire-format ladder: empty, small, large, LZ4, truncated, wrong version, corrupt; then the
// record file framing.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include <gtest/gtest.h>

#include "errors.h"
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

TEST(record, empty_payload_round_trips) {
  record r = tensor_record({0, 4});
  ASSERT_TRUE(r.has_payload());
  EXPECT_EQ(r.header.length, 0u);
  record back = round_trip(r);
  EXPECT_TRUE(back.has_payload());
  EXPECT_EQ(back.payload_bytes().size(), 0u);
  EXPECT_EQ(back.header.shape, (std::vector<int64_t>{0, 4}));
}

// A tensor tprobe cannot read travels as its facts: foreign_dtype instead of dtype, no payload,
// no stats; one that claims data or statistics as well is malformed.
TEST(record, foreign_dtype_tensor_round_trips_as_facts) {
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

TEST(record, header_only_record_has_one_frame) {
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

TEST(record, small_payload_keeps_every_field) {
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

TEST(record, integral_and_negative_zero_floats_stay_floats) {
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

TEST(record, large_payload_round_trips) {
  record r = tensor_record({4096, 1024});  // 16 MiB
  record back = round_trip(r);
  auto a = r.payload_bytes(), b = back.payload_bytes();
  ASSERT_EQ(b.size(), size_t{16} << 20);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0);
}

TEST(record, lz4_payload_round_trips_and_shrinks) {
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

TEST(record, incompressible_payload_is_not_lz4) {
  std::vector<std::byte> noise(4096);
  uint32_t x = 12345;
  for (auto &b : noise) b = static_cast<std::byte>((x = x * 1664525u + 1013904223u) >> 24);
  EXPECT_FALSE(record_payload_lz4(noise).has_value());
}

TEST(record, truncated_header_is_rejected) {
  auto bytes = header_bytes(tensor_record({2}).header);
  for (size_t cut : {size_t{0}, size_t{3}, bytes.size() / 2, bytes.size() - 1}) {
    std::span<const std::byte> part(bytes.data(), cut);
    EXPECT_THROW(record_header_decode(part), framing_error) << "cut at " << cut;
  }
}

TEST(record, truncated_payload_is_rejected) {
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

TEST(record, missing_payload_frame_is_rejected) {
  record r = tensor_record({8});
  auto frames = record_encode(r);
  std::vector<zmq::message_t> received;
  received.emplace_back(frames[0].data(), frames[0].size());
  EXPECT_THROW(record_decode(received), framing_error);
}

TEST(record, wrong_major_version_is_rejected_naming_it) {
  auto bytes = header_bytes(tensor_record({2}).header);
  bytes[2] = std::byte{RECORD_VERSION_MAJOR + 1};
  try {
    record_header_decode(bytes);
    FAIL();
  } catch (const framing_error &e) {
    EXPECT_NE(std::string(e.what()).find("major version 2"), std::string::npos) << e.what();
  }
}

TEST(record, newer_minor_version_with_unknown_keys_is_accepted) {
  auto bytes = header_bytes(record_header_of(record_kind::flush));
  bytes[3] = std::byte{RECORD_VERSION_MINOR + 1};
  EXPECT_EQ(record_header_decode(bytes).kind, record_kind::flush);
}

TEST(record, bad_magic_is_rejected) {
  auto bytes = header_bytes(tensor_record({2}).header);
  bytes[0] = std::byte{'X'};
  EXPECT_THROW(record_header_decode(bytes), framing_error);
}

TEST(record, corrupt_msgpack_is_rejected) {
  auto bytes = header_bytes(tensor_record({2}).header);
  for (size_t i = RECORD_PREFIX_SIZE; i < bytes.size(); ++i) bytes[i] = std::byte{0xc1};  // never-used byte
  EXPECT_THROW(record_header_decode(bytes), framing_error);
}

TEST(record, corrupt_lz4_block_is_rejected) {
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

TEST(record, shape_and_length_must_agree) {
  record r = tensor_record({4});
  r.header.shape = {5};
  EXPECT_THROW(round_trip(r), framing_error);
}

TEST(record, unknown_kind_and_dtype_are_rejected) {
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

TEST(record_file, round_trips_a_stream) {
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

TEST(record_file, truncated_file_names_the_offset) {
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

TEST(record_file, not_a_record_file) {
  test::temp_dir dir;
  test::write_file(dir / "x", "hello world, not records");
  EXPECT_THROW(record_file_reader(dir / "x"), framing_error);
  EXPECT_THROW(record_file_reader(dir / "missing"), system_error);
}

// A frame length is checked against the file before anything is allocated: a 1 TB length used to
// reach zmq_msg_init_size and fail with ENOMEM ("Cannot allocate memory", exit 111), where a
// corrupt file is an input error (framing_error, exit 100) naming the file and the offset.
TEST(record_file, huge_frame_length_is_corrupt_input_not_an_allocation) {
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

// The fuzzer ran out of file descriptors: a reader whose constructor threw on a bad magic never
// closed its file, so a stage rejecting many files would end in EMFILE.
TEST(record_file, rejected_file_is_closed) {
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
