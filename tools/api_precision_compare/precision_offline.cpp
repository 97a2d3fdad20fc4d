// precision_offline.cpp: see precision_offline.h.
#include "precision_offline.h"

#include <fmt/format.h>

#include "errors.h"

namespace tprobe {
namespace {

precheck::csv_table read_details(const std::string &path, const char *side) {
  if (path.empty()) throw usage_error(fmt::format("the {} details CSV is required (-{} FILE)", side, side));
  if (std::filesystem::path(path).extension() != ".csv")
    throw usage_error(fmt::format("{}: the {} details file must be a .csv", path, side));
  const precheck::csv_table t = precheck::read_csv_table(path);
  precheck::check_precision_columns(t, path);
  return t;
}

}  // namespace

const stage_description &api_precision_compare_stage_description() {
  static const stage_description d{
      "api-precision-compare",
      "judge an NPU pre-check details CSV against a GPU one, API by API (msprobe api_precision_compare)",
      false,
      false,
      {
          {"npu", "string", "", "the device-under-test's accuracy_checking_details_*.csv (msprobe's -npu)"},
          {"gpu", "string", "", "the trusted device's accuracy_checking_details_*.csv (msprobe's -gpu)"},
          {"output", "string", "./", "folder for api_precision_compare_{result,details}_{ts}.csv", {}, {}, "-o"},
          {"msprobe-version", "string", "8.3.3", "whose standards judge the rows", {}, {}, {}, {"8.3.3", "head"}},
      }};
  return d;
}

precision_offline_report precision_offline_run(const precision_offline_options &o) {
  const precheck::dialect d = precheck::dialect_parse(o.version);
  const precheck::csv_table npu = read_details(o.npu_csv, "npu");
  const precheck::csv_table gpu = read_details(o.gpu_csv, "gpu");
  precision_offline_report r;
  r.result = precheck::api_precision_compare(npu, gpu, d);
  r.files = precheck::write_precision_compare(r.result, o.output_dir, precheck::timestamp_now());
  for (const auto &row : r.result.results) {
    // msprobe's print_test_success: forward must pass, backward pass or absent (" ").
    const bool pass = row.forward == "pass" && (row.backward == "pass" || row.backward == " ");
    const bool error = row.forward == "error" || row.backward == "error";
    (pass ? r.passed : error ? r.errors : r.others) += 1;
    if (!pass && !r.first_not_pass) r.first_not_pass = &row;
  }
  return r;
}

std::string precision_summary_line(const precision_offline_report &r) {
  const size_t n = r.result.results.size();
  std::string line = fmt::format("{} API{}: {} pass, {} error, {} other", n, n == 1 ? "" : "s", r.passed, r.errors,
                                 r.others);
  if (r.first_not_pass)
    line += fmt::format("; first not pass: {} (forward {}, backward {})", r.first_not_pass->api_name,
                        r.first_not_pass->forward, r.first_not_pass->backward == " " ? "none" : r.first_not_pass->backward);
  return line;
}

}  // namespace tprobe
