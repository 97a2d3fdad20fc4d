// quiet_thread.h: threads that never take the process's signals.
//
// A process-directed signal (SIGINT from a terminal, SIGTERM from `tprobe run` or a job
// scheduler) goes to one thread that does not block it: Linux tries the main thread first, but
// takes another when the main thread blocks the signal for a while or has one pending. It must
// reach the thread that waits for it: Python's main thread in a training process, which the
// signal wakes from a blocking call (time.sleep, a DataLoader's queue) to raise KeyboardInterrupt
// at once; a stage's main thread, whose handler (installed without SA_RESTART, stage_io.cpp) ends
// a blocking call with EINTR. Delivered to a helper asleep on a condition variable, it would
// interrupt nothing, and the process would react only when its main thread next looked. ZeroMQ
// starts its I/O threads this way for the same reason; tprobe's own threads (the capture's sender
// and part readers, the control listener) are started with quiet_thread.
#pragma once

#include <csignal>
#include <thread>
#include <utility>

#include <pthread.h>

namespace tprobe {

// std::thread(f) with every signal blocked in the new thread, which inherits its creator's mask
// at creation; the creator's own mask is restored before this returns, also when creation throws.
// (The synchronous signals of a fault, SIGSEGV and the like, still end the process.)
template <class F>
std::thread quiet_thread(F &&f) {
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  struct restore_mask {
    const sigset_t &mask;
    ~restore_mask() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{previous};
  return std::thread(std::forward<F>(f));
}

}  // namespace tprobe
