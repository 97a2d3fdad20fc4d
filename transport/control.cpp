// control.cpp: the control channel, stages → capture (endpoint.h "Control", record.h
// "control"): the capture's control_listener, which receives commands on a thread of its own, and
// a stage's control_sender. Apart from endpoint.cpp because it is a channel of its own beside the
// data path (PUSH/PULL, best effort, never blocking), sharing only the endpoint rules and CurveZMQ.
// Its declarations stay in endpoint.h, where every user of the channel includes them from.
#include "endpoint.h"
#include "link.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "curve.h"
#include "errors.h"
#include "quiet_thread.h"

namespace tprobe {

// ---- control ----

namespace {

std::string control_default_endpoint() {
  static std::atomic<uint64_t> serial{0};
  std::string dir;
  for (const char *var : {"TPROBE_RUN_DIR", "TMPDIR"})
    if (const char *v = std::getenv(var); v && *v) {
      dir = v;
      break;
    }
  if (dir.empty()) dir = "/tmp";
  std::string path = fmt::format("{}/tprobe-control-{}-{}", dir, ::getpid(), ++serial);
  // sockaddr_un holds 107 characters: a deeper directory gets a loopback port instead.
  if (path.size() > 100) return "tcp://127.0.0.1:*";
  return "ipc://" + path;
}

}  // namespace

struct control_listener::impl {
  zmq::context_t &ctx;
  zmq::socket_t pull;
  std::string endpoint;
  std::string wake_endpoint;  // inproc PAIR: the destructor's way to end the thread's poll
  zmq::socket_t wake_sender;
  std::thread thread;
  std::atomic<bool> pending{false};
  std::atomic<uint64_t> rejected{0};
  std::mutex mutex;
  std::vector<record> inbox;

  explicit impl(zmq::context_t &c) : ctx(c) {}

  void loop(zmq::socket_t &wake) {
    for (;;) {
      zmq::pollitem_t items[] = {{pull.handle(), 0, ZMQ_POLLIN, 0}, {wake.handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(-1));
      } catch (const zmq::error_t &e) {
        if (e.num() == EINTR) continue;
        return;  // the context is going away
      }
      if (items[1].revents & ZMQ_POLLIN) return;
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> frames;
      zmq::message_t m;
      try {
        do {
          if (!pull.recv(m, zmq::recv_flags::dontwait)) break;
          frames.push_back(std::move(m));
        } while (frames.back().more());
      } catch (const zmq::error_t &) {
        return;
      }
      if (frames.empty()) continue;
      try {
        record r = record_decode(frames);
        if (r.header.kind != record_kind::control) {
          ++rejected;
          continue;
        }
        std::lock_guard lock(mutex);
        inbox.push_back(std::move(r));
        pending.store(true, std::memory_order_release);
      } catch (const framing_error &) {
        ++rejected;  // a malformed command must not reach the training thread, nor end the listener
      }
    }
  }
};

control_listener::control_listener(zmq::context_t &ctx, const std::string &spec)
    : impl_(std::make_unique<impl>(ctx)) {
  auto &s = *impl_;
  const std::string wanted = spec.empty() ? control_default_endpoint() : spec;
  if (endpoint_is_file(wanted)) throw usage_error(fmt::format("control endpoint \"{}\" is a file, not a socket", wanted));
  endpoint_check(wanted);
  const std::string address = endpoint_bind_address(wanted);
  const curve_plan curve = curve_plan_for(address, curve_role::server);
  s.pull = zmq::socket_t(ctx, zmq::socket_type::pull);
  curve_apply(s.pull, curve);
  s.pull.set(zmq::sockopt::rcvhwm, 1000);
  s.pull.set(zmq::sockopt::linger, 0);
  try {
    s.pull.bind(address);
  } catch (const zmq::error_t &e) {
    endpoint_rethrow(e, "bind", address);
  }
  s.endpoint = s.pull.get(zmq::sockopt::last_endpoint);
  static std::atomic<uint64_t> serial{0};
  s.wake_endpoint = fmt::format("inproc://tprobe-control-wake-{}", ++serial);
  zmq::socket_t wake(ctx, zmq::socket_type::pair);
  wake.bind(s.wake_endpoint);
  s.wake_sender = zmq::socket_t(ctx, zmq::socket_type::pair);
  s.wake_sender.set(zmq::sockopt::linger, 0);
  s.wake_sender.connect(s.wake_endpoint);
  s.thread = quiet_thread([&s, w = std::move(wake)]() mutable {  // signals are the host thread's
    s.loop(w);
    w.set(zmq::sockopt::linger, 0);
    w.close();
    s.pull.close();
  });
}

control_listener::~control_listener() {
  auto &s = *impl_;
  try {
    s.wake_sender.send(zmq::str_buffer("x"), zmq::send_flags::dontwait);
  } catch (const zmq::error_t &) {
  }
  if (s.thread.joinable()) s.thread.join();
}

std::string control_listener::endpoint() const { return impl_->endpoint; }
bool control_listener::pending() const { return impl_->pending.load(std::memory_order_relaxed); }
uint64_t control_listener::rejected() const { return impl_->rejected.load(); }

std::vector<record> control_listener::take() {
  std::lock_guard lock(impl_->mutex);
  std::vector<record> out;
  out.swap(impl_->inbox);
  impl_->pending.store(false, std::memory_order_relaxed);
  return out;
}

struct control_sender::impl {
  zmq::context_t &ctx;
  std::map<std::string, zmq::socket_t> sockets;
  explicit impl(zmq::context_t &c) : ctx(c) {}
};

control_sender::control_sender(zmq::context_t &ctx) : impl_(std::make_unique<impl>(ctx)) {}
control_sender::~control_sender() = default;

void control_sender::connect(const std::string &endpoint) {
  if (impl_->sockets.count(endpoint)) return;
  if (endpoint_is_file(endpoint)) throw usage_error(fmt::format("control endpoint \"{}\" is a file", endpoint));
  endpoint_check(endpoint);
  const curve_plan curve = curve_plan_for(endpoint, curve_role::client);
  zmq::socket_t push(impl_->ctx, zmq::socket_type::push);
  curve_apply(push, curve);
  // A command sent just before this stage exits still goes out; a capture that is gone holds the
  // stage's exit this long at most.
  push.set(zmq::sockopt::linger, CONTROL_LINGER_MS);
  push.set(zmq::sockopt::sndhwm, 1000);
  push.set(zmq::sockopt::immediate, 0);  // queue until connected: the capture may be starting
  try {
    push.connect(endpoint);
  } catch (const zmq::error_t &e) {
    endpoint_rethrow(e, "connect to", endpoint);
  }
  impl_->sockets.emplace(endpoint, std::move(push));
}

bool control_sender::send(const std::string &endpoint, const record &command) {
  if (command.header.kind != record_kind::control)
    throw usage_error(fmt::format("control_sender: a {} record is not a command", record_kind_name(command.header.kind)));
  connect(endpoint);
  auto it = impl_->sockets.find(endpoint);
  auto frames = record_encode(command);
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto flags =
        (i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none) | zmq::send_flags::dontwait;
    try {
      if (!it->second.send(frames[i], flags)) return false;
    } catch (const zmq::error_t &e) {
      if (e.num() == EINTR) return false;
      endpoint_rethrow(e, "send a command to", endpoint);
    }
  }
  return true;
}

}  // namespace tprobe
