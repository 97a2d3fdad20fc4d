// Record files (transport/record_file.cpp, record.h section 6): a stream round trips, and a
// truncated or corrupt file is named by its offset before anything is allocated for it.
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
