// endpoint.h: how records move between a producer and a stage, and between stages.
//
// Topology. Every stage input *binds* one ZeroMQ ROUTER socket; every producer (a capture session,
// an upstream stage, the launcher) *connects* one DEALER socket per consumer. Inputs are listed on
// the consumer, so the consumer owns the address and producers only need to know it.
//
// Endpoint strings: "ipc://path", "tcp://host:port" (a bare "tcp://:port" or "tcp://*:port" binds
// to 127.0.0.1: loopback unless an address is given), "inproc://name" (same process, same
// zmq::context_t), or a file path ("file://path" or any string without "://"), which reads or writes
// a record file (record.h section 4).
//
// Network (docs/network.md). A tcp endpoint that is not loopback (127.0.0.0/8, "localhost", [::1])
// is refused with usage_error, before any bind or connect, unless CurveZMQ keys are set in the
// environment, where every stage, the launcher and the capture find them without new options:
//   TPROBE_CURVE_SECRET_KEY  this process's secret key (Z85, 40 characters); needed to bind: a
//                            binding socket is a CURVE server with it
//   TPROBE_CURVE_PUBLIC_KEY  its public key; optional (derived from the secret), checked if set
//   TPROBE_CURVE_SERVER_KEY  the public key of the stage a connecting socket talks to; needed to
//                            connect. A connecting socket uses this process's key pair if it has
//                            one, else a fresh pair per socket.
// Once the secret or the server key is set, every tcp socket of the process uses CURVE, loopback
// too (never plain text beside encrypted), and a tcp bind or connect that lacks its key is refused. CURVE encrypts
// and authenticates the server; clients are not authenticated (no ZAP handler). ipc, inproc and
// files are unaffected.
//
// Protocol on a connection (record kinds of record.h):
//   producer: hello → (waits for ack) → data records … → eos → (waits for ack, then closes)
//   consumer: on hello registers the producer and answers ack.
//   Barriers: a data record with meta barrier (record_sender::sync) is answered `synced` once
//   the consumer handled it: a stage's runtime (stages/common/stage_io.h) answers when the stage
//   calls receive() again (or
//   finish()), after the outputs it passed the barrier on to have answered theirs. So a barrier
//   crosses a chain of stages and comes back from the last one. Waits for `synced` are watched
//   like the eos ack (below).
//   Shared memory (1.2, shm.h): a consumer answers shm: true to a producer on its host; a link
//   to such a consumer sends a payload that already lies in shared memory as a reference. The
//   capture puts large payloads in its ring when its consumer takes them, and each stage passes
//   references on to stages of its host, so a tensor is copied once, by the capture. The
//   consumer hands its stage a record whose payload frame is the shared memory itself.
// The consumer's stream ends when registration is closed and every registered producer has sent
// eos. Registration closes when `producers` producers have registered (producers > 0), or when a
// `final` record arrives (the launcher sends it after the capturing command exited; use
// producers == 0 for inputs fed by a capture). hello carries the producer's host and pid: a
// producer on this host whose process has died without eos (crashed) and whose connection has been
// silent for a second is counted as truncated (counts().truncated_producers, reported), never
// waited for forever. This is the only timed path, and it runs only on that failure.
//
// Flow control. The main path is lossless: sends block when the peer's high-water mark is reached
// (backpressure up to the training thread's bounded queue). The consumer acknowledges eos, which
// proves every earlier record arrived; only then does the producer close (a dead consumer cannot
// hold a process open, and after SIGINT/SIGTERM closing is best effort).
//
// Deadlines. Every wait on another process is bounded or watched (link_deadlines):
//  - the hello's ack: connect_timeout_ms (30 s by default), else system_error "unable to reach";
//  - a blocked send and the eos ack: the consumer named in its ack (pid, host) is checked every
//    quarter second while blocked; a consumer on this host that is gone (or a zombie), or the
//    watched process (the launcher, for a capture) or the launcher's failure marker
//    (RUN_DIR/failed, written when a stage failed), ends the wait at once with
//    consumer_lost_error. A live consumer that does not read is waited for up to
//    stall_timeout_ms (-1: forever, the default for stages, whose launcher watches them; the
//    capture sets the config's tprobe.pipeline_timeout_s), then consumer_lost_error too.
//  These checks cost nothing while sends go through: they run only when a send would block. The tap is lossy on purpose: an XPUB socket with
// ZMQ_XPUB_NODROP sent with ZMQ_DONTWAIT; a record a slow tap cannot take is counted in
// tap_dropped(), never blocking the main path.
//
// This library is the protocol, not a stage: the consumer side that stages run on (input, outputs,
// tap, barriers, signals) is stages/common/stage_io.h, built from output_link and endpoint_bind
// (link.h). Thread safety: one connection object belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "errors.h"
#include "record.h"

namespace tprobe {

// True for file:// or path-like specs; `path` receives the file path.
bool endpoint_is_file(const std::string &spec, std::string *path = nullptr);
// Loopback unless an address is given: "tcp://:5555" / "tcp://*:5555" → "tcp://127.0.0.1:5555".
std::string endpoint_bind_address(const std::string &spec);
// Throws usage_error naming `spec` when it is not one of the forms above.
void endpoint_check(const std::string &spec);
// True when traffic to `spec` cannot leave this host: ipc, inproc, a file, or tcp to 127.0.0.0/8,
// "localhost" or [::1] ("*" and an empty host count as the 127.0.0.1 they bind). Anything else,
// a host name or an interface name included, is not loopback (names are never resolved here).
bool endpoint_is_loopback(const std::string &spec);

// A fresh CurveZMQ key pair, Z85 (40 characters each), for TPROBE_CURVE_* (tprobe keygen).
// Throws usage_error when libzmq was built without CURVE.
struct curve_keypair {
  std::string public_key, secret_key;
};
curve_keypair endpoint_curve_keypair();

// The deadlines of one producer connection (see above).
struct link_deadlines {
  int connect_timeout_ms = 30000;  // hello → ack; -1 = forever
  int stall_timeout_ms = -1;       // a blocked send or the eos ack without progress; -1 = forever
  int64_t watch_pid = 0;           // another process on this host whose end ends the wait (0: none)
  std::string failure_marker;      // a file whose existence ends the wait (the launcher's RUN_DIR/failed)
};

// The consumer stopped reading: it is gone, the watched process is gone, or it stalled past the
// deadline. what() names the endpoint, the consumer and the reason.
class consumer_lost_error : public system_error {
 public:
  using system_error::system_error;
};

// True when `pid` names no running process on this host: it does not exist or is a zombie
// (exited, not yet reaped by its parent). False for pid <= 0.
bool process_is_gone(int64_t pid);

// Interrupting waits. Every wait of this library on another process (a blocked send, an ack, a
// barrier's answer, a tap's next record) ends early once the process is interrupted: a stage
// asked to stop by SIGINT/SIGTERM (stages/common/stage_io.h installs the handlers) finishes
// instead of waiting on a consumer that may never read. transport_interrupt() is
// async-signal-safe once transport_interrupt_fd() has been called outside the handler.
void transport_interrupt();
bool transport_interrupted();
// A descriptor that becomes readable once interrupted: poll it beside a socket to wake then.
int transport_interrupt_fd();

// A producer connection: the capture session's and the launcher's side of the protocol.
class record_sender {
 public:
  // Connects to `endpoint` (or opens a record file) and completes the hello/ack handshake.
  // Throws system_error if no consumer answers within deadlines.connect_timeout_ms.
  // `numbered`: the caller stamps seq 1, 2, 3, … on the data records in the order it sends them
  // (a capture does); hello says so, and the consumer reports the records that never arrived.
  record_sender(zmq::context_t &ctx, const std::string &endpoint, const std::string &producer_name,
                int high_water_mark = 1000, link_deadlines deadlines = {}, bool numbered = false);
  ~record_sender();
  record_sender(const record_sender &) = delete;
  record_sender &operator=(const record_sender &) = delete;
  // Blocking (backpressure); consumer_lost_error when the consumer is gone or stalled (above).
  // A payload frame in shared memory (shm.h) goes by reference when shares_memory().
  void send(const record &r);
  // True when the consumer takes payloads by reference (its ack said shm and it runs on this
  // host): a producer then puts large payloads in an shm_ring.
  bool shares_memory() const;
  // Sends the open batch (record.h "Batches": small data records to a consumer whose ack said
  // batch: true are held until RECORD_BATCH_BYTES, a record that travels alone, or a wait).
  // A producer calls it when it runs out of records to send (after at most a nap); blocks and
  // throws as send.
  void flush();
  // Records sent but not yet handed to ZeroMQ (in a batch), or lost with a batch whose send
  // failed: what a producer that detaches counts as not delivered.
  size_t unsent_records() const;
  // eos with the given counts, then close (delivers everything first); consumer_lost_error as
  // send, when the eos is not acknowledged. `records`: the data records sent on this connection,
  // barriers included; a consumer that received fewer reports the rest as lost (stage_io.h).
  void finish(uint64_t records, uint64_t dropped);
  // Closes without eos, dropping whatever the socket still holds (after consumer_lost_error).
  void abandon();
  // Sends `r` as a barrier (record.h; meta key barrier is set here) and returns once the consumer
  // answered `synced`: it has handled r and everything before it, downstream stages included.
  // Returns false at once, after sending, where nobody answers barriers (a record file, or a
  // consumer whose ack did not offer them). consumer_lost_error as send: a dead or stalled
  // consumer, or a stop request, ends the wait.
  bool sync(record r);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// The launcher's `final`: connect to a stage input and tell it no new producer will come.
// Returns true once the stage acknowledged it, false if it did not within timeout_ms (the stage
// is gone or stuck; the launcher then deals with the stage's exit status).
bool endpoint_send_final(zmq::context_t &ctx, const std::string &endpoint, int timeout_ms = 10000);

// ---- Control: stages → capture (record.h "control", docs/wire-format.md "Control") ----
//
// The capture listens on a control endpoint of its own, announced in its session record (meta
// key control), which every stage downstream sees: any stage, a user's own included, can send it
// commands without the stages between relaying them. Commands are control records; the capture
// applies them on its training thread at the next operator or step boundary. Delivery is best
// effort and never blocks either side: a capture that is gone loses them, and the sender is
// told only that its message could not be queued.

// The capture's side: binds and receives on a thread of its own, so that the training thread
// only ever pays one atomic load (pending()) while no command waits.
class control_listener {
 public:
  // Binds `spec`: "" picks ipc://DIR/tprobe-control-PID-N with DIR = $TPROBE_RUN_DIR, $TMPDIR or
  // /tmp (tcp://127.0.0.1:* where that path is too long for ipc). Throws usage_error for a bad
  // spec, system_error when the bind fails.
  control_listener(zmq::context_t &ctx, const std::string &spec);
  ~control_listener();  // stops the thread; commands not taken are dropped
  control_listener(const control_listener &) = delete;
  control_listener &operator=(const control_listener &) = delete;
  std::string endpoint() const;  // the bound address, as stages connect to it
  bool pending() const;          // one relaxed atomic load
  std::vector<record> take();    // the commands received so far, in arrival order
  // Records that arrived but were not control records, or did not decode: counted, ignored.
  uint64_t rejected() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// How long a stage's exit waits for a command it queued to go out (control_sender).
inline constexpr int CONTROL_LINGER_MS = 1000;

// A stage's side: one socket per capture endpoint, connected on first use.
class control_sender {
 public:
  explicit control_sender(zmq::context_t &ctx);
  ~control_sender();
  control_sender(const control_sender &) = delete;
  control_sender &operator=(const control_sender &) = delete;
  // Queues `command` (a record of kind control) for the capture at `endpoint` (from its session
  // record). Never blocks: returns false when the message could not be queued (the capture's
  // queue is full or unreachable). Throws usage_error for a bad endpoint or a record that is not
  // a control record.
  bool send(const std::string &endpoint, const record &command);
  // Connects to the capture at `endpoint` ahead of its first command (send() does it otherwise),
  // so that a command later does not wait for ZeroMQ's connection and handshake while the capture
  // trains on, or closes. A stage calls it when a session record names the endpoint.
  void connect(const std::string &endpoint);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// The live-tap side: subscribes to a stage's tap and yields what it publishes. Lossy by design.
class tap_subscriber {
 public:
  // Connects and waits until the connection is made (with CurveZMQ on: until its handshake
  // succeeded, so a wrong TPROBE_CURVE_SERVER_KEY fails here): system_error "unable to connect to
  // ENDPOINT: nothing answered within N ms" when nobody serves it (-1 = do not wait).
  tap_subscriber(zmq::context_t &ctx, const std::string &endpoint, int connect_timeout_ms = 5000);
  ~tap_subscriber();
  // Next record, or nullopt after `timeout_ms` without one (-1 = wait) or on stop_requested().
  // A wait without a deadline (-1) also ends, with nullopt, once the tap's stage went away (its
  // connection closed: the stage ended, or died) and everything it published before is read.
  std::optional<record> receive(int timeout_ms);
  // The tap's stage closed the connection (watched once connected; not for inproc, nor with a
  // negative connect_timeout_ms).
  bool publisher_gone() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tprobe
