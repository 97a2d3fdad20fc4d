// The capture session's queue (session.h): records handed from the training thread to the sender
// thread, which batches them, sends them on every link and hands spent records back for reuse;
// the wake-up policy between the two; and detaching when the pipeline stops reading. Apart from
// the captures that fill the queue (session_capture.cpp): this is the only code of the sender
// thread.
#include <cmath>
#include <cstdio>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>

#include "monitor_record.h"
#include "session.h"

using namespace tprobe;

bool tprobe_session::enqueue(record &&r, bool urgent) {
  return enqueue(std::make_unique<pending>(pending{std::move(r), {}}), urgent);
}

bool tprobe_session::enqueue(pending_ptr &&p, bool urgent) {
  const size_t size = p->r.has_payload() ? *p->r.header.stored : 0;
  // Spent records are kept for reuse, or freed, after the lock is released (declared before
  // it, destroyed after).
  struct keep_recycled {
    std::vector<pending_ptr> &spent_records, &reusable_records;
    ~keep_recycled() {
      if (spent_records.empty()) return;
      if (reusable_records.empty()) {
        reusable_records.swap(spent_records);
      } else {
        // Pointers: cheap to move, so none is freed while there is room for it.
        const size_t room = reusable_max > reusable_records.size() ? reusable_max - reusable_records.size() : 0;
        const size_t kept = std::min(room, spent_records.size());
        std::move(spent_records.begin(), spent_records.begin() + static_cast<std::ptrdiff_t>(kept),
                  std::back_inserter(reusable_records));
      }
      if (reusable_records.size() > reusable_max) reusable_records.resize(reusable_max);
      spent_records.clear();  // what is left goes, the storage stays
    }
  } after_unlock{recycled, reusable};
  std::unique_lock lock(mutex);
  if (!spent.empty()) spent.swap(recycled);
  if (sender_error) std::rethrow_exception(sender_error);
  if (detached.load(std::memory_order_relaxed)) {
    ++counts.undelivered;
    return false;
  }
  if (!queue.empty() && queued_bytes + size > options.queue_bytes) {
    ++counts.waits;
    producer_waiting = true;
    not_empty.notify_one();  // a full queue is worth a wake-up
    // Bounded: the sender detaches when the pipeline stops reading (pipeline_timeout_ms).
    has_space.wait(lock, [&] {
      return queue.empty() || queued_bytes + size <= options.queue_bytes || sender_error || detached.load();
    });
    producer_waiting = false;
    if (sender_error) std::rethrow_exception(sender_error);
    if (detached.load()) {
      ++counts.undelivered;
      return false;
    }
  }
  queued_bytes += size;
  p->r.header.seq = ++seq;
  queue.push_back(std::move(p));
  ++counts.records;
  if (sender_waiting &&
      (urgent || sender_deep_sleep || queue.size() >= wake_records || queued_bytes >= wake_bytes))
    not_empty.notify_one();
  return true;
}

void tprobe_session::detach(const std::string &reason, uint64_t lost_in_batch) {
  int64_t first_lost;
  {
    std::lock_guard lock(mutex);
    counts.undelivered += queue.size() + lost_in_batch;
    first_lost = first_step_not_dumped = step_delivered + 1;
    queue.clear();
    queued_bytes = 0;
    detach_reason = reason;
    detached.store(true);
    has_space.notify_all();
  }
  for (auto &s : senders) s->abandon();
  std::fprintf(stderr,
               "tprobe: warning: the pipeline stopped reading (%s): no step from step %lld on is dumped; the "
               "capture is detached and training goes on\n",
               reason.c_str(), static_cast<long long>(first_lost));
}

void tprobe_session::throw_detached() {
  std::lock_guard lock(mutex);
  throw system_error(fmt::format("the capture is detached from its pipeline ({}): no step from step {} on is dumped",
                                 detach_reason, first_step_not_dumped));
}

void tprobe_session::sender_loop() {
  try {
    std::vector<pending_ptr> batch;
    int idle_naps = 0;
    bool holding = false;  // a link keeps an open batch (flush_after_naps)
    // Sends every link's open batch; false once the session has detached.
    auto flush_links = [&] {
      try {
        for (auto &s : senders) s->flush();
        return true;
      } catch (const consumer_lost_error &e) {
        detach(e.what(), unsent_records());
        return false;
      }
    };
    for (;;) {
      bool flush_due = false;
      {
        std::unique_lock lock(mutex);
        while (queue.empty() && !closing) {
          if (holding && idle_naps >= flush_after_naps) {
            flush_due = true;  // sent below, without the lock: a send may block
            break;
          }
          sender_waiting = true;
          if (idle_naps >= deep_sleep_after) {
            sender_deep_sleep = true;
            not_empty.wait(lock);
          } else if (not_empty.wait_for(lock, sender_nap) == std::cv_status::timeout && queue.empty()) {
            ++idle_naps;
          }
          sender_waiting = sender_deep_sleep = false;
        }
        if (!flush_due && queue.empty()) {
          if (!holding) return;  // closing, and everything sent
          flush_due = true;      // closing: the open batch goes first
        } else if (!flush_due) {
          idle_naps = 0;
          batch.swap(queue);  // one lock for everything that piled up
          // An empty queue lets a waiting producer in (a payload larger than the whole budget
          // waits for exactly that), and records without payload release no bytes to wake it.
          if (producer_waiting) has_space.notify_one();
        }
      }
      if (flush_due) {
        if (!flush_links()) return;
        holding = false;
        continue;
      }
      bool control = false;  // a stop or step went by: flush now
      int64_t step_ended = -1;  // the batch's last step_end: delivered once the flush below went
      for (size_t i = 0; i < batch.size(); ++i) {
        record &r = batch[i]->r;
        const size_t size = r.has_payload() ? *r.header.stored : 0;
        control = control || r.header.kind == record_kind::flush || r.header.kind == record_kind::step_end;
        if (r.header.kind == record_kind::step_end) step_ended = r.header.step;
        if (options.lz4 && r.has_payload() && r.header.codec == record_codec::raw) {
          if (auto packed = record_payload_lz4(r.payload_bytes())) {
            const uint64_t length = r.header.length;
            r.header.codec = record_codec::lz4;
            r.set_payload_frame(std::move(*packed));
            r.header.length = length;
          }
        }
        try {
          if (is_step_barrier(r)) {
            for (auto &s : senders) (void)s->sync(record(r.header));
            std::lock_guard lock(mutex);
            barriers_done = r.header.meta["barrier"].get<uint64_t>();
            has_space.notify_all();
          } else if (batch[i]->monitor_template) {
            // capture_monitor_values' numbers, checked there against this template.
            monitor_rows rows = *batch[i]->monitor_template;
            rows.step = r.header.step;
            const double *v = batch[i]->monitor_values.data();
            for (auto &row : rows.rows)
              for (auto &cell : row.values) {
                cell.value = *v++;
                cell.integer = cell.integer && !std::isnan(cell.value);  // an int column's NaN stays a float
              }
            r = monitor_record_make(std::move(r.header), batch[i]->monitor_prefix, rows);
            for (auto &s : senders) s->send(r);
            r.header.meta = nullptr;  // the rows' tree, made on this thread, is freed on it
          } else if (!batch[i]->value_json.empty()) {
            // Checked by capture_value unless the caller vouched for it; packed from its text
            // as the record is encoded, with no tree in between.
            r.header.meta = record_meta_text(batch[i]->value_json);
            try {
              for (auto &s : senders) s->send(r);
            } catch (const std::invalid_argument &e) {  // tprobe_capture_value_unchecked's
              throw usage_error(fmt::format("{} {}: value is not valid JSON: {}", r.header.entry, r.header.slot,
                                            e.what()));
            }
            r.header.meta = nullptr;
          } else {
            for (auto &s : senders) s->send(r);
          }
        } catch (const consumer_lost_error &e) {
          detach(e.what(), batch.size() - i + unsent_records());
          return;
        }
        r.drop_payload();  // our reference to the payload goes now, not at the end of the batch
        // Only bytes count against the queue's budget: a record without a payload (most of
        // them: statistics in place) frees nothing a waiting producer could use, and taking the
        // lock for it made the training thread's next enqueue wait on this thread.
        if (size == 0) continue;
        std::lock_guard lock(mutex);
        queued_bytes -= size;
        if (producer_waiting) has_space.notify_one();
      }
      {
        // Back to the training thread, which frees them at its next capture.
        std::lock_guard lock(mutex);
        if (spent.empty()) spent.swap(batch);
      }
      batch.clear();
      // Small records wait in a link's batch (record.h "Batches") while more follow: a nap
      // that brings none sends them (flush_after_naps), as do a control record and closing.
      if (control && !flush_links()) return;
      if (step_ended >= 0) {
        std::lock_guard lock(mutex);
        step_delivered = step_ended;
      }
      holding = unsent_records() > 0;
    }
  } catch (...) {
    std::lock_guard lock(mutex);
    sender_error = std::current_exception();
    has_space.notify_all();
  }
}

uint64_t tprobe_session::unsent_records() const {
  size_t n = 0;
  for (const auto &s : senders) n = std::max(n, s->unsent_records());
  return n;
}

bool tprobe_session::is_step_barrier(const record &r) {
  return r.header.kind == record_kind::step_end && record_is_barrier(r.header);
}
