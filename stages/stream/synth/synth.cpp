#include "synth.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "dump_semantics.h"
#include "errors.h"
#include "tensor_stats.h"

namespace tprobe {

namespace {

// splitmix64: tiny, fast, and good enough for test data; one generator per tensor record, seeded
// from (seed, index), so a record's bytes do not depend on the records before it.
struct generator {
  uint64_t state;
  generator(uint64_t seed, uint64_t index) : state(seed * 0x9E3779B97F4A7C15ull ^ (index + 1) * 0xBF58476D1CE4E5B9ull) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double real() { return unit() * 8.0 - 4.0; }                             // [-4, 4)
  int64_t small_int() { return static_cast<int64_t>(next() % 201) - 100; }  // [-100, 100]
};

template <typename T>
void put(std::byte *p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// Writes `value` as element i of type t (complex: its real part; the imaginary part is kept).
void put_real(std::byte *p, size_t i, dtype t, double value) {
  switch (t) {
    case dtype::float64: put<double>(p, i, value); return;
    case dtype::float32: put<float>(p, i, static_cast<float>(value)); return;
    case dtype::float16: put<uint16_t>(p, i, float_to_float16(static_cast<float>(value))); return;
    case dtype::bfloat16: put<uint16_t>(p, i, float_to_bfloat16(static_cast<float>(value))); return;
    case dtype::complex64: put<float>(p, 2 * i, static_cast<float>(value)); return;
    case dtype::complex128: put<double>(p, 2 * i, value); return;
    default: return;
  }
}

void fill(std::byte *p, dtype t, size_t count, generator &g) {
  for (size_t i = 0; i < count; ++i) {
    switch (t) {
      case dtype::int8: put<int8_t>(p, i, static_cast<int8_t>(g.small_int())); break;
      case dtype::int16: put<int16_t>(p, i, static_cast<int16_t>(g.small_int())); break;
      case dtype::int32: put<int32_t>(p, i, static_cast<int32_t>(g.small_int())); break;
      case dtype::int64: put<int64_t>(p, i, g.small_int()); break;
      case dtype::uint8: put<uint8_t>(p, i, static_cast<uint8_t>(g.next())); break;
      case dtype::boolean: put<uint8_t>(p, i, static_cast<uint8_t>(g.next() & 1)); break;
      case dtype::complex64:
        put<float>(p, 2 * i, static_cast<float>(g.real()));
        put<float>(p, 2 * i + 1, static_cast<float>(g.real()));
        break;
      case dtype::complex128:
        put<double>(p, 2 * i, g.real());
        put<double>(p, 2 * i + 1, g.real());
        break;
      default: put_real(p, i, t, g.real()); break;  // the floating types
    }
  }
}

constexpr std::string_view pattern_names[] = {"normal", "nan", "inf", "neginf", "mixed"};

std::string synth_entry_name(uint64_t index_in_step) {
  return entry_api_name("Torch", "add", static_cast<int64_t>(index_in_step / 2), entry_direction::forward);
}

}  // namespace

std::string_view synth_pattern_name(synth_pattern p) { return pattern_names[static_cast<size_t>(p)]; }

synth_pattern synth_pattern_parse(std::string_view name) {
  for (size_t i = 0; i < std::size(pattern_names); ++i)
    if (pattern_names[i] == name) return static_cast<synth_pattern>(i);
  throw usage_error(fmt::format("--pattern \"{}\": not one of {}", name, fmt::join(pattern_names, ", ")));
}

const stage_description &synth_stage_description() {
  static const stage_description d{
      "synth",
      "send synthetic records (a session, tensors from a seed, step ends) as a capture would: a test source",
      false,
      true,
      {
          {"records", "int", "100", "tensor records in the whole run", 0, {}},
          {"steps", "int", "1", "steps the tensor records are spread over, each ended by a step_end record", 1, {}},
          {"sizes", "list", "16", "element counts of the tensors, cycled (comma-separated or repeated)", {}, {}},
          {"dtypes", "list", "float32",
           "element types, cycled: float64 float32 float16 bfloat16 int8 int16 int32 int64 uint8 bool complex64 "
           "complex128", {}, {}},
          {"pattern", "string", "normal",
           "NaN/Inf in the chosen tensors: normal (none), nan, inf, neginf, mixed (one NaN, +Inf and -Inf)", {}, {}, {},
           std::vector<std::string>(std::begin(pattern_names), std::end(pattern_names))},
          {"every", "int", "1", "the pattern goes into every N-th tensor record (floating and complex dtypes)", 1, {}},
          {"rate", "float", "0", "records per second; 0 = as fast as the consumer takes them", 0, {}},
          {"seed", "int", "1", "seed of the data: the same options send the same bytes", 0, {}},
          {"save", "bool", "false", "flag every tensor to be saved as .npy (task tensor implies it)", {}, {}},
          {"entry-records", "bool", "true", "send an entry record (with a one-line stack) before each entry", {}, {}},
          {"task", "string", "", "session task: statistics or tensor (default: $TPROBE_TASK, else statistics)", {}, {}},
          {"dump-path", "string", "", "session dump_path (default: $TPROBE_DUMP_PATH, else ./dump)", {}, {}},
          {"rank", "int", "-1", "producer rank; -1 = not distributed (dump folder \"rank\")", -1, 2147483647},
      }};
  return d;
}

std::vector<dtype> synth_parse_dtypes(const std::vector<std::string> &names) {
  std::vector<dtype> out;
  for (const auto &n : names) {
    auto t = dtype_from_name(n);
    if (!t) throw usage_error(fmt::format("--dtypes: unknown dtype \"{}\"", n));
    out.push_back(*t);
  }
  return out;
}

std::vector<uint64_t> synth_parse_sizes(const std::vector<std::string> &texts) {
  std::vector<uint64_t> out;
  for (const auto &t : texts) {
    size_t used = 0;
    uint64_t v = 0;
    try {
      if (!t.empty() && t.front() != '-') v = std::stoull(t, &used, 10);
    } catch (const std::exception &) {
      used = 0;
    }
    if (used == 0 || used != t.size()) throw usage_error(fmt::format("--sizes must be element counts, got \"{}\"", t));
    out.push_back(v);
  }
  return out;
}

void synth_apply_environment(synth_stage_options &o, std::vector<std::string> &outputs,
                             const std::function<const char *(const char *)> &env) {
  auto value = [&](const char *name) -> std::string {
    const char *v = env(name);
    return v ? v : "";
  };
  if (outputs.empty()) {
    const std::string endpoints = value("TPROBE_ENDPOINT");
    std::string_view rest = endpoints;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      if (const auto ep = rest.substr(0, comma); !ep.empty()) outputs.emplace_back(ep);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  if (o.task.empty()) o.task = value("TPROBE_TASK");
  if (o.task.empty()) o.task = "statistics";
  if (o.dump_path.empty()) o.dump_path = value("TPROBE_DUMP_PATH");
  if (o.dump_path.empty()) o.dump_path = "./dump";
  o.dump_path = std::filesystem::absolute(o.dump_path).lexically_normal().string();
  if (o.label.empty()) o.label = value("TPROBE_RUN_LABEL");
}

void synth_check(const synth_stage_options &o) {
  if (o.steps == 0) throw usage_error("--steps must be at least 1");
  if (o.every == 0) throw usage_error("--every must be at least 1");
  if (!(o.rate >= 0) || std::isinf(o.rate)) throw usage_error(fmt::format("--rate {}: must be a finite number >= 0", o.rate));
  if (o.sizes.empty()) throw usage_error("--sizes is empty");
  if (o.dtypes.empty()) throw usage_error("--dtypes is empty");
  if (!o.task.empty() && o.task != "statistics" && o.task != "tensor")
    throw usage_error(fmt::format("--task \"{}\": synth sends statistics or tensor", o.task));
  for (uint64_t s : o.sizes)
    if (s > (uint64_t{1} << 31))
      throw usage_error(fmt::format("--sizes {}: at most {} elements per tensor", s, uint64_t{1} << 31));
}

uint64_t synth_step_begin(const synth_stage_options &o, uint64_t step) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(o.records) * step / o.steps);
}

uint64_t synth_total_records(const synth_stage_options &o) {
  uint64_t entries = 0;
  if (o.entry_records)
    for (uint64_t s = 0; s < o.steps; ++s) entries += (synth_step_begin(o, s + 1) - synth_step_begin(o, s) + 1) / 2;
  return 1 + o.records + entries + o.steps;
}

bool synth_is_special(const synth_stage_options &o, uint64_t index) {
  const dtype t = o.dtypes[index % o.dtypes.size()];
  return o.pattern != synth_pattern::normal && (index + 1) % o.every == 0 &&
         (dtype_is_floating(t) || dtype_is_complex(t)) && o.sizes[index % o.sizes.size()] > 0;
}

record synth_tensor(const synth_stage_options &o, uint64_t index, int64_t step, uint64_t index_in_step) {
  record r(record_kind::tensor);
  auto &h = r.header;
  h.step = step;
  h.rank = o.rank;
  h.entry = synth_entry_name(index_in_step);
  h.slot = index_in_step % 2 == 0 ? "input.0" : "output.0";
  h.type = o.dtypes[index % o.dtypes.size()];
  const uint64_t count = o.sizes[index % o.sizes.size()];
  h.shape = {static_cast<int64_t>(count)};
  if (o.save || o.task == "tensor") h.flags |= RECORD_FLAG_SAVE;

  std::vector<std::byte> data(count * dtype_size(h.type));
  generator g(o.seed, index);
  fill(data.data(), h.type, count, g);
  if (synth_is_special(o, index)) {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const size_t at = g.next() % count;
    // Distinct elements from `at` on; a tensor too small for all of "mixed" gets what fits.
    auto put_at = [&](size_t k, double v) {
      if (k < count) put_real(data.data(), (at + k) % count, h.type, v);
    };
    switch (o.pattern) {
      case synth_pattern::nan: put_at(0, nan); break;
      case synth_pattern::inf: put_at(0, inf); break;
      case synth_pattern::neginf: put_at(0, -inf); break;
      case synth_pattern::mixed:
        put_at(0, nan);
        put_at(1, inf);
        put_at(2, -inf);
        break;
      case synth_pattern::normal: break;
    }
  }
  r.set_payload(std::move(data));
  return r;
}

synth_stage_result synth_run(stage_io &io, const synth_stage_options &o) {
  synth_check(o);
  synth_stage_result result;
  const std::string run = fmt::format("synth-{}", o.seed);
  const auto start = std::chrono::steady_clock::now();
  uint64_t seq = 0;
  auto send = [&](record &r) {
    r.header.run = run;
    r.header.rank = o.rank;
    r.header.seq = ++seq;
    // Pacing, not synchronisation: record n leaves no earlier than n / rate seconds after the start.
    if (o.rate > 0)
      std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(static_cast<double>(result.records) / o.rate)));
    io.send(r);
    ++result.records;
  };

  record session(record_kind::session);
  auto &meta = session.header.meta;
  meta = nlohmann::ordered_json::object();
  meta["task"] = o.task.empty() ? "statistics" : o.task;
  meta["level"] = "L1";
  meta["framework"] = "pytorch";
  if (!o.dump_path.empty()) meta["dump_path"] = o.dump_path;
  meta["rank"] = o.rank;
  meta["step"] = nlohmann::ordered_json::array();
  meta["precision"] = "low";
  meta["summary_mode"] = "statistics";
  meta["data_mode"] = nlohmann::ordered_json::array({"all"});
  meta["producer"] = "tprobe-synth";
  meta["seed"] = o.seed;
  if (!o.label.empty()) meta["label"] = o.label;
  send(session);

  for (uint64_t step = 0; step < o.steps && !result.interrupted; ++step) {
    const uint64_t begin = synth_step_begin(o, step), end = synth_step_begin(o, step + 1);
    for (uint64_t t = begin; t < end; ++t) {
      if (stop_requested()) {
        result.interrupted = true;
        break;
      }
      const uint64_t i = t - begin;
      if (o.entry_records && i % 2 == 0) {
        record e(record_kind::entry);
        e.header.step = static_cast<int64_t>(step);
        e.header.entry = synth_entry_name(i);
        e.header.meta = {{"stack", nlohmann::ordered_json::array({"File \"tprobe-synth\", line 1, in synth_run"})},
                         {"parent", nullptr}};
        send(e);
        ++result.entries;
      }
      record r = synth_tensor(o, t, static_cast<int64_t>(step), i);
      result.special += synth_is_special(o, t);
      result.payload_bytes += r.header.length;
      send(r);
      ++result.tensors;
    }
    if (result.interrupted) break;
    record end_of_step(record_kind::step_end);
    end_of_step.header.step = static_cast<int64_t>(step);
    send(end_of_step);
    ++result.steps;
  }
  io.finish();
  return result;
}

}  // namespace tprobe
