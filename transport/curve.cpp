// curve.cpp: CurveZMQ (curve.h): the TPROBE_CURVE_* key variables read and checked, the plan of
// one socket, its options, and fresh key pairs (endpoint_curve_keypair, endpoint.h).
#include "curve.h"

#include <cstdint>
#include <cstdlib>

#include <fmt/format.h>

#include "endpoint.h"
#include "errors.h"

namespace tprobe {

namespace {

constexpr const char *curve_secret_variable = "TPROBE_CURVE_SECRET_KEY";
constexpr const char *curve_public_variable = "TPROBE_CURVE_PUBLIC_KEY";
constexpr const char *curve_server_variable = "TPROBE_CURVE_SERVER_KEY";

std::string curve_key_variable(const char *name) {
  const char *value = std::getenv(name);
  if (!value || !*value) return {};
  std::string key(value);
  uint8_t decoded[32];
  if (key.size() != 40 || !zmq_z85_decode(decoded, key.c_str()))
    throw usage_error(fmt::format("{}: not a CurveZMQ key (40 Z85 characters, as `tprobe keygen` prints)", name));
  return key;
}

curve_environment curve_environment_read() {
  curve_environment keys;
  keys.secret = curve_key_variable(curve_secret_variable);
  keys.public_key = curve_key_variable(curve_public_variable);
  keys.server = curve_key_variable(curve_server_variable);
  if (!keys.public_key.empty() && keys.secret.empty())
    throw usage_error(fmt::format("{} is set without {} (a process that only connects names the stage's public key in "
                                  "{})", curve_public_variable, curve_secret_variable, curve_server_variable));
  if (!keys.on()) return keys;
  if (!zmq_has("curve"))
    throw usage_error(fmt::format("{}/{} are set but this libzmq was built without CURVE (zmq_has(\"curve\") is "
                                  "false): use a libzmq built with libsodium, or unset them",
                                  curve_secret_variable, curve_server_variable));
  if (!keys.secret.empty()) {
    char derived[41];
    if (zmq_curve_public(derived, keys.secret.c_str()) != 0)
      throw usage_error(fmt::format("{}: not a CurveZMQ secret key", curve_secret_variable));
    if (keys.public_key.empty()) keys.public_key = derived;
    else if (keys.public_key != derived)
      throw usage_error(fmt::format("{}: not the public key of {} (make both with `tprobe keygen`)",
                                    curve_public_variable, curve_secret_variable));
  }
  return keys;
}

}  // namespace

curve_plan curve_plan_for(const std::string &spec, curve_role role) {
  if (spec.rfind("tcp://", 0) != 0) return {};
  curve_plan plan{.on = false, .role = role, .keys = curve_environment_read()};
  if (!plan.keys.on()) {
    if (endpoint_is_loopback(spec)) return plan;
    if (role == curve_role::server)
      throw usage_error(fmt::format("endpoint \"{}\" is not loopback: binding it needs CurveZMQ: set {} (and {}) "
                                    "from `tprobe keygen`, or bind 127.0.0.1 (docs/network.md)",
                                    spec, curve_secret_variable, curve_public_variable));
    throw usage_error(fmt::format("endpoint \"{}\" is not loopback: connecting to it needs CurveZMQ: set {} to the "
                                  "public key of the stage that binds it (docs/network.md)",
                                  spec, curve_server_variable));
  }
  plan.on = true;
  if (role == curve_role::server && plan.keys.secret.empty())
    throw usage_error(fmt::format("endpoint \"{}\": CurveZMQ is on ({} is set), so binding it needs this process's "
                                  "key pair: set {}", spec, curve_server_variable, curve_secret_variable));
  if (role == curve_role::client && plan.keys.server.empty())
    throw usage_error(fmt::format("endpoint \"{}\": CurveZMQ is on ({} is set), so connecting to it needs the public "
                                  "key of the stage that binds it: set {}",
                                  spec, curve_secret_variable, curve_server_variable));
  return plan;
}

void curve_apply(zmq::socket_t &socket, const curve_plan &plan) {
  if (!plan.on) return;
  if (plan.role == curve_role::server) {
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, plan.keys.secret);
    return;
  }
  curve_keypair own{plan.keys.public_key, plan.keys.secret};
  // Without a pair of its own a client makes one: the server authenticates no client (no ZAP
  // handler), so a throwaway pair costs nothing and keeps one more secret out of the environment.
  if (own.secret_key.empty()) own = endpoint_curve_keypair();
  socket.set(zmq::sockopt::curve_serverkey, plan.keys.server);
  socket.set(zmq::sockopt::curve_publickey, own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, own.secret_key);
}

std::string curve_hint(const curve_plan &plan) {
  if (!plan.on) return "";
  return fmt::format(" (CurveZMQ is on: is {} the public key of the stage that binds it?)", curve_server_variable);
}

curve_keypair endpoint_curve_keypair() {
  if (!zmq_has("curve"))
    throw usage_error("this libzmq was built without CURVE (zmq_has(\"curve\") is false): use a libzmq built with libsodium");
  char public_key[41], secret_key[41];
  if (zmq_curve_keypair(public_key, secret_key) != 0)
    throw system_error(fmt::format("unable to make a CurveZMQ key pair: {}", zmq_strerror(zmq_errno())));
  return {public_key, secret_key};
}

}  // namespace tprobe
