#include "stage_io.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include <signal.h>
#include <time.h>

#include <fmt/format.h>

#include "errors.h"
#include "link.h"
#include "shm.h"

namespace tprobe {

namespace {

using clock_type = std::chrono::steady_clock;

// The last stop signal (SIGINT, SIGTERM), and the one that cut a stream short (stage_io.h).
volatile std::sig_atomic_t g_stop_signal = 0;
int g_stream_cut_by = 0;

void on_signal(int sig) {
  g_stop_signal = sig;
  transport_interrupt();
}

// A signal asked the stage to stop before its input's end-of-stream (a source: before it ended
// on its own): its output lacks what came after, whatever it wrote is complete.
void note_stream_cut() {
  if (!g_stream_cut_by) g_stream_cut_by = g_stop_signal ? static_cast<int>(g_stop_signal) : SIGTERM;
}

struct producer_state {
  std::string name;
  std::string host;
  int64_t pid = 0;
  bool done = false;
  uint64_t lost_payloads = 0;  // references that could not be opened after the producer died
  clock_type::time_point last_seen;
  // Data records that came, and for a numbered producer (hello, record.h) the seq expected next
  // and the records its gaps skipped: what the eos count and the seq check hold against it.
  uint64_t received = 0;
  bool numbered = false;
  uint64_t next_seq = 1;
  uint64_t skipped = 0;
  uint64_t first_skipped = 0;  // the first seq that never came (0: none)
};

}  // namespace

struct stage_io::impl {
  stage_io_options options;
  zmq::context_t &ctx;
  // input
  zmq::socket_t router;
  std::unique_ptr<record_file_reader> input_file;
  std::string input_endpoint;
  std::map<std::string, producer_state> producers;
  bool registration_closed = false;
  bool ended = false;
  bool interrupted = false;
  // outputs
  std::vector<std::unique_ptr<output_link>> outputs;
  zmq::socket_t tap;
  std::string tap_endpoint;
  stage_io_counts counts;
  // Barriers (record.h): the one received and not yet answered (the stage is handling it), and
  // the outputs that were sent a barrier since, with its token. Settled by the next receive() or
  // finish(): the stage asking for more means it has handled the record.
  struct barrier_from {
    std::string producer_id;
    uint64_t token;
  };
  // pass_unchanged (stage_io.h): the stage's rules, and the glances of the batch at hand.
  std::function<bool(const record_glance &)> unchanged;
  std::function<void(const record_glance &)> passed;
  std::vector<record_glance> glances;
  std::optional<barrier_from> barrier_received;
  std::vector<output_link *> barrier_outputs;
  uint64_t barrier_token = 0;  // of barriers sent downstream
  // Records of a batch received and not yet returned (batched_next up to batched_used), from
  // producer batched_from. The records stay from batch to batch, each decoded into one that held
  // a record before (its strings' and vectors' storage kept) and handed to the stage where it
  // lies (next()): no record is allocated, moved or freed on the way.
  std::vector<record> batched;
  std::string batched_from;
  size_t batched_next = 0, batched_used = 0;
  // The record next() returns when it came alone (socket) or from a file, reused the same way.
  record single;
  // The record next() returned last. Its payload goes when the stage asks for the next one,
  // before any wait: a payload in the producer's shared-memory ring must not stay held while
  // this stage waits for a producer that may be waiting for that very space.
  record *handed = nullptr;

  impl(zmq::context_t &c, const stage_io_options &o) : options(o), ctx(c) {}

  bool stream_complete() const {
    if (!registration_closed) return false;
    for (const auto &[id, p] : producers)
      if (!p.done) return false;
    return true;
  }

  void register_producer(const std::string &id, const record &hello) {
    producer_state p;
    const auto &m = hello.header.meta;
    if (m.is_object()) {
      p.name = m.value("name", std::string{});
      p.host = m.value("host", std::string{});
      p.pid = m.value("pid", int64_t{0});
      p.numbered = m.value("numbered", false);
    }
    p.last_seen = clock_type::now();
    producers[id] = p;
    ++counts.producers;
    if (options.producers > 0 && counts.producers >= static_cast<uint64_t>(options.producers))
      registration_closed = true;
  }

  void send_ack(const std::string &id) {
    record_header ack = record_header_of(record_kind::ack);
    ack.meta = endpoint_peer_meta(options.producer_name);
    ack.meta["sync"] = true;  // every stage_io answers barriers
    // Payloads by reference from a producer on this host (shm.h); a file or tcp peer elsewhere
    // gets bytes.
    if (auto it = producers.find(id); it != producers.end() && it->second.host == endpoint_host_name() && shm_enabled())
      ack.meta["shm"] = true;
    ack.meta["batch"] = true;  // small records several to a message (record.h "Batches")
    ack.meta["stack_refs"] = true;  // call stacks once per id (record.h section 5): see receive()
    auto frame = record_header_encode(ack);
    try {
      router.send(zmq::buffer(id), zmq::send_flags::sndmore);
      router.send(frame, zmq::send_flags::none);
    } catch (const zmq::error_t &e) {
      // The producer left before its answer (router_mandatory: EHOSTUNREACH), e.g. one stopped
      // by a signal right after its eos: nobody waits for this ack, and the stream goes on.
      if (e.num() != EHOSTUNREACH) endpoint_rethrow(e, "answer a producer on", input_endpoint);
    }
  }

  // The stage has handled the barrier it received (it asks for the next record, or finishes):
  // once every output it passed the barrier to has answered, answer the producer.
  void settle_barrier() {
    for (auto *o : barrier_outputs)
      if (!o->wait_synced(barrier_token)) break;  // stopping: the barrier is abandoned
    barrier_outputs.clear();
    if (!barrier_received) return;
    const auto from = std::move(*barrier_received);
    barrier_received.reset();
    if (stop_requested()) return;
    record_header synced = record_header_of(record_kind::synced);
    synced.meta = {{"barrier", from.token}};
    auto frame = record_header_encode(synced);
    try {
      router.send(zmq::buffer(from.producer_id), zmq::send_flags::sndmore);
      router.send(frame, zmq::send_flags::none);
    } catch (const zmq::error_t &e) {
      // The producer is gone (router_mandatory: EHOSTUNREACH): nobody waits for the answer.
      if (e.num() != EHOSTUNREACH) endpoint_rethrow(e, "answer a barrier on", input_endpoint);
    }
  }

  // A data record from `p` came (its seq, 0 when it has none). A numbered producer's records come
  // in seq order, each once: a seq further on means records in between were lost; one already
  // past is a broken producer.
  void note_arrival(producer_state &p, uint64_t seq) {
    ++p.received;
    if (!p.numbered || seq == p.next_seq) {
      ++p.next_seq;
      return;
    }
    if (seq < p.next_seq)
      throw framing_error(fmt::format("{} (pid {}) sent seq {} after seq {}: its records must come in order, once",
                                      p.name, p.pid, seq, p.next_seq - 1));
    if (!p.first_skipped) p.first_skipped = p.next_seq;
    p.skipped += seq - p.next_seq;
    p.next_seq = seq + 1;
  }

  // The end of `p`'s stream: its eos said it sent `sent` data records (nullopt: no eos, or one
  // without the count). What never arrived is counted in counts.lost and named in lost_message,
  // which ends the stage once its output is complete (lost_check).
  void note_stream_end(const producer_state &p, std::optional<uint64_t> sent, const std::string &where) {
    const uint64_t short_by = sent && *sent > p.received ? *sent - p.received : 0;
    const uint64_t lost = std::max(short_by, p.skipped);
    if (!lost) return;
    counts.lost += lost;
    if (!lost_message.empty()) return;  // the first loss is the one named
    const std::string who = p.name.empty() ? "a producer" : p.name;
    lost_message = fmt::format("{} record{} that {} sent never arrived on {}{}; what came is written, and the "
                               "output lacks {}",
                               lost, lost == 1 ? "" : "s", p.pid ? fmt::format("{} (pid {})", who, p.pid) : who, where,
                               p.first_skipped ? fmt::format(" (the first: seq {})", p.first_skipped) : "",
                               lost == 1 ? "it" : "them");
  }
  std::string lost_message;

  // Records were lost on the way to this stage: a system error, raised once the stage has
  // written (a sink, at the end of its input) or passed on (finish) everything that came.
  void lost_check() const {
    if (counts.lost) throw system_error(lost_message);
  }

  std::string producer_label(const std::string &id) const {
    auto it = producers.find(id);
    if (it == producers.end() || it->second.name.empty()) return "an unregistered producer";
    return fmt::format("{} (pid {})", it->second.name, it->second.pid);
  }

  // A producer on this host whose process died without eos, silent for a second: its stream is
  // truncated. Checked only while waiting, so a live stream is never cut.
  void reap_dead_producers() {
    const std::string host = endpoint_host_name();
    const auto now = clock_type::now();
    for (auto &[id, p] : producers) {
      if (p.done || p.host != host || now - p.last_seen < std::chrono::seconds(1)) continue;
      if (!process_is_gone(p.pid)) continue;
      p.done = true;
      ++counts.truncated_producers;
      note_stream_end(p, std::nullopt, input_endpoint);
      fmt::print(stderr, "{}: warning: producer {} (pid {}) exited without end-of-stream; its stream is truncated\n",
                 options.producer_name, p.name, p.pid);
    }
  }

  record *receive_file() {
    for (;;) {
      if (!input_file->read(single)) {
        note_stream_end(file_producer, std::nullopt, options.input);
        fmt::print(stderr, "{}: warning: {} ends without end-of-stream (a truncated recording)\n",
                   options.producer_name, options.input);
        ++counts.truncated_producers;
        return nullptr;
      }
      switch (single.header.kind) {
        case record_kind::eos:
          note_stream_end(file_producer, eos_records(single), options.input);
          if (single.header.meta.is_object())
            counts.upstream_dropped += single.header.meta.value("dropped", uint64_t{0});
          return nullptr;
        case record_kind::hello:
        case record_kind::ack:
        case record_kind::synced:
        case record_kind::control:
        case record_kind::final: continue;  // connection control, meaningless in a file
        default:
          ++counts.received;
          note_arrival(file_producer, 0);  // a file's records are not numbered: counted
          // A recording keeps the stream's stack ids (record.h section 5) as they were sent: a
          // stack's lines once, then its id, across steps.
          note_stack(single);
          return &single;
      }
    }
  }

  producer_state file_producer{.name = "the recording"};  // the writer of a file input

  // The `records` of an eos: the data records its producer sent (record.h).
  static std::optional<uint64_t> eos_records(const record &eos) {
    if (!eos.header.meta.is_object()) return std::nullopt;
    auto it = eos.header.meta.find("records");
    if (it == eos.header.meta.end() || !it->is_number_unsigned()) return std::nullopt;
    return it->get<uint64_t>();
  }

  // The lines behind a stack id, for this stage's outputs and for record_stack_lines.
  static void note_stack(const record &r) {
    if (const auto id = record_stack_id(r.header))  // entry records only
      if (auto it = r.header.meta.find("stack"); it != r.header.meta.end() && it->is_array())
        stack_book_define(r.header.run, *id, *it);
  }

  record *next() {
    if (handed) handed->drop_payload();
    handed = nullptr;
    return handed = next_record();
  }

  record *next_record() {
    settle_barrier();
    if (ended) return nullptr;
    if (input_file) {
      record *r = receive_file();
      if (!r) {
        ended = true;
        publish_tap_end();
        if (outputs.empty()) lost_check();
      }
      return r;
    }
    for (;;) {
      if (stream_complete()) {
        ended = true;
        publish_tap_end();
        if (outputs.empty()) lost_check();  // a stage with outputs says so in finish()
        return nullptr;
      }
      if (stop_requested()) {
        ended = interrupted = true;
        note_stream_cut();
        publish_tap_end();
        return nullptr;
      }
      if (batched_next < batched_used) {
        record &r = batched[batched_next++];
        const bool take = accept(batched_from, r, false);
        // Read: the next batch decodes into these records again, after the stage is done with r.
        if (batched_next == batched_used) batched_next = batched_used = 0;
        if (take) return &r;
        continue;
      }
      // A busy stream is drained without a poll per record (a poll is a system call or two);
      // only an empty socket makes us wait.
      std::vector<zmq::message_t> frames;
      zmq::message_t m;
      try {
        if (router.recv(m, zmq::recv_flags::dontwait)) {
          frames.push_back(std::move(m));
          while (frames.back().more()) {
            (void)router.recv(m);  // the rest of a multipart message is already there
            frames.push_back(std::move(m));
          }
        }
      } catch (const zmq::error_t &e) {
        if (e.num() == EINTR) continue;
        endpoint_rethrow(e, "receive from", input_endpoint);
      }
      if (frames.empty()) {
        // Nothing to read: what this stage holds in batches goes downstream before it waits.
        for (auto &o : outputs) o->flush();
        bool waiting_on_producer = false;
        for (const auto &[id, p] : producers) waiting_on_producer |= !p.done;
        zmq::pollitem_t items[] = {{router.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, transport_interrupt_fd(), ZMQ_POLLIN, 0}};
        try {
          zmq::poll(items, 2, std::chrono::milliseconds(waiting_on_producer ? 1000 : -1));
        } catch (const zmq::error_t &e) {
          if (e.num() == EINTR) continue;
          endpoint_rethrow(e, "poll", input_endpoint);
        }
        if (!(items[0].revents & ZMQ_POLLIN) && !(items[1].revents & ZMQ_POLLIN)) reap_dead_producers();
        continue;  // the loop head sees stop_requested(); the next pass receives
      }
      const std::string id = frames.front().to_string();
      frames.erase(frames.begin());
      if (frames.size() == 1 && record_frame_is_batch(frames[0])) {
        try {
          if (pass_batch(id, frames[0])) continue;
          record_batch_decode(frames[0], batched, batched_used, options.decode);
          batched_from = id;
          // The producer is seen once for the batch, not at each of its records.
          if (auto p = producers.find(id); p != producers.end()) p->second.last_seen = clock_type::now();
        } catch (const framing_error &e) {
          throw framing_error(fmt::format("malformed batch from {} on {}: {}", producer_label(id), input_endpoint,
                                          e.what()));
        }
        continue;
      }
      try {
        record_decode(frames, single, options.decode);
      } catch (const framing_error &e) {
        // It arrived, unreadable: reported as malformed, not again as lost. Its seq, unread, is
        // taken to be the one expected.
        if (auto p = producers.find(id); p != producers.end()) note_arrival(p->second, p->second.next_seq);
        throw framing_error(fmt::format("malformed record from {} on {}: {}", producer_label(id), input_endpoint,
                                        e.what()));
      }
      if (accept(id, single, true)) return &single;
    }
  }

  // A batch whose every record the stage would pass on unchanged goes to the outputs as it came
  // (stage_io.h, pass_unchanged): true when sent so. Not when an output would have to change it
  // (a file, a consumer without batches or stack references, a stack this output has not
  // defined), when a tap subscriber wants the records one by one, or when a record defines a
  // stack (its lines go into this process's book through the decoded path). Throws framing_error.
  bool pass_batch(const std::string &id, const zmq::message_t &frame) {
    if (!unchanged || outputs.empty() || (tap && tap_subscribed())) return false;
    auto producer = producers.find(id);
    if (producer == producers.end()) return false;  // the decoded path names the broken protocol
    for (const auto &o : outputs)
      if (!o->takes_batches() || !o->takes_stack_refs()) return false;
    record_batch_glance(frame, glances);
    for (const auto &g : glances) {
      if (g.has_stack_lines || !unchanged(g)) return false;
      if (g.stack_id)
        for (const auto &o : outputs)
          if (!o->stack_defined(g.run, *g.stack_id)) return false;
    }
    producer->second.last_seen = clock_type::now();
    for (const auto &g : glances) note_arrival(producer->second, g.seq);
    for (auto &o : outputs) {
      zmq::message_t copy;
      copy.copy(const_cast<zmq::message_t &>(frame));  // shares the bytes
      o->send_batch(std::move(copy), glances.size());
    }
    counts.received += glances.size();
    counts.sent += glances.size();
    counts.passed_unchanged += glances.size();
    if (passed)
      for (const auto &g : glances) passed(g);
    return true;
  }

  // One record from producer `id`: connection control is answered here (false), a data record
  // is made ready for the stage (true). `seen`: note the producer as seen now (a batch's records
  // were, when the batch came).
  bool accept(const std::string &id, record &r, bool seen) {
    auto it = producers.find(id);
    if (seen && it != producers.end()) it->second.last_seen = clock_type::now();
    switch (r.header.kind) {
      case record_kind::hello:
        register_producer(id, r);
        send_ack(id);
        return false;
      case record_kind::final:
        registration_closed = true;
        send_ack(id);
        return false;
      case record_kind::eos:
        if (it != producers.end()) {
          it->second.done = true;
          note_stream_end(it->second, eos_records(r), input_endpoint);
        }
        if (r.header.meta.is_object()) counts.upstream_dropped += r.header.meta.value("dropped", uint64_t{0});
        send_ack(id);  // tells the producer that everything before eos arrived
        return false;
      case record_kind::ack:
      case record_kind::synced:
      case record_kind::control:
        throw framing_error(fmt::format("{} sent {} to {}, which only consumers send", producer_label(id),
                                        record_kind_name(r.header.kind), input_endpoint));
      default:
        if (it == producers.end())
          throw framing_error(fmt::format("{} from a producer that did not say hello first on {}", r.describe(),
                                          input_endpoint));
        note_arrival(it->second, r.header.seq);
        if (r.header.meta.is_object()) {
          if (auto b = r.header.meta.find("barrier"); b != r.header.meta.end() && b->is_number_unsigned())
            barrier_received = barrier_from{id, b->get<uint64_t>()};
        }
        if (r.header.shm) {
          try {
            const uint64_t length = r.header.length;
            r.set_payload_frame(shm_frame_from_ref(*r.header.shm, length));
            r.header.shm.reset();
          } catch (const framing_error &e) {
            throw framing_error(fmt::format("malformed record from {} on {}: {}: {}", producer_label(id),
                                            input_endpoint, r.describe(), e.what()));
          } catch (const system_error &) {
            // A producer that died with references in flight took its segment with it: what it
            // sent is lost, as a crashed producer's stream is (truncated), not the stage's fault.
            if (it == producers.end() || it->second.host != endpoint_host_name() || !process_is_gone(it->second.pid)) throw;
            if (!it->second.lost_payloads++)
              fmt::print(stderr, "{}: warning: producer {} (pid {}) exited with payloads in shared memory; they are lost\n",
                         options.producer_name, it->second.name, it->second.pid);
            return false;
          }
        }
        ++counts.received;
        note_stack(r);
        if (tap && outputs.empty()) publish_consumed(r);
        return true;
    }
  }

  void send(const record &r, bool may_batch = true) {
    if (is_barrier(r)) return send_barrier(r);
    // Encoded once, at the first output that takes the frames as they are: a file encodes its
    // own, and a record sent by reference or with its stack adapted needs none of them.
    std::optional<std::vector<zmq::message_t>> frames;
    const auto encoded = [&]() -> std::vector<zmq::message_t> & {
      if (!frames) frames = record_encode(r);
      return *frames;
    };
    const bool batchable = may_batch && record_batchable(r.header);
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (outputs[o]->is_file()) {
        outputs[o]->send(r);
        continue;
      }
      if (outputs[o]->send_by_reference(r)) continue;
      if (auto adapted = outputs[o]->adapt_stack(r.header)) {  // an entry record: no payload
        std::vector<zmq::message_t> own;
        own.push_back(record_header_encode(*adapted));
        outputs[o]->send_frames(std::move(own), batchable);
        continue;
      }
      auto &all = encoded();
      std::vector<zmq::message_t> copy(all.size());
      for (size_t i = 0; i < all.size(); ++i) copy[i].copy(all[i]);  // shared, not duplicated
      outputs[o]->send_frames(std::move(copy), batchable);
    }
    ++counts.sent;
    if (tap && tap_subscribed()) publish_tap(r, encoded());
  }

  static bool is_barrier(const record &r) { return record_is_barrier(r.header); }

  // A barrier passed on: under this stage's own token (producers' tokens may collide), and
  // answered upstream only once every output that answers barriers has answered it.
  void send_barrier(const record &r) {
    settle_barrier_outputs_first();
    record_header h = r.header;
    h.meta["barrier"] = ++barrier_token;
    std::vector<zmq::message_t> frames = record_encode(r);
    frames[0] = record_header_encode(h);  // the payload frame, if any, stays shared
    for (auto &o : outputs) {
      if (o->is_file()) {
        o->send(r);  // a recording: nobody answers a barrier there
        continue;
      }
      std::vector<zmq::message_t> out(frames.size());
      for (size_t i = 0; i < frames.size(); ++i) out[i].copy(frames[i]);
      o->send_frames(std::move(out));
      if (o->syncs()) barrier_outputs.push_back(o.get());
    }
    ++counts.sent;
    if (tap) publish_tap(r, frames);
  }

  // Two barriers sent without a receive() between them: the earlier one is waited for first.
  void settle_barrier_outputs_first() {
    for (auto *o : barrier_outputs) (void)o->wait_synced(barrier_token);
    barrier_outputs.clear();
  }

  // A sink sends nothing, so its tap shows what it consumes: headers only, and only while someone
  // subscribes (encoding a header per record is not free).
  void publish_consumed(const record &r) {
    if (!tap_subscribed()) return;
    std::vector<zmq::message_t> frames;
    if (options.tap_payload || !r.has_payload()) {
      frames = record_encode(r);
    } else {
      record_header h = r.header;
      h.stored.reset();
      h.codec = record_codec::raw;
      h.length = 0;
      frames.push_back(record_header_encode(h));
    }
    publish_tap(r, frames);
  }

  // XPUB hands up one message per change of the subscription to "" (1: subscribed, 0: gone).
  // Asked at most once a clock tick (1-4 ms), not per record: a non-blocking receive that finds
  // nothing costs a system call (ZeroMQ polls its command mailbox), which was one per record in a
  // sink. A new subscriber misses a few milliseconds more of a tap that is lossy anyway.
  bool tap_subscribed() {
    const auto now = coarse_steady_now();
    if (now - tap_checked_ < std::chrono::milliseconds(1)) return tap_subscribed_;
    tap_checked_ = now;
    zmq::message_t m;
    try {
      while (tap.recv(m, zmq::recv_flags::dontwait))
        if (m.size() >= 1) tap_subscribed_ = static_cast<const uint8_t *>(m.data())[0] == 1;
    } catch (const zmq::error_t &) {
    }
    return tap_subscribed_;
  }
  bool tap_subscribed_ = false;
  clock_type::time_point tap_checked_{};

  void publish_tap(const record &r, std::vector<zmq::message_t> &frames) {
    // The header must say whether a payload frame follows: a tap without payloads gets a header
    // encoded without one (only for records that carry a payload).
    std::vector<zmq::message_t> out;
    if (options.tap_payload || frames.size() == 1) {
      out = std::move(frames);
    } else {
      record_header h = r.header;
      h.stored.reset();
      h.codec = record_codec::raw;
      h.length = 0;
      out.push_back(record_header_encode(h));
    }
    for (size_t i = 0; i < out.size(); ++i) {
      const auto flags = (i + 1 < out.size() ? zmq::send_flags::sndmore : zmq::send_flags::none) |
                         zmq::send_flags::dontwait;
      try {
        if (!tap.send(out[i], flags)) {
          ++counts.tap_dropped;  // a slow tap: drop and count, never block the main path
          return;
        }
      } catch (const zmq::error_t &e) {
        if (e.num() == EINTR) {
          ++counts.tap_dropped;
          return;
        }
        endpoint_rethrow(e, "publish on", tap_endpoint);
      }
    }
  }

  void finish() {
    // Stopped by a signal before the input ended (a stage that stopped reading, a source cut short).
    if (stop_requested() && !(ended && !interrupted)) note_stream_cut();
    settle_barrier();
    record eos(record_header_of(record_kind::eos));
    // What was lost on the way here is dropped for everyone downstream.
    eos.header.meta = {{"records", counts.sent}, {"dropped", counts.upstream_dropped + counts.lost}};
    for (auto &o : outputs) o->finish(eos);
    outputs.clear();
    if (tap && !tap_ended) {
      tap_ended = true;
      auto frame = record_header_encode(eos.header);
      (void)tap.send(frame, zmq::send_flags::dontwait);
    }
    lost_check();
  }

  // A sink's tap shows what it consumes (publish_consumed), so its end too, when its input ends:
  // a sink has no finish() to call, and `tprobe tap` on it must not wait forever. Best effort, as
  // everything on a tap; the subscriber also ends when the stage's connection closes.
  bool tap_ended = false;
  void publish_tap_end() {
    if (!tap || !outputs.empty() || tap_ended) return;
    tap_ended = true;
    record eos(record_header_of(record_kind::eos));
    eos.header.meta = {{"records", counts.received}};
    auto frame = record_header_encode(eos.header);
    try {
      (void)tap.send(frame, zmq::send_flags::dontwait);
    } catch (const zmq::error_t &) {
      ++counts.tap_dropped;  // never fails the stage: the tap is for watching
    }
  }
};

stage_io::stage_io(zmq::context_t &ctx, const stage_io_options &options)
    : impl_(std::make_unique<impl>(ctx, options)) {
  auto &s = *impl_;
  // Every tcp endpoint is checked before anything binds or connects: a refused tap or output must
  // not leave the input listening on a port meanwhile.
  if (!options.input.empty() && !endpoint_is_file(options.input)) endpoint_check_bind(options.input);
  if (!options.tap.empty()) endpoint_check_bind(options.tap);
  for (const auto &out : options.outputs)
    if (!endpoint_is_file(out)) endpoint_check_connect(out);
  if (!options.input.empty()) {
    std::string path;
    if (endpoint_is_file(options.input, &path)) {
      s.input_file = std::make_unique<record_file_reader>(path, s.options.decode);
      s.input_endpoint = options.input;
    } else {
      s.router = zmq::socket_t(ctx, zmq::socket_type::router);
      s.router.set(zmq::sockopt::rcvhwm, options.high_water_mark);
      s.router.set(zmq::sockopt::router_mandatory, 1);
      s.router.set(zmq::sockopt::linger, 1000);
      s.input_endpoint = endpoint_bind(s.router, options.input);
    }
  }
  if (!options.tap.empty()) {
    s.tap = zmq::socket_t(ctx, zmq::socket_type::xpub);
    s.tap.set(zmq::sockopt::xpub_nodrop, 1);  // report a full subscriber as EAGAIN, so drops are counted
    s.tap.set(zmq::sockopt::sndhwm, options.high_water_mark);
    s.tap.set(zmq::sockopt::linger, 0);
    s.tap_endpoint = endpoint_bind(s.tap, options.tap);
  }
  for (const auto &out : options.outputs)
    s.outputs.push_back(
        std::make_unique<output_link>(ctx, out, options.producer_name, options.high_water_mark, options.deadlines));
}

stage_io::~stage_io() = default;
std::optional<record> stage_io::receive() {
  record *r = impl_->next();
  if (!r) return std::nullopt;
  return std::move(*r);
}
record *stage_io::next() { return impl_->next(); }

void stage_io::send(const record &r) { impl_->send(r); }
void stage_io::send_alone(const record &r) { impl_->send(r, false); }
void stage_io::pass_unchanged(std::function<bool(const record_glance &)> unchanged,
                              std::function<void(const record_glance &)> passed) {
  impl_->unchanged = std::move(unchanged);
  impl_->passed = std::move(passed);
}
void stage_io::flush() {
  for (auto &o : impl_->outputs) o->flush();
}
void stage_io::finish() { impl_->finish(); }
std::string stage_io::input_endpoint() const { return impl_->input_endpoint; }
std::string stage_io::tap_endpoint() const { return impl_->tap_endpoint; }
const stage_io_counts &stage_io::counts() const { return impl_->counts; }
bool stage_io::interrupted() const { return impl_->interrupted; }

// ---- signals ----

void stage_install_signal_handlers() {
  (void)transport_interrupt_fd();  // the self-pipe exists before a handler may write to it
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked zmq call returns EINTR and sees the flag
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

bool stop_requested() { return transport_interrupted(); }

int stage_stream_cut_by() { return g_stream_cut_by; }

void request_stop() { transport_interrupt(); }

std::chrono::steady_clock::time_point coarse_steady_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

}  // namespace tprobe
