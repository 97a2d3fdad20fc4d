// tensorboard.cpp: see tensorboard.h.
#include "tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "errors.h"
#include "safe_path.h"

namespace tprobe {

namespace {

// The byte-at-a-time table of the reflected Castagnoli polynomial: event files are small (a few
// scalars a tag and step), so the slicing variants' speed is not worth their tables here.
constexpr std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrc32cTable = crc32c_table();

void put_le(std::string &out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Protocol buffers' base-128 varint; an int64 is encoded as its two's complement uint64.
void put_varint(std::string &out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// A field key: (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
void put_key(std::string &out, uint32_t field, uint32_t wire) { put_varint(out, (field << 3) | wire); }

void put_bytes(std::string &out, uint32_t field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

void put_double(std::string &out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 1);
  put_le(out, bits, 8);
}

void put_float(std::string &out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 5);
  put_le(out, bits, 4);
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : data) c = kCrc32cTable[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t tfrecord_masked_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, tfrecord_masked_crc(crc32c(out)), 4);
  out.append(data);
  put_le(out, tfrecord_masked_crc(crc32c(data)), 4);
  return out;
}

std::string tensorboard_file_version_event(double wall_time) {
  std::string e;
  put_double(e, 1, wall_time);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string tensorboard_scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;  // Summary.Value
  put_bytes(v, 1, tag);
  put_float(v, 2, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e;
  put_double(e, 1, wall_time);
  if (step != 0) {  // proto3: a zero is not written
    put_key(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(step));
  }
  put_bytes(e, 5, summary);
  return e;
}

double tensorboard_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

tensorboard_writer::tensorboard_writer(const std::string &dir, double wall_time) {
  path_ = fmt::format("{}/events.out.tfevents.{:010d}.{}", dir, static_cast<int64_t>(std::floor(wall_time)),
                      host_name());
  fd_ = safe_open_for_write(path_);
  pending_ = tfrecord_frame(tensorboard_file_version_event(wall_time));
  flush();
}

tensorboard_writer::~tensorboard_writer() {
  try {
    flush();
  } catch (const std::exception &) {
    // flush() is how a caller learns of a failed write; a destructor cannot report one.
  }
  if (fd_ >= 0) ::close(fd_);
}

void tensorboard_writer::add_scalar(std::string_view tag, float value, int64_t step, double wall_time) {
  pending_ += tfrecord_frame(tensorboard_scalar_event(wall_time, step, tag, value));
  ++scalars_;
}

void tensorboard_writer::flush() {
  if (pending_.empty()) return;
  std::string text;
  text.swap(pending_);
  safe_write_all(fd_, text.data(), text.size(), path_);
}

}  // namespace tprobe
