#include "shm.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include "errors.h"

namespace tprobe {

namespace {

constexpr char segment_magic[8] = {'T', 'P', 'S', 'H', 'M', 'S', 'G', '1'};
constexpr uint32_t block_magic = 0x42535054;  // "TPSB", little-endian
constexpr size_t header_page = 4096;
constexpr size_t block_header_bytes = 64;
constexpr size_t block_align = 64;

struct segment_header {
  char magic[8];
  uint64_t id;
  uint64_t capacity;
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> waiters;
};
static_assert(sizeof(segment_header) <= header_page);
static_assert(std::atomic<uint32_t>::is_always_lock_free, "holds must work across processes");

struct block_header {
  uint32_t magic;
  std::atomic<uint32_t> holds;
  uint64_t bytes;
  uint64_t length;
};
static_assert(sizeof(block_header) <= block_header_bytes);

long futex(std::atomic<uint32_t> *word, int op, uint32_t value, const timespec *timeout) {
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), op, value, timeout, nullptr, 0);
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// "/proc/<digits>/fd/<digits>", the only form a producer's segment path takes.
bool is_proc_fd_path(const std::string &p) {
  auto digits = [&](size_t &i) {
    const size_t start = i;
    while (i < p.size() && p[i] >= '0' && p[i] <= '9') ++i;
    return i > start && i - start <= 10;
  };
  if (p.rfind("/proc/", 0) != 0) return false;
  size_t i = 6;
  if (!digits(i) || p.compare(i, 4, "/fd/") != 0) return false;
  i += 4;
  return digits(i) && i == p.size();
}

}  // namespace

// One mapping of a segment in this process: the producer's own, or one a consumer opened.
struct shm_segment {
  std::byte *base = nullptr;
  size_t size = 0;
  uint64_t id = 0;
  // How other processes open it: our own /proc/PID/fd/FD, the producer's fd for its ring and our
  // fd for one we opened. A reference we pass on names our fd, which lives as long as this
  // process, not the producer's, which may be gone by the time a stage further down opens it.
  std::string path;
  int fd = -1;  // a segment we opened (a ring's fd belongs to the ring)

  segment_header *header() const { return reinterpret_cast<segment_header *>(base); }
  block_header *block_at(uint64_t block_offset) const {
    return reinterpret_cast<block_header *>(base + block_offset);
  }

  // The last hold of a block gone: the producer may reuse it. Wakes the producer only when it
  // sleeps (one atomic load otherwise).
  void release(block_header *b) const {
    if (b->holds.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    header()->generation.fetch_add(1, std::memory_order_release);
    if (header()->waiters.load(std::memory_order_acquire)) futex(&header()->generation, FUTEX_WAKE, INT_MAX, nullptr);
  }

  ~shm_segment() {
    if (base) ::munmap(base, size);
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// Every segment this process has mapped, so that a frame's address finds its segment (shm_share)
// and a reference finds its mapping by id (shm_frame_from_ref). Our own rings are held weakly (a
// ring lives while its session or frames use it); segments we opened are kept mapped, with their
// fd open, for the life of the process: a reference we passed on names our fd, and the stage
// that receives it may open it after our last record using it is gone. A stage serves one run,
// so this is one mapping per capture process that fed it.
struct registry {
  std::mutex mutex;
  std::vector<std::weak_ptr<shm_segment>> segments;
  std::vector<std::shared_ptr<shm_segment>> opened;

  void add(const std::shared_ptr<shm_segment> &s, bool keep) {
    std::lock_guard lock(mutex);
    std::erase_if(segments, [](const auto &w) { return w.expired(); });
    segments.push_back(s);
    if (keep) opened.push_back(s);
  }
  std::shared_ptr<shm_segment> containing(const void *p) {
    std::lock_guard lock(mutex);
    const auto *b = static_cast<const std::byte *>(p);
    for (const auto &w : segments)
      if (auto s = w.lock(); s && b >= s->base + header_page && b < s->base + s->size) return s;
    return nullptr;
  }
  std::shared_ptr<shm_segment> find(uint64_t id) {
    std::lock_guard lock(mutex);
    for (const auto &w : segments)
      if (auto s = w.lock(); s && s->id == id) return s;
    return nullptr;
  }
};

registry &the_registry() {
  static auto *r = new registry;  // never destroyed: frames may die during static destruction
  return *r;
}

// What a frame's free function gets: its mapping (kept alive) and its block.
struct frame_hold {
  std::shared_ptr<shm_segment> segment;
  block_header *block;
};

void release_frame(void *, void *hint) {
  auto *h = static_cast<frame_hold *>(hint);
  h->segment->release(h->block);
  delete h;
}

zmq::message_t frame_over(std::shared_ptr<shm_segment> segment, block_header *b) {
  auto *payload = reinterpret_cast<std::byte *>(b) + block_header_bytes;
  auto *hold = new frame_hold{std::move(segment), b};
  return zmq::message_t(payload, b->length, &release_frame, hold);
}

}  // namespace

bool shm_enabled() {
  const char *env = std::getenv("TPROBE_SHM");
  return !(env && (std::strcmp(env, "0") == 0 || std::strcmp(env, "off") == 0));
}

struct shm_ring::impl {
  std::shared_ptr<shm_segment> segment;
  int fd = -1;
  mutable std::mutex mutex;
  // Blocks in allocation order, oldest first (offsets from the segment base). Padding at the
  // ring's end, skipped when a block did not fit there, is an entry with pad = true.
  struct live_block {
    uint64_t offset, bytes;
    bool pad;
  };
  std::deque<live_block> live;
  uint64_t begin = header_page;  // first usable byte
  uint64_t end = 0;              // one past the last usable byte
  uint64_t head = header_page;   // where the next block goes
  uint64_t used = 0;             // bytes in live blocks and padding
  uint32_t gave_up_at = 0;       // the generation when the ring last gave up (see allocate)
  bool gave_up = false;
  // Read by counts() without the mutex, which an allocation holds while it waits.
  std::atomic<uint64_t> blocks{0}, bytes{0}, waits{0}, gave_up_count{0};

  void reclaim() {
    while (!live.empty()) {
      const live_block &f = live.front();
      if (!f.pad && segment->block_at(f.offset)->holds.load(std::memory_order_acquire) != 0) break;
      used -= f.bytes;
      live.pop_front();
    }
    if (live.empty()) head = begin, used = 0;
  }

  // Where a block of `bytes` fits now, or 0. May push a padding entry to wrap around.
  uint64_t place(uint64_t bytes) {
    if (live.empty()) {
      head = begin;
      return bytes <= end - begin ? begin : 0;
    }
    const uint64_t tail = live.front().offset;
    if (head > tail || (head == tail && used == 0)) {
      if (end - head >= bytes) return head;
      if (tail - begin >= bytes) {  // wrap: the rest of the ring's end becomes padding
        if (end > head) {
          live.push_back({head, end - head, true});
          used += end - head;
        }
        head = begin;
        return begin;
      }
      return 0;
    }
    if (head < tail && tail - head >= bytes) return head;
    return 0;
  }
};

shm_ring::shm_ring(size_t capacity) : impl_(std::make_unique<impl>()) {
  capacity = round_up(std::max(capacity, header_page + (size_t{1} << 20)), header_page);
  const int fd = ::memfd_create("tprobe-payloads", MFD_CLOEXEC);
  if (fd < 0) throw system_error_from_errno("create", "a shared-memory segment (memfd_create)", errno);
  if (::ftruncate(fd, static_cast<off_t>(capacity)) != 0) {
    const int e = errno;
    ::close(fd);
    throw system_error_from_errno("size", "a shared-memory segment", e);
  }
  void *base = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    throw system_error_from_errno("map", "a shared-memory segment", e);
  }
  auto seg = std::make_shared<shm_segment>();
  seg->base = static_cast<std::byte *>(base);
  seg->size = capacity;
  seg->id = std::random_device{}() | (static_cast<uint64_t>(std::random_device{}()) << 32);
  seg->path = fmt::format("/proc/{}/fd/{}", ::getpid(), fd);
  auto *h = new (base) segment_header{};
  std::memcpy(h->magic, segment_magic, sizeof segment_magic);
  h->id = seg->id;
  h->capacity = capacity;
  impl_->segment = seg;
  impl_->fd = fd;
  impl_->end = capacity;
  the_registry().add(seg, false);
}

shm_ring::~shm_ring() {
  // Frames still in flight keep the mapping (they hold the segment); consumers that opened the
  // fd keep the memory. Closing our fd only stops new consumers from opening it.
  if (impl_->fd >= 0) ::close(impl_->fd);
}

std::optional<zmq::message_t> shm_ring::allocate(size_t size, const std::function<bool()> &keep_waiting,
                                                 int patience_ms) {
  auto &m = *impl_;
  const uint64_t bytes = round_up(block_header_bytes + size, block_align);
  std::unique_lock lock(m.mutex);
  if (bytes > (m.end - m.begin) / 2) return std::nullopt;
  segment_header *sh = m.segment->header();
  using clock = std::chrono::steady_clock;
  auto last_progress = clock::now();
  bool waited = false;
  for (;;) {
    const uint32_t generation = sh->generation.load(std::memory_order_acquire);
    m.reclaim();
    if (const uint64_t at = m.place(bytes)) {
      auto *b = new (m.segment->base + at) block_header{};
      b->magic = block_magic;
      b->holds.store(1, std::memory_order_relaxed);
      b->bytes = bytes;
      b->length = size;
      m.live.push_back({at, bytes, false});
      m.used += bytes;
      m.head = at + bytes;
      m.gave_up = false;
      m.blocks.fetch_add(1, std::memory_order_relaxed);
      m.bytes.fetch_add(size, std::memory_order_relaxed);
      return frame_over(m.segment, b);
    }
    // Full. A consumer that released nothing since we last gave up still holds on: do not wait
    // for it again (the socket takes the payload), until it releases something.
    if (m.gave_up && generation == m.gave_up_at) {
      m.gave_up_count.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    if (!waited) m.waits.fetch_add(1, std::memory_order_relaxed), waited = true;
    const auto now = clock::now();
    if (now - last_progress >= std::chrono::milliseconds(patience_ms) || (keep_waiting && !keep_waiting())) {
      m.gave_up = true;
      m.gave_up_at = generation;
      m.gave_up_count.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    sh->waiters.fetch_add(1, std::memory_order_acq_rel);
    if (sh->generation.load(std::memory_order_acquire) == generation) {
      const auto left = std::chrono::milliseconds(patience_ms) - (now - last_progress);
      const auto wait = std::min<clock::duration>(left, std::chrono::milliseconds(250));
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
      timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      futex(&sh->generation, FUTEX_WAIT, generation, &ts);
    }
    sh->waiters.fetch_sub(1, std::memory_order_acq_rel);
    if (sh->generation.load(std::memory_order_acquire) != generation) last_progress = clock::now();
  }
}

std::string shm_ring::path() const { return impl_->segment->path; }
uint64_t shm_ring::id() const { return impl_->segment->id; }
size_t shm_ring::capacity() const { return impl_->segment->size; }
shm_ring_counts shm_ring::counts() const {
  return {impl_->blocks.load(), impl_->bytes.load(), impl_->waits.load(), impl_->gave_up_count.load()};
}

std::optional<record_shm_ref> shm_share(const zmq::message_t &frame) {
  if (frame.size() == 0) return std::nullopt;
  auto segment = the_registry().containing(frame.data());
  if (!segment) return std::nullopt;
  const auto *payload = static_cast<const std::byte *>(frame.data());
  const uint64_t offset = static_cast<uint64_t>(payload - segment->base);
  if (offset < header_page + block_header_bytes) return std::nullopt;
  block_header *b = segment->block_at(offset - block_header_bytes);
  // Only a frame over a whole block is one of ours (not, say, a slice some stage made).
  if (b->magic != block_magic || b->length != frame.size()) return std::nullopt;
  b->holds.fetch_add(1, std::memory_order_relaxed);  // we hold it already: it cannot be freed meanwhile
  return record_shm_ref{segment->path, segment->id, offset};
}

void shm_unshare(const record_shm_ref &ref) {
  auto segment = the_registry().find(ref.id);
  if (segment) segment->release(segment->block_at(ref.offset - block_header_bytes));
}

zmq::message_t shm_frame_from_ref(const record_shm_ref &ref, uint64_t length) {
  auto segment = the_registry().find(ref.id);
  if (!segment) {
    static std::mutex open_mutex;  // two threads mapping the same segment map it once
    std::lock_guard lock(open_mutex);
    segment = the_registry().find(ref.id);
    if (!segment) {
      // A reference names a producer's memfd and nothing else: a record must not make a stage
      // open an arbitrary file (or block on a FIFO or a device).
      if (!is_proc_fd_path(ref.path))
        throw framing_error(fmt::format("shm reference names \"{}\", not a /proc/PID/fd/FD segment", ref.path));
      const int fd = ::open(ref.path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
      if (fd < 0) throw system_error_from_errno("open", "shared-memory segment " + ref.path, errno);
      struct stat st{};
      void *base = MAP_FAILED;
      errno = 0;
      if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) >= header_page)
        base = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      else if (errno == 0)
        errno = EINVAL;  // not a segment: a directory, a device, a file shorter than a header
      const int e = errno;
      if (base == MAP_FAILED) {
        ::close(fd);
        throw system_error_from_errno("map", "shared-memory segment " + ref.path, e);
      }
      auto seg = std::make_shared<shm_segment>();
      seg->base = static_cast<std::byte *>(base);
      seg->size = static_cast<size_t>(st.st_size);
      seg->fd = fd;
      seg->path = fmt::format("/proc/{}/fd/{}", ::getpid(), fd);
      const segment_header *h = seg->header();
      if (std::memcmp(h->magic, segment_magic, sizeof segment_magic) != 0 || h->id != ref.id ||
          h->capacity != seg->size)
        throw framing_error(fmt::format("shm reference to {}: not the segment {:x} it names (a stale path?)",
                                        ref.path, ref.id));
      seg->id = ref.id;
      the_registry().add(seg, true);
      segment = std::move(seg);
    }
  }
  if (ref.offset < header_page + block_header_bytes || ref.offset % block_align != 0 ||
      ref.offset > segment->size || length > segment->size - ref.offset)
    throw framing_error(fmt::format("shm reference {}+{} of {} bytes lies outside its segment", ref.path,
                                    ref.offset, length));
  block_header *b = segment->block_at(ref.offset - block_header_bytes);
  if (b->magic != block_magic || b->length != length || b->holds.load(std::memory_order_acquire) == 0)
    throw framing_error(fmt::format("shm reference {}+{}: no live block of {} bytes there", ref.path, ref.offset,
                                    length));
  return frame_over(std::move(segment), b);
}

}  // namespace tprobe
