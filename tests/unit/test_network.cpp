// The network rule (docs/network.md, endpoint.h "Network"): tcp beyond loopback only with CurveZMQ
// keys, checked before anything binds or connects; key variables validated one line each; with
// keys, every tcp socket is CURVE: records, eos, final and the tap go through with the right server
// key, and a wrong one fails within the connect deadline. Over real loopback sockets on :* only;
// no test sends a byte to a non-loopback address.
#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.h>

#include "stage_io.h"
#include "errors.h"

using namespace tprobe;

namespace {

constexpr const char *secret_variable = "TPROBE_CURVE_SECRET_KEY";
constexpr const char *public_variable = "TPROBE_CURVE_PUBLIC_KEY";
constexpr const char *server_variable = "TPROBE_CURVE_SERVER_KEY";

// Every test starts and ends without the key variables, whatever it set in between.
class Network : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char *name : {secret_variable, public_variable, server_variable}) ::unsetenv(name);
  }
  static void set(const char *name, const std::string &value) { ::setenv(name, value.c_str(), 1); }
  // This process as a stage: its own pair, and its own public key as the server key, so that it
  // can both bind and connect.
  static curve_keypair set_stage_keys() {
    const curve_keypair keys = endpoint_curve_keypair();
    set(secret_variable, keys.secret_key);
    set(public_variable, keys.public_key);
    set(server_variable, keys.public_key);
    return keys;
  }
};

record numbered(uint64_t i) {
  record r(record_kind::tensor);
  r.header.entry = "Functional.relu." + std::to_string(i) + ".forward";
  r.header.slot = "output.0";
  r.header.seq = i + 1;
  r.header.type = dtype::uint8;
  r.header.shape = {4};
  r.set_payload(std::vector<std::byte>(4, static_cast<std::byte>(i)));
  return r;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `f`, expects usage_error, returns its message.
template <class F>
std::string usage_message(F &&f) {
  try {
    f();
  } catch (const usage_error &e) {
    return e.what();
  } catch (const std::exception &e) {
    ADD_FAILURE() << "not a usage_error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error";
  return "";
}

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

// A loopback port held by a plain socket: any attempt to bind it (or 0.0.0.0 on it) fails with
// EADDRINUSE, a system_error. A usage_error on such an endpoint therefore proves that the refusal
// came before any bind.
struct held_port {
  zmq::socket_t socket;
  std::string port;
  explicit held_port(zmq::context_t &ctx) : socket(ctx, zmq::socket_type::pair) {
    socket.set(zmq::sockopt::linger, 0);
    socket.bind("tcp://127.0.0.1:*");
    const std::string ep = socket.get(zmq::sockopt::last_endpoint);
    port = ep.substr(ep.rfind(':') + 1);
  }
};

}  // namespace

TEST_F(Network, loopback_is_127_localhost_and_ipv6_1) {
  for (const std::string ep : {"tcp://127.0.0.1:5555", "tcp://127.1.2.3:*", "tcp://localhost:1", "tcp://[::1]:7",
                               "tcp://::1:7", "tcp://[::ffff:127.0.0.1]:7", "tcp://*:5555", "tcp://:*",
                               "tcp://10.0.0.1:1;127.0.0.1:5555", "ipc:///tmp/x", "inproc://x", "rec.tpr"})
    EXPECT_TRUE(endpoint_is_loopback(ep)) << ep;
  for (const std::string ep : {"tcp://0.0.0.0:5555", "tcp://10.0.0.1:5555", "tcp://128.0.0.1:1", "tcp://[::]:1",
                               "tcp://eth0:1", "tcp://lo:1", "tcp://hosta:5555", "tcp://localhost.localdomain:1",
                               "tcp://127.0.0.1:1;10.0.0.1:5555"})
    EXPECT_FALSE(endpoint_is_loopback(ep)) << ep;
}

TEST_F(Network, without_keys_a_non_loopback_bind_is_refused_before_binding) {
  zmq::context_t ctx;
  held_port held(ctx);
  stage_io_options in;
  in.input = "tcp://0.0.0.0:" + held.port;
  std::string message = usage_message([&] { stage_io io(ctx, in); });
  EXPECT_TRUE(contains(message, "\"tcp://0.0.0.0:" + held.port + "\"")) << message;
  EXPECT_TRUE(contains(message, secret_variable)) << message;
  EXPECT_TRUE(contains(message, "docs/network.md")) << message;

  in.input = "tcp://0.0.0.0:*";
  EXPECT_TRUE(contains(usage_message([&] { stage_io io(ctx, in); }), secret_variable));

  // A refused tap must not leave the (loopback, allowed) input bound meanwhile: checked first.
  stage_io_options with_tap;
  with_tap.input = "tcp://127.0.0.1:" + held.port;
  with_tap.tap = "tcp://10.0.0.1:*";
  message = usage_message([&] { stage_io io(ctx, with_tap); });
  EXPECT_TRUE(contains(message, "\"tcp://10.0.0.1:*\"")) << message;
  EXPECT_TRUE(contains(message, secret_variable)) << message;
}

TEST_F(Network, without_keys_a_non_loopback_connect_is_refused_before_connecting) {
  zmq::context_t ctx;
  const std::string remote = "tcp://10.0.0.1:5555";  // never contacted: refused before connect
  for (auto &&attempt : std::vector<std::function<void()>>{
           [&] { record_sender s(ctx, remote, "test", 1000, link_deadlines{.connect_timeout_ms = 500}); },
           [&] { (void)endpoint_send_final(ctx, remote, 500); },
           [&] { tap_subscriber t(ctx, remote, 500); },
       }) {
    const std::string message = usage_message(attempt);
    EXPECT_TRUE(contains(message, "\"" + remote + "\"")) << message;
    EXPECT_TRUE(contains(message, server_variable)) << message;
  }
  // A stage's output: refused before its input binds.
  held_port held(ctx);
  stage_io_options io;
  io.input = "tcp://127.0.0.1:" + held.port;
  io.outputs = {remote};
  const std::string message = usage_message([&] { stage_io s(ctx, io); });
  EXPECT_TRUE(contains(message, server_variable)) << message;
}

TEST_F(Network, bad_key_variables_are_refused_naming_the_variable) {
  zmq::context_t ctx;
  const curve_keypair keys = endpoint_curve_keypair();
  const curve_keypair other = endpoint_curve_keypair();
  auto loopback_bind = [&] {
    stage_io_options in;
    in.input = "tcp://127.0.0.1:*";
    stage_io io(ctx, in);
  };
  struct bad_case {
    const char *name;
    std::string value;
  };
  for (const auto &[name, value] : {bad_case{secret_variable, "short"},
                                    bad_case{secret_variable, std::string(40, '~')},  // not in Z85's alphabet
                                    bad_case{secret_variable, keys.secret_key + "\n"},
                                    bad_case{server_variable, keys.public_key.substr(1)}}) {
    clear();
    set(secret_variable, keys.secret_key);
    set(server_variable, keys.public_key);
    set(name, value);
    const std::string message = usage_message(loopback_bind);
    EXPECT_EQ(message.rfind(std::string(name) + ": not a CurveZMQ key", 0), 0u) << message;
    EXPECT_FALSE(contains(message, keys.secret_key)) << "a secret in a message: " << message;
  }

  clear();
  set(secret_variable, keys.secret_key);
  set(public_variable, other.public_key);
  EXPECT_TRUE(contains(usage_message(loopback_bind), std::string(public_variable) + ": not the public key of"));

  clear();
  set(public_variable, keys.public_key);  // someone's public key, meant as the server key
  EXPECT_TRUE(contains(usage_message(loopback_bind), server_variable));

  // Once keys are set, every tcp socket needs its key: no plain text beside CURVE.
  clear();
  set(server_variable, keys.public_key);
  std::string message = usage_message(loopback_bind);
  EXPECT_TRUE(contains(message, "CurveZMQ is on") && contains(message, secret_variable)) << message;
  clear();
  set(secret_variable, keys.secret_key);
  message = usage_message([&] { record_sender s(ctx, "tcp://127.0.0.1:1", "test"); });
  EXPECT_TRUE(contains(message, "CurveZMQ is on") && contains(message, server_variable)) << message;
}

TEST_F(Network, keypair_is_z85_and_consistent) {
  const curve_keypair keys = endpoint_curve_keypair();
  ASSERT_EQ(keys.public_key.size(), 40u);
  ASSERT_EQ(keys.secret_key.size(), 40u);
  char derived[41];
  ASSERT_EQ(zmq_curve_public(derived, keys.secret_key.c_str()), 0);
  EXPECT_EQ(keys.public_key, derived);
  EXPECT_NE(endpoint_curve_keypair().secret_key, keys.secret_key);
}

TEST_F(Network, with_keys_records_eos_and_final_go_through_curve) {
  zmq::context_t ctx;
  set_stage_keys();
  stage_io_options in;
  in.input = "tcp://127.0.0.1:*";
  in.producers = 0;  // until final, as for a capture: covers the launcher's final over CURVE too
  stage_io consumer(ctx, in);
  const std::string ep = consumer.input_endpoint();
  ASSERT_EQ(ep.rfind("tcp://127.0.0.1:", 0), 0u) << ep;
  // The handshakes need the consumer receiving, so the producers run beside it. The receiving
  // thread reads no variable: changing them here is safe.
  std::thread producers([&] {
    const link_deadlines deadlines{.connect_timeout_ms = 5000};
    // One producer with this process's pair, then one (as on another host) with the server key
    // only: a fresh pair for its socket.
    record_sender own_pair(ctx, ep, "own pair", 1000, deadlines);
    ::unsetenv(secret_variable);
    ::unsetenv(public_variable);
    record_sender ephemeral(ctx, ep, "ephemeral", 1000, deadlines);
    for (uint64_t i = 0; i < 20; ++i) own_pair.send(numbered(i));
    own_pair.finish(20, 0);
    for (uint64_t i = 0; i < 30; ++i) ephemeral.send(numbered(i));
    ephemeral.finish(30, 2);
    EXPECT_TRUE(endpoint_send_final(ctx, ep, 5000));
  });
  uint64_t n = 0;
  while (auto r = consumer.receive()) {
    EXPECT_EQ(r->payload_bytes().size(), 4u);
    ++n;
  }
  producers.join();
  EXPECT_EQ(n, 50u);
  EXPECT_EQ(consumer.counts().producers, 2u);
  EXPECT_EQ(consumer.counts().upstream_dropped, 2u);
  EXPECT_FALSE(consumer.interrupted());
}

TEST_F(Network, a_curve_server_refuses_plain_and_wrongly_keyed_clients_within_the_deadline) {
  zmq::context_t ctx;
  set_stage_keys();
  stage_io_options in;
  in.input = "tcp://127.0.0.1:*";
  stage_io consumer(ctx, in);
  const std::string ep = consumer.input_endpoint();

  // The wrong server key: the handshake fails (silently on the wire), the deadline answers.
  clear();
  set(server_variable, endpoint_curve_keypair().public_key);
  auto t0 = std::chrono::steady_clock::now();
  try {
    record_sender s(ctx, ep, "wrong key", 1000, link_deadlines{.connect_timeout_ms = 500});
    ADD_FAILURE() << "a wrong server key connected";
  } catch (const system_error &e) {
    EXPECT_TRUE(contains(e.what(), "unable to reach " + ep) && contains(e.what(), server_variable)) << e.what();
  }
  EXPECT_LT(seconds_since(t0), 3.0);

  // No keys at all (loopback is allowed in plain text): a CURVE server does not talk to it.
  clear();
  t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(record_sender(ctx, ep, "plain", 1000, link_deadlines{.connect_timeout_ms = 500}), system_error);
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_FALSE(endpoint_send_final(ctx, ep, 300));
}

TEST_F(Network, a_tap_over_tcp_with_keys) {
  zmq::context_t ctx;
  const curve_keypair stage_keys = set_stage_keys();
  stage_io_options opts;
  opts.tap = "tcp://127.0.0.1:*";
  stage_io io(ctx, opts);
  const std::string tap = io.tap_endpoint();
  ASSERT_EQ(tap.rfind("tcp://127.0.0.1:", 0), 0u) << tap;

  // A viewer on another host has only the server key.
  clear();
  set(server_variable, stage_keys.public_key);
  tap_subscriber sub(ctx, tap, 5000);
  // The subscription reaches the XPUB asynchronously: records go until the tap shows one.
  std::optional<record> seen;
  for (uint64_t i = 0; !seen; ++i) {
    io.send(numbered(i));
    seen = sub.receive(10);
    ASSERT_LT(i, 10000u) << "the tap never showed a record";
  }
  EXPECT_EQ(seen->header.kind, record_kind::tensor);

  // The wrong server key: the handshake never succeeds, so the subscriber says so at its deadline.
  set(server_variable, endpoint_curve_keypair().public_key);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    tap_subscriber wrong(ctx, tap, 500);
    ADD_FAILURE() << "a wrong server key connected to the tap";
  } catch (const system_error &e) {
    EXPECT_TRUE(contains(e.what(), "unable to connect to " + tap) && contains(e.what(), server_variable)) << e.what();
  }
  EXPECT_LT(seconds_since(t0), 3.0);
}
