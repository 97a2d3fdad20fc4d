// Payload buffers for the capture session's frames (session.h), recycled. Apart from the session:
// a pool outlives it while frames are in flight, and it knows nothing of records.
//
// A fresh allocation per tensor costs page faults for big tensors and a cross-thread free (the
// frame dies on ZeroMQ's I/O thread) for small ones; both cost more than the copy itself. Buffers
// come in power-of-two classes; the pool keeps at most `limit` bytes idle and frees the rest. It
// outlives the session while frames are in flight: each frame holds a reference.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include <zmq.hpp>

namespace tprobe {

class payload_pool {
 public:
  explicit payload_pool(size_t limit) : limit_(limit) {}

  // A pool with one reference, the caller's; the last release_ref (the caller's or a frame's)
  // frees it.
  static payload_pool *create(size_t limit) { return new payload_pool(limit); }
  void release_ref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // A frame of `size` bytes whose buffer comes back to the pool (or is freed) when ZeroMQ is done
  // with it; any thread may free it.
  zmq::message_t frame(size_t size);

 private:
  struct block_header {
    payload_pool *pool;
    int cls;
  };
  static constexpr size_t header_bytes = 64;  // keeps the payload cache-line aligned
  static constexpr int min_shift = 8, max_shift = 28;  // 256 B … 256 MiB

  static int class_of(size_t size) {
    int shift = min_shift;
    while (shift <= max_shift && (size_t{1} << shift) < size) ++shift;
    return shift > max_shift ? -1 : shift - min_shift;
  }
  static size_t class_bytes(int cls) { return size_t{1} << (cls + min_shift); }

  static void free_frame(void *, void *hint);
  void give_back(std::byte *block, int cls);
  ~payload_pool();

  std::atomic<int> refs_{1};
  std::mutex mutex_;
  std::vector<std::byte *> free_[max_shift - min_shift + 1];
  size_t idle_ = 0;
  const size_t limit_;
};

}  // namespace tprobe
