// tprobe-repro: one API call of a dump as a standalone PyTorch script (repro.h).
//
//   tprobe repro DUMP --api Functional.linear.0 -o DIR     then: python3 DIR/repro_Functional.linear.0.py
#include <fmt/format.h>

#include "repro/repro.h"
#include "stage_main.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-repro", [&] {
    static const stage_description description{
        .stage = "repro",
        .summary = "write a standalone PyTorch script that re-runs one API call of a dump and compares it "
                   "(msprobe's single-API script generator)",
        .has_input = false,
        .has_output = false,
        .options = {{"api", "string", "", "the API call, as dump.json names it: Functional.linear.0"},
                    {"output", "string", "./repro", "folder for the script and the tensor files it reads", {}, {}, "-o"}},
    };
    CLI::App app{description.summary, "tprobe-repro"};
    repro_options o;
    app.add_option("DUMP", o.dump, "a dump.json, its rank folder, or a step folder holding one rank")->required();
    stage_option_values values;
    stage_add_declared_options(app, description, values);
    stage_add_describe_option(app, description);
    stage_parse(app, argc, argv);
    stage_check_declared_options(description, values);
    o.api = values.text("api");
    o.output_dir = values.text("output");
    if (o.api.empty()) throw usage_error("--api NAME is required (an API call of the dump: Functional.linear.0)");

    const repro_report r = repro_write(o);
    fmt::print("tprobe-repro: {} ({}): {} and {} tensor file{}{}\n", r.api, r.op, r.script, r.tensor_files.size(),
               r.tensor_files.size() == 1 ? "" : "s",
               r.random_tensors ? fmt::format("; {} tensor{} drawn from their statistics (random mode)", r.random_tensors, r.random_tensors == 1 ? "" : "s")
                                : "");
    return EXIT_OK;
  });
}
