// tprobe-repro: one API call of a dump as a standalone PyTorch script (repro.h).
//
//   tprobe repro DUMP --api Functional.linear.0 -o DIR     then: python3 DIR/repro_Functional.linear.0.py
#include <fmt/format.h>

#include "repro/repro.h"
#include "stage_main.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  static const stage_description description{
      .stage = "repro",
      .summary = "write a standalone PyTorch script that re-runs one API call of a dump and compares it "
                 "(msprobe's single-API script generator)",
      .has_input = false,
      .has_output = false,
      .options = {{.name = "api", .type = "string", .default_value = "",
                   .doc = "the API call, as dump.json names it: Functional.linear.0", .required = true},
                  {"output", "string", "./repro", "folder for the script and the tensor files it reads", {}, {}, "-o"}},
  };
  repro_options o;
  stage_main_extras extras;
  extras.add_arguments = [&](CLI::App &app) {
    app.add_option("DUMP", o.dump, "a dump.json, its rank folder, or a step folder holding one rank")->required();
  };
  return stage_main(argc, argv, description, [&](stage_main_context &c) {
    o.api = c.values().text("api");
    o.output_dir = c.values().text("output");
    const repro_report r = repro_write(o);
    fmt::print("tprobe-repro: {} ({}): {} and {} tensor file{}{}\n", r.api, r.op, r.script, r.tensor_files.size(),
               r.tensor_files.size() == 1 ? "" : "s",
               r.random_tensors ? fmt::format("; {} tensor{} drawn from their statistics (random mode)", r.random_tensors, r.random_tensors == 1 ? "" : "s")
                                : "");
    return static_cast<int>(EXIT_OK);
  }, extras);
}
