#include "endpoint.h"
#include "link.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include "curve.h"
#include "errors.h"
#include "shm.h"

namespace tprobe {

namespace {

using clock_type = std::chrono::steady_clock;

// ---- signals: a self-pipe, so that a signal wakes zmq::poll without any timeout ----
std::atomic<bool> g_stop{false};
int g_signal_pipe[2] = {-1, -1};

void on_signal(int) {
  g_stop.store(true);
  if (g_signal_pipe[1] >= 0) {
    const char c = 's';
    [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &c, 1);
  }
}

void ensure_signal_pipe() {
  if (g_signal_pipe[0] >= 0) return;
  if (::pipe2(g_signal_pipe, O_NONBLOCK | O_CLOEXEC) != 0) throw system_error_from_errno("create", "signal pipe", errno);
}

const std::string &host_name() {
  static const std::string name = [] {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return std::string();
    return std::string(buf);
  }();
  return name;
}

// Who we are, in hello (producer) and ack (consumer): lets the other side watch this process.
nlohmann::ordered_json peer_meta(const std::string &name) {
  return {{"name", name}, {"host", host_name()}, {"pid", static_cast<int64_t>(::getpid())}};
}

// How often a blocked send or a wait for an ack looks at the consumer's process. Only a send that
// would block pays for it.
constexpr int watch_interval_ms = 250;

[[noreturn]] void rethrow_zmq(const zmq::error_t &e, const std::string &verb, const std::string &object) {
  throw system_error(fmt::format("unable to {} {}: {}", verb, object, e.what()));
}

// One outgoing connection: a DEALER that has completed the hello/ack handshake, or a record file.
class link_impl {
 public:
  link_impl(zmq::context_t &ctx, const std::string &spec, const std::string &producer_name, int hwm,
            const link_deadlines &deadlines, bool numbered = false)
      : spec_(spec), deadlines_(deadlines) {
    std::string path;
    if (endpoint_is_file(spec, &path)) {
      file_ = std::make_unique<record_file_writer>(path);
      return;
    }
    endpoint_check(spec);
    curve_ = curve_plan_for(spec, curve_role::client);
    socket_ = zmq::socket_t(ctx, zmq::socket_type::dealer);
    curve_apply(socket_, curve_);
    socket_.set(zmq::sockopt::sndhwm, hwm);
    socket_.set(zmq::sockopt::rcvhwm, hwm);
    socket_.set(zmq::sockopt::linger, -1);  // until finish()'s eos ack proves delivery
    // A send that would block comes back after this long, so that the consumer can be checked.
    socket_.set(zmq::sockopt::sndtimeo, watch_interval_ms);
    try {
      socket_.connect(spec);
    } catch (const zmq::error_t &e) {
      rethrow_zmq(e, "connect to", spec);
    }
    record hello(record_kind::hello);
    hello.header.meta = peer_meta(producer_name);
    if (numbered) hello.header.meta["numbered"] = true;  // record.h, hello
    send(hello);
    try {
      wait_reply(reply::hello_ack);
    } catch (...) {
      socket_.set(zmq::sockopt::linger, 0);  // the unanswered hello must not hold the context open
      throw;
    }
  }

  void send(const record &r) {
    if (auto adapted = adapt_stack(r.header)) {
      record entry(std::move(*adapted));  // entry records have no payload
      return send_adapted(entry);
    }
    send_adapted(r);
  }

  // Section 5 of record.h, for this link: a record file is read from its start, as a consumer
  // that takes references reads its input.
  std::optional<record_header> adapt_stack(const record_header &h) {
    return stacks_.adapt(h, file_ || consumer_stack_refs_);
  }

  void send_adapted(const record &r) {
    if (file_) {
      file_->write(r);
      return;
    }
    if (send_by_reference(r)) return;
    // A small record goes into the open batch as it is encoded, with no frame of its own.
    if (batches() && record_batchable(r.header) && batch_append(r)) return;
    send_frames(record_encode(r), record_batchable(r.header));
  }

  // A payload already in shared memory goes by reference (shm.h) to a consumer that maps it:
  // sends the header alone and returns true; false (nothing sent) for any other record.
  bool send_by_reference(const record &r) {
    if (!takes_shm() || !r.has_payload() || r.header.codec != record_codec::raw) return false;
    auto ref = shm_share(*r.payload_frame());
    if (!ref) return false;
    record_header h = r.header;
    h.stored.reset();
    h.shm = std::move(*ref);
    std::vector<zmq::message_t> frames;
    frames.push_back(record_header_encode(h));
    try {
      send_frames(std::move(frames));
    } catch (...) {
      shm_unshare(*h.shm);
      throw;
    }
    return true;
  }

  // True when the consumer said in its ack that it takes payloads by reference and runs on this
  // host (record.h "shm").
  bool takes_shm() const { return !file_ && consumer_shm_ && consumer_host_ == host_name(); }

  // A batchable record (record_batchable) joins the open batch when the consumer takes batches
  // and it is small; anything else closes the batch first, so that order is kept.
  void send_frames(std::vector<zmq::message_t> frames, bool batchable = false) {
    if (batchable && batches()) {
      size_t bytes = 0;
      for (const auto &f : frames) bytes += f.size();
      if (bytes <= RECORD_BATCH_RECORD_MAX) {
        const auto now = clock_type::now();
        if (batch_.empty()) batch_opened_ = now;
        batch_.append(frames);
        flush_if_full(now);
        return;
      }
    }
    flush();
    send_now(std::move(frames));
  }

  // The record into the open batch (record_batch_builder::append): false when it is too large.
  bool batch_append(const record &r) {
    const auto now = clock_type::now();
    const bool opening = batch_.empty();
    if (!batch_.append(r)) return false;
    if (opening) batch_opened_ = now;
    flush_if_full(now);
    return true;
  }

  void flush_if_full(clock_type::time_point now) {
    if (batch_.bytes() >= RECORD_BATCH_BYTES || now - batch_opened_ >= std::chrono::milliseconds(RECORD_BATCH_MAX_AGE_MS))
      flush();
  }

  // Sends the open batch, if any (record.h, "Batches"). Blocks and throws as a send does.
  void flush() {
    if (batch_.empty()) return;
    const size_t records = batch_.records();
    send_batch_frame(batch_.take(), records);
  }

  // A batch frame passed on as it arrived (record.h section 4), after the open batch.
  void send_batch(zmq::message_t frame, size_t records) {
    flush();
    send_batch_frame(std::move(frame), records);
  }

  // One batch frame of `records` records, counted as unsent until ZeroMQ has taken it.
  void send_batch_frame(zmq::message_t frame, size_t records) {
    unsent_ = records;
    std::vector<zmq::message_t> frames;
    frames.push_back(std::move(frame));
    send_now(std::move(frames));
    unsent_ = 0;
  }

  bool takes_stack_refs() const { return !file_ && consumer_stack_refs_; }
  bool stack_defined(std::string_view run, uint64_t id) const { return stacks_.defined(run, id); }

  // Records this link took and has not handed to ZeroMQ: the open batch, or the one whose send
  // failed (consumer_lost_error). What a detaching producer counts as undelivered.
  size_t unsent_records() const { return batch_.records() + unsent_; }

  // True when the consumer said in its ack that it takes batches (record.h "Batches").
  bool batches() const { return !file_ && consumer_batches_; }

  void send_now(std::vector<zmq::message_t> frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      try {
        // At the high-water mark this waits for the consumer (backpressure), looking at it every
        // watch interval: a dead or stalled consumer ends the wait (consumer_lost_error).
        std::optional<clock_type::time_point> blocked_since;
        while (!socket_.send(frames[i], flags)) {
          if (!blocked_since) blocked_since = clock_type::now() - std::chrono::milliseconds(watch_interval_ms);
          check_consumer(*blocked_since, "send to");
        }
      } catch (const zmq::error_t &e) {
        if (e.num() == EINTR && !transport_interrupted()) {  // an unrelated signal: the record must get through
          --i;
          continue;
        }
        if (e.num() == EINTR) {
          // Asked to stop while the consumer does not read (it died, or is stopping too): give up
          // rather than block forever, and do not let pending records hold the process open.
          socket_.set(zmq::sockopt::linger, 0);
          throw system_error(fmt::format("unable to send to {}: stopped while the consumer was not reading", spec_));
        }
        rethrow_zmq(e, "send to", spec_);
      }
    }
  }

  ~link_impl() {
    if (socket_ && transport_interrupted()) socket_.set(zmq::sockopt::linger, 0);
  }

  bool is_file() const { return file_ != nullptr; }
  // True when the consumer said in its ack that it answers barriers (record.h, "Barrier").
  bool syncs() const { return !file_ && consumer_syncs_; }

  // Waits for the consumer's `synced` answer to the barrier `token` sent earlier, watched like
  // the eos ack (check_consumer: consumer_lost_error). Returns false without waiting on when a
  // stop was requested (the stage is shutting down; the barrier is abandoned, not answered).
  bool wait_synced(uint64_t token) { return wait_reply(reply::synced, token); }

  // Sends eos and waits for the consumer's ack, which proves that every record before it arrived;
  // then nothing is pending and the socket closes at once. Delivery is protocol, not linger time:
  // a dead consumer cannot hold the process open. After a stop request this is best effort.
  void finish(const record &eos) {
    if (file_) {
      file_->write(eos);
      file_->close();
      return;
    }
    send(eos);
    if (!transport_interrupted()) {
      try {
        wait_reply(reply::eos_ack);
      } catch (...) {
        abandon();
        throw;
      }
    }
    abandon();
  }

  // Closes at once, dropping what the socket still holds.
  void abandon() {
    if (file_) {
      file_->close();
      return;
    }
    batch_ = record_batch_builder();
    if (!socket_) return;
    socket_.set(zmq::sockopt::linger, 0);
    socket_.close();
  }

 private:
  enum class reply { hello_ack, eos_ack, synced };

  std::string consumer_text() const {
    if (consumer_pid_ <= 0) return "the consumer";
    return fmt::format("{} (pid {})", consumer_name_.empty() ? std::string("the consumer") : consumer_name_,
                       consumer_pid_);
  }

  // Why the pipeline as a whole is known to be gone ("" when it is not): the watched process (the
  // launcher) ended, or the launcher left its failure marker (a stage failed: it stops the
  // stages and leaves the command running, so it stays alive itself).
  std::string pipeline_gone() const {
    if (deadlines_.watch_pid > 0 && process_is_gone(deadlines_.watch_pid))
      return fmt::format("the pipeline's launcher (pid {}) is gone", deadlines_.watch_pid);
    if (!deadlines_.failure_marker.empty() && ::access(deadlines_.failure_marker.c_str(), F_OK) == 0) {
      std::string reason;
      if (FILE *f = std::fopen(deadlines_.failure_marker.c_str(), "re")) {
        char buffer[512];
        const size_t n = std::fread(buffer, 1, sizeof buffer - 1, f);
        std::fclose(f);
        reason.assign(buffer, n);
        while (!reason.empty() && reason.back() == '\n') reason.pop_back();
      }
      return "the pipeline failed" + (reason.empty() ? std::string() : ": " + reason);
    }
    return "";
  }

  // Called while a send or an eos ack is overdue: throws consumer_lost_error when waiting on is
  // pointless (the consumer or the watched process is gone) or past the stall deadline.
  void check_consumer(clock_type::time_point since, const char *verb) {
    auto lost = [&](const std::string &why) {
      socket_.set(zmq::sockopt::linger, 0);  // nothing pending may hold the process open now
      throw consumer_lost_error(fmt::format("unable to {} {}: {}", verb, spec_, why));
    };
    if (transport_interrupted()) lost("stopped while the consumer was not reading");
    if (consumer_pid_ > 0 && consumer_host_ == host_name() && process_is_gone(consumer_pid_))
      lost(consumer_text() + " is gone");
    if (std::string why = pipeline_gone(); !why.empty()) lost(why);
    if (deadlines_.stall_timeout_ms >= 0 &&
        clock_type::now() - since >= std::chrono::milliseconds(deadlines_.stall_timeout_ms))
      lost(fmt::format("{} has not read for {} ms", consumer_text(), deadlines_.stall_timeout_ms));
  }

  // Waits for the consumer's answer: the ack of hello or eos, or `synced` for barrier `token`.
  // A `synced` for another token (a barrier given up on earlier) is skipped.
  bool wait_reply(reply what, uint64_t token = 0) {
    flush();  // nothing waits in a batch while this side waits for an answer
    ensure_signal_pipe();
    const auto started = clock_type::now();
    const int timeout_ms = what == reply::hello_ack ? deadlines_.connect_timeout_ms : deadlines_.stall_timeout_ms;
    for (;;) {
      zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, g_signal_pipe[0], ZMQ_POLLIN, 0}};
      if (what == reply::hello_ack && timeout_ms >= 0 &&
          clock_type::now() - started >= std::chrono::milliseconds(timeout_ms))
        throw system_error(
            fmt::format("unable to reach {}: no stage answered within {} ms{}", spec_, timeout_ms, curve_hint(curve_)));
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(watch_interval_ms));
      } catch (const zmq::error_t &e) {
        if (e.num() == EINTR) continue;
        rethrow_zmq(e, "poll", spec_);
      }
      if (items[1].revents & ZMQ_POLLIN || transport_interrupted()) {
        if (what == reply::synced) return false;
        throw system_error(fmt::format("unable to reach {}: stopped while waiting for its answer", spec_));
      }
      if (!(items[0].revents & ZMQ_POLLIN)) {
        if (what != reply::hello_ack) {
          check_consumer(started, what == reply::synced ? "wait for a barrier of" : "finish the stream to");
        } else if (std::string why = pipeline_gone(); !why.empty()) {
          throw system_error(fmt::format("unable to reach {}: {}", spec_, why));
        }
        continue;
      }
      std::vector<zmq::message_t> frames;
      zmq::message_t m;
      do {
        (void)socket_.recv(m);
        frames.push_back(std::move(m));
      } while (frames.back().more());
      record r = record_decode(frames);
      const auto &meta = r.header.meta;
      if (r.header.kind == record_kind::synced) {
        if (what == reply::synced && meta.is_object() && meta.value("barrier", uint64_t{0}) == token) return true;
        continue;  // the answer to a barrier given up on
      }
      if (r.header.kind != record_kind::ack || what == reply::synced)
        throw framing_error(fmt::format("{} answered {} with a {} record", spec_,
                                        what == reply::hello_ack ? "hello"
                                        : what == reply::eos_ack ? "eos"
                                                                 : "a barrier",
                                        record_kind_name(r.header.kind)));
      if (meta.is_object()) {
        consumer_name_ = meta.value("name", std::string{});
        consumer_host_ = meta.value("host", std::string{});
        consumer_pid_ = meta.value("pid", int64_t{0});
        consumer_syncs_ = meta.value("sync", false);
        consumer_shm_ = meta.value("shm", false) && shm_enabled();
        // The consumer's ack decides (record.h "Batches" and section 5): batches and stack
        // references to a consumer that takes them, one record per message and stacks inline
        // to one that does not.
        consumer_batches_ = meta.value("batch", false);
        consumer_stack_refs_ = meta.value("stack_refs", false);
      }
      return true;
    }
  }

  std::string spec_;
  link_deadlines deadlines_;
  curve_plan curve_;
  zmq::socket_t socket_;
  std::unique_ptr<record_file_writer> file_;
  // From the consumer's ack: watched while a send is blocked.
  std::string consumer_name_, consumer_host_;
  int64_t consumer_pid_ = 0;
  bool consumer_syncs_ = false;
  bool consumer_shm_ = false;
  bool consumer_batches_ = false;
  bool consumer_stack_refs_ = false;
  stack_link stacks_;
  record_batch_builder batch_;
  clock_type::time_point batch_opened_;  // when its first record joined
  size_t unsent_ = 0;  // records of a batch being sent
};


}  // namespace

bool process_is_gone(int64_t pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  // A zombie still answers kill(): its parent has not reaped it yet (a training script's child
  // launcher that died, say). Its state letter in /proc tells.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%lld/stat", static_cast<long long>(pid));
  FILE *f = std::fopen(path, "re");
  if (!f) return false;
  char buffer[512];
  const size_t n = std::fread(buffer, 1, sizeof buffer - 1, f);
  std::fclose(f);
  buffer[n] = '\0';
  const char *close_paren = std::strrchr(buffer, ')');  // the command name may hold spaces and ')'
  return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

// ---- the pieces a consumer runtime builds on (link.h) ----

struct output_link::impl : link_impl {
  using link_impl::link_impl;
};

output_link::output_link(zmq::context_t &ctx, const std::string &spec, const std::string &producer_name, int hwm,
                         const link_deadlines &deadlines)
    : impl_(std::make_unique<impl>(ctx, spec, producer_name, hwm, deadlines)) {}
output_link::~output_link() = default;
void output_link::send(const record &r) { impl_->send(r); }
bool output_link::send_by_reference(const record &r) { return impl_->send_by_reference(r); }
void output_link::send_frames(std::vector<zmq::message_t> frames, bool batchable) {
  impl_->send_frames(std::move(frames), batchable);
}
std::optional<record_header> output_link::adapt_stack(const record_header &h) { return impl_->adapt_stack(h); }
void output_link::flush() { impl_->flush(); }
void output_link::send_batch(zmq::message_t frame, size_t records) { impl_->send_batch(std::move(frame), records); }
bool output_link::takes_batches() const { return impl_->batches(); }
bool output_link::takes_stack_refs() const { return impl_->takes_stack_refs(); }
bool output_link::stack_defined(std::string_view run, uint64_t id) const { return impl_->stack_defined(run, id); }
bool output_link::is_file() const { return impl_->is_file(); }
bool output_link::syncs() const { return impl_->syncs(); }
bool output_link::takes_shm() const { return impl_->takes_shm(); }
bool output_link::wait_synced(uint64_t token) { return impl_->wait_synced(token); }
void output_link::finish(const record &eos) { impl_->finish(eos); }
void output_link::abandon() { impl_->abandon(); }

const std::string &endpoint_host_name() { return host_name(); }
nlohmann::ordered_json endpoint_peer_meta(const std::string &name) { return peer_meta(name); }
void endpoint_rethrow(const zmq::error_t &e, const std::string &verb, const std::string &object) {
  rethrow_zmq(e, verb, object);
}

void endpoint_check_bind(const std::string &spec) {
  endpoint_check(spec);
  (void)curve_plan_for(endpoint_bind_address(spec), curve_role::server);
}

void endpoint_check_connect(const std::string &spec) {
  endpoint_check(spec);
  (void)curve_plan_for(spec, curve_role::client);
}

std::string endpoint_bind(zmq::socket_t &socket, const std::string &spec) {
  const std::string address = endpoint_bind_address(spec);
  curve_apply(socket, curve_plan_for(address, curve_role::server));
  try {
    socket.bind(address);
  } catch (const zmq::error_t &e) {
    rethrow_zmq(e, "bind", address);
  }
  return socket.get(zmq::sockopt::last_endpoint);
}

// ---- endpoint strings ----

bool endpoint_is_file(const std::string &spec, std::string *path) {
  if (spec.rfind("file://", 0) == 0) {
    if (path) *path = spec.substr(7);
    return true;
  }
  if (spec.find("://") != std::string::npos) return false;
  if (path) *path = spec;
  return true;
}

std::string endpoint_bind_address(const std::string &spec) {
  // "tcp://::1:5555" is an IPv6 address, not a bare port.
  if (spec.rfind("tcp://:", 0) == 0 && spec.find(':', 7) == std::string::npos) return "tcp://127.0.0.1:" + spec.substr(7);
  if (spec.rfind("tcp://*:", 0) == 0) return "tcp://127.0.0.1:" + spec.substr(8);
  return spec;
}

void endpoint_check(const std::string &spec) {
  if (spec.empty()) throw usage_error("endpoint is empty");
  std::string path;
  if (endpoint_is_file(spec, &path)) {
    if (path.empty()) throw usage_error(fmt::format("endpoint \"{}\": file path is empty", spec));
    return;
  }
  auto rest = [&](std::string_view scheme) { return spec.substr(scheme.size()); };
  if (spec.rfind("ipc://", 0) == 0) {
    if (rest("ipc://").empty()) throw usage_error(fmt::format("endpoint \"{}\": ipc path is empty", spec));
    if (rest("ipc://").size() > 107)
      throw usage_error(fmt::format("endpoint \"{}\": ipc path is longer than 107 bytes (a Unix socket limit)", spec));
    return;
  }
  if (spec.rfind("inproc://", 0) == 0) {
    if (rest("inproc://").empty()) throw usage_error(fmt::format("endpoint \"{}\": inproc name is empty", spec));
    return;
  }
  if (spec.rfind("tcp://", 0) == 0) {
    const std::string hostport = rest("tcp://");
    const auto colon = hostport.rfind(':');
    if (colon == std::string::npos || colon + 1 == hostport.size())
      throw usage_error(fmt::format("endpoint \"{}\": tcp needs host:port (port may be *)", spec));
    const std::string port = hostport.substr(colon + 1);
    if (port != "*" && port.find_first_not_of("0123456789") != std::string::npos)
      throw usage_error(fmt::format("endpoint \"{}\": port \"{}\" is not a number or *", spec, port));
    return;
  }
  throw usage_error(fmt::format("endpoint \"{}\": unknown transport (use ipc://, tcp://, inproc:// or a file)", spec));
}

bool endpoint_is_loopback(const std::string &spec) {
  const std::string address = endpoint_bind_address(spec);
  if (address.rfind("tcp://", 0) != 0) return true;
  // "tcp://[source;]host:port": only the destination decides where the traffic goes.
  std::string host = address.substr(6);
  host = host.substr(0, host.rfind(':'));
  if (const auto semicolon = host.rfind(';'); semicolon != std::string::npos) host = host.substr(semicolon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  return false;
}

// ---- interrupting waits ----

void transport_interrupt() {
  (void)transport_interrupt_fd();  // created already when called from a signal handler (see endpoint.h)
  on_signal(0);
}

bool transport_interrupted() { return g_stop.load(); }

int transport_interrupt_fd() {
  ensure_signal_pipe();
  return g_signal_pipe[0];
}

// ---- record_sender ----

struct record_sender::impl {
  link_impl link;
  uint64_t barrier_token = 0;
  impl(zmq::context_t &ctx, const std::string &endpoint, const std::string &name, int hwm,
       const link_deadlines &deadlines, bool numbered)
      : link(ctx, endpoint, name, hwm, deadlines, numbered) {}
};

record_sender::record_sender(zmq::context_t &ctx, const std::string &endpoint, const std::string &producer_name,
                             int high_water_mark, link_deadlines deadlines, bool numbered)
    : impl_(std::make_unique<impl>(ctx, endpoint, producer_name, high_water_mark, deadlines, numbered)) {}

record_sender::~record_sender() = default;
void record_sender::send(const record &r) { impl_->link.send(r); }
bool record_sender::shares_memory() const { return impl_->link.takes_shm(); }
void record_sender::flush() { impl_->link.flush(); }
size_t record_sender::unsent_records() const { return impl_->link.unsent_records(); }
void record_sender::abandon() { impl_->link.abandon(); }

bool record_sender::sync(record r) {
  if (!r.header.meta.is_object()) r.header.meta = nlohmann::ordered_json::object();
  const uint64_t token = ++impl_->barrier_token;
  r.header.meta["barrier"] = token;
  impl_->link.send(r);
  if (!impl_->link.syncs()) return false;
  if (!impl_->link.wait_synced(token))
    throw consumer_lost_error("unable to wait for a barrier: stopped while the consumer was not answering");
  return true;
}

void record_sender::finish(uint64_t records, uint64_t dropped) {
  record eos(record_header_of(record_kind::eos));
  eos.header.meta = {{"records", records}, {"dropped", dropped}};
  impl_->link.finish(eos);
}

// ---- final ----

bool endpoint_send_final(zmq::context_t &ctx, const std::string &endpoint, int timeout_ms) {
  endpoint_check(endpoint);
  const curve_plan curve = curve_plan_for(endpoint, curve_role::client);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  curve_apply(s, curve);
  s.set(zmq::sockopt::linger, 0);
  s.connect(endpoint);
  auto frame = record_header_encode(record_header_of(record_kind::final));
  s.send(frame, zmq::send_flags::none);
  zmq::pollitem_t items[] = {{s.handle(), 0, ZMQ_POLLIN, 0}};
  const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
  while (clock_type::now() < deadline) {
    try {
      zmq::poll(items, 1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()));
    } catch (const zmq::error_t &e) {
      if (e.num() == EINTR) continue;
      throw;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      zmq::message_t ack;
      (void)s.recv(ack);
      return true;
    }
  }
  return false;
}

// ---- tap_subscriber ----

struct tap_subscriber::impl {
  zmq::socket_t sub;
  std::string endpoint;
  // Reports ZMQ_EVENT_DISCONNECTED: the tap's stage went away (ended, or died). Not connected
  // for inproc or connect_timeout_ms < 0, whose connection is not watched.
  zmq::socket_t monitor;
  bool gone = false;
};

namespace {

// ZeroMQ connects in the background and retries forever: a SUB connected to an endpoint nobody
// serves would wait in silence. The socket monitor reports the connection when it is made; its
// absence by the deadline is the answer.
// With CURVE the TCP connection alone proves little (a wrong server key connects, then the
// handshake fails in silence): then the connection counts once the handshake succeeded.
// `keep`, when given, receives the monitor, which goes on reporting ZMQ_EVENT_DISCONNECTED from
// the moment of the connection (watching from then on leaves no gap for a disconnection to
// slip through).
void wait_connected(zmq::context_t &ctx, zmq::socket_t &socket, const std::string &endpoint,
                    const std::function<void()> &connect, int timeout_ms, const curve_plan &curve,
                    zmq::socket_t *keep = nullptr) {
  const int awaited = curve.on ? ZMQ_EVENT_HANDSHAKE_SUCCEEDED : ZMQ_EVENT_CONNECTED;
  static std::atomic<uint64_t> monitors{0};
  const std::string monitor_address = fmt::format("inproc://tprobe-connect-monitor-{}-{}", ::getpid(), ++monitors);
  if (zmq_socket_monitor(socket.handle(), monitor_address.c_str(), awaited | (keep ? ZMQ_EVENT_DISCONNECTED : 0)) != 0)
    throw system_error(fmt::format("unable to monitor the connection to {}: {}", endpoint, zmq_strerror(zmq_errno())));
  zmq::socket_t monitor(ctx, zmq::socket_type::pair);
  monitor.set(zmq::sockopt::linger, 0);
  monitor.connect(monitor_address);
  connect();
  ensure_signal_pipe();
  const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
  bool connected = false;
  while (!connected) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (left.count() <= 0 || transport_interrupted()) break;
    zmq::pollitem_t items[] = {{monitor.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, g_signal_pipe[0], ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, left);
    } catch (const zmq::error_t &e) {
      if (e.num() == EINTR) continue;
      throw;
    }
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    zmq::message_t event, address;
    (void)monitor.recv(event);
    if (event.more()) (void)monitor.recv(address);
    uint16_t id = 0;
    if (event.size() >= sizeof id) std::memcpy(&id, event.data(), sizeof id);
    connected = id == awaited;
  }
  if (connected && keep) {
    *keep = std::move(monitor);
    return;
  }
  zmq_socket_monitor(socket.handle(), nullptr, 0);
  if (!connected && !transport_interrupted())
    throw system_error(fmt::format("unable to connect to {}: nothing answered within {} ms (is the run still going, "
                                   "and is this its tap?){}", endpoint, timeout_ms, curve_hint(curve)));
}

}  // namespace

tap_subscriber::tap_subscriber(zmq::context_t &ctx, const std::string &endpoint, int connect_timeout_ms)
    : impl_(std::make_unique<impl>()) {
  endpoint_check(endpoint);
  if (endpoint_is_file(endpoint)) throw usage_error(fmt::format("tap \"{}\": a tap is an endpoint, not a file", endpoint));
  const curve_plan curve = curve_plan_for(endpoint, curve_role::client);
  impl_->endpoint = endpoint;
  impl_->sub = zmq::socket_t(ctx, zmq::socket_type::sub);
  curve_apply(impl_->sub, curve);
  impl_->sub.set(zmq::sockopt::linger, 0);
  impl_->sub.set(zmq::sockopt::subscribe, "");
  auto connect = [&] {
    try {
      impl_->sub.connect(endpoint);
    } catch (const zmq::error_t &e) {
      rethrow_zmq(e, "connect to", endpoint);
    }
  };
  // inproc has no background connection (and no monitor events): it connects or fails at once.
  if (connect_timeout_ms < 0 || endpoint.rfind("inproc://", 0) == 0) connect();
  else wait_connected(ctx, impl_->sub, endpoint, connect, connect_timeout_ms, curve, &impl_->monitor);
}

tap_subscriber::~tap_subscriber() {
  if (impl_ && impl_->monitor) zmq_socket_monitor(impl_->sub.handle(), nullptr, 0);
}

bool tap_subscriber::publisher_gone() const { return impl_->gone; }

std::optional<record> tap_subscriber::receive(int timeout_ms) {
  ensure_signal_pipe();
  const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (transport_interrupted()) return std::nullopt;
    long wait = -1;
    if (timeout_ms >= 0) {
      wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
      if (wait < 0) return std::nullopt;
    }
    // Once the stage is gone nothing more can come: what it sent before is read first (the
    // I/O thread queues it ahead of the disconnection), then a wait without a deadline ends.
    if (impl_->gone && timeout_ms < 0 && !(impl_->sub.get(zmq::sockopt::events) & ZMQ_POLLIN)) return std::nullopt;
    const bool watching = impl_->monitor && !impl_->gone;
    zmq::pollitem_t items[] = {{impl_->sub.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, g_signal_pipe[0], ZMQ_POLLIN, 0},
                               {watching ? impl_->monitor.handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, watching ? 3 : 2, std::chrono::milliseconds(wait));
    } catch (const zmq::error_t &e) {
      if (e.num() == EINTR) continue;
      rethrow_zmq(e, "poll", impl_->endpoint);
    }
    if (watching && (items[2].revents & ZMQ_POLLIN)) {
      zmq::message_t event, address;
      (void)impl_->monitor.recv(event);
      if (event.more()) (void)impl_->monitor.recv(address);
      uint16_t id = 0;
      if (event.size() >= sizeof id) std::memcpy(&id, event.data(), sizeof id);
      if (id == ZMQ_EVENT_DISCONNECTED) impl_->gone = true;
      continue;
    }
    if (items[1].revents & ZMQ_POLLIN) continue;
    if (!(items[0].revents & ZMQ_POLLIN)) {
      if (timeout_ms >= 0) return std::nullopt;
      continue;
    }
    std::vector<zmq::message_t> frames;
    zmq::message_t m;
    do {
      (void)impl_->sub.recv(m);
      frames.push_back(std::move(m));
    } while (frames.back().more());
    return record_decode(frames);
  }
}

}  // namespace tprobe
