// The entry functions of the fuzz targets; see fuzz_entries.h for what each one promises.
#include "fuzz_entries.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "compare/compare_dump.h"
#include "capture_config.h"
#include "errors.h"
#include "npy.h"
#include "pyjson.h"
#include "record.h"
#include "run/manifest.h"

namespace tprobe::fuzz {

namespace {

// The errors the parsers' contracts allow for bad input; the caller's check decides what else
// to do with an accepted input.
template <class F>
void accepted_or_rejected(F &&body) {
  try {
    body();
  } catch (const usage_error &) {
  } catch (const framing_error &) {
  } catch (const system_error &) {
  }
}

// One memfd per process, rewritten for every input: the parsers under test take paths, and a
// memfd needs no directory to clean up and never touches the disk.
class scratch_file {
 public:
  scratch_file() {
    fd_ = ::memfd_create("tprobe-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  scratch_file(const scratch_file &) = delete;
  scratch_file &operator=(const scratch_file &) = delete;

  // Replaces the content with `parts` concatenated; returns the path to open.
  const std::string &write(std::initializer_list<std::span<const uint8_t>> parts) {
    if (::ftruncate(fd_, 0) != 0) throw std::runtime_error(std::string("ftruncate: ") + std::strerror(errno));
    off_t offset = 0;
    for (auto part : parts) {
      while (!part.empty()) {
        const ssize_t n = ::pwrite(fd_, part.data(), part.size(), offset);
        if (n < 0) {
          if (errno == EINTR) continue;
          throw std::runtime_error(std::string("pwrite: ") + std::strerror(errno));
        }
        part = part.subspan(static_cast<size_t>(n));
        offset += n;
      }
    }
    return path_;
  }

  // The lowest free descriptor number: a parser that leaks a descriptor raises it.
  int lowest_free_fd() const {
    const int fd = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(std::string("fcntl(F_DUPFD): ") + std::strerror(errno));
    ::close(fd);
    return fd;
  }

 private:
  int fd_ = -1;
  std::string path_;
};

scratch_file &scratch() {
  static scratch_file file;
  return file;
}

// Every reader closes what it opened, on every path: a stage reads many files, and a leak per
// rejected file ends in EMFILE (the fuzzer found one in record_file_reader).
class fd_leak_check {
 public:
  fd_leak_check() : before_(scratch().lowest_free_fd()) {}
  void verify(const char *reader) const {
    if (const int now = scratch().lowest_free_fd(); now != before_)
      throw fuzz_contract_violation(std::string(reader) + " leaves a file descriptor open (lowest free fd " +
                                    std::to_string(before_) + " before, " + std::to_string(now) + " after)");
  }

 private:
  int before_;
};

std::string_view as_text(std::span<const uint8_t> data) {
  return {reinterpret_cast<const char *>(data.data()), data.size()};
}

// ---- record ----

std::string hex_of(const zmq::message_t &m) {
  std::string out;
  const auto *p = static_cast<const unsigned char *>(m.data());
  for (size_t i = 0; i < m.size() && i < 64; ++i) {
    static constexpr char digits[] = "0123456789abcdef";
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

// What a consumer does with a decoded record, and the promises of record.h it relies on.
void use_record(const record &r) {
  (void)r.describe();
  std::span<const std::byte> payload;
  bool payload_ok = false;
  accepted_or_rejected([&] {  // a corrupt LZ4 block is a framing_error
    payload = r.payload_bytes();
    payload_ok = true;
  });
  if (payload_ok && r.has_payload() && payload.size() != r.header.length)
    throw fuzz_contract_violation(r.describe() + ": payload_bytes() is " + std::to_string(payload.size()) +
                                  " bytes, header length " + std::to_string(r.header.length));
  // A tensor's decoded payload holds exactly its shape's elements: the stats stage and the
  // writer size their loops and files from the shape.
  if (payload_ok && r.has_payload() && r.header.kind == record_kind::tensor) {
    uint64_t bytes = dtype_size(r.header.type);
    bool overflow = false;
    for (const int64_t d : r.header.shape) overflow |= __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes);
    if (overflow || bytes != payload.size())
      throw fuzz_contract_violation(r.describe() + ": accepted a payload of " + std::to_string(payload.size()) +
                                    " bytes for a shape of " + (overflow ? "more than 2^64" : std::to_string(bytes)) +
                                    " bytes");
  }
  // The stack rule (record.h section 5) on whatever meta the decoder accepted: a reference
  // nobody defined is the only refusal.
  accepted_or_rejected([&] {
    stack_link link;
    for (bool takes_refs : {true, false, true}) (void)link.adapt(r.header, takes_refs);
    (void)record_stack_lines(r.header);
  });
  // What the decoder accepts, the encoder writes back in a form the decoder accepts again, with
  // the same header: a stage forwards every record it reads.
  auto frames = record_encode(r);
  std::vector<zmq::message_t> copy;
  for (const auto &f : frames) copy.emplace_back(f.data(), f.size());
  try {
    const record back = record_decode(copy);
    const zmq::message_t again = record_header_encode(back.header);
    if (again.size() != frames[0].size() || std::memcmp(again.data(), frames[0].data(), again.size()) != 0)
      throw fuzz_contract_violation(r.describe() + ": header changes in an encode/decode round trip: " +
                                    hex_of(frames[0]) + " became " + hex_of(again));
  } catch (const framing_error &e) {
    throw fuzz_contract_violation(r.describe() + ": record_decode rejects what record_encode wrote: " + e.what());
  }
}

// A batch frame (record.h "Batches"): every record it yields is usable, may travel in a batch,
// and a batch built again from them decodes to the same records.
// The glance of a batch (record_batch_glance, what a stage passing it on whole reads) accepts every
// batch the decoder accepts and sees the same kind, run, flags, payload, statistics and stack.
void batch_glance_agrees(const zmq::message_t &frame, const std::vector<record> &records, bool decoded) {
  std::vector<record_glance> glances;
  try {
    record_batch_glance(frame, glances);
  } catch (const framing_error &e) {
    if (decoded) throw fuzz_contract_violation(std::string("record_batch_glance rejects a batch the decoder reads: ") + e.what());
    return;
  }
  if (!decoded) return;  // the glance reads fewer keys: it may accept what the decoder rejects
  if (glances.size() != records.size()) throw fuzz_contract_violation("a glance sees another number of records");
  for (size_t i = 0; i < records.size(); ++i) {
    const auto &g = glances[i];
    const auto &h = records[i].header;
    const auto stack = h.meta.is_object() ? h.meta.find("stack") : h.meta.end();
    const bool lines = h.meta.is_object() && stack != h.meta.end() && stack->is_array();
    if (g.kind != h.kind || g.run != h.run || g.flags != h.flags || g.length != h.length ||
        g.has_payload != h.stored.has_value() || g.has_stats != h.stats.has_value() ||
        g.has_crc32 != (h.stats && h.stats->crc32.has_value()) || g.stack_id != record_stack_id(h) ||
        g.has_stack_lines != lines)
      throw fuzz_contract_violation(records[i].describe() + ": the glance differs from the decoded header");
  }
}

void record_batch(const zmq::message_t &frame) {
  std::vector<record> records;
  bool decoded = false;
  accepted_or_rejected([&] {
    records = record_batch_decode(frame);
    decoded = true;
  });
  batch_glance_agrees(frame, records, decoded);
  record_batch_builder again;
  for (const auto &r : records) {
    if (!record_batchable(r.header))
      throw fuzz_contract_violation(r.describe() + ": record_batch_decode returned a record that may not be batched");
    use_record(r);
    again.append(record_encode(r));
  }
  const zmq::message_t rebuilt = again.take();
  try {
    if (record_batch_decode(rebuilt).size() != records.size())
      throw fuzz_contract_violation("a rebuilt batch decodes to another number of records");
  } catch (const framing_error &e) {
    throw fuzz_contract_violation(std::string("record_batch_decode rejects a batch record_batch_builder wrote: ") +
                                  e.what());
  }
}

// A header decoded as the writer decodes it (a value's meta kept as its bytes) and as every other
// stage does: the same answer, the same message on a refusal, and the same text for the meta.
void value_meta_as_bytes_agrees(const zmq::message_t &header_frame) {
  const auto decode = [&](bool as_bytes, record &r) -> std::string {
    std::vector<zmq::message_t> frames(1);
    frames[0].copy(const_cast<zmq::message_t &>(header_frame));
    try {
      record_decode(frames, r, record_decode_options{.value_meta_as_msgpack = as_bytes});
    } catch (const framing_error &e) {
      return e.what();
    }
    return {};
  };
  record as_bytes, as_tree;
  const std::string refused_as_bytes = decode(true, as_bytes), refused_as_tree = decode(false, as_tree);
  if (refused_as_bytes != refused_as_tree)
    throw fuzz_contract_violation("a header is refused differently with a value's meta kept as bytes: \"" +
                                  refused_as_bytes + "\" against \"" + refused_as_tree + "\"");
  if (!refused_as_tree.empty()) return;
  std::string from_bytes, from_tree;
  bool bytes_threw = false, tree_threw = false;
  try {
    record_meta_pyjson_append(from_bytes, as_bytes.header, 1, 3);
  } catch (const usage_error &) {
    bytes_threw = true;
  }
  try {
    pyjson_dump_append(from_tree, as_tree.header.meta, 1, 3);
  } catch (const usage_error &) {
    tree_threw = true;
  }
  if (bytes_threw != tree_threw || from_bytes != from_tree)
    throw fuzz_contract_violation(as_tree.describe() + ": its meta renders differently kept as bytes: " + from_bytes +
                                  " against " + from_tree);
}

void record_frames(uint8_t mode, std::span<const uint8_t> data) {
  const unsigned count = (mode >> 1) & 3u;
  std::vector<zmq::message_t> frames;
  for (unsigned i = 0; i < count; ++i) {
    size_t size = data.size();
    if (i + 1 < count) {
      uint32_t announced = 0;
      for (size_t b = 0; b < 4 && b < data.size(); ++b) announced |= static_cast<uint32_t>(data[b]) << (8 * b);
      data = data.subspan(std::min<size_t>(4, data.size()));
      size = std::min<size_t>(announced, data.size());
    }
    frames.emplace_back(data.data(), size);
    data = data.subspan(size);
  }
  if (frames.size() == 1 && record_frame_is_batch(frames[0])) return record_batch(frames[0]);
  if (!frames.empty()) value_meta_as_bytes_agrees(frames[0]);
  accepted_or_rejected([&] { use_record(record_decode(frames)); });
}

void record_file(uint8_t mode, std::span<const uint8_t> data) {
  const auto *magic = reinterpret_cast<const uint8_t *>(RECORD_FILE_MAGIC.data());
  const std::span<const uint8_t> prefix = (mode & 2) ? std::span(magic, RECORD_FILE_MAGIC.size())
                                                     : std::span<const uint8_t>();
  const std::string &path = scratch().write({prefix, data});
  const fd_leak_check fds;
  accepted_or_rejected([&] {
    record_file_reader reader(path);
    // Every record takes at least one byte of the file, so this ends; the bound only guards
    // against a reader that stops advancing.
    for (size_t n = 0; n <= prefix.size() + data.size(); ++n) {
      auto r = reader.read();
      if (!r) return;
      use_record(*r);
    }
    throw fuzz_contract_violation("record_file_reader returned more records than the file has bytes");
  });
  fds.verify("record_file_reader");
}

// ---- manifest ----

// A fixed option table for every stage, one option per type, so that stage_option_args sees
// every conversion; "source" and "sink" stand for stages without input or output.
stage_description describe_stage(const manifest_stage &s) {
  stage_description d;
  d.stage = s.verb.empty() ? "exec" : s.verb;
  d.has_input = s.verb != "source";
  d.has_output = s.verb != "sink";
  for (const auto &[name, type] : {std::pair{"threads", "int"}, std::pair{"scale", "float"}, std::pair{"lz4", "bool"},
                                   std::pair{"name", "string"}, std::pair{"only", "list"}}) {
    stage_option_spec option;
    option.name = name;
    option.type = type;
    d.options.push_back(std::move(option));
  }
  return d;
}

void check_topological_order(const manifest &m) {
  if (m.topological_order.size() != m.stages.size())
    throw fuzz_contract_violation(m.path + ": topological_order has " + std::to_string(m.topological_order.size()) +
                                  " stages of " + std::to_string(m.stages.size()));
  std::vector<bool> placed(m.stages.size(), false);
  for (const size_t i : m.topological_order) {
    if (i >= m.stages.size() || placed[i]) throw fuzz_contract_violation(m.path + ": topological_order is no permutation");
    for (const auto &input : m.stages[i].inputs) {
      if (input == MANIFEST_CAPTURE) continue;
      const auto producer = std::find_if(m.stages.begin(), m.stages.end(), [&](const auto &s) { return s.name == input; });
      if (producer == m.stages.end() || !placed[static_cast<size_t>(producer - m.stages.begin())])
        throw fuzz_contract_violation(m.path + ": stage \"" + m.stages[i].name + "\" comes before its input \"" +
                                      input + "\"");
    }
    placed[i] = true;
  }
}

// ---- npy ----

struct npy_view {
  std::string descr;
  std::vector<int64_t> shape;
  bool fortran_order = false;
  std::span<const std::byte> data;
};

void check_npy(const npy_view &v, size_t count, size_t itemsize, const std::string &which) {
  size_t expected = 0;
  if (__builtin_mul_overflow(count, itemsize, &expected) || v.data.size() != expected)
    throw fuzz_contract_violation(which + ": " + std::to_string(v.data.size()) + " data bytes for " +
                                  std::to_string(count) + " elements of " + std::to_string(itemsize) + " bytes");
  // Touch every byte: an array that reaches past the mapping faults here, not in a caller.
  unsigned sum = 0;
  for (const std::byte b : v.data) sum += static_cast<unsigned>(b);
  (void)sum;
  (void)npy_descr_dtype(v.descr);
}

}  // namespace

void fuzz_record(std::span<const uint8_t> data) {
  if (data.empty()) return;
  const uint8_t mode = data[0];
  if (mode & 1)
    record_file(mode, data.subspan(1));
  else
    record_frames(mode, data.subspan(1));
}

void fuzz_manifest(std::span<const uint8_t> data) {
  const std::string &path = scratch().write({data});
  const fd_leak_check fds;
  accepted_or_rejected([&] {
    manifest m = manifest_load(path);
    check_topological_order(m);
    for (size_t i = 0; i < m.stages.size(); ++i) {
      (void)m.consumers_of(i);
      (void)m.stages[i].program();
    }
    (void)m.capture_readers();
    manifest_check_options(m, describe_stage);
    for (size_t i = 0; i < m.stages.size(); ++i) (void)manifest_stage_argv(m, i, "/run", "/bin");
  });
  fds.verify("manifest_load");
  // The launcher's other JSON input: a stage's --describe output.
  accepted_or_rejected([&] { (void)stage_description_parse(std::string(as_text(data)), "tprobe-fuzz"); });
}

void fuzz_config(std::span<const uint8_t> data) {
  const std::string &path = scratch().write({data});
  const fd_leak_check fds;
  accepted_or_rejected([&] {
    capture_config cfg = config_load(path);
    (void)cfg.session_meta();
    capture_filter filter(cfg);
    for (const int64_t step : {int64_t{0}, int64_t{3}}) {
      (void)filter.step_enabled(step);
      (void)filter.past_last_step(step);
    }
    (void)filter.rank_enabled(-1);
    (void)filter.rank_enabled(2);
    for (const char *entry : {"Functional.linear.0.forward", "Module.fc.Linear.forward.0", "Functional.linear.0.backward",
                              "Module.fc.Linear.parameters_grad"}) {
      if (filter.entry_enabled(entry)) {
        (void)filter.slot_enabled(entry, "input.0");
        (void)filter.slot_enabled(entry, "output.0");
        (void)filter.save_tensor(entry);
      }
    }
    filter.reset_step();
    // What PrecisionDebugger(level=..., step=...) does to the same document.
    config_overrides overrides;
    overrides.level = "mix";
    overrides.step = std::vector<int64_t>{0, 2};
    config_apply_overrides(cfg, overrides);
  });
  fds.verify("config_load");
}

void fuzz_dump_json(std::span<const uint8_t> data) {
  const std::string &path = scratch().write({data});
  const fd_leak_check fds;
  accepted_or_rejected([&] {
    const dump_file f = dump_load(path, "NPU");
    for (const auto &row : f.rows)
      if (row.entry >= f.entries.size())
        throw fuzz_contract_violation("dump row " + row.name + " points at entry " + std::to_string(row.entry) + " of " +
                                      std::to_string(f.entries.size()));
    (void)dump_mode(f, f);
  });
  fds.verify("dump_load");
  accepted_or_rejected([&] {
    const auto doc = pyjson_parse(as_text(data), "stack.json");
    (void)stack_from_json(doc, "stack.json");
    // Python's json.dumps(json.loads(text)) reads back as itself: compare writes what it read.
    for (const int indent : {1, -1}) {
      const std::string once = pyjson_dump(doc, indent);
      const std::string twice = pyjson_dump(pyjson_parse(once, "pyjson_dump output"), indent);
      if (once != twice)
        throw fuzz_contract_violation("pyjson_dump/pyjson_parse round trip changes " + once.substr(0, 200) + " into " +
                                      twice.substr(0, 200));
    }
  });
}

void fuzz_npy(std::span<const uint8_t> data) {
  const std::string &path = scratch().write({data});
  const fd_leak_check fds;
  bool read_ok = false, mapped_ok = false;
  npy_array a;
  accepted_or_rejected([&] {
    a = npy_read(path);
    read_ok = true;
    check_npy({a.descr, a.shape, a.fortran_order, a.data}, a.element_count(), a.itemsize(), "npy_read");
    (void)a.type();
  });
  accepted_or_rejected([&] {
    const npy_mapped m(path);
    mapped_ok = true;
    check_npy({m.descr(), m.shape(), m.fortran_order(), m.data()}, m.element_count(), m.itemsize(), "npy_mapped");
    (void)m.type();
    if (read_ok && (m.descr() != a.descr || m.shape() != a.shape || m.fortran_order() != a.fortran_order ||
                    !std::equal(m.data().begin(), m.data().end(), a.data.begin(), a.data.end())))
      throw fuzz_contract_violation("npy_read and npy_mapped read the same file differently");
  });
  fds.verify("npy_read or npy_mapped");
  // Both readers share one header parser: a file one of them accepts, the other accepts too.
  if (read_ok != mapped_ok)
    throw fuzz_contract_violation(std::string("npy_read ") + (read_ok ? "accepts" : "rejects") + " a file npy_mapped " +
                                  (mapped_ok ? "accepts" : "rejects"));
}

std::span<const fuzz_target> fuzz_targets() {
  static constexpr fuzz_target targets[] = {
      {"record", fuzz_record}, {"manifest", fuzz_manifest}, {"config", fuzz_config},
      {"dump_json", fuzz_dump_json}, {"npy", fuzz_npy},
  };
  return targets;
}

}  // namespace tprobe::fuzz
