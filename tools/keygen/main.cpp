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
  // Its table is empty, and still the one place --help and --describe read: an option added here
  // is parsed, described and checked like every stage's.
  static const stage_description description{
      .stage = "keygen",
      .summary = "Print a new CurveZMQ key pair as TPROBE_CURVE_* lines (docs/network.md)",
      .has_input = false,
      .has_output = false,
      .options = {},
  };
  return stage_main(argc, argv, description, [](stage_main_context &) {
    const curve_keypair keys = endpoint_curve_keypair();
    fmt::print("TPROBE_CURVE_PUBLIC_KEY='{}'\nTPROBE_CURVE_SECRET_KEY='{}'\n", keys.public_key, keys.secret_key);
    return static_cast<int>(EXIT_OK);
  });
}
