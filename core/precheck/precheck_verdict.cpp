#include "precheck_verdict.h"

#include <charconv>

#include <fmt/format.h>

#include "api_precision_compare.h"
#include "half_float.h"
#include "precheck_files.h"

namespace tprobe::precheck {

namespace {

// "Functional.linear.0.forward.output.2" → (forward, 2).
std::optional<std::pair<bool, size_t>> row_slot(const std::string &row_name, const std::string &full_name) {
  for (const bool forward : {true, false}) {
    const std::string prefix = full_name + (forward ? ".forward.output." : ".backward.output.");
    if (!row_name.starts_with(prefix)) continue;
    size_t index = 0;
    const char *begin = row_name.data() + prefix.size(), *end = row_name.data() + row_name.size();
    const auto [ptr, ec] = std::from_chars(begin, end, index);
    if (ec != std::errc() || ptr != end) return std::nullopt;
    return std::make_pair(forward, index);
  }
  return std::nullopt;
}

status worst(status a, status b) {
  auto rank = [](status s) { return s == status::error ? 3 : s == status::warning ? 2 : s == status::pass ? 1 : 0; };
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace

double round_to_dtype(double value, std::string_view dtype) {
  if (dtype == "torch.float32") return static_cast<float>(value);
  if (dtype == "torch.float16") return float16_to_float(float_to_float16(static_cast<float>(value)));
  if (dtype == "torch.bfloat16") return bfloat16_to_float(float_to_bfloat16(static_cast<float>(value)));
  return value;
}

void judge_against_rounding(api_judgement &judgement, const api_replay &replay, dialect d) {
  if (replay.skip_reason) return;
  const std::string bare = bare_api_name(replay.full_name);
  bool changed = false;
  for (auto &row : judgement.details) {
    const status stage1 = row.verdict;
    if (stage1 != status::error && stage1 != status::warning) continue;
    const auto slot = row_slot(row.api_name, replay.full_name);
    if (!slot) continue;
    const auto &bench_list = slot->first ? replay.forward_bench : replay.backward_bench;
    const auto &device_list = slot->first ? replay.forward_device : replay.backward_device;
    if (slot->second >= bench_list.size() || slot->second >= device_list.size()) continue;
    const auto *bench = std::get_if<tensor_values>(&bench_list[slot->second]);
    const auto *device = std::get_if<tensor_values>(&device_list[slot->second]);
    if (!bench || !device || bench->values.size() != device->values.size()) continue;
    if (device->dtype != "torch.float16" && device->dtype != "torch.bfloat16" && device->dtype != "torch.float32")
      continue;
    // Under autocast the device computed in the autocast dtype even where it returns float32
    // (input gradients): a perfect kernel's result carries that dtype's rounding.
    const std::string rounding = !replay.autocast_dtype.empty() && device->dtype == "torch.float32"
                                     ? replay.autocast_dtype : device->dtype;
    tensor_values rounded{rounding, device->shape, bench->values};
    for (auto &v : rounded.values) v = round_to_dtype(v, rounding);
    const detail_row reference = judge_output(row.api_name, bare, *bench, rounded, d);
    // Stage 2 with the rounded result as the trusted device's; an autocast row is measured as the
    // dtype it was computed in (its ULPs and thresholds are that dtype's, not float32's).
    const detail_row measured =
        rounding == device->dtype ? row
                                  : judge_output(row.api_name, bare, *bench,
                                                 tensor_values{rounding, device->shape, device->values}, d);
    csv_table npu{detail_header(), {detail_cells(measured, d)}};
    csv_table gpu{detail_header(), {detail_cells(reference, d)}};
    const precision_compare_result stage2 = api_precision_compare(npu, gpu, d);
    if (stage2.details.empty()) continue;
    const precision_detail &verdict = stage2.details.front();
    std::string why = verdict.compare_message;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    for (auto &c : why)
      if (c == '\n') c = ' ';
    if (verdict.compare_result == "pass") {
      row.verdict = status::pass;
      row.message += fmt::format("tprobe: pass: within msprobe's stage-2 thresholds ({}) of the bench rounded to {}; "
                                 "the stage-1 {} is the dtype's own rounding.\n",
                                 verdict.compare_algorithm, rounding, stage1 == status::error ? "error" : "warning");
      changed = true;
    } else if (verdict.compare_result == "error") {
      row.verdict = status::error;
      row.message += fmt::format("tprobe: error: worse than the bench rounded to {} by msprobe's stage-2 thresholds "
                                 "({}{}{}).\n",
                                 rounding, verdict.compare_algorithm, why.empty() ? "" : ": ", why);
      changed = changed || stage1 != status::error;
    }
  }
  if (!changed) return;
  // The result row follows its rows again: the worst of each direction, SKIP rows ignored.
  std::optional<status> forward, backward;
  for (const auto &row : judgement.details) {
    const auto slot = row_slot(row.api_name, replay.full_name);
    if (!slot || row.verdict == status::skip) continue;
    auto &dir = slot->first ? forward : backward;
    dir = dir ? worst(*dir, row.verdict) : row.verdict;
  }
  if (forward && judgement.result.forward != status::skip) judgement.result.forward = *forward;
  if (backward && judgement.result.backward && *judgement.result.backward != status::skip)
    judgement.result.backward = *backward;
}

}  // namespace tprobe::precheck
