// shm.h: tensor payloads by reference, through shared memory, between processes of one host.
//
// Why. A 16 MiB payload sent over an ipc socket is copied twice by the kernel (into the socket,
// out of it) and once more into every further stage; a tensor dump of a large model then costs
// more in copies than the disk costs in writes. Here the capture copies a tensor once, into a
// shared segment, and every stage on this host reads that memory; the writer writes the .npy from
// it. Records and control stay on ZeroMQ: only the payload bytes move by reference.
//
// Segments. A producer (the capture session) owns one segment: a memfd of `capacity` bytes,
// mapped shared, used as a ring of blocks. A consumer opens it as /proc/PID/fd/FD of the process
// that sent it the reference (no name in /dev/shm, so nothing is left behind by a crash: the
// memory goes with the last process that maps it), keeps it open and mapped while it lives, and
// names its own fd in the references it passes on: a stage further down opens the segment through
// its immediate producer, which is alive until that stage acknowledged its end-of-stream, so no
// hop depends on the capture process still running. The segment's first page is a header:
//
//   offset  size  field
//   0       8     magic "TPSHMSG1"
//   8       8     id: a random 64-bit number, carried in every reference (a stale /proc path that
//                 now names another file is detected, not read)
//   16      8     capacity in bytes, header page included
//   24      4     release generation: +1 whenever a block's last hold is released (a futex word)
//   28      4     waiters: non-zero while the producer sleeps on the generation
//
// Blocks start on 64-byte boundaries after the header page; each has a 64-byte header:
//   0  4  magic "TPSB";  4  4  holds (atomic count);  8  8  block bytes (header included);
//   16 8  payload length
// followed by the payload. A block is free when its holds reach 0; the producer reclaims blocks
// in allocation order (a block released early waits for the older ones), so releases may happen
// in any order, in any process.
//
// Holds. The producer's own frame holds a block once. Passing a frame by reference to a consumer
// adds one hold (shm_share), which travels with the reference: the consumer's frame owns it
// (shm_frame_from_ref) and releases it when the frame dies, or passes it on again. So a payload
// lives exactly as long as some process still has a record that uses it, across any chain of
// stages on this host, and no stage needs to know about shared memory: a record's payload frame
// is simply memory in the segment.
//
// Backpressure. When the ring is full the producer waits for releases (a futex wait on the
// generation, woken by the releasing process). A consumer that holds on to payloads (a stage that
// keeps records, or one that died) must never wedge the training process: if no block is
// released for `patience_ms`, or keep_waiting() says stop, allocate() gives up and the caller
// sends that payload over the socket instead, and later allocations do not wait again until a
// release happens.
//
// Safety. A reference is checked before use: segment id, bounds, block magic and length; a bad
// one is a framing_error naming it. Mappings are shared with the producer, so a consumer trusts
// the producer (same host, same user) as it trusts its records.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <zmq.hpp>

#include "record.h"

namespace tprobe {

struct shm_segment;

// Payloads smaller than this go over the socket: a reference and its bookkeeping cost more than
// copying a few KiB, and small records stay self-contained.
inline constexpr size_t SHM_MIN_PAYLOAD = size_t{64} << 10;

// True unless TPROBE_SHM is "0" or "off": a user setting (docs/performance.md, "Runtime switches")
// for a container whose memory limit cannot spare the ring or that refuses memfd_create.
bool shm_enabled();

struct shm_ring_counts {
  uint64_t blocks = 0;        // payloads placed in the ring
  uint64_t bytes = 0;         // their bytes
  uint64_t waits = 0;         // allocations that had to wait for a release
  uint64_t gave_up = 0;       // allocations that went to the socket instead (full, no release)
};

// The producer's ring. One thread allocates at a time (an internal mutex makes it safe anyway);
// frames may die on any thread or in any process.
class shm_ring {
 public:
  // Creates and maps a memfd segment of `capacity` bytes. Throws system_error.
  explicit shm_ring(size_t capacity);
  ~shm_ring();
  shm_ring(const shm_ring &) = delete;
  shm_ring &operator=(const shm_ring &) = delete;

  // A frame of `size` bytes in the ring (its memory is not initialised), or nullopt when the
  // ring cannot take it: larger than half the ring, or full with no release within
  // patience_ms, or keep_waiting() (asked every quarter second of waiting) returned false.
  std::optional<zmq::message_t> allocate(size_t size, const std::function<bool()> &keep_waiting = {},
                                         int patience_ms = 200);

  std::string path() const;  // /proc/PID/fd/FD
  uint64_t id() const;
  size_t capacity() const;
  shm_ring_counts counts() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// The reference for passing `frame` to a consumer on this host, with one more hold on its block
// (the consumer's to release); nullopt when the frame's memory is not in a segment this process
// owns or has mapped. Undo with shm_unshare when the reference could not be sent.
std::optional<record_shm_ref> shm_share(const zmq::message_t &frame);
void shm_unshare(const record_shm_ref &ref);

// A frame over the payload that `ref` names (`length` bytes), mapping its segment on first use.
// The frame owns the hold that came with the reference. Throws framing_error when the reference
// does not name a block of that length, system_error when the segment cannot be opened.
zmq::message_t shm_frame_from_ref(const record_shm_ref &ref, uint64_t length);

}  // namespace tprobe
