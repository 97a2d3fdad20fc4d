// Shared-memory payloads (transport/shm.h, record.h key shm): the ring's allocation, wrap-around,
// release in any order and backpressure that never wedges the producer; references checked
// before use; and stage_io passing a payload by reference along a chain of stages, so that the
// last stage reads the very memory the producer wrote.
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "stage_io.h"
#include "errors.h"
#include "record.h"
#include "shm.h"
#include "test_support.h"

using namespace tprobe;

namespace {

constexpr size_t MiB = size_t{1} << 20;

void fill(zmq::message_t &f, unsigned char byte) { std::memset(f.data(), byte, f.size()); }

bool all_bytes(const void *p, size_t n, unsigned char byte) {
  const auto *b = static_cast<const unsigned char *>(p);
  for (size_t i = 0; i < n; ++i)
    if (b[i] != byte) return false;
  return true;
}

// Producer → forwarding stage → sink, over ipc, each stage on a thread of its own reading by
// next() or, with by_next false, by receive(); sink_sees gets every record at the sink. A
// producer sends to fwd_in; join() waits for both stages to see the end of the stream.
struct stage_chain {
  test::temp_dir dir;
  zmq::context_t ctx;
  std::string fwd_in;
  std::thread sink, forward;

  stage_chain(bool by_next, std::function<void(const record &)> sink_sees) {
    std::atomic<bool> ready{false};
    std::string sink_in;
    sink = std::thread([&, by_next, sink_sees] {
      stage_io io(ctx, options("sink", {}));
      sink_in = io.input_endpoint();
      ready = true;
      if (by_next) {
        while (record *r = io.next()) sink_sees(*r);
      } else {
        while (auto r = io.receive()) sink_sees(*r);
      }
    });
    while (!ready) std::this_thread::yield();
    ready = false;
    forward = std::thread([&, by_next, out = sink_in] {
      stage_io io(ctx, options("forwarder", {out}));
      fwd_in = io.input_endpoint();
      ready = true;
      if (by_next) {
        while (record *r = io.next()) io.send(*r);
      } else {
        while (auto r = io.receive()) io.send(*r);
      }
      io.finish();
    });
    while (!ready) std::this_thread::yield();
  }
  void join() {
    forward.join();
    sink.join();
  }

 private:
  stage_io_options options(const std::string &name, std::vector<std::string> outputs) {
    stage_io_options o;
    o.input = test::ipc_endpoint(dir, name + ".in");
    o.outputs = std::move(outputs);
    o.producer_name = name;
    return o;
  }
};

}  // namespace

TEST(ShmRing, frames_live_in_the_segment_until_released_then_the_space_returns) {
  shm_ring ring(16 * MiB);
  EXPECT_EQ(ring.path().rfind("/proc/", 0), 0u);
  std::vector<zmq::message_t> frames;
  for (int i = 0; i < 7; ++i) {
    auto f = ring.allocate(2 * MiB, {}, 50);
    ASSERT_TRUE(f) << i;
    fill(*f, static_cast<unsigned char>(i + 1));
    frames.push_back(std::move(*f));
  }
  // 7 x 2 MiB (+ block headers) of 16 MiB: two more do not fit; nothing is released, so the ring
  // gives up after its patience instead of waiting for ever.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(ring.allocate(3 * MiB, {}, 50));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // Given up once: the next full allocation does not wait again until something is released.
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_FALSE(ring.allocate(3 * MiB, {}, 10000));
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(2));
  EXPECT_EQ(ring.counts().gave_up, 2u);
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(all_bytes(frames[i].data(), frames[i].size(), static_cast<unsigned char>(i + 1)));
  frames.clear();
  auto big = ring.allocate(7 * MiB, {}, 50);  // everything came back
  EXPECT_TRUE(big);
  EXPECT_FALSE(ring.allocate(9 * MiB, {}, 50)) << "more than half the ring never goes in it";
}

TEST(ShmRing, blocks_come_back_in_order_whatever_order_they_are_released_in) {
  shm_ring ring(8 * MiB);
  auto a = ring.allocate(3 * MiB, {}, 20);
  auto b = ring.allocate(3 * MiB, {}, 20);
  ASSERT_TRUE(a && b);
  b.reset();  // the newer one first: its space waits for the older one
  EXPECT_FALSE(ring.allocate(3 * MiB, {}, 20));
  a.reset();
  auto c = ring.allocate(3 * MiB, {}, 20);
  ASSERT_TRUE(c);
  fill(*c, 7);
  auto d = ring.allocate(3 * MiB, {}, 20);
  ASSERT_TRUE(d);
  // Wrap-around: release the older, allocate again; the data of the live block is intact.
  fill(*d, 9);
  c.reset();
  auto e = ring.allocate(3 * MiB, {}, 20);
  ASSERT_TRUE(e);
  fill(*e, 5);
  EXPECT_TRUE(all_bytes(d->data(), d->size(), 9));
}

TEST(ShmRing, a_full_ring_waits_for_a_release_from_another_thread) {
  shm_ring ring(8 * MiB);
  auto a = ring.allocate(3 * MiB, {}, 20);
  auto b = ring.allocate(3 * MiB, {}, 20);
  ASSERT_TRUE(a && b);
  std::thread releaser([&] {
    while (ring.counts().waits == 0) std::this_thread::yield();  // the allocation below sleeps
    a.reset();
  });
  auto c = ring.allocate(3 * MiB, {}, 60000);  // woken by the release, long before its patience
  releaser.join();
  EXPECT_TRUE(c);
  EXPECT_EQ(ring.counts().gave_up, 0u);
}

TEST(ShmRing, keep_waiting_false_ends_the_wait) {
  shm_ring ring(8 * MiB);
  auto a = ring.allocate(3 * MiB, {}, 20);
  auto b = ring.allocate(3 * MiB, {}, 20);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(ring.allocate(3 * MiB, [] { return false; }, 60000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(ShmRef, a_shared_frame_names_the_same_memory_and_holds_it) {
  shm_ring ring(8 * MiB);
  auto a = ring.allocate(3 * MiB, {}, 20);
  ASSERT_TRUE(a);
  fill(*a, 3);
  auto ref = shm_share(*a);
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->path, ring.path());
  EXPECT_EQ(ref->id, ring.id());
  zmq::message_t other = shm_frame_from_ref(*ref, 3 * MiB);
  EXPECT_EQ(other.data(), a->data());
  a.reset();  // the reference's hold keeps the block
  auto b = ring.allocate(3 * MiB, {}, 20);
  ASSERT_TRUE(b);
  EXPECT_FALSE(ring.allocate(3 * MiB, {}, 20));
  EXPECT_TRUE(all_bytes(other.data(), other.size(), 3));
  other = zmq::message_t();
  EXPECT_TRUE(ring.allocate(3 * MiB, {}, 20));

  zmq::message_t heap(std::string(100000, 'x'));
  EXPECT_FALSE(shm_share(heap)) << "memory outside every segment has no reference";
}

TEST(ShmRef, bad_references_are_framing_errors_not_reads) {
  shm_ring ring(8 * MiB);
  auto a = ring.allocate(MiB, {}, 20);
  ASSERT_TRUE(a);
  auto ref = shm_share(*a);
  ASSERT_TRUE(ref);
  EXPECT_THROW(shm_frame_from_ref(*ref, MiB + 1), framing_error);  // not the block's length
  record_shm_ref outside = *ref;
  outside.offset = 64 * MiB;
  EXPECT_THROW(shm_frame_from_ref(outside, MiB), framing_error);
  record_shm_ref misaligned = *ref;
  misaligned.offset += 8;
  EXPECT_THROW(shm_frame_from_ref(misaligned, MiB), framing_error);
  // The right path with another id: the file is opened and mapped, and its id does not match.
  record_shm_ref stale = *ref;
  stale.id ^= 1;
  EXPECT_THROW(shm_frame_from_ref(stale, MiB), framing_error);
  // A segment this process has not mapped (another id) is opened by its path, which must be a
  // producer's /proc/PID/fd/FD.
  for (const char *path : {"/etc/passwd", "/proc/self/fd/0", "/proc/1/fd/../../self/fd/3", "/dev/zero"}) {
    record_shm_ref elsewhere = *ref;
    elsewhere.id ^= 2;
    elsewhere.path = path;
    EXPECT_THROW(shm_frame_from_ref(elsewhere, MiB), framing_error) << path;
  }
  record_shm_ref missing = *ref;
  missing.id ^= 2;
  missing.path = "/proc/" + std::to_string(::getpid()) + "/fd/999999";
  EXPECT_THROW(shm_frame_from_ref(missing, MiB), system_error);
  shm_unshare(*ref);
}

TEST(ShmRecord, header_key_round_trips_and_never_comes_with_a_frame) {
  record_header h = record_header_of(record_kind::tensor);
  h.type = dtype::float32;
  h.shape = {4, 65536};
  h.length = 4 * 65536 * 4;
  h.shm = record_shm_ref{"/proc/12/fd/7", 0xfeedfacecafebeefull, 4096 + 64};
  auto frame = record_header_encode(h);
  record_header back = record_header_decode({static_cast<const std::byte *>(frame.data()), frame.size()});
  ASSERT_TRUE(back.shm);
  EXPECT_EQ(back.shm->path, "/proc/12/fd/7");
  EXPECT_EQ(back.shm->id, 0xfeedfacecafebeefull);
  EXPECT_EQ(back.shm->offset, 4160u);
  EXPECT_EQ(back.length, h.length);
  EXPECT_FALSE(back.stored);

  record_header wrong = h;
  wrong.shape = {3};  // length no longer matches the tensor
  auto f2 = record_header_encode(wrong);
  EXPECT_THROW(record_header_decode({static_cast<const std::byte *>(f2.data()), f2.size()}), framing_error);
  record_header both = h;
  both.stored = h.length;
  EXPECT_THROW(record_header_encode(both), std::logic_error);
}

// Producer → forwarding stage → sink, over ipc: the sink reads the producer's memory itself (the
// same address, in this one process), small payloads still travel as bytes, and once every
// record is gone the ring is empty again.
TEST(ShmStageIo, payloads_cross_a_chain_of_stages_by_reference) {
  std::vector<const void *> sink_saw;
  std::vector<bool> sink_ok;
  stage_chain chain(false, [&](const record &r) {
    const auto bytes = r.payload_bytes();
    sink_saw.push_back(bytes.data());
    sink_ok.push_back(all_bytes(bytes.data(), bytes.size(), static_cast<unsigned char>(r.header.seq)));
  });

  shm_ring ring(32 * MiB);
  std::vector<const void *> sent;
  {
    record_sender producer(chain.ctx, chain.fwd_in, "capture");
    ASSERT_TRUE(producer.shares_memory());
    for (uint64_t i = 1; i <= 40; ++i) {
      record r(record_kind::tensor);
      r.header.seq = i;
      r.header.type = dtype::uint8;
      const size_t n = i % 4 == 0 ? 1000 : 3 * MiB;  // every fourth small, as bytes
      r.header.shape = {static_cast<int64_t>(n)};
      zmq::message_t f;
      if (n >= SHM_MIN_PAYLOAD) {
        auto a = ring.allocate(n, {}, 5000);  // 40 x 3 MiB through 32 MiB: waits for releases
        ASSERT_TRUE(a) << i;
        f = std::move(*a);
      } else {
        f = zmq::message_t(n);
      }
      fill(f, static_cast<unsigned char>(i));
      sent.push_back(f.data());
      r.set_payload_frame(std::move(f));
      producer.send(r);
    }
    producer.finish(40, 0);
  }
  chain.join();
  ASSERT_EQ(sink_saw.size(), 40u);
  for (size_t i = 0; i < 40; ++i) {
    EXPECT_TRUE(sink_ok[i]) << i;
    if ((i + 1) % 4 == 0) EXPECT_NE(sink_saw[i], sent[i]) << "small payloads are copied";
    else EXPECT_EQ(sink_saw[i], sent[i]) << "large payloads are the producer's memory";
  }
  EXPECT_EQ(ring.counts().gave_up, 0u);
  EXPECT_TRUE(ring.allocate(15 * MiB, {}, 20)) << "every hold was released";
}

// A stage reading by next() holds the record it was handed only until it asks for the next one:
// a payload still held while the stage waits would leave the producer waiting for that space,
// and the stage for the producer.
TEST(ShmStageIo, next_lets_go_of_the_last_payload_before_it_waits) {
  std::vector<bool> sink_ok;
  stage_chain chain(true, [&](const record &r) {
    const auto bytes = r.payload_bytes();
    sink_ok.push_back(all_bytes(bytes.data(), bytes.size(), static_cast<unsigned char>(r.header.seq)));
  });

  // Record 1's block, then two more: the second of them fits only where record 1's block was
  // (the ring's space comes back in order), so it waits for both stages to let go of record 1
  // while they wait for record 2, which is sent only after it.
  shm_ring ring(8 * MiB);
  auto record_of = [](uint64_t seq, zmq::message_t frame) {
    record r(record_kind::tensor);
    r.header.seq = seq;
    r.header.type = dtype::uint8;
    r.header.shape = {static_cast<int64_t>(frame.size())};
    fill(frame, static_cast<unsigned char>(seq));
    r.set_payload_frame(std::move(frame));
    return r;
  };
  bool waited_for_release = false;
  {
    record_sender producer(chain.ctx, chain.fwd_in, "capture");
    EXPECT_TRUE(producer.shares_memory());
    auto first = ring.allocate(3 * MiB);
    EXPECT_TRUE(first);
    producer.send(record_of(1, first ? std::move(*first) : zmq::message_t(3 * MiB)));
    auto second = ring.allocate(3 * MiB);
    auto third = ring.allocate(3 * MiB, {}, 5000);
    waited_for_release = second && third;
    producer.send(record_of(2, second ? std::move(*second) : zmq::message_t(3 * MiB)));
    producer.send(record_of(3, third ? std::move(*third) : zmq::message_t(3 * MiB)));
    producer.finish(3, 0);
  }
  chain.join();
  EXPECT_TRUE(waited_for_release) << "a stage held record 1's payload while it waited for record 2";
  ASSERT_EQ(sink_ok.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(sink_ok[i]) << i;
}

// TPROBE_SHM=off: the same chain with bytes only (the switch for comparisons).
TEST(ShmStageIo, switched_off_the_consumer_does_not_offer_it) {
  setenv("TPROBE_SHM", "off", 1);
  test::temp_dir dir;
  zmq::context_t ctx;
  std::atomic<bool> ready{false};
  std::string in;
  std::thread sink([&] {
    stage_io_options o;
    o.input = test::ipc_endpoint(dir, "sink.in");
    o.producer_name = "sink";
    stage_io io(ctx, o);
    in = io.input_endpoint();
    ready = true;
    while (io.receive()) {
    }
  });
  while (!ready) std::this_thread::yield();
  {
    record_sender producer(ctx, in, "capture");
    EXPECT_FALSE(producer.shares_memory());
    producer.finish(0, 0);
  }
  sink.join();
  unsetenv("TPROBE_SHM");
}
