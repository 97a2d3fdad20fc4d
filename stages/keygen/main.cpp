// tprobe-keygen: prints a new CurveZMQ key pair as environment lines, for the stages and captures
// that talk over a network (docs/network.md):
//
//   (umask 077; tprobe keygen > stage.keys)     then: set -a; . ./stage.keys; set +a
//
// The values are single-quoted: Z85 uses shell characters ($ & < > ( ) …) but never a quote.
#include <fmt/format.h>

#include "stage_main.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-keygen", [&] {
    const stage_description description{
        .stage = "keygen",
        .summary = "Print a new CurveZMQ key pair as TPROBE_CURVE_* lines (docs/network.md)",
        .has_input = false,
        .has_output = false,
        .options = {},
    };
    CLI::App app{description.summary, "tprobe-keygen"};
    app.add_flag_callback(
        "--describe", [&] { fmt::print("{}\n", stage_describe_json(description)); throw CLI::Success(); },
        "Print this stage's option table as JSON");
    stage_parse(app, argc, argv);
    const curve_keypair keys = endpoint_curve_keypair();
    fmt::print("TPROBE_CURVE_PUBLIC_KEY='{}'\nTPROBE_CURVE_SECRET_KEY='{}'\n", keys.public_key, keys.secret_key);
    return EXIT_OK;
  });
}
