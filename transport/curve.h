// curve.h: CurveZMQ on a tcp socket (endpoint.h "Network", docs/network.md): what one socket
// does about it, worked out from the TPROBE_CURVE_* variables before it binds or connects, and the
// socket options that do it. Internal to transport/ (endpoint.cpp's links, binds and taps,
// control.cpp's channel); endpoint.h holds the public part (the rules, endpoint_curve_keypair).
// Apart from endpoint.cpp because keys and their checks are a concern of their own.
#pragma once

#include <string>

#include <zmq.hpp>

namespace tprobe {

// The key variables, read at each bind or connect (not once per process): a process sets them
// before it opens sockets, and tests change them between cases. The values are never echoed in a
// message: one of them is a secret.
struct curve_environment {
  std::string secret, public_key, server;  // Z85; public_key is filled in from secret
  bool on() const { return !secret.empty() || !server.empty(); }
};

enum class curve_role { server, client };  // the socket binds / connects

// What one socket does about CurveZMQ, worked out before any socket binds or connects, so that a
// refused endpoint never opens a port or sends a byte.
struct curve_plan {
  bool on = false;
  curve_role role = curve_role::client;
  curve_environment keys;
};

// The plan for a socket that binds (server) or connects (client) `spec`. Throws usage_error for
// a tcp endpoint that is not loopback without keys, a key that is malformed or missing for the
// role, or keys set with a libzmq built without CURVE.
curve_plan curve_plan_for(const std::string &spec, curve_role role);
// Before bind/connect: the options apply to the connections made afterwards.
void curve_apply(zmq::socket_t &socket, const curve_plan &plan);
// Appended to "nothing answered": with CURVE, a wrong server key looks exactly like silence (the
// server drops a hello it cannot decrypt), so say which setting to check.
std::string curve_hint(const curve_plan &plan);

}  // namespace tprobe
