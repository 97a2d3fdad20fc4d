// stage_io.h: a stage's runtime: its input, outputs and tap, the record protocol of every
// connection (transport/endpoint.h), barriers passed down a chain, payloads by reference
// (transport/shm.h), counters and signals. A stage's library function takes a stage_io and loops
// on receive() / send(); its main() makes one from the command line (stage_main.h). The stage kit
// (stream/kit/tprobe_stage.h) wraps it for stages of your own.
//
// Consumer side of a connection: on hello, register the producer and answer ack with
// {name, host, pid}, sync: true (barriers are answered) and shm: true for a producer on this host;
// data records go to the stage in order; eos is acknowledged (everything before it arrived). The
// stream ends when registration is closed (`producers` registered, or a `final` record) and every
// registered producer sent eos; a producer on this host that died without eos and has been silent
// a second is counted as truncated, never waited for. Lossless means checked: a producer's eos
// counts the data records it sent, and a numbered producer's (a capture's, record.h hello) carry
// seq 1, 2, 3, …; records that never arrived are counted (counts().lost), passed on as dropped in
// this stage's eos, and end the stage with system_error naming the producer and the first
// missing seq, once what came is written: at the end of the input for a stage without outputs
// (next() throws there), in finish() after its eos otherwise. Outputs are output_links (transport/link.h);
// the tap is an XPUB bound at options.tap, lossy on purpose (tap_dropped counts what it could not
// take).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "endpoint.h"
#include "record.h"

namespace tprobe {

struct stage_io_options {
  std::string input;                 // "" = this stage has no input
  int producers = 1;                 // see above; 0 = until a `final` record
  std::vector<std::string> outputs;  // consumers to connect to (or files to write)
  std::string tap;                   // "" = no tap; else an endpoint to bind an XPUB on
  bool tap_payload = false;          // also publish payload frames on the tap
  int high_water_mark = 1000;        // records queued per connection before sends block
  std::string producer_name;         // sent in hello and ack, shown in messages ("tprobe-stats")
  link_deadlines deadlines;          // of the outputs (stall: forever by default, see above)
  record_decode_options decode;      // how the records next() hands over hold what they read
};

struct stage_io_counts {
  uint64_t received = 0;          // data records received
  uint64_t sent = 0;              // records sent (per output, not summed)
  uint64_t tap_dropped = 0;       // records the tap could not take
  uint64_t producers = 0;         // producers registered
  uint64_t truncated_producers = 0;  // producers gone without eos
  uint64_t upstream_dropped = 0;  // sum of `dropped` in upstream eos records
  uint64_t lost = 0;              // records producers sent that never arrived (see above)
  uint64_t passed_unchanged = 0;  // records of batches passed on as they came (pass_unchanged)
};

class stage_io {
 public:
  // Binds the input and tap, connects the outputs and completes their handshakes: when the
  // constructor returns, the stage is ready (write the ready-fd line then).
  // Throws usage_error for a bad endpoint string, system_error when a bind or connect fails.
  stage_io(zmq::context_t &ctx, const stage_io_options &options);
  ~stage_io();
  stage_io(const stage_io &) = delete;
  stage_io &operator=(const stage_io &) = delete;

  // The next data record (session, tensor, value, entry, flush, step_end), or nullopt when the
  // stream ended (see above) or stop_requested() became true. Throws framing_error on a malformed
  // record, system_error on a socket or file error.
  std::optional<record> receive();
  // receive() without a move or an allocation: the same record, decoded into storage kept from
  // one record to the next, or nullptr where receive() returns nullopt. It stays valid, and the
  // stage may change it (take its payload, drop it), until the next call of next() or receive().
  record *next();

  // Send to every output (blocking) and publish on the tap (never blocking).
  void send(const record &r);
  // As send, but in a message of its own, never in a batch (record.h "Batches"): for a record
  // that may be malformed on purpose (tprobe-fault), so that the error downstream names it
  // alone instead of failing the batch around it.
  void send_alone(const record &r);
  // Records this stage would pass on exactly as they came (most of a statistics stage's input,
  // whose statistics the capture computed): `unchanged` says which, from the keys a glance reads
  // (record.h, record_glance). receive() then passes a batch (record.h section 4) of only such
  // records straight to the outputs, undecoded, and tells `passed` each record of it instead of
  // returning them; counts().received, sent and passed_unchanged include them. A batch goes so
  // only when every output is a socket whose consumer takes batches and stack references and
  // has defined the batch's stack ids, no tap subscriber is watching, and no record of it defines
  // a stack; otherwise its records come one by one as before. The keys a glance does not read
  // are checked by the consumer that decodes the records. Call before the first receive().
  void pass_unchanged(std::function<bool(const record_glance &)> unchanged,
                      std::function<void(const record_glance &)> passed);

  // Sends what the outputs hold in batches. receive() does it before it waits for input; a stage
  // that pauses otherwise (sleeps, stalls, computes for long) calls it first.
  void flush();

  // Send eos on every output (meta records/dropped) and close them, delivering everything.
  void finish();

  // The actual bound input address (after "tcp://127.0.0.1:*" this holds the chosen port).
  std::string input_endpoint() const;
  std::string tap_endpoint() const;
  const stage_io_counts &counts() const;
  // True when the stream ended because of a signal rather than end-of-stream.
  bool interrupted() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Signals. A stage's main() calls this once: SIGINT and SIGTERM then make receive() return
// nullopt (the stage finishes its files and passes eos on) instead of killing the process, and
// end the transport's waits (endpoint.h, "Interrupting waits").
void stage_install_signal_handlers();
bool stop_requested();
void request_stop();  // as if a signal arrived (tests)
// The signal (SIGINT, SIGTERM) that cut this process's stream short, 0 when none did: it arrived
// before the input's end-of-stream (a source: before it ended on its own), and the stage ended on
// it. What the stage wrote is complete, but lacks what would have come after, so the stage is not
// done: stage_main_guard() turns its exit 0 into 128 + that signal, as a shell reports a process
// ended by it, and `tprobe run` tells the cut stage from a finished one. A signal that comes after
// the end-of-stream (while the files are written) cuts nothing.
int stage_stream_cut_by();

// steady_clock's time as of the kernel's last tick (CLOCK_MONOTONIC_COARSE: the same clock, up
// to a tick, 1-4 ms, behind), read from memory with no timer access. For the once-a-record
// questions about deadlines of a millisecond or more (is a flush due, is it time to look at the
// tap's subscriptions): a precise read per record was a percent or two of a stage's time.
std::chrono::steady_clock::time_point coarse_steady_now();


}  // namespace tprobe
