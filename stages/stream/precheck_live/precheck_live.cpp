#include "precheck_live.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "dump_semantics.h"
#include "errors.h"
#include "quiet_thread.h"
#include "record_leaf.h"

namespace tprobe {

const stage_description &precheck_live_stage_description() {
  static const stage_description d = [] {
    stage_description d{
        "precheck-live",
        "replay every API call of the stream on the CPU one precision higher and judge it by msprobe's standards "
        "(run_ut), live; the CSV files of tprobe precheck at the end",
        true,
        true,
        {
            {"output-dir", "string", "./output", "folder for step{S}/rank{R}/accuracy_checking_{result,details}_{ts}.csv"},
            {"jobs", "int", "1", "APIs replayed in parallel (one core each, at nice +10)", 1, 1024},
            {"max-buffer-mib", "int", "1024",
             "tensor data held for calls not yet replayed; past it whole calls are skipped (sampled) and counted", 0,
             1048576},
        }};
    const auto &shared = precheck::precheck_run_option_specs();  // the run's options, as tprobe-precheck's
    d.options.insert(d.options.end(), shared.begin(), shared.end());
    return d;
  }();
  return d;
}

namespace {

using json = nlohmann::ordered_json;
namespace pc = precheck;

// One API call ("Functional.gelu.0") as it is assembled: its forward and backward entries as the
// writer puts them in dump.json, and the data of its saved tensors by data_name.
struct api_call {
  std::string name;
  json forward, backward;  // null until the entry exists
  std::unordered_map<std::string, at::Tensor> tensors;
  uint64_t bytes = 0;             // payload bytes held in `tensors`
  bool collective = false;        // Distributed.*: its output comes late; waits for the step's end
  bool expects_backward = false;  // a forward output requires grad
  bool forward_ended = false;
  bool decided = false;   // wanted() asked (a row slot made, or not wanted)
  bool handed = false;    // to the replay, or dropped: later records are late
  bool dropped = false;   // fell behind
  struct row_slot *slot = nullptr;
};

// A dump folder of the stream, step{S}/rank{R}: its calls in arrival order and its files.
struct folder {
  int64_t step = 0;
  int32_t rank = -1;
  std::unique_ptr<pc::precheck_run> run;  // made at its first wanted call
  std::vector<std::shared_ptr<api_call>> calls;
  std::unordered_map<std::string, std::shared_ptr<api_call>> by_name;
  bool ended = false;
};

// A row to write, in the order wanted() was asked.
struct row_slot {
  folder *f = nullptr;
  std::shared_ptr<api_call> call;
  std::optional<pc::api_judgement> judgement;
  bool done = false;  // judged, or nothing to write (dropped, failed)
};

struct session_facts {
  std::string framework = "pytorch";
  std::string tensor_format = "npy";
  data_mode_filter data_mode;
  stats_options stats;
};

// The tensors of one call, served to the replay by data_name. A fresh copy per load, as a file is
// read afresh offline: the replay may write into what it is given (an in-place operator).
class memory_source : public pc::tensor_source {
 public:
  explicit memory_source(const std::unordered_map<std::string, at::Tensor> &tensors) : tensors_(tensors) {}
  std::optional<at::Tensor> load(const json &entry) override {
    std::string name = entry.value("data_name", "");
    if (name.empty()) name = entry.value("datapath", "");
    if (name.empty() || name == "-1") return std::nullopt;
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) throw usage_error("the stream names " + name + " but sent no data for it");
    return it->second.clone();
  }

 private:
  const std::unordered_map<std::string, at::Tensor> &tensors_;
};

// "Functional.gelu.0" of an API entry ("Functional.gelu.0.forward"); nullopt for what is not an API
// call of a dump.json that tprobe-precheck reads: modules (any name with "Module", as offline),
// parameter gradients, debug saves.
struct api_entry {
  std::string call;
  bool forward;
};
std::optional<api_entry> api_entry_of(const std::string &entry) {
  if (entry.find("Module") != std::string::npos) return std::nullopt;
  if (entry.ends_with(".forward")) return api_entry{entry.substr(0, entry.size() - 8), true};
  if (entry.ends_with(".backward")) return api_entry{entry.substr(0, entry.size() - 9), false};
  return std::nullopt;
}

class live_precheck {
 public:
  live_precheck(stage_io &io, const precheck_live_options &o) : io_(io), o_(o) {}

  precheck_live_result run() {
    const unsigned jobs = std::max(1u, o_.jobs);
    if (jobs > 1) at::set_num_threads(1);  // parallel over APIs, not inside each operator (as offline)
    for (unsigned i = 0; i < jobs; ++i) workers_.push_back(quiet_thread([this] { work(); }));
    writer_ = quiet_thread([this] { write_rows(); });
    try {
      while (record *r = io_.next()) {
        ++res_.records;
        handle(*r);
        send_event();
      }
      // End of the stream: every folder is as complete as it will be.
      for (auto &[key, f] : folders_) end_folder(f);
    } catch (...) {
      stop_workers();
      throw;
    }
    stop_workers();
    send_event();
    io_.finish();
    if (failure_) std::rethrow_exception(failure_);
    for (auto &[key, f] : folders_) {
      if (!f.run) continue;
      const auto &c = f.run->counts();
      res_.counts.pass += c.pass;
      res_.counts.warning += c.warning;
      res_.counts.error += c.error;
      res_.counts.skip += c.skip;
      if (!res_.counts.first_not_pass && c.first_not_pass)
        res_.counts.first_not_pass = fmt::format("step {} rank {} {}", f.step, f.rank, *c.first_not_pass);
      res_.folders.push_back({f.step, f.rank, f.run->files().result_path().string(),
                              f.run->files().details_path().string()});
    }
    res_.peak_buffer_bytes = peak_;
    return std::move(res_);
  }

 private:
  void handle(record &r) {
    const auto &h = r.header;
    switch (h.kind) {
      case record_kind::session: {
        session_facts s;
        const json &m = h.meta;
        if (m.is_object()) {
          if (auto it = m.find("framework"); it != m.end() && it->is_string()) s.framework = it->get<std::string>();
          if (auto it = m.find("tensor_format"); it != m.end() && it->is_string()) s.tensor_format = it->get<std::string>();
        }
        s.data_mode = data_mode_of_session(m);
        s.stats = stats_options_of_session(m);
        sessions_[h.run] = std::move(s);
        return;
      }
      case record_kind::entry: return entry_record(r);
      case record_kind::tensor:
      case record_kind::value: return data_record(r);
      case record_kind::step_end:
        switch_entry(h.run, nullptr, "");
        if (auto it = folders_.find({h.step, h.rank}); it != folders_.end()) end_folder(it->second);
        return;
      default: return;
    }
  }

  const session_facts &session(const std::string &run) {
    const auto it = sessions_.find(run);
    return it != sessions_.end() ? it->second : sessions_[run];  // no session record: defaults
  }

  folder &folder_of(const record_header &h) {
    folder &f = folders_[{h.step, h.rank}];
    f.step = h.step;
    f.rank = h.rank;
    return f;
  }

  // The producer's records moved on from one entry to another: the earlier one has ended.
  void switch_entry(const std::string &run, folder *f, const std::string &entry) {
    auto &cur = current_[run];
    if (cur.first == f && cur.second == entry) return;
    if (cur.first && !cur.first->ended) entry_ended(*cur.first, cur.second);
    cur = {f, entry};
  }

  void entry_ended(folder &f, const std::string &entry) {
    const auto api = api_entry_of(entry);
    if (!api) return;
    const auto it = f.by_name.find(api->call);
    if (it == f.by_name.end()) return;
    const auto call = it->second;
    if (api->forward) {
      if (call->collective) return;  // its output may still come: at the step's end
      forward_ended(f, call);
      if (!call->expects_backward) hand(call);
    } else if (call->forward_ended) {
      hand(call);  // the backward is whole
    }
  }

  // The call, made at its entry's first record; nullptr when it is not one to check.
  std::shared_ptr<api_call> call_of(folder &f, const std::string &call_name) {
    auto [it, created] = f.by_name.try_emplace(call_name);
    if (created) {
      it->second = std::make_shared<api_call>();
      it->second->name = call_name;
      it->second->collective = call_name.starts_with("Distributed.");
      f.calls.push_back(it->second);
    }
    return it->second;
  }

  // The entry as dump.json begins it (entry_skeleton_json), when it is not there yet.
  json *entry_json(api_call &c, bool forward, const entry_name &parsed, const json *is_recompute) {
    json &e = forward ? c.forward : c.backward;
    if (e.is_null()) {
      e = entry_skeleton_json(parsed, sess_->data_mode, is_recompute);
      if (forward) ++res_.apis;
    }
    return &e;
  }

  void entry_record(const record &r) {
    const auto &h = r.header;
    folder &f = folder_of(h);
    switch_entry(h.run, &f, h.entry);
    if (f.ended) return;
    const auto api = api_entry_of(h.entry);
    if (!api) return;
    sess_ = &session(h.run);
    const entry_name parsed = entry_parse(h.entry);
    const json &meta = h.meta;
    // As the writer: an entry the filters skipped, one without values (tprobe-overflow's clean
    // calls) or of a direction data_mode leaves out is not in dump.json (its records may still
    // make it).
    const auto meta_is = [&](const char *key, bool value) {
      const auto it = meta.is_object() ? meta.find(key) : meta.end();
      return meta.is_object() && it != meta.end() && it->is_boolean() && it->get<bool>() == value;
    };
    if (meta_is("skipped", true) || meta_is("data", false) || !sess_->data_mode.allows_entry(parsed)) return;
    const auto call = call_of(f, api->call);
    if (call->handed) return;
    const json *is_recompute = nullptr;
    if (meta.is_object())
      if (const auto it = meta.find("is_recompute"); it != meta.end()) is_recompute = &*it;
    (void)entry_json(*call, api->forward, parsed, is_recompute);
  }

  void data_record(record &r) {
    const auto &h = r.header;
    folder &f = folder_of(h);
    switch_entry(h.run, &f, h.entry);
    const auto api = api_entry_of(h.entry);
    if (!api) return;
    if (f.ended) {
      ++res_.late_records;
      return;
    }
    sess_ = &session(h.run);
    const entry_name parsed = entry_parse(h.entry);
    if (!sess_->data_mode.allows(parsed, h.slot)) return;
    const auto call = call_of(f, api->call);
    if (call->handed) {
      ++res_.late_records;
      return;
    }
    json leaf;
    if (h.kind == record_kind::tensor) {
      (void)record_fill_missing_stats(r, sess_->stats);
      std::string data_name;
      if (record_tensor_saved(r)) {
        data_name = record_data_name(h, sess_->tensor_format);
        if (!hold_tensor(*call, r, data_name)) return;  // the call is dropped
      }
      const record_leaf_names names = record_leaf_names_of(h, sess_->framework);
      leaf = tensor_leaf_json(record_tensor_facts(h, names, data_name));
      // A backward entry comes only for outputs that require grad, and only where data_mode lets
      // backward entries through.
      if (api->forward && h.requires_grad && slot_io_of(h.slot) == slot_io::output && sess_->data_mode.backward())
        call->expects_backward = true;
    } else {
      leaf = record_leaf_json(r, sess_->framework);
    }
    json *e = entry_json(*call, api->forward, parsed, nullptr);
    try {
      entry_slot_json(*e, parsed, record_slot_location(h, parsed)) = std::move(leaf);
    } catch (const std::invalid_argument &) {
      ++res_.refused;  // the writer refuses it too (not in dump.json)
    }
  }

  // Copies the payload into a tensor of the call, or drops the whole call when the buffer would
  // pass its bound. False when the call is dropped.
  bool hold_tensor(api_call &c, const record &r, const std::string &data_name) {
    const auto &h = r.header;
    const auto bytes = r.payload_bytes();
    if (bytes.size() != h.element_count() * dtype_size(h.type))
      throw framing_error(fmt::format("{}: payload is {} bytes, shape needs {}", r.describe(), bytes.size(),
                                      h.element_count() * dtype_size(h.type)));
    if (buffered_.load() + bytes.size() > o_.max_buffer_bytes) {
      drop(c);
      return false;
    }
    const auto type = pc::torch_scalar_type(h.type);
    if (!type) throw framing_error(r.describe() + ": no LibTorch dtype for " + std::string(dtype_name(h.type)));
    at::Tensor t = at::empty(h.shape, at::TensorOptions().dtype(*type));
    if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    c.tensors[data_name] = std::move(t);
    c.bytes += bytes.size();
    peak_ = std::max(peak_, buffered_ += bytes.size());
    return true;
  }

  // Fell behind: the call goes whole, counted; its later records are ignored.
  void drop(api_call &c) {
    if (c.dropped) return;
    c.dropped = true;
    c.handed = true;
    ++res_.fell_behind;
    release(c);
    {
      std::lock_guard lock(mutex_);
      if (c.slot) c.slot->done = true;
    }
    rows_ready_.notify_one();
  }

  void release(api_call &c) {
    c.tensors.clear();
    buffered_ -= c.bytes;
    c.bytes = 0;
  }

  // A forward has ended: is it wanted (resume, -f), in arrival order? Then it gets its row's place.
  void forward_ended(folder &f, const std::shared_ptr<api_call> &call) {
    if (call->forward_ended) return;
    call->forward_ended = true;
    if (call->decided || call->dropped || call->forward.is_null()) return;
    call->decided = true;
    {
      // wanted() reads what write() adds to (the run's names written): one at a time. The
      // writer thread holds this lock for one row at most, never for a replay.
      std::lock_guard files(files_mutex_);
      if (!f.run) f.run = std::make_unique<pc::precheck_run>(o_.run, folder_path(f));
      if (!f.run->wanted(call->name, call->forward)) {
        ++res_.not_wanted;
        call->handed = true;
        release(*call);
        return;
      }
    }
    std::lock_guard lock(mutex_);
    slots_.push_back({&f, call, std::nullopt, false});
    call->slot = &slots_.back();
  }

  std::filesystem::path folder_path(const folder &f) const {
    return std::filesystem::path(o_.output_dir) / fmt::format("step{}", f.step) /
           (f.rank < 0 ? std::string("rank") : fmt::format("rank{}", f.rank));
  }

  // To the replay threads (its row's place was made by forward_ended).
  void hand(const std::shared_ptr<api_call> &call) {
    if (call->handed || !call->slot) return;
    call->handed = true;
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(call->slot);
    }
    work_ready_.notify_one();
  }

  // The step ended on this rank: every call of it is complete.
  void end_folder(folder &f) {
    if (f.ended) return;
    for (const auto &call : f.calls) forward_ended(f, call);
    for (const auto &call : f.calls) hand(call);
    f.ended = true;
    f.calls.clear();
    f.by_name.clear();
  }

  void work() {
    // Below the training on a shared host: the replay samples instead of taking its cores.
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
    std::unique_lock lock(mutex_);
    for (;;) {
      work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      row_slot *slot = queue_.front();
      queue_.pop_front();
      lock.unlock();
      api_call &c = *slot->call;
      std::optional<pc::api_judgement> j;
      std::exception_ptr error;
      try {
        memory_source source(c.tensors);
        j = slot->f->run->check(c.name, c.forward, c.backward.is_null() ? nullptr : &c.backward, source);
      } catch (...) {
        error = std::current_exception();
      }
      release(c);
      lock.lock();
      if (error && !failure_) failure_ = error;
      slot->judgement = std::move(j);
      slot->done = true;
      rows_ready_.notify_one();
    }
  }

  // The writer thread: rows in order as their turn comes, each written outside mutex_, so that the
  // stage's own thread (which reads the stream) never waits for a file.
  void write_rows() {
    std::unique_lock lock(mutex_);
    for (;;) {
      rows_ready_.wait(lock, [&] { return (!slots_.empty() && slots_.front().done) || (writer_stopping_ && slots_.empty()); });
      if (slots_.empty()) return;
      row_slot s = std::move(slots_.front());
      slots_.pop_front();
      s.call->slot = nullptr;
      const bool write = s.judgement && !failure_;
      lock.unlock();
      if (write) {
        std::lock_guard files(files_mutex_);
        pc::precheck_run &run = *s.f->run;
        run.write(*s.judgement);
        ++res_.checked;
        if (!res_.first_not_pass_line && run.counts().first_not_pass) {
          const std::string line = fmt::format("step {} rank {} {}", s.f->step, s.f->rank, *run.counts().first_not_pass);
          res_.first_not_pass_line = line;
          if (o_.log) {
            fmt::print(o_.log, "tprobe-precheck-live: first API not pass: {}\n", line);
            std::fflush(o_.log);
          }
          if (o_.on_first_not_pass) o_.on_first_not_pass(s.f->step, s.f->rank, *s.judgement);
          std::lock_guard events(mutex_);
          event_ = {s.f->step, s.f->rank, s.call->name, line};
        }
      }
      lock.lock();
    }
  }

  // The first error, downstream, from the stage's own thread (stage_io is not thread-safe).
  void send_event() {
    pending ev;
    {
      std::lock_guard lock(mutex_);
      if (!event_ || event_sent_) return;
      ev = *event_;
      event_sent_ = true;
    }
    record r(record_kind::value);
    r.header.step = ev.step;
    r.header.rank = ev.rank;
    r.header.entry = ev.api + ".forward";
    r.header.meta = {{"event", "first_api_not_pass"}, {"step", ev.step}, {"rank", ev.rank}, {"api", ev.api}, {"line", ev.line}};
    io_.send(r);
  }

  void stop_workers() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_ready_.notify_all();
    for (auto &t : workers_)
      if (t.joinable()) t.join();
    workers_.clear();
    {
      // Every call handed is judged now; one never handed (the stream broke off) has no row.
      std::lock_guard lock(mutex_);
      for (auto &slot : slots_) slot.done = true;
      writer_stopping_ = true;
    }
    rows_ready_.notify_all();
    if (writer_.joinable()) writer_.join();
  }

  struct pending {
    int64_t step = 0;
    int32_t rank = -1;
    std::string api, line;
  };

  stage_io &io_;
  const precheck_live_options &o_;
  precheck_live_result res_;
  std::map<std::string, session_facts> sessions_;
  const session_facts *sess_ = nullptr;  // the session of the record being handled
  std::map<std::pair<int64_t, int32_t>, folder> folders_;  // by (step, rank): steps in order
  std::map<std::string, std::pair<folder *, std::string>> current_;  // by run: the entry its records are at
  std::atomic<uint64_t> buffered_{0};
  uint64_t peak_ = 0;

  // Shared with the replay threads.
  std::mutex mutex_;
  std::condition_variable work_ready_, rows_ready_;
  std::mutex files_mutex_;  // each folder's precheck_run: wanted() on this thread, write() on the writer's
  std::deque<row_slot *> queue_;
  std::deque<row_slot> slots_;  // rows to write, in order (references stay valid: push_back, pop_front)
  bool stopping_ = false, writer_stopping_ = false;
  std::exception_ptr failure_;
  std::optional<pending> event_;
  bool event_sent_ = false;
  std::vector<std::thread> workers_;
  std::thread writer_;
};

}  // namespace

precheck_live_result precheck_live_run(stage_io &io, const precheck_live_options &options) {
  return live_precheck(io, options).run();
}

}  // namespace tprobe
