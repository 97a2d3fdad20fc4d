// record.h: the tprobe record, on the wire and on disk. This header is the specification;
// docs/wire-format.md repeats it for readers who do not read C++.
//
// 1. Messages
//
//    A record is one ZeroMQ multipart message of one or two frames:
//
//      frame 0  header   (always)
//      frame 1  payload  (present iff the header says `stored` is present, see below)
//
//    or, between peers that agreed on it, one of several records in a batch frame (section 4).
//
//    Header frame layout (all multi-byte integers little-endian):
//
//      offset  size  field
//      0       2     magic "TP" (0x54 0x50)
//      2       1     major version (RECORD_VERSION_MAJOR = 1). A reader rejects any other major.
//      3       1     minor version (RECORD_VERSION_MINOR). A reader accepts any minor of its major:
//                    minors only add optional header keys, which older readers ignore.
//      4       n     msgpack map (str key → value), the header fields below; nothing may follow it.
//                    Values nest at most RECORD_HEADER_MAX_DEPTH (1000) levels deep.
//
//    Header keys (msgpack types; "opt" keys may be absent, readers use the stated default):
//
//      key            type              meaning
//      kind           str               record kind, see 2
//      run            str               producer run id (opt, ""): one capture session
//      rank           int               producer rank, -1 when not distributed (opt, -1)
//      step           int               training step the record belongs to (opt, 0)
//      seq            uint              producer sequence number, +1 per record sent by that
//                                       producer (opt, 0); gaps seen on a lossy tap are drops,
//                                       on a connection whose hello said numbered, losses
//      entry          str               dump entry, msprobe naming: "Functional.linear.0.forward",
//                                       "Module.conv1.Conv2d.forward.0" (opt, "")
//      slot           str               place in the entry: "input.0", "input.1.0", "kwargs.dim",
//                                       "output.0", "parameters.weight", "parameters_grad.weight"
//                                       (opt, ""); tensor file name = entry + "." + slot + ".npy"
//      path           array[int|str]    opt: the nesting under the slot's section, ints are list
//                                       indices and strs dict keys; default: parsed from slot,
//                                       digit-only segments taken as list indices. The capture
//                                       sends it for a slot with a dict key that the slot alone
//                                       cannot tell (digits, a dot: {"head.0": t}), whose slot
//                                       is then msprobe's name ("output.head.0")
//      dtype          str               element type, dtype_name() of core/dtype.h (tensor; absent
//                                       when foreign_dtype is given)
//      foreign_dtype  str               opt: an element type tprobe has no dtype for (fp8,
//                                       quantized, …, or a layout without plain memory), as the
//                                       framework names it in dump.json ("torch.float8_e4m3fn").
//                                       Such a tensor record has no payload and no stats: its
//                                       facts (foreign_dtype, shape, requires_grad) are all that
//                                       travels, and dump.json gets null statistics.
//      shape          array[int]        tensor shape, [] for 0-d (tensor)
//      device         str               "cpu", "cuda:0", … (opt, "cpu")
//      requires_grad  bool              (opt, false)
//      type           str               tensor type as dumped, "torch.Tensor" (opt: derived from
//                                       the session's framework)
//      flags          uint              bit set, RECORD_FLAG_* below (opt, 0)
//      codec          str               payload codec: "raw" or "lz4" (opt, "raw")
//      length         uint              payload bytes after decoding (opt, 0)
//      stored         uint              payload frame bytes; present iff frame 1 is present
//      shm            map               opt (1.2), the payload by reference instead of frame 1:
//                                       {path: str, id: uint, offset: uint}, a block of `length`
//                                       bytes in a shared-memory segment of this host (shm.h);
//                                       never together with `stored`. Sent only to a consumer
//                                       whose ack said shm: true; never written to files or taps.
//      stats          map               opt, statistics when known: keys max, min, mean, norm
//                                       (nil | bool | int | float64), nan, inf (uint), crc32 (uint)
//      meta           any msgpack       opt, kind-specific structured data (see 2)
//
// 2. Kinds
//
//      hello     producer → consumer, first record on a connection. The consumer answers with
//                ack on the same connection; only then does the producer send data, so a
//                consumer knows every producer before that producer's data (see endpoint.h).
//                meta (opt): {name: str, host: str, pid: int}, as ack's; numbered: true when the
//                producer's data records on this connection carry seq 1, 2, 3, … in the order
//                sent (a capture's do; a stage passes its producers' seq on and does not say so).
//      ack       consumer → producer. meta (opt): {name: str, host: str, pid: int}, the consumer
//                that answered, so that a producer blocked on it can tell a consumer that died
//                (a pid on this host that is gone) from one that is slow (endpoint.h); and
//                sync: true when the consumer answers barriers (below, since 1.1);
//                shm: true when the consumer takes payloads by reference (header key shm,
//                since 1.2): it runs on the producer's host (by host name) and maps segments.
//      session   a capture session opened: meta = the effective config as a map (task, level,
//                framework, dump_path, summary_mode, data_mode, rank, …) and, when the
//                producer is one of a manifest's runs, label (str: the run's name); and
//                half_mean (str, 1.6): "rounded_sum" when the Mean of a float16/bfloat16
//                tensor is to be computed as torch before 2.2 does on the CPU
//                (core/tensor_stats.h, stats_options::half_mean_of_rounded_sum), by whichever
//                stage computes statistics the capture did not.
//      tensor    one tensor: header fields above, payload = the contiguous element bytes
//                (C order, little-endian), optional: a tensor whose statistics are known and
//                whose data is not needed travels without payload.
//      value     a non-tensor argument: meta = its msprobe JSON leaf, e.g. {"type":"int","value":1}
//                or nil for None.
//      entry     metadata of one dump entry, sent before its tensors: meta = map with optional
//                keys stack (array of str), parent (str|nil, construct.json), is_recompute (bool),
//                skipped (bool, 1.5: true when the scope or list filters exclude the entry; it
//                is a node of construct.json and nothing else, and no other record of it follows),
//                data (bool, 1.6: false when the call's values are not dumped, as tprobe-overflow
//                marks a call that did not overflow: the entry keeps its construct.json node and
//                its stack, and no other record of it follows).
//      flush     the producer asks for files to be brought up to date (debugger.stop()).
//      step_end  the producer finished `step`: files of (step, rank) are final.
//      Barrier (1.1). Any data record may carry meta key barrier: uint (a token chosen by its
//                sender), and is then a barrier: the consumer answers `synced` once it has
//                handled that record and everything before it, including what it passed on
//                downstream for it (a stage waits for its own consumers' `synced` first). Only
//                a consumer whose ack said sync: true is sent barriers; a consumer that cannot
//                answer them is never waited for. The capture makes step_end a barrier, so
//                that step() returns when the writer has written that step's files.
//      synced    consumer → producer, answering a barrier: meta = {barrier: the token}.
//      control   (1.1) a stage → a capture, on the capture's control endpoint (the session
//                record's meta key control; endpoint.h "Control"), never on the data path:
//                meta = {command: str, from: str (the sender, for messages), reason: str, …}:
//                  stop    end the capture for good (msprobe's service end), e.g. after
//                          overflow_nums overflowing calls;
//                  narrow  capture less from now on: any of step (msprobe's list of ints and
//                          "a-b" ranges: only those steps), list (entry name substrings: only
//                          entries containing one), level ("L0": modules only, "L1": operators
//                          only, "mix"). A narrowing replaces the previous one of the same key.
//                A capture ignores (and reports once) a command it does not know.
//      eos       end of this producer's stream: meta = {records: uint, dropped: uint}: the
//                data records it sent on this connection, and those its own producers reported
//                dropped or lost. The consumer answers ack: everything before eos has arrived;
//                records it counted fewer than `records` were lost on the way (reported, and
//                passed on as dropped).
//                A stage that has seen eos from every producer finishes its output, sends its
//                own eos downstream and exits 0 (111 when records were lost on the way).
//      final     sent by the launcher to a stage input after the producing command exited:
//                no new producer will connect.
//
// 3. Payload codecs
//
//      raw   the bytes themselves; stored == length.
//      lz4   one LZ4 block (LZ4_compress_default); decoding must yield exactly `length` bytes.
//
// 4. Batches (1.3)
//
//    Small data records may travel several to one ZeroMQ message: one frame, the batch frame,
//    in place of their own frames (a message per record costs the sender, the I/O threads and the
//    receiver more than the record itself when records are small):
//
//      offset  size  field
//      0       2     magic "TB" (0x54 0x42)
//      2       1     major version (RECORD_VERSION_MAJOR); a reader rejects any other major
//      3       1     minor version (RECORD_VERSION_MINOR)
//      4       ...   zero or more records, each:
//                      u32 (little-endian) n, the length of its header frame
//                      n bytes, its header frame exactly as in 1 ("TP", versions, msgpack map)
//                      `stored` bytes of payload iff the header has key stored
//                    the last record ends exactly at the end of the frame.
//
//    A batch holds data records only (session, tensor, value, entry, flush, step_end), none a
//    barrier (meta key barrier) or a payload by reference (shm): connection control and
//    barriers travel alone, so that what a peer waits for is never held back. Records keep their
//    order, within a batch and with the messages around it. A producer sends batches only to a
//    consumer whose ack said batch: true (any host: a batch is bytes); files and taps get records
//    one by one. A sender closes a batch at RECORD_BATCH_BYTES, when a record joins one that is
//    RECORD_BATCH_MAX_AGE_MS old, before any record that may not join one, and before it waits
//    for anything (its consumer, its own input) longer than a nap of at most a millisecond, so
//    a batch never holds records back from a consumer that could take them for longer than
//    that. (The capture's sender naps between the training thread's bursts of records; it keeps
//    its batch across a nap that brings more, and sends it after one that brings none.)
//
//    A stage may pass a batch on as it arrived, undecoded, when it would pass every record of it
//    on unchanged (stage_io.h, pass_unchanged): it reads each header's msgpack through once and
//    only the keys that decide that (record_batch_glance); a record's other keys are checked by
//    the consumer that decodes it. Such a batch goes only to consumers that take batches and
//    stack references, and only when none of its entry records carries a stack's lines.
//
// 5. Call stacks by reference (1.4)
//
//    An entry record's meta carries its call stack as "stack": [lines] (every version). Since
//    1.4 it may also carry "stack_id": uint, a number its producer gives each distinct stack of a
//    run (within one "run", the same lines have the same id and one id has one list of lines).
//    A stack is ~1.5 KB where an entry record is otherwise ~100 bytes: sent with every entry it
//    was most of what a pipeline carried.
//
//    On a link whose consumer said stack_refs: true in its ack, the lines travel once per id: the
//    first entry record with that id on the link carries "stack" and "stack_id", later ones
//    "stack_id" alone. Every link keeps this rule by itself, so a consumer resolves every id from
//    its own input, whatever a stage before it dropped (the first reference it passes on carries
//    the lines). A consumer that did not offer stack_refs gets "stack" in every entry record, as
//    before 1.4. A record file (section 6) follows the rule and is read from its start; a tap
//    shows the records as they travel, references included.
//
// 6. Record files ("offline = online")
//
//    A recorded stream is a file of the same frames:
//
//      "TPROBE-RECORDS\n\0" (16 bytes), then per record:
//        u8  frame count (1 or 2)
//        per frame: u64 byte length, then the bytes
//
//    Every stage reads its input from an endpoint or from such a file, and a stage output may be a
//    file: the bytes of each record are the same either way.
//
//    A reader checks every frame length before allocating for it: a length larger than the bytes
//    left in the file, or than RECORD_FILE_MAX_FRAME (64 GiB, the bound for a pipe, which cannot
//    be measured), is a corrupt file (framing_error naming the file and the record's byte offset).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "dtype.h"
#include "tensor_stats.h"

namespace tprobe {

inline constexpr uint8_t RECORD_VERSION_MAJOR = 1;
// 1.1: barriers and synced; 1.2: shm references; 1.3: batches; 1.4: stacks by reference;
// 1.5: entries the filters skip (entry meta "skipped"); 1.6: session meta "half_mean", entry meta
// "data"
inline constexpr uint8_t RECORD_VERSION_MINOR = 6;
inline constexpr size_t RECORD_PREFIX_SIZE = 4;
inline constexpr size_t RECORD_HEADER_MAX_DEPTH = 1000;  // above msprobe's 400 levels of dump data

enum class record_kind : uint8_t {
  hello,
  ack,
  session,
  tensor,
  value,
  entry,
  flush,
  step_end,
  eos,
  final,
  synced,
  control,
};
std::string_view record_kind_name(record_kind k);
// Connection control (hello, ack, eos, final, synced, control), as opposed to the data records a stage
// receives and may pass on.
constexpr bool record_kind_is_control(record_kind k) {
  return k == record_kind::hello || k == record_kind::ack || k == record_kind::eos || k == record_kind::final ||
         k == record_kind::synced || k == record_kind::control;
}
std::optional<record_kind> record_kind_from_name(std::string_view name);

enum class record_codec : uint8_t { raw, lz4 };

// Flags (header key "flags").
inline constexpr uint32_t RECORD_FLAG_SAVE = 1u << 0;   // write this tensor's data to a file
inline constexpr uint32_t RECORD_FLAG_CRC32 = 1u << 1;  // summary_mode md5: compute the CRC-32
// The tensor's memory was never written (the output of an allocation-only operator, core's
// entry_allocates_only): the record has no payload and no statistics, and dump.json marks it.
inline constexpr uint32_t RECORD_FLAG_UNINITIALIZED = 1u << 2;

// A payload in shared memory (header key shm; transport/shm.h).
struct record_shm_ref {
  std::string path;  // the segment, as the consumer opens it: /proc/PID/fd/FD
  uint64_t id = 0;   // the segment's id (its header holds the same)
  uint64_t offset = 0;  // of the payload in the segment
};

// One element of the nesting path under a slot's section.
using record_path_element = std::variant<int64_t, std::string>;

// A new field needs its default in record::reuse_as as well (test_record checks the size).
struct record_header {
  record_kind kind = record_kind::tensor;
  std::string run;
  int32_t rank = -1;
  int64_t step = 0;
  uint64_t seq = 0;
  std::string entry;
  std::string slot;
  std::optional<std::vector<record_path_element>> path;
  dtype type = dtype::float32;
  std::vector<int64_t> shape;
  std::string foreign_dtype;  // "" = `type` is the element type (see foreign_dtype above)
  std::string device = "cpu";
  bool requires_grad = false;
  std::string tensor_type;  // "" = derived from the session's framework
  uint32_t flags = 0;
  record_codec codec = record_codec::raw;
  uint64_t length = 0;                // decoded payload bytes
  std::optional<uint64_t> stored;     // payload frame bytes; set iff a payload frame exists
  std::optional<record_shm_ref> shm;  // the payload by reference (never with stored)
  std::optional<tensor_stats> stats;  // statistics when known
  nlohmann::ordered_json meta;        // null when absent
  // meta as its msgpack bytes instead of a tree: only a value record's, and only when decoded
  // with record_decode_options::value_meta_as_msgpack; `meta` is then null. Encoded as it is;
  // record_meta_pyjson_append renders either form.
  std::string meta_msgpack;

  uint64_t element_count() const;  // product of shape (1 for 0-d)
};

// A header of the given kind with every other field at its default.
inline record_header record_header_of(record_kind kind) {
  record_header h;
  h.kind = kind;
  return h;
}

// A malformed record: wrong magic, unknown major version, bad msgpack, missing or mistyped key,
// truncated or corrupt payload. what() names the record as far as it could be read.
class framing_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A decoded record. The payload frame is kept as received (zero copy); payload_bytes() decodes it
// on first use.
class record {
 public:
  record_header header;

  record() = default;
  explicit record(record_header h) : header(std::move(h)) {}
  explicit record(record_kind kind) : header(record_header_of(kind)) {}

  bool has_payload() const { return header.stored.has_value(); }
  // The decoded payload (header.length bytes). Throws framing_error on a corrupt LZ4 block.
  std::span<const std::byte> payload_bytes() const;
  // Set the payload from owned bytes (raw codec); sets length and stored.
  void set_payload(std::vector<std::byte> bytes);
  // Take a payload frame as-is (as received, or built by the caller); codec/length must match.
  void set_payload_frame(zmq::message_t frame);
  void drop_payload();
  // The record as record(kind) makes it (every header field at its default, no payload), but
  // with the storage its strings and vectors hold kept: a producer that reuses its spent records
  // allocates nothing for the next one's entry name, slot and shape.
  void reuse_as(record_kind kind);
  const zmq::message_t *payload_frame() const { return payload_frame_ ? &*payload_frame_ : nullptr; }

  // "Functional.linear.0.forward input.0 (rank 0, step 1, seq 42)": for error messages.
  std::string describe() const;

 private:
  std::optional<zmq::message_t> payload_frame_;
  mutable std::vector<std::byte> decoded_;  // LZ4 payloads, decoded lazily
  mutable bool decoded_valid_ = false;
};

// Encode the header frame (prefix + msgpack map).
zmq::message_t record_header_encode(const record_header &h);

// A meta given as the JSON text of its value (header.meta = record_meta_text(text)), for a
// producer that holds its meta as text already (the capture's non-tensor values): encoding packs
// the value the text holds, parsed straight into msgpack, with no tree built and freed for it.
// Encoding throws std::invalid_argument, naming the error, for a text that is not JSON. Only
// encoding reads it: the rest of the header's readers see a binary value, and a decoded meta is
// always the tree.
nlohmann::ordered_json record_meta_text(std::string_view json_text);
// The msgpack bytes the header encoder writes for a meta given as `json_text`; general_only
// forces the path every text can take (nlohmann's parse) over the quick one for plain texts, so
// that tests can hold the two to each other. Throws std::invalid_argument as encoding does.
std::string record_meta_text_msgpack(std::string_view json_text, bool general_only = false);
// How a decoder may hold what it reads (record_decode, record_batch_decode, record_file_reader).
struct record_decode_options {
  // A value record's meta kept as its msgpack bytes (record_header::meta_msgpack), checked as a
  // tree would be, instead of built into a tree: for a consumer that only renders it (the
  // writer), building, rendering and freeing the tree cost 1,700 instructions a value more. A
  // meta the bytes cannot stand for as they are (a key given twice, a map of more than 16 keys,
  // bin, ext, or a top-level "barrier") is still built as a tree, and so is the meta of a header
  // that names its kind after its meta.
  bool value_meta_as_msgpack = false;
};

// Decode a header frame. Throws framing_error.
record_header record_header_decode(std::span<const std::byte> frame);
// The same, into `into`: reset first (record_header_reset), so that a consumer decoding every
// record into the same few headers allocates nothing for their names and shapes. On a throw,
// `into` holds what was read.
void record_header_decode(std::span<const std::byte> frame, record_header &into);
// Every field of `h` at its default and `kind`, the storage its strings and vectors hold kept.
void record_header_reset(record_header &h, record_kind kind);
// h.meta as pyjson_dump_append(out, h.meta, indent, level) writes it, from either form
// (record_header::meta_msgpack): "null" when there is none.
void record_meta_pyjson_append(std::string &out, const record_header &h, int indent, int level);

// Encode a record as its frames. The payload frame, if any, is shared, not copied.
std::vector<zmq::message_t> record_encode(const record &r);
// Decode frames into a record; takes the payload frame. Throws framing_error.
record record_decode(std::vector<zmq::message_t> &frames);
// The same, into `into` (reused: record::reuse_as).
void record_decode(std::vector<zmq::message_t> &frames, record &into, const record_decode_options &options = {});

// Compress `bytes` into an LZ4 payload frame; returns nullopt when LZ4 would not shrink it.
std::optional<zmq::message_t> record_payload_lz4(std::span<const std::byte> bytes);

// Batches (section 4).
inline constexpr size_t RECORD_BATCH_BYTES = 32 * 1024;  // a sender closes a batch at this size
inline constexpr size_t RECORD_BATCH_RECORD_MAX = 8 * 1024;  // larger records travel alone
// A sender also closes a batch whose first record waited this long when it adds another: a slow
// stage (seconds per record, input never empty) still hands on what it made, one by one.
inline constexpr int RECORD_BATCH_MAX_AGE_MS = 5;

// Call stacks by reference (section 5).
//
// The process's book of the lines behind stack ids, by run: filled by a producer for the ids it
// gives (the capture) and by stage_io from the definitions it receives; read by links that must
// send the lines, and by stages that need them (writer, nan_live). Thread-safe.
void stack_book_define(const std::string &run, uint64_t id, nlohmann::ordered_json lines);
// The lines an entry record stands for: its meta's "stack", or the book's lines for its
// "stack_id"; nullptr when it has neither (or an id nobody defined). Valid while `h` and the
// process live.
const nlohmann::ordered_json *record_stack_lines(const record_header &h);
// Its meta's "stack_id", if any.
std::optional<uint64_t> record_stack_id(const record_header &h);

// One link's side of the rule of section 5: which ids it has sent the lines of.
class stack_link {
 public:
  // The header as this link must send `h`, or nullopt when `h` goes as it is: lines removed from
  // a record whose id this link defined before, or added to one whose id it has not (from `h`
  // itself or the book; a reference nobody defined is a broken stream: framing_error). A consumer
  // without stack_refs gets the lines in every entry record.
  std::optional<record_header> adapt(const record_header &h, bool consumer_takes_refs);
  // True when this link has sent the lines of (run, id): a reference to it goes as it is.
  bool defined(std::string_view run, uint64_t id) const;

 private:
  std::vector<std::pair<std::string, uint64_t>> defined_;  // (run, id), sorted
};

// True for a barrier (section 2): a data record whose meta has key barrier.
bool record_is_barrier(const record_header &h);
// True for a record that may join a batch: a data record, not a barrier, no payload by reference.
bool record_batchable(const record_header &h);
// True when `frame` is a batch frame (starts with "TB"); record_batch_decode checks the rest.
bool record_frame_is_batch(const zmq::message_t &frame);
// The records of a batch frame, in order; payloads are copied out of the frame. Throws
// framing_error (bad magic or major, a length past the end, a record that may not be batched).
std::vector<record> record_batch_decode(const zmq::message_t &frame);
// The same, appended to `out`, which is left as it was when the batch is rejected: a stage decodes
// each batch into the records it keeps from batch to batch, each record built where it stays
// (a returned vector was a move of every record, and more as the vector grew).
void record_batch_decode(const zmq::message_t &frame, std::vector<record> &out);
// The same, into out[used], out[used + 1] …: records already there are reused (record::reuse_as),
// the rest appended; `used` counts the batch's records in. On a throw, `used` is as it was.
void record_batch_decode(const zmq::message_t &frame, std::vector<record> &out, size_t &used,
                         const record_decode_options &options = {});

// A record of a batch as record_batch_glance sees it: the keys that tell whether a stage would
// pass it on unchanged, without decoding the rest. `run` points into the batch frame.
struct record_glance {
  record_kind kind = record_kind::tensor;
  std::string_view run;
  uint64_t seq = 0;          // key seq (0 when absent)
  uint32_t flags = 0;
  uint64_t length = 0;       // decoded payload bytes (key length; 0 when absent)
  bool has_payload = false;  // key stored: the payload follows the header
  bool has_stats = false;    // key stats
  bool has_crc32 = false;    // stats.crc32
  std::optional<uint64_t> stack_id;  // meta.stack_id (entry records, section 5)
  bool has_stack_lines = false;      // meta.stack
};
// The records of a batch frame, in order, into `out` (cleared first). Each header is checked to
// be one msgpack map with string keys, nested at most RECORD_HEADER_MAX_DEPTH levels, and ending
// at its length; the keys above are checked for their types, a known data kind, no barrier and no
// shm; the other keys are not read. Throws framing_error as record_batch_decode does.
void record_batch_glance(const zmq::message_t &frame, std::vector<record_glance> &out);

// Builds one batch frame from a record's encoded frames (record_encode), appended in order.
class record_batch_builder {
 public:
  record_batch_builder();
  // Appends a record given as its frames: [header] or [header, payload].
  void append(const std::vector<zmq::message_t> &frames);
  // Appends a batchable record (record_batchable): its header encoded in the thread's header
  // buffer and copied once into the batch, with no frame of its own, when header and payload
  // together are at most RECORD_BATCH_RECORD_MAX bytes; false, and the batch as it was, when
  // larger (such a record travels alone).
  bool append(const record &r);
  size_t records() const { return records_; }
  size_t bytes() const { return buffer_.size(); }
  bool empty() const { return records_ == 0; }
  zmq::message_t take();  // the batch frame; the builder starts a new, empty batch

 private:
  std::vector<std::byte> buffer_;
  size_t records_ = 0;
};

// Record files (section 6).
inline constexpr std::string_view RECORD_FILE_MAGIC{"TPROBE-RECORDS\n\0", 16};
inline constexpr uint64_t RECORD_FILE_MAX_FRAME = uint64_t{1} << 36;  // section 6

class record_file_writer {
 public:
  // Creates or truncates `path` (mode 0640). Throws system_error.
  explicit record_file_writer(const std::string &path);
  ~record_file_writer();
  record_file_writer(const record_file_writer &) = delete;
  record_file_writer &operator=(const record_file_writer &) = delete;
  void write(const record &r);
  void close();  // flush and close; throws system_error on a failed write

 private:
  std::string path_;
  std::FILE *file_ = nullptr;
};

class record_file_reader {
 public:
  // Opens `path` and checks its magic. Throws system_error / framing_error.
  explicit record_file_reader(const std::string &path, const record_decode_options &options = {});
  ~record_file_reader();
  record_file_reader(const record_file_reader &) = delete;
  record_file_reader &operator=(const record_file_reader &) = delete;
  // The next record, or nullopt at a clean end of file. Throws framing_error when the file ends
  // inside a record or a record is malformed (the message names the file and byte offset).
  std::optional<record> read();
  // The same, into `into` (reused: record::reuse_as); false at a clean end of file.
  bool read(record &into);

 private:
  std::string path_;
  record_decode_options options_;
  std::FILE *file_ = nullptr;
  uint64_t offset_ = 0;
  // Where frames may end, as measured last: min(file size, offset + RECORD_FILE_MAX_FRAME).
  uint64_t measured_end_ = 0;
};

// Statistics as the msgpack "stats" map and back (also used by the tap).
nlohmann::ordered_json tensor_stats_to_json(const tensor_stats &s);

}  // namespace tprobe
