#include "fault.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "errors.h"

namespace tprobe {

namespace {

// splitmix64, one stream per fault (see fault.h).
class fault_stream {
 public:
  fault_stream(uint64_t seed, uint64_t fault) : state_(seed * 0x9E3779B97F4A7C15ull ^ fault * 0xD1B54A32D192ED03ull) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // One draw whatever p is, so that the schedule stays aligned with the eligible records.
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }

 private:
  uint64_t state_;
};

// Replaces the payload frame, keeping what the header said about the payload before.
void replace_payload_keeping_header(record &r, zmq::message_t frame) {
  const auto stored = r.header.stored;
  const auto length = r.header.length;
  const auto codec = r.header.codec;
  r.set_payload_frame(std::move(frame));
  r.header.stored = stored;
  r.header.length = length;
  r.header.codec = codec;
}

bool truncate(record &r, fault_stream &g) {
  const zmq::message_t *frame = r.payload_frame();
  if (!frame || frame->size() == 0) return false;
  const size_t keep = g.next() % frame->size();
  replace_payload_keeping_header(r, zmq::message_t(frame->data(), keep));
  return true;
}

bool corrupt(record &r, fault_part part, fault_stream &g) {
  const zmq::message_t *frame = r.payload_frame();
  if (!frame) return false;
  if (part == fault_part::header) {
    // The decoder checks a tensor's payload length against dtype × shape: make them disagree.
    auto &shape = r.header.shape;
    if (r.header.kind != record_kind::tensor) return false;
    if (r.header.element_count() == 0) shape = {1};
    else if (shape.empty()) shape = {2};
    else shape.push_back(2);
    return true;
  }
  if (frame->size() == 0) return false;
  zmq::message_t copy(frame->data(), frame->size());  // the received frame may be shared
  auto *bytes = static_cast<uint8_t *>(copy.data());
  const size_t at = g.next() % copy.size();
  bytes[at] ^= static_cast<uint8_t>(1u << (g.next() % 8));
  replace_payload_keeping_header(r, std::move(copy));
  return true;
}

// Blocks until a signal (or request_stop()) asks the stage to stop, reading nothing. The transport
// offers no bare wait-for-stop; a subscriber on an inproc endpoint that nobody binds is one: it
// never yields a record, and receive(-1) returns nullopt once a stop is requested (it watches the
// signal pipe, so a signal that came just before the wait is not missed).
void wait_for_stop() {
  zmq::context_t ctx;
  tap_subscriber never(ctx, fmt::format("inproc://tprobe-fault-stall-{}", static_cast<const void *>(&ctx)));
  while (never.receive(-1)) {
  }
}

}  // namespace

fault_part fault_part_parse(std::string_view name) {
  if (name == "header") return fault_part::header;
  if (name == "payload") return fault_part::payload;
  throw usage_error(fmt::format("--corrupt-part \"{}\": not header or payload", name));
}

const stage_description &fault_stage_description() {
  static const stage_description d{
      "fault",
      "pass records through while delaying, dropping, duplicating, truncating or corrupting some, stalling or "
      "dying: a test stage",
      true,
      true,
      {
          {"seed", "int", "1", "seed of the fault schedule: the same input and seed give the same faults", 0, {}},
          {"delay-ms", "float", "0", "pause this many milliseconds before passing a chosen record", 0, {}},
          {"delay-prob", "float", "1", "probability that an eligible record is delayed (with --delay-ms)", 0, 1},
          {"drop-prob", "float", "0", "probability that an eligible record is dropped", 0, 1},
          {"duplicate-prob", "float", "0", "probability that an eligible record is sent twice", 0, 1},
          {"truncate-prob", "float", "0",
           "probability that an eligible record's payload is cut short (malformed downstream: exit 100)", 0, 1},
          {"corrupt-prob", "float", "0", "probability that an eligible record with a payload is corrupted", 0, 1},
          {"corrupt-part", "string", "header",
           "header: shape and payload disagree (malformed downstream); payload: one data bit flipped", {}, {}, {},
           {"header", "payload"}},
          {"stall-after", "int", "-1", "after this many records stop reading and sending until a signal; -1 = never", -1, {}},
          {"die-after", "int", "-1", "after this many records die at once (SIGKILL, no end-of-stream); -1 = never", -1, {}},
          {"kinds", "list", "tensor",
           "record kinds the probabilistic faults apply to (session, entry, tensor, value, flush, step_end)", {}, {}},
      }};
  return d;
}

void fault_check(const fault_stage_options &o) {
  auto probability = [](const char *name, double p) {
    if (!(p >= 0 && p <= 1)) throw usage_error(fmt::format("--{} {}: a probability is between 0 and 1", name, p));
  };
  probability("delay-prob", o.delay_prob);
  probability("drop-prob", o.drop_prob);
  probability("duplicate-prob", o.duplicate_prob);
  probability("truncate-prob", o.truncate_prob);
  probability("corrupt-prob", o.corrupt_prob);
  if (!(o.delay_ms >= 0) || std::isinf(o.delay_ms))
    throw usage_error(fmt::format("--delay-ms {}: must be a finite number >= 0", o.delay_ms));
}

fault_stage_result fault_run(stage_io &io, const fault_stage_options &o) {
  fault_check(o);
  fault_stage_result result;
  fault_stream delay_g(o.seed, 1), drop_g(o.seed, 2), duplicate_g(o.seed, 3), truncate_g(o.seed, 4),
      corrupt_g(o.seed, 5);
  auto send = [&](const record &r, bool spoiled = false) {
    if (spoiled) io.send_alone(r);  // its error downstream must name it, not a batch around it
    else io.send(r);
    ++result.sent;
  };
  for (;;) {
    if (o.die_after && result.received == *o.die_after) {
      result.end = fault_end::die;
      return result;
    }
    if (o.stall_after && result.received == *o.stall_after) {
      io.flush();  // what it passed on arrives; only what comes after is held
      wait_for_stop();
      result.end = fault_end::stalled;
      break;
    }
    auto r = io.receive();
    if (!r) break;
    ++result.received;
    if (std::find(o.kinds.begin(), o.kinds.end(), r->header.kind) == o.kinds.end()) {
      send(*r);
      continue;
    }
    const bool delay = delay_g.chance(o.delay_prob) && o.delay_ms > 0;
    const bool drop = drop_g.chance(o.drop_prob);
    const bool duplicate = duplicate_g.chance(o.duplicate_prob);
    const bool cut = truncate_g.chance(o.truncate_prob);
    const bool spoil = corrupt_g.chance(o.corrupt_prob);
    if (drop) {
      ++result.dropped;
      continue;
    }
    if (delay) {
      // A deliberately slow stage: its input fills up meanwhile and upstream blocks.
      io.flush();
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.delay_ms));
      ++result.delayed;
    }
    bool spoiled = false;
    if (spoil && corrupt(*r, o.corrupt_part, corrupt_g)) ++result.corrupted, spoiled = true;
    if (cut && truncate(*r, truncate_g)) ++result.truncated, spoiled = true;
    send(*r, spoiled);
    if (duplicate) {
      send(*r, spoiled);
      ++result.duplicated;
    }
  }
  io.finish();
  return result;
}

}  // namespace tprobe
