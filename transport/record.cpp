// record.cpp: the record class of record.h (its payload frame, kept as received and LZ4-decoded
// on first use; reuse; describe), a record as its frames and back (record_encode,
// record_decode), and LZ4 payloads. The header codec is record_header.cpp; the meta's quick
// forms record_meta.cpp; batches record_batch.cpp; call stacks by reference record_stacks.cpp;
// record files record_file.cpp. Their shared helpers are in record_codec.h.
#include "record.h"

#include <lz4.h>

#include <fmt/format.h>

#include "record_codec.h"

namespace tprobe {

using namespace record_detail;

std::span<const std::byte> record::payload_bytes() const {
  if (!payload_frame_) return {};
  const auto *data = static_cast<const std::byte *>(payload_frame_->data());
  if (header.codec == record_codec::raw) return {data, payload_frame_->size()};
  if (!decoded_valid_) {
    if (header.length > static_cast<uint64_t>(INT32_MAX))
      throw framing_error(describe() + ": LZ4 payload larger than 2 GiB");
    decoded_.resize(header.length);
    const int n = LZ4_decompress_safe(reinterpret_cast<const char *>(data), reinterpret_cast<char *>(decoded_.data()),
                                      static_cast<int>(payload_frame_->size()), static_cast<int>(header.length));
    if (n < 0 || static_cast<uint64_t>(n) != header.length)
      throw framing_error(describe() + ": corrupt LZ4 payload");
    decoded_valid_ = true;
  }
  return {decoded_.data(), decoded_.size()};
}

void record::set_payload(std::vector<std::byte> bytes) {
  // The frame owns the vector's buffer: moving it to the heap avoids a copy of the data.
  auto *owned = new std::vector<std::byte>(std::move(bytes));
  header.codec = record_codec::raw;
  header.length = owned->size();
  header.stored = owned->size();
  payload_frame_.emplace(owned->data(), owned->size(),
                         [](void *, void *hint) { delete static_cast<std::vector<std::byte> *>(hint); }, owned);
  decoded_valid_ = false;
}

void record::set_payload_frame(zmq::message_t frame) {
  header.stored = frame.size();
  if (header.codec == record_codec::raw) header.length = frame.size();
  payload_frame_.emplace(std::move(frame));
  decoded_valid_ = false;
}

void record::reuse_as(record_kind kind) {
  drop_payload();
  decoded_.shrink_to_fit();  // an LZ4 payload's decoded bytes are not kept for the next record
  record_header_reset(header, kind);
}

void record::drop_payload() {
  payload_frame_.reset();
  decoded_.clear();
  decoded_valid_ = false;
  header.stored.reset();
  header.length = 0;
  header.codec = record_codec::raw;
}

std::string record::describe() const {
  std::string s(record_kind_name(header.kind));
  s += " record";
  if (!header.entry.empty()) s += " " + header.entry;
  if (!header.slot.empty()) s += " " + header.slot;
  s += fmt::format(" (rank {}, step {}, seq {})", header.rank, header.step, header.seq);
  return s;
}

std::vector<zmq::message_t> record_encode(const record &r) {
  std::vector<zmq::message_t> frames;
  frames.reserve(2);
  frames.push_back(record_header_encode(r.header));
  if (r.has_payload()) {
    if (!r.payload_frame()) throw std::logic_error("record header says stored but has no payload frame");
    frames.emplace_back();
    frames.back().copy(const_cast<zmq::message_t &>(*r.payload_frame()));  // shares large buffers
  }
  return frames;
}

record record_decode(std::vector<zmq::message_t> &frames) {
  record r;
  record_decode(frames, r);
  return r;
}

void record_decode(std::vector<zmq::message_t> &frames, record &r, const record_decode_options &options) {
  if (frames.empty() || frames.size() > 2)
    throw framing_error(fmt::format("a record has 1 or 2 frames, not {}", frames.size()));
  const auto &hf = frames[0];
  r.reuse_as(record_kind::tensor);
  header_decode_into_reset({static_cast<const std::byte *>(hf.data()), hf.size()}, r.header, options);
  const bool expects_payload = r.header.stored.has_value();
  if (expects_payload != (frames.size() == 2))
    throw framing_error(r.describe() + (expects_payload ? ": header announces a payload frame that is missing"
                                                        : ": unexpected payload frame"));
  if (expects_payload) {
    if (frames[1].size() != *r.header.stored)
      throw framing_error(r.describe() + fmt::format(": payload frame is {} bytes, header says {} (truncated?)",
                                                     frames[1].size(), *r.header.stored));
    const uint64_t length = r.header.length;
    r.set_payload_frame(std::move(frames[1]));
    r.header.length = length;
  }
}

std::optional<zmq::message_t> record_payload_lz4(std::span<const std::byte> bytes) {
  if (bytes.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) return std::nullopt;
  const int bound = LZ4_compressBound(static_cast<int>(bytes.size()));
  std::vector<char> out(static_cast<size_t>(bound));
  const int n = LZ4_compress_default(reinterpret_cast<const char *>(bytes.data()), out.data(),
                                     static_cast<int>(bytes.size()), bound);
  if (n <= 0 || static_cast<size_t>(n) >= bytes.size()) return std::nullopt;
  return zmq::message_t(out.data(), static_cast<size_t>(n));
}

}  // namespace tprobe
