// record_batch.cpp: batches (record.h section 4): which records may join one, a batch frame
// decoded (record_batch_decode) or only glanced at (record_batch_glance, for a stage that passes
// batches on unchanged), and built (record_batch_builder, over a pool of recycled buffers). Apart
// from the header codec (record_header.cpp), whose encoder and decoder it calls per record.
#include "record.h"

#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "record_codec.h"

namespace tprobe {

using namespace record_detail;

// ---- batches ----

namespace {
constexpr unsigned char BATCH_MAGIC[2] = {'T', 'B'};
constexpr size_t BATCH_PREFIX_SIZE = 4;
}  // namespace

bool record_is_barrier(const record_header &h) { return h.meta.is_object() && h.meta.contains("barrier"); }

bool record_batchable(const record_header &h) {
  return !record_kind_is_control(h.kind) && !h.shm && !record_is_barrier(h);
}

bool record_frame_is_batch(const zmq::message_t &frame) {
  const auto *b = static_cast<const unsigned char *>(frame.data());
  return frame.size() >= 2 && b[0] == BATCH_MAGIC[0] && b[1] == BATCH_MAGIC[1];
}

namespace {

// Walks a batch frame's framing (record.h section 4): `each(index, header, at)` gets the header
// bytes of record `index` and returns its payload's size (0 without one), which must lie within
// the frame from byte `at`. Returns the number of records.
template <typename Each>
size_t batch_walk(const zmq::message_t &frame, Each &&each) {
  const auto *bytes = static_cast<const std::byte *>(frame.data());
  const size_t size = frame.size();
  if (size < BATCH_PREFIX_SIZE || !record_frame_is_batch(frame))
    throw framing_error(fmt::format("batch frame of {} bytes lacks the 4-byte \"TB\" prefix", size));
  const auto major = static_cast<uint8_t>(bytes[2]);
  if (major != RECORD_VERSION_MAJOR)
    throw framing_error(fmt::format("batch format major version {} is not supported (this build reads {})", major,
                                    RECORD_VERSION_MAJOR));
  size_t index = 0;
  size_t at = BATCH_PREFIX_SIZE;
  while (at < size) {
    if (size - at < 4)
      throw framing_error(fmt::format("batch record {} at byte {}: {} bytes left, a length takes 4 (truncated?)",
                                      index, at, size - at));
    uint32_t header_length = 0;
    std::memcpy(&header_length, bytes + at, 4);  // little-endian hosts only (x86-64, aarch64)
    at += 4;
    if (header_length > size - at)
      throw framing_error(fmt::format("batch record {} at byte {}: header of {} bytes, {} left (truncated?)", index,
                                      at - 4, header_length, size - at));
    const std::span<const std::byte> header(bytes + at, header_length);
    at += header_length;
    const uint64_t stored = each(index, header, at);
    if (stored > size - at)
      throw framing_error(fmt::format("batch record {} announces {} payload bytes, {} left (truncated?)", index,
                                      stored, size - at));
    at += static_cast<size_t>(stored);
    ++index;
  }
  return index;
}

}  // namespace

std::vector<record> record_batch_decode(const zmq::message_t &frame) {
  std::vector<record> out;
  record_batch_decode(frame, out);
  return out;
}

void record_batch_decode(const zmq::message_t &frame, std::vector<record> &out) {
  const size_t kept = out.size();
  size_t used = kept;
  try {
    record_batch_decode(frame, out, used);
  } catch (...) {
    out.resize(kept);
    throw;
  }
}

void record_batch_decode(const zmq::message_t &frame, std::vector<record> &out, size_t &used,
                         const record_decode_options &options) {
  const size_t kept = used;
  const auto *bytes = static_cast<const std::byte *>(frame.data());
  try {
    batch_walk(frame, [&](size_t index, std::span<const std::byte> header, size_t at) -> uint64_t {
      record &r = used < out.size() ? out[used] : out.emplace_back();
      ++used;
      r.reuse_as(record_kind::tensor);  // a spare record's payload and LZ4 buffer go
      header_decode_into_reset(header, r.header, options);
      if (!record_batchable(r.header))
        throw framing_error(fmt::format("batch record {}: {} may not travel in a batch (control, barrier or shm)",
                                        index, r.describe()));
      const uint64_t stored = r.header.stored.value_or(0);
      if (r.header.stored && stored <= frame.size() - at) {
        const uint64_t length = r.header.length;
        r.set_payload_frame(zmq::message_t(bytes + at, static_cast<size_t>(stored)));
        r.header.length = length;
      }
      return stored;
    });
  } catch (...) {
    used = kept;
    throw;
  }
}

namespace {

// Reads only record_glance's keys of one header, with the decoder's cursor: no object tree, no
// allocation. Stops at the first problem; problem() or msgpack_problem() says why.
class glance_reader : msgpack_cursor {
 public:
  glance_reader(std::string_view body, record_glance &g) : msgpack_cursor(body), g_(g) {}

  // False on a problem.
  bool read() {
    const auto type = peek();
    if (!type) return false;
    if (*type != MP_MAP) return skip(1);  // finish() says it is not a map
    top_level_map_ = true;
    uint64_t elements = 0;
    if (!open(MP_MAP, 1, elements)) return false;
    for (uint64_t i = 0; i < elements / 2; ++i) {
      const auto key_type = peek();
      if (!key_type) return false;
      if (*key_type != MP_STR) return fail("header map has a key that is not a string");
      std::string_view key;
      if (!read_str(key) || !top_value(key)) return false;
    }
    return true;
  }

  using msgpack_cursor::msgpack_problem;
  using msgpack_cursor::trailing;
  const std::string &problem() const { return problem_; }

  // After a successful read: the checks of the whole header.
  void finish(size_t index) const {
    if (!top_level_map_) throw framing_error(fmt::format("batch record {}: header is not a msgpack map", index));
    if (!have_kind_) throw framing_error(fmt::format("batch record {}: header has no \"kind\"", index));
    if (record_kind_is_control(g_.kind) || barrier_ || shm_)
      throw framing_error(fmt::format("batch record {}: a {} record{} may not travel in a batch (control, barrier or shm)",
                                      index, record_kind_name(g_.kind), barrier_ ? " with a barrier" : ""));
  }
  uint64_t stored() const { return stored_; }

 private:
  bool fail(std::string problem) {
    problem_ = std::move(problem);
    return false;
  }

  // The value at the cursor as an unsigned integer (a signed format holding 0 or more counts, as
  // in the decoder); nullopt, and the value passed over, when it is anything else.
  bool unsigned_value(std::optional<uint64_t> &out) {
    out.reset();
    value v;
    if (!read_any(3, v)) return false;
    if (v.type == kind::positive_integer) out = v.u64;
    return true;
  }

  bool top_value(std::string_view key) {
    const auto type = peek();
    if (!type) return false;
    if (key_is(key, "kind") || key_is(key, "run")) {
      if (*type != MP_STR) return skip(2) && fail(fmt::format("header key \"{}\" is not a string", key));
      std::string_view text;
      if (!read_str(text)) return false;
      if (key_is(key, "run")) {
        g_.run = text;
        return true;
      }
      const auto k = record_kind_from_name(text);
      if (!k) return fail(fmt::format("unknown record kind \"{}\"", text));
      g_.kind = *k;
      have_kind_ = true;
      return true;
    }
    if (key_is(key, "flags") || key_is(key, "length") || key_is(key, "stored") || key_is(key, "seq")) {
      std::optional<uint64_t> v;
      if (!unsigned_value(v)) return false;
      if (!v) return fail(fmt::format("header key \"{}\" is not an unsigned int", key));
      if (key_is(key, "length")) g_.length = *v;
      else if (key_is(key, "seq")) g_.seq = *v;
      else if (key_is(key, "stored")) stored_ = *v, g_.has_payload = true;
      else if (*v > UINT32_MAX) return fail("header key \"flags\" is not a 32-bit set");
      else g_.flags = static_cast<uint32_t>(*v);
      return true;
    }
    // A key given twice counts as the decoder counts it, by its last value.
    if (key_is(key, "stats")) {
      g_.has_stats = g_.has_crc32 = false;
      if (*type != MP_MAP) return skip(2);
      g_.has_stats = true;
      return sub_map(key);
    }
    if (key_is(key, "meta")) {
      barrier_ = g_.has_stack_lines = false;
      g_.stack_id.reset();
      if (*type != MP_MAP) return skip(2);
      return sub_map(key);
    }
    if (key_is(key, "shm")) shm_ = true;
    return skip(2);
  }

  // stats' or meta's map: the keys that decide; the others, and keys that are not strings, are
  // the decoder's concern.
  bool sub_map(std::string_view top) {
    uint64_t elements = 0;
    if (!open(MP_MAP, 2, elements)) return false;
    const bool meta = key_is(top, "meta");
    for (uint64_t i = 0; i < elements / 2; ++i) {
      const auto key_type = peek();
      if (!key_type) return false;
      std::string_view sub;
      if (*key_type == MP_STR) {
        if (!read_str(sub)) return false;
      } else if (!skip(3)) {
        return false;
      }
      if (!meta) {
        if (!skip(3)) return false;
        if (key_is(sub, "crc32")) g_.has_crc32 = true;
        continue;
      }
      if (key_is(sub, "stack")) {
        const auto type = peek();
        if (!type) return false;
        g_.has_stack_lines = *type == MP_ARRAY;
        if (!skip(3)) return false;
      } else if (key_is(sub, "stack_id")) {
        if (!unsigned_value(g_.stack_id)) return false;
      } else {
        if (!skip(3)) return false;
        if (key_is(sub, "barrier")) barrier_ = true;
      }
    }
    return true;
  }

  record_glance &g_;
  bool top_level_map_ = false;
  bool have_kind_ = false;
  bool barrier_ = false;
  bool shm_ = false;
  uint64_t stored_ = 0;
  std::string problem_;
};

}  // namespace

void record_batch_glance(const zmq::message_t &frame, std::vector<record_glance> &out) {
  out.clear();
  batch_walk(frame, [&](size_t index, std::span<const std::byte> header, size_t) -> uint64_t {
    std::string_view body;
    try {
      body = header_body(header);
    } catch (const framing_error &e) {
      throw framing_error(fmt::format("batch record {}: {}", index, e.what()));
    }
    record_glance &g = out.emplace_back();
    glance_reader reader(body, g);
    if (!reader.read()) {
      if (!reader.msgpack_problem().empty())
        throw framing_error(fmt::format("batch record {}: header is not valid msgpack ({})", index,
                                        reader.msgpack_problem()));
      throw framing_error(fmt::format("batch record {}: {}", index, reader.problem()));
    }
    if (reader.trailing())
      throw framing_error(fmt::format("batch record {}: header has {} trailing bytes after its msgpack map", index,
                                      reader.trailing()));
    reader.finish(index);
    return reader.stored();
  });
}

namespace {

// Batch buffers, recycled. A batch frame is freed where ZeroMQ lets go of it (its I/O thread,
// once sent), so with a fresh buffer every batch glibc kept handing the sender's arena top back to
// the kernel and faulting it in again: 5-22 pages a transformer step on the capture's sender, each
// first touch ~14 µs on a paravirtualised guest (docs/performance.md, 2026-11-28 evening). A few
// buffers kept here are mapped already, and warm.
constexpr size_t batch_buffer_bytes = RECORD_BATCH_BYTES + RECORD_BATCH_RECORD_MAX;

struct batch_buffer_pool {
  static constexpr size_t kept_max = 16;  // batches in flight at once, beyond which buffers go back
  std::mutex mutex;
  std::vector<std::vector<std::byte>> kept;
};

batch_buffer_pool &the_batch_buffer_pool() {
  static auto *pool = new batch_buffer_pool;  // never destroyed: frames may die in static destruction
  return *pool;
}

std::vector<std::byte> batch_buffer_get() {
  auto &pool = the_batch_buffer_pool();
  {
    std::lock_guard lock(pool.mutex);
    if (!pool.kept.empty()) {
      std::vector<std::byte> b = std::move(pool.kept.back());
      pool.kept.pop_back();
      return b;
    }
  }
  std::vector<std::byte> b;
  b.reserve(batch_buffer_bytes);
  return b;
}

void batch_buffer_put(std::vector<std::byte> &&b) {
  if (b.capacity() > 4 * batch_buffer_bytes) return;  // grown by an unusual record: not kept
  b.clear();
  auto &pool = the_batch_buffer_pool();
  std::lock_guard lock(pool.mutex);
  if (pool.kept.size() < batch_buffer_pool::kept_max) pool.kept.push_back(std::move(b));
}

}  // namespace

record_batch_builder::record_batch_builder() : buffer_(batch_buffer_get()) {
  const unsigned char prefix[BATCH_PREFIX_SIZE] = {BATCH_MAGIC[0], BATCH_MAGIC[1], RECORD_VERSION_MAJOR,
                                                   RECORD_VERSION_MINOR};
  buffer_.insert(buffer_.end(), reinterpret_cast<const std::byte *>(prefix),
                 reinterpret_cast<const std::byte *>(prefix) + BATCH_PREFIX_SIZE);
}

namespace {

// One record of a batch (section 4): its header's length, the header, the payload.
void batch_append_bytes(std::vector<std::byte> &batch, std::span<const std::byte> header,
                        std::span<const std::byte> payload) {
  if (header.size() > UINT32_MAX) throw std::logic_error("a header frame over 4 GiB");
  const auto length = static_cast<uint32_t>(header.size());
  const auto *l = reinterpret_cast<const std::byte *>(&length);
  batch.insert(batch.end(), l, l + 4);
  batch.insert(batch.end(), header.begin(), header.end());
  batch.insert(batch.end(), payload.begin(), payload.end());
}

std::span<const std::byte> bytes_of(const zmq::message_t &m) {
  return {static_cast<const std::byte *>(m.data()), m.size()};
}

}  // namespace

bool record_batch_builder::append(const record &r) {
  if (!record_batchable(r.header)) throw std::logic_error("record_batch_builder: a record that may not be batched");
  if (r.has_payload() && !r.payload_frame()) throw std::logic_error("record header says stored but has no payload frame");
  const auto payload = r.has_payload() ? bytes_of(*r.payload_frame()) : std::span<const std::byte>{};
  if (payload.size() > RECORD_BATCH_RECORD_MAX) return false;
  const encoded_header header(r.header);  // in the thread's header buffer, emptied at return
  if (header.bytes().size() + payload.size() > RECORD_BATCH_RECORD_MAX) return false;
  batch_append_bytes(buffer_, header.bytes(), payload);
  ++records_;
  return true;
}

void record_batch_builder::append(const std::vector<zmq::message_t> &frames) {
  if (frames.empty() || frames.size() > 2) throw std::logic_error("a record has 1 or 2 frames");
  batch_append_bytes(buffer_, bytes_of(frames[0]),
                     frames.size() == 2 ? bytes_of(frames[1]) : std::span<const std::byte>{});
  ++records_;
}

zmq::message_t record_batch_builder::take() {
  // The frame owns the buffer (no copy) and gives it back to the pool when freed; the builder
  // starts over with another.
  auto *owned = new std::vector<std::byte>(std::move(buffer_));
  zmq::message_t frame(owned->data(), owned->size(),
                       [](void *, void *hint) {
                         auto *b = static_cast<std::vector<std::byte> *>(hint);
                         batch_buffer_put(std::move(*b));
                         delete b;
                       },
                       owned);
  *this = record_batch_builder();
  return frame;
}

}  // namespace tprobe
