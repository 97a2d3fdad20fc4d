// fuzz_entries.h: one entry function per fuzz target, shared by the libFuzzer binaries
// (tests/fuzz/fuzz_<target>.cpp, clang, -DTPROBE_BUILD_FUZZ=ON) and the GoogleTest that replays
// tests/fuzz/corpus/ and tests/fuzz/regressions/ in the normal build
// (tests/unit/test_fuzz_regressions.cpp), so that a crash found once stays fixed in every build.
//
// Each function feeds `data` to the product's own parser, the way the product reads that input,
// then uses what was parsed and checks the parser's promises. It returns normally when the input
// was accepted, or rejected with an error the contract allows: usage_error or system_error
// (core/errors.h), framing_error (transport/record.h). Anything else is a finding and escapes:
// a crash or sanitizer report, an exception of another type (std::bad_alloc, std::length_error,
// nlohmann's out_of_range, zmq::error_t, ...), or a fuzz_contract_violation thrown by the checks
// below, which include that a reader closes every file descriptor it opened. In a fuzz binary an escaping exception aborts (libFuzzer saves the input); in the
// GoogleTest it fails the test naming the file.
//
// Not thread-safe: inputs that the parser reads from a path go through one scratch file per
// process (a memfd, named /proc/self/fd/N in messages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string_view>

namespace tprobe::fuzz {

// A parser accepted an input but broke a promise its header makes about the result.
class fuzz_contract_violation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Records (transport/record.h). data[0] picks the path, the rest is the input:
//   bit 0 = 0: record_decode() of frames: bits 1-2 give the frame count (0-3, so the count check
//              is reached too); every frame but the last is a u32 little-endian length (cut to
//              what is left) and its bytes, the last frame is the rest.
//   bit 0 = 1: record_file_reader over the rest written to a file, all records read; with bit 1
//              set the 16-byte file magic is written first, so mutations are spent on records.
// Every decoded record: describe(), payload_bytes(), the tensor length promise, and
// encode(decode(encode(r))) == encode(r) for the header frame.
void fuzz_record(std::span<const uint8_t> data);

// A pipeline manifest (launcher/run/manifest.h): manifest_load() of the input as a file, then
// manifest_check_options() against a fixed table (no binary is run), manifest_stage_argv() of
// every stage and the topological order promise; also stage_description_parse() of the input.
void fuzz_manifest(std::span<const uint8_t> data);

// A capture config.json (core/capture_config.h): config_load() of the input as a file, then
// session_meta(), a capture_filter's decisions, and config_apply_overrides().
void fuzz_config(std::span<const uint8_t> data);

// A dump.json as tprobe compare reads it (core/compare/compare_dump.h: dump_load(), i.e.
// core/pyjson.h's parser and the flattening), dump_mode(), the input as a stack.json
// (stack_from_json), and pyjson's dump/parse round trip.
void fuzz_dump_json(std::span<const uint8_t> data);

// An .npy file (core/npy.h): npy_read() and npy_mapped of the input as a file; both must agree
// and hold element_count() * itemsize() bytes.
void fuzz_npy(std::span<const uint8_t> data);

// The targets by name ("record", "manifest", "config", "dump_json", "npy"), in that order, for
// the replay test and the corpus folders tests/fuzz/{corpus,regressions}/<name>/.
struct fuzz_target {
  std::string_view name;
  void (*entry)(std::span<const uint8_t>);
};
std::span<const fuzz_target> fuzz_targets();

}  // namespace tprobe::fuzz
