// The capture session's payload buffers (payload_pool.h): taking a block of a size class, and
// giving it back when ZeroMQ frees the frame.
#include "payload_pool.h"

#include <new>

namespace tprobe {

zmq::message_t payload_pool::frame(size_t size) {
  const int cls = class_of(size);
  std::byte *block = nullptr;
  if (cls >= 0) {
    std::lock_guard lock(mutex_);
    auto &list = free_[cls];
    if (!list.empty()) {
      block = list.back();
      list.pop_back();
      idle_ -= class_bytes(cls);
    }
  }
  if (!block) block = static_cast<std::byte *>(::operator new(header_bytes + (cls >= 0 ? class_bytes(cls) : size)));
  auto *h = reinterpret_cast<block_header *>(block);
  h->pool = this;
  h->cls = cls;
  refs_.fetch_add(1, std::memory_order_relaxed);
  return zmq::message_t(block + header_bytes, size, &payload_pool::free_frame, block);
}

void payload_pool::free_frame(void *, void *hint) {
  auto *block = static_cast<std::byte *>(hint);
  auto *h = reinterpret_cast<block_header *>(block);
  payload_pool *pool = h->pool;
  pool->give_back(block, h->cls);
  pool->release_ref();
}

void payload_pool::give_back(std::byte *block, int cls) {
  if (cls >= 0) {
    std::lock_guard lock(mutex_);
    if (idle_ + class_bytes(cls) <= limit_) {
      free_[cls].push_back(block);
      idle_ += class_bytes(cls);
      return;
    }
  }
  ::operator delete(block);
}

payload_pool::~payload_pool() {
  for (auto &list : free_)
    for (std::byte *b : list) ::operator delete(b);
}

}  // namespace tprobe
