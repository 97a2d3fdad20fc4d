// link.h: the pieces of the record protocol (endpoint.h) that a consumer runtime builds on: the
// producer side of one connection, and binding with the network rules. A stage's runtime
// (stages/common/stage_io.h) is made of these; a capture needs only record_sender (endpoint.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "endpoint.h"
#include "record.h"

namespace tprobe {

// One connection to a consumer (or a record file), as endpoint.h describes it: the constructor
// connects and completes hello/ack; sends block at the high-water mark, watched by `deadlines`;
// a payload in shared memory goes by reference when the consumer takes it (shm.h). One thread.
class output_link {
 public:
  output_link(zmq::context_t &ctx, const std::string &spec, const std::string &producer_name, int hwm,
              const link_deadlines &deadlines);
  ~output_link();
  output_link(const output_link &) = delete;
  output_link &operator=(const output_link &) = delete;

  void send(const record &r);
  // The record with its payload by reference when the consumer takes it and the payload lies in
  // shared memory: true when sent so; false, with nothing sent, otherwise.
  bool send_by_reference(const record &r);
  // Frames already encoded (shared among several links); never by reference. A batchable record
  // (record_batchable of its header) may join a batch when the consumer takes them.
  void send_frames(std::vector<zmq::message_t> frames, bool batchable = false);
  // The header this link must send in place of `h` by the stack rule (record.h section 5), or
  // nullopt when the frames encoded from `h` will do. Call it for every record whose frames go
  // out by send_frames: it counts the ids this link defined.
  std::optional<record_header> adapt_stack(const record_header &h);
  // Sends the open batch, if any: the runtime calls it before it waits for input.
  void flush();
  // A batch frame received from upstream, sent on as it is after the open batch (record.h
  // section 4: only to a consumer that takes batches and stack references, and only a batch
  // whose stack references this link has defined). `records` is its record count.
  void send_batch(zmq::message_t frame, size_t records);
  bool takes_batches() const;     // the consumer's ack said batch (never a file)
  bool takes_stack_refs() const;  // the consumer's ack said stack_refs (never a file)
  // True when this link has sent the lines of stack `id` of `run` (record.h section 5).
  bool stack_defined(std::string_view run, uint64_t id) const;
  bool is_file() const;
  bool syncs() const;      // the consumer answers barriers (its ack said sync)
  bool takes_shm() const;  // the consumer takes payloads by reference (its ack said shm, same host)
  // Waits for `synced` with `token`; false when interrupted (the barrier is abandoned).
  bool wait_synced(uint64_t token);
  void finish(const record &eos);  // eos, its ack, close
  void abandon();                  // close now, dropping what is queued

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// This host's name, as hello and ack carry it.
const std::string &endpoint_host_name();
// {name, host, pid}: what hello and ack say about the process that sends them.
nlohmann::ordered_json endpoint_peer_meta(const std::string &name);
// system_error "unable to VERB OBJECT: …" from a ZeroMQ error.
[[noreturn]] void endpoint_rethrow(const zmq::error_t &e, const std::string &verb, const std::string &object);
// The checks a bind or a connect of `spec` would fail (bad form, network rules, CurveZMQ keys),
// without binding: a runtime checks every endpoint before it opens any.
void endpoint_check_bind(const std::string &spec);
void endpoint_check_connect(const std::string &spec);
// Binds `socket` (options set by the caller) at `spec`, loopback unless an address is given, as a
// CurveZMQ server when keys are set; returns the bound address. Throws system_error.
std::string endpoint_bind(zmq::socket_t &socket, const std::string &spec);

}  // namespace tprobe
