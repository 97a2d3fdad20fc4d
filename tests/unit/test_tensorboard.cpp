// stages/stream/monitor/tensorboard.h: the event files tprobe-monitor writes for `format:
// tensorboard`, read back by a reader written here from the specifications, not from the writer:
// TFRecord framing (tensorflow/core/lib/io/record_reader.cc: uint64 length, masked CRC32C of the
// length, data, masked CRC32C of the data; CRC32C computed bit by bit, RFC 3720's polynomial) and
// the Event protobuf (tensorflow/core/util/event.proto, decoded by a generic wire-format walk:
// field numbers and wire types, unknown fields skipped).
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "monitor/tensorboard.h"
#include "test_support.h"

namespace tprobe {
namespace {

// ---- the reader ----

uint32_t spec_crc32c(const std::string &s) {  // bitwise, reflected 0x1EDC6F41 = 0x82F63B78
  uint32_t crc = ~0u;
  for (unsigned char c : s) {
    crc ^= c;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t spec_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t le(const std::string &s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(static_cast<unsigned char>(s.at(at + i))) << (8 * i);
  return v;
}

// TFRecord records of a file; a framing error fails the test.
std::vector<std::string> read_tfrecords(const std::string &bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 12u) << "a truncated length at " << at;
    if (bytes.size() - at < 12) break;
    const uint64_t n = le(bytes, at, 8);
    EXPECT_EQ(le(bytes, at + 8, 4), spec_mask(spec_crc32c(bytes.substr(at, 8)))) << "length crc at " << at;
    EXPECT_GE(bytes.size() - at - 12, n + 4) << "a truncated record at " << at;
    if (bytes.size() - at - 12 < n + 4) break;
    std::string data = bytes.substr(at + 12, n);
    EXPECT_EQ(le(bytes, at + 12 + n, 4), spec_mask(spec_crc32c(data))) << "data crc at " << at;
    out.push_back(std::move(data));
    at += 12 + n + 4;
  }
  return out;
}

struct pb_field {
  uint32_t number = 0, wire = 0;
  uint64_t value = 0;  // varint, fixed64, fixed32
  std::string bytes;   // length-delimited
};

std::vector<pb_field> read_pb(const std::string &s) {
  std::vector<pb_field> out;
  size_t at = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const auto b = static_cast<unsigned char>(s.at(at++));
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    ADD_FAILURE() << "a varint longer than 10 bytes";
    return v;
  };
  while (at < s.size()) {
    const uint64_t key = varint();
    pb_field f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<uint32_t>(key & 7);
    switch (f.wire) {
      case 0: f.value = varint(); break;
      case 1: f.value = le(s, at, 8), at += 8; break;
      case 5: f.value = le(s, at, 4), at += 4; break;
      case 2: {
        const uint64_t n = varint();
        f.bytes = s.substr(at, n);
        EXPECT_EQ(f.bytes.size(), n);
        at += n;
        break;
      }
      default: ADD_FAILURE() << "wire type " << f.wire; return out;
    }
    out.push_back(std::move(f));
  }
  return out;
}

struct event {
  double wall_time = 0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  std::vector<std::pair<std::string, float>> scalars;  // summary.value: (tag, simple_value)
};

event read_event(const std::string &data) {
  event e;
  for (const auto &f : read_pb(data)) {
    if (f.number == 1 && f.wire == 1) std::memcpy(&e.wall_time, &f.value, 8);
    else if (f.number == 2 && f.wire == 0) e.step = static_cast<int64_t>(f.value);
    else if (f.number == 3 && f.wire == 2) e.file_version = f.bytes;
    else if (f.number == 5 && f.wire == 2) {
      for (const auto &v : read_pb(f.bytes)) {
        EXPECT_EQ(v.number, 1u);
        std::string tag;
        std::optional<float> simple;
        for (const auto &x : read_pb(v.bytes)) {
          if (x.number == 1 && x.wire == 2) tag = x.bytes;
          if (x.number == 2 && x.wire == 5) {
            const auto bits = static_cast<uint32_t>(x.value);
            float fv;
            std::memcpy(&fv, &bits, 4);
            simple = fv;
          }
        }
        EXPECT_TRUE(simple.has_value()) << tag;
        e.scalars.emplace_back(tag, simple.value_or(0));
      }
    } else {
      ADD_FAILURE() << "an unexpected Event field " << f.number << " wire " << f.wire;
    }
  }
  return e;
}

std::vector<event> read_event_file(const std::string &path) {
  std::vector<event> out;
  for (const auto &r : read_tfrecords(test::read_file(path))) out.push_back(read_event(r));
  return out;
}

// ---- the tests ----

TEST(Tensorboard, Crc32cIsCastagnolisOfTheKnownVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the CRC catalogue's check value
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of zeros
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);  // and of ones
  EXPECT_EQ(crc32c(""), 0u);
  for (const std::string &s : std::vector<std::string>{"a", "brain.Event:2", std::string(1000, 'x')}) EXPECT_EQ(crc32c(s), spec_crc32c(s));
  EXPECT_EQ(tfrecord_masked_crc(0x12345678u), spec_mask(0x12345678u));
}

TEST(Tensorboard, TheWritersFileIsAFileVersionRecordThenOneScalarAnEvent) {
  test::temp_dir dir;
  const double t0 = 1700000000.25;
  std::string path;
  {
    tensorboard_writer w(dir.path(), t0);
    path = w.path();
    // Valid from its creation on: the file_version record is there before any scalar.
    const auto first = read_event_file(path);
    ASSERT_EQ(first.size(), 1u);
    w.add_scalar("0:fc.weight/rank0/post_grad_norm", 2.236068f, 0, t0 + 1);
    w.add_scalar("0:fc.weight/rank0/post_grad_mean", -0.25f, 0, t0 + 1);
    w.add_scalar("0:fc.weight/rank0/post_grad_norm", 6.708204f, 2, t0 + 2);
    w.add_scalar("0:fc.bias/rank0/post_grad_norm", std::nanf(""), 2, t0 + 2);
    w.add_scalar("neg", 1.0f, -3, t0 + 2);
    EXPECT_EQ(read_event_file(path).size(), 1u);  // queued until flush
    w.flush();
    EXPECT_EQ(w.scalars(), 5u);
    w.add_scalar("0:fc.weight/rank0/post_grad_norm", 1.5f, 3, t0 + 3);  // written when destroyed
  }
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(std::filesystem::path(path).filename().string(), std::string("events.out.tfevents.1700000000.") + host);
  EXPECT_EQ(std::filesystem::path(path).parent_path(), std::filesystem::path(dir.path()));

  const auto events = read_event_file(path);
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[0].wall_time, t0);
  EXPECT_TRUE(events[0].scalars.empty());
  struct want {
    int64_t step;
    std::string tag;
    float value;
    double wall;
  };
  const std::vector<want> wants = {{0, "0:fc.weight/rank0/post_grad_norm", 2.236068f, t0 + 1},
                                   {0, "0:fc.weight/rank0/post_grad_mean", -0.25f, t0 + 1},
                                   {2, "0:fc.weight/rank0/post_grad_norm", 6.708204f, t0 + 2},
                                   {2, "0:fc.bias/rank0/post_grad_norm", std::nanf(""), t0 + 2},
                                   {-3, "neg", 1.0f, t0 + 2},
                                   {3, "0:fc.weight/rank0/post_grad_norm", 1.5f, t0 + 3}};
  for (size_t i = 0; i < wants.size(); ++i) {
    const auto &e = events[i + 1];
    SCOPED_TRACE(i);
    EXPECT_FALSE(e.file_version.has_value());
    EXPECT_EQ(e.step, wants[i].step);
    EXPECT_EQ(e.wall_time, wants[i].wall);
    ASSERT_EQ(e.scalars.size(), 1u);
    EXPECT_EQ(e.scalars[0].first, wants[i].tag);
    if (std::isnan(wants[i].value)) EXPECT_TRUE(std::isnan(e.scalars[0].second));
    else EXPECT_EQ(e.scalars[0].second, wants[i].value);
  }
}

TEST(Tensorboard, TheReaderCatchesACorruptedRecord) {
  // The reader's own check: a flipped data byte breaks the data CRC, a flipped length byte the
  // length CRC (so a test passing above does not pass for a reader that checks nothing).
  std::string frame = tfrecord_frame(tensorboard_scalar_event(1.0, 1, "t", 1.0f));
  ASSERT_EQ(read_tfrecords(frame).size(), 1u);
  std::string bad = frame;
  bad[14] ^= 1;
  EXPECT_NONFATAL_FAILURE(read_tfrecords(bad), "data crc");
  bad = frame;
  bad[9] ^= 1;  // the length's CRC
  EXPECT_NONFATAL_FAILURE(read_tfrecords(bad), "length crc");
}

}  // namespace
}  // namespace tprobe
