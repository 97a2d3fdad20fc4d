// record_file.cpp: record files (record.h section 6, "offline = online"): the writer and the
// reader, which checks every frame length before allocating for it. Apart because it is I/O on a
// file; a record's frames are record.cpp's (record_encode, record_decode).
#include "record.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include <sys/stat.h>

#include <fmt/format.h>

#include "errors.h"

namespace tprobe {

// ---- record files ----

record_file_writer::record_file_writer(const std::string &path) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw system_error_from_errno("create", path, errno);
  ::fchmod(fileno(file_), 0640);
  if (std::fwrite(RECORD_FILE_MAGIC.data(), 1, RECORD_FILE_MAGIC.size(), file_) != RECORD_FILE_MAGIC.size())
    throw system_error_from_errno("write", path, errno);
}

record_file_writer::~record_file_writer() {
  if (file_) std::fclose(file_);
}

void record_file_writer::write(const record &r) {
  auto frames = record_encode(r);
  const uint8_t count = static_cast<uint8_t>(frames.size());
  bool ok = std::fwrite(&count, 1, 1, file_) == 1;
  for (const auto &f : frames) {
    const uint64_t size = f.size();  // little-endian hosts only (x86-64, aarch64)
    ok = ok && std::fwrite(&size, sizeof size, 1, file_) == 1;
    ok = ok && (size == 0 || std::fwrite(f.data(), 1, size, file_) == size);
  }
  if (!ok) throw system_error_from_errno("write", path_, errno);
}

void record_file_writer::close() {
  if (!file_) return;
  const bool ok = std::fflush(file_) == 0;
  const int err = errno;
  std::fclose(file_);
  file_ = nullptr;
  if (!ok) throw system_error_from_errno("write", path_, err);
}

namespace {

// The largest frame length that may follow byte `offset` of `file`: the bytes left in a regular
// file (measured now, so a file still being appended to is read as far as it goes), capped at
// RECORD_FILE_MAX_FRAME for any file (a pipe cannot be measured).
uint64_t frame_size_limit(std::FILE *file, uint64_t offset) {
  struct stat st {};
  if (::fstat(fileno(file), &st) != 0 || !S_ISREG(st.st_mode)) return RECORD_FILE_MAX_FRAME;
  const auto size = static_cast<uint64_t>(st.st_size);
  return std::min(size > offset ? size - offset : 0, RECORD_FILE_MAX_FRAME);
}

}  // namespace

record_file_reader::record_file_reader(const std::string &path, const record_decode_options &options)
    : path_(path), options_(options) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) throw system_error_from_errno("open", path, errno);
  char magic[RECORD_FILE_MAGIC.size()];
  if (std::fread(magic, 1, sizeof magic, file_) != sizeof magic ||
      std::string_view(magic, sizeof magic) != RECORD_FILE_MAGIC) {
    std::fclose(file_);  // no destructor runs for a constructor that throws
    file_ = nullptr;
    throw framing_error(fmt::format("{}: not a tprobe record file (bad magic)", path));
  }
  offset_ = sizeof magic;
}

record_file_reader::~record_file_reader() {
  if (file_) std::fclose(file_);
}

std::optional<record> record_file_reader::read() {
  record r;
  if (!read(r)) return std::nullopt;
  return r;
}

bool record_file_reader::read(record &into) {
  const uint64_t record_offset = offset_;
  uint8_t count = 0;
  if (std::fread(&count, 1, 1, file_) != 1) {
    if (std::ferror(file_)) throw system_error_from_errno("read", path_, errno);
    return false;
  }
  offset_ += 1;
  auto truncated = [&] {
    return framing_error(fmt::format("{}: record at byte {} is truncated", path_, record_offset));
  };
  if (count < 1 || count > 2)
    throw framing_error(fmt::format("{}: record at byte {} has {} frames (corrupt file)", path_, record_offset, count));
  std::vector<zmq::message_t> frames;
  for (uint8_t i = 0; i < count; ++i) {
    uint64_t size = 0;
    if (std::fread(&size, sizeof size, 1, file_) != 1) throw truncated();
    offset_ += sizeof size;
    // Checked before allocating: a corrupt length must be a corrupt-file error (exit 100), not a
    // failed 1 TB allocation (ENOMEM, exit 111) or a machine driven into swap.
    // A frame inside the end measured last needs no fstat (a file only grows): one per record
    // was a tenth of a stage's time replaying a recording.
    if (size > measured_end_ - std::min(offset_, measured_end_)) {
      const uint64_t limit = frame_size_limit(file_, offset_);
      measured_end_ = offset_ + limit;
      if (size > limit)
        throw framing_error(fmt::format(
            "{}: record at byte {} claims a {}-byte frame at byte {}, but {} (corrupt file)", path_, record_offset,
            size, offset_ - sizeof size,
            limit == RECORD_FILE_MAX_FRAME ? fmt::format("a frame is at most {} bytes", RECORD_FILE_MAX_FRAME)
                                           : fmt::format("only {} bytes are left in the file", limit)));
    }
    zmq::message_t frame(size);
    if (size && std::fread(frame.data(), 1, size, file_) != size) throw truncated();
    offset_ += size;
    frames.push_back(std::move(frame));
  }
  try {
    record_decode(frames, into, options_);
    return true;
  } catch (const framing_error &e) {
    throw framing_error(fmt::format("{}: record at byte {}: {}", path_, record_offset, e.what()));
  }
}

}  // namespace tprobe
