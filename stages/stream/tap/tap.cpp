#include "tap.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>

namespace tprobe {

const stage_description &tap_stage_description() {
  static const stage_description d{
      "tap",
      "print the records flowing through a stage's live tap, one line each",
      false,
      false,
      {
          {"count", "int", "0", "stop after this many records (0: until end-of-stream)", 0},
          {"json", "bool", "false", "print one JSON object per line"},
          {"filter", "string", "", "only records whose entry name contains this"},
          {"connect-timeout", "int", "5000", "ms to wait for the endpoint to answer before exiting 111", 1, 3.6e6},
          {"stage", "string", "", "with a run directory: the stage whose tap to watch"},
          {"list", "bool", "false", "with a run directory: print its taps (stage endpoint) and exit"},
      }};
  return d;
}

namespace {
std::string stat_text(const stat_value &v) {
  switch (v.k) {
    case stat_value::kind::boolean: return v.boolean ? "true" : "false";
    case stat_value::kind::integer: return std::to_string(v.integer);
    case stat_value::kind::real: return fmt::format("{:.6g}", v.real);
    case stat_value::kind::null: break;
  }
  return "null";
}
}  // namespace

std::vector<std::pair<std::string, std::string>> tap_find_in_run_dir(const std::string &dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> taps;
  std::error_code e;
  for (fs::directory_iterator it(dir, e), end; !e && it != end; it.increment(e)) {
    const auto &p = it->path();
    std::error_code ignored;
    if (p.extension() != ".tap" || !it->is_socket(ignored)) continue;
    taps.emplace_back(p.stem().string(), "ipc://" + fs::absolute(p, ignored).string());
  }
  if (e) throw usage_error(fmt::format("{}: not a run directory: {}", dir, e.message()));
  if (taps.empty())
    throw usage_error(fmt::format("{}: no taps (<stage>.tap sockets) in it: not a run directory of tprobe run, or "
                                  "the run has ended",
                                  dir));
  std::sort(taps.begin(), taps.end());
  return taps;
}

std::string tap_resolve_target(const std::string &target, const std::string &stage) {
  std::error_code e;
  if (target.find("://") != std::string::npos || !std::filesystem::is_directory(target, e)) {
    if (!stage.empty()) throw usage_error("--stage needs a run directory, not an endpoint");
    return target;
  }
  const auto taps = tap_find_in_run_dir(target);
  std::vector<std::string> names;
  for (const auto &[name, endpoint] : taps) {
    if (name == stage || (stage.empty() && taps.size() == 1)) return endpoint;
    names.push_back(name);
  }
  if (stage.empty())
    throw usage_error(fmt::format("{} has {} taps: choose one with --stage ({})", target, taps.size(),
                                  fmt::join(names, ", ")));
  throw usage_error(fmt::format("{} has no tap of stage \"{}\" (taps: {})", target, stage, fmt::join(names, ", ")));
}

std::string tap_format_line(const record &r) {
  const auto &h = r.header;
  std::string line = fmt::format("step {} rank {} ", h.step, h.rank);
  switch (h.kind) {
    case record_kind::tensor: {
      line += fmt::format("{} {} {} [{}]", h.entry, h.slot,
                          h.foreign_dtype.empty() ? std::string(dtype_name(h.type)) : h.foreign_dtype,
                          fmt::join(h.shape, ", "));
      if (h.stats) {
        const auto &s = *h.stats;
        line += fmt::format(" max={} min={} mean={} norm={}", stat_text(s.max), stat_text(s.min),
                            stat_text(s.mean), stat_text(s.norm));
        if (s.nan_count || s.inf_count) line += fmt::format(" nan={} inf={}", s.nan_count, s.inf_count);
        if (s.crc32) line += fmt::format(" crc32={:08x}", *s.crc32);
      }
      if (h.stored) line += fmt::format(" ({} bytes)", h.length);
      return line;
    }
    case record_kind::value: return line + fmt::format("{} {} = {}", h.entry, h.slot, h.meta.dump());
    default:
      line += std::string(record_kind_name(h.kind));
      if (!h.entry.empty()) line += " " + h.entry;
      if (!h.meta.is_null()) line += " " + h.meta.dump();
      return line;
  }
}

nlohmann::ordered_json tap_format_json(const record &r) {
  const auto &h = r.header;
  nlohmann::ordered_json j{{"kind", record_kind_name(h.kind)}, {"run", h.run},   {"rank", h.rank},
                           {"step", h.step},                   {"seq", h.seq},   {"entry", h.entry},
                           {"slot", h.slot}};
  if (h.kind == record_kind::tensor) {
    j["dtype"] = h.foreign_dtype.empty() ? std::string(dtype_name(h.type)) : h.foreign_dtype;
    j["shape"] = h.shape;
    j["requires_grad"] = h.requires_grad;
    if (h.stats) j["stats"] = tensor_stats_to_json(*h.stats);
  }
  if (!h.meta.is_null()) j["meta"] = h.meta;
  return j;
}

tap_stage_result tap_run(tap_subscriber &tap, const tap_stage_options &options, std::FILE *out) {
  tap_stage_result result;
  std::map<std::pair<std::string, int32_t>, uint64_t> last_seq;  // per producer (run, rank)
  while (auto r = tap.receive(-1)) {
    const auto &h = r->header;
    if (h.kind == record_kind::eos) {
      result.ended = true;
      break;
    }
    if (h.seq != 0) {
      auto [it, inserted] = last_seq.try_emplace({h.run, h.rank}, h.seq);
      if (!inserted) {
        if (h.seq > it->second + 1) {
          const uint64_t gap = h.seq - it->second - 1;
          result.missed += gap;
          fmt::print(out, "… {} records missed by this tap (rank {})\n", gap, h.rank);
        }
        it->second = std::max(it->second, h.seq);
      }
    }
    if (!options.filter.empty() && h.entry.find(options.filter) == std::string::npos) continue;
    if (options.json)
      fmt::print(out, "{}\n", tap_format_json(*r).dump());
    else
      fmt::print(out, "{}\n", tap_format_line(*r));
    std::fflush(out);
    if (++result.records == options.count && options.count != 0) break;
  }
  return result;
}

}  // namespace tprobe
