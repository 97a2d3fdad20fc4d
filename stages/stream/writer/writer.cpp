#include "writer.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <thread>
#include <unordered_map>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "dump_document.h"
#include "dump_semantics.h"
#include "errors.h"
#include "npy.h"
#include "pyjson.h"
#include "quiet_thread.h"
#include "record_leaf.h"
#include "safe_path.h"
#include "torch_save.h"

namespace tprobe {

namespace {

using json = nlohmann::ordered_json;
using clock_type = std::chrono::steady_clock;

// The effective configuration a producer announced in its session record.
struct session_info {
  std::string task = "statistics";
  std::string level = "L1";
  std::string framework = "pytorch";
  std::string dump_path;
  // tprobe.tensor_format: dump_tensor_data/ files as .npy (NumPy) or .pt (torch.save, msprobe's).
  std::string tensor_format = "npy";
  bool tensor_data = false;  // task tensor, or a tensor_list: dump_tensor_data/ exists
  data_mode_filter data_mode;
  stats_options stats;  // precision, half_mean: for statistics computed here (fill_missing_stats)
};

session_info session_from_meta(const json &meta) {
  session_info s;
  if (!meta.is_object()) return s;
  s.task = meta.value("task", s.task);
  s.level = meta.value("level", s.level);
  s.framework = meta.value("framework", s.framework);
  s.dump_path = meta.value("dump_path", std::string{});
  // The capture validated it (core/capture_config.cpp); a hand-made producer's typo must not silently
  // give the other format.
  if (const auto it = meta.find("tensor_format"); it != meta.end()) s.tensor_format = it->is_string() ? it->get<std::string>() : it->dump();
  if (s.tensor_format != "npy" && s.tensor_format != "pt")
    throw usage_error(fmt::format("session record: tensor_format \"{}\" is not one of npy, pt", s.tensor_format));
  const auto tensor_list = meta.value("tensor_list", json::array());
  s.tensor_data = s.task == "tensor" || s.task == "overflow_check" || (tensor_list.is_array() && !tensor_list.empty());
  s.data_mode = data_mode_of_session(meta);
  s.stats = stats_options_of_session(meta);
  return s;
}

// msprobe's level "debug" (the single-point save API) writes debug.json in place of dump.json.
std::string data_file_name(const session_info &s) { return s.level == "debug" ? "debug.json" : "dump.json"; }

// Runs jobs in order on a thread of its own, started at the first job: the file system work a
// folder needs before its step ends (two directories and three temporaries), which on the
// writer's thread was a third of its time in a step of 500 records on ext4. The writer's thread places
// the step's records meanwhile, and waits for the job only where it needs the folder: at a
// rewrite (the step's end, a timed flush) or a tensor file. With step()'s barrier, the training
// thread waits for the writer's thread, not for this one, while the records arrive.
//
// Contract: a job's exception reaches whoever waits on its future, as often as they wait. The
// destructor runs the jobs already queued and joins the thread; the objects a job touches must
// outlive the queue (dump_writer declares it after what its jobs touch).
class background_jobs {
 public:
  background_jobs() = default;
  background_jobs(const background_jobs &) = delete;
  background_jobs &operator=(const background_jobs &) = delete;
  ~background_jobs() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  std::shared_future<void> submit(std::function<void()> job) {
    std::packaged_task<void()> task(std::move(job));
    std::shared_future<void> done = task.get_future().share();
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
    }
    // Signals belong to the stage's main thread, whose handler ends its blocking receive.
    if (!thread_.joinable()) thread_ = quiet_thread([this] { loop(); });
    wake_.notify_one();
    return done;
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every job run
      std::packaged_task<void()> task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      task();  // an exception is kept in the task's future
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

// The dump path's lock file, DUMP/.tprobe-writer.lock: a writer holds a POSIX record lock on one
// byte of it per rank it writes there (byte R + 1 for rank R, byte 0 for the folder "rank"), for
// its whole life. So a second writer into the same rank folders (a second run into the same
// dump_path at once) is refused with one line naming the first, while the ranks of one job, each
// with a pipeline of its own (direct mode, several hosts), share the dump path. One descriptor per
// dump path however many ranks; fcntl locks rather than flock() because flock over NFS, where dump
// paths often are, is emulated with them anyway. The last writer to end removes the file; one that
// was killed leaves it behind, unlocked, and the next writer takes it over.
class dump_path_lock {
 public:
  static constexpr const char *file_name = ".tprobe-writer.lock";

  // `root`: an absolute, normalised dump path that exists (safe_mkdirs). Throws system_error when
  // the file cannot be used.
  explicit dump_path_lock(const std::string &root) : root_(root), path_(root + "/" + file_name) { open_file(); }
  ~dump_path_lock() {
    if (fd_ < 0) return;
    ::close(fd_);  // every rank's lock goes with it
    // The file goes when no other writer holds a byte of it: probed with a lock on the whole file,
    // which a writer that opened the file meanwhile waits out (take) before it starts again.
    const int fd = ::open(path_.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    struct flock all = whole_file(F_WRLCK);
    if (::fcntl(fd, F_SETLK, &all) == 0) (void)::unlink(path_.c_str());
    ::close(fd);
  }
  dump_path_lock(const dump_path_lock &) = delete;
  dump_path_lock &operator=(const dump_path_lock &) = delete;

  // Locks `rank`'s byte (once per rank). Throws system_error naming the writer that holds it.
  void take(int32_t rank) {
    if (fd_ < 0 || !ranks_.insert(rank).second) return;
    for (int attempt = 0;; ++attempt) {
      struct flock byte = rank_byte(rank, F_WRLCK);
      if (::fcntl(fd_, F_SETLK, &byte) != 0) {
        const int e = errno;
        if (e != EAGAIN && e != EACCES) return unsupported(e);
        struct flock holder = rank_byte(rank, F_WRLCK);
        if (::fcntl(fd_, F_GETLK, &holder) == 0 && holder.l_type != F_UNLCK && !(holder.l_start == 0 && holder.l_len == 0)) {
          ranks_.erase(rank);
          const std::string folder = rank < 0 ? "rank" : fmt::format("rank{}", rank);
          throw system_error(fmt::format(
              "unable to lock dump path {} for its {} folders: {} is writing them ({}); wait for that run to end or "
              "choose another dump_path",
              root_, folder, holder.l_pid > 0 ? fmt::format("tprobe-writer pid {}", holder.l_pid) : "another writer",
              path_));
        }
        // A writer removing the file at its end (its lock covers the whole file): wait the moment it
        // takes, then start again on the file as it is then.
        byte = rank_byte(rank, F_WRLCK);
        while (::fcntl(fd_, F_SETLKW, &byte) != 0 && errno == EINTR) {
        }
      }
      if (still_named()) return;
      if (attempt == 100) throw system_error("unable to lock dump path " + root_ + ": its lock file keeps being replaced");
      ::close(fd_);  // the file this descriptor locked was removed: the rank's lock goes with it
      fd_ = -1;
      open_file();
      if (fd_ < 0) return;
      // Every rank taken so far, again on the new file (none can conflict: all were ours).
      for (int32_t r : ranks_) {
        struct flock again = rank_byte(r, F_WRLCK);
        if (r != rank && ::fcntl(fd_, F_SETLK, &again) != 0) return unsupported(errno);
      }
    }
  }

 private:
  static struct flock whole_file(short type) {
    struct flock l {};
    l.l_type = type;
    l.l_whence = SEEK_SET;
    return l;  // l_start 0, l_len 0: the whole file, however long
  }
  static struct flock rank_byte(int32_t rank, short type) {
    struct flock l = whole_file(type);
    l.l_start = static_cast<off_t>(std::max(rank, -1)) + 1;
    l.l_len = 1;
    return l;
  }

  void open_file() {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640);
    if (fd_ < 0) throw system_error_from_errno("open", path_, errno);
  }

  // Whether the path still names the file this descriptor locked (a writer that ended may have
  // removed it just before the lock was granted).
  bool still_named() const {
    struct stat held {}, named {};
    return ::fstat(fd_, &held) == 0 && ::lstat(path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
           held.st_dev == named.st_dev;
  }

  // A file system without record locks: writing goes on, unguarded, and says so once.
  void unsupported(int e) {
    if (e != ENOLCK && e != EOPNOTSUPP && e != EINVAL && e != EBADF) throw system_error_from_errno("lock", path_, e);
    fmt::print(stderr, "tprobe-writer: warning: unable to lock dump path {}: {}; a second run writing into it at the "
                       "same time would not be refused\n", root_, std::strerror(e));
    ::close(fd_);
    fd_ = -1;
  }

  std::string root_, path_;
  int fd_ = -1;
  std::set<int32_t> ranks_;
};

// One dump folder: step{S}/rank{R}.
struct dump_doc {
  std::string dir;       // absolute
  std::string relative;  // step{S}/rank{R}
  session_info session;
  dump_document data;  // dump.json's "data"
  json construct = json::object();
  // construct's keys → their positions in its ordered map (which only ever appends): a new entry
  // was looked up key by key, so a step of n entries cost n²/2 string compares at L0 and mix.
  std::unordered_map<std::string, size_t> construct_index;
  stack_list stacks;  // names, lines
  std::unordered_map<std::string, size_t> stack_index;  // joined lines → index in stacks
  std::unordered_map<uint64_t, size_t> stack_id_index;  // the run's stack id → index in stacks
  bool dirty = true;
  // stack.json and construct.json change less often than dump.json (never, at level L1 without
  // stacks): each rewrite is a new file, and file creation is what a step's write costs most.
  bool stacks_dirty = true;
  bool construct_dirty = true;
  std::optional<safe_dir> tensor_dir;  // dump_tensor_data/, opened at its first tensor file
  // The next rewrite's temporaries of dump.json, stack.json and construct.json, created while the
  // step runs: creating a file is most of what a write costs, and the step's last write is paid
  // by the training thread waiting on its barrier. Each is used once; later rewrites create theirs.
  prepared_file next_data, next_stacks, next_construct;
  // The folder's creation and the temporaries above, made by dump_writer's background jobs: no
  // one reads dir's contents or next_* before waiting on it (dump_writer::await_folder).
  std::shared_future<void> folder_ready;  // reset once awaited and done
  bool prepares_in_background = false;    // its job makes next_*: counted as made until awaited
  std::vector<std::string> errors;  // refused records (dump_writer::refuse): dump_error_info.log
  size_t errors_written = 0;
};

class dump_writer {
 public:
  explicit dump_writer(const writer_stage_options &o) : options_(o) {
    if (!options_.dump_path.empty()) path_check_create(options_.dump_path, "dump path");
    // The first timed rewrite a whole interval after the start, as every later one: not at
    // whichever of the first records finds the coarse clock past the start.
    next_flush_ = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                          std::chrono::duration<double>(options_.flush_interval));
  }

  void handle(record &r) {
    finished_.reset();  // the last step's document, freed once its barrier has been answered
    ++result_.records;
    const auto &h = r.header;
    switch (h.kind) {
      case record_kind::session: sessions_[h.run] = session_from_meta(h.meta); return;
      case record_kind::entry: entry_metadata(r); return;
      case record_kind::tensor:
      case record_kind::value:
        // A record this folder cannot hold (a path past any list, a slot that clashes with what
        // is there, a file name outside msprobe's set, …) is one refused record, named and
        // counted (refuse); the rest of the stream is still dumped. Its folder is made first,
        // outside: a dump path that cannot be used fails the writer, as before.
        {
          dump_doc &d = doc(h);
          try {
            if (h.kind == record_kind::tensor) fill_missing_stats(r);
            place(r, d);
          } catch (const usage_error &e) {
            refuse(d, e.what());
          } catch (const framing_error &e) {
            refuse(d, e.what());
          }
        }
        return;
      case record_kind::flush:
        if (auto *d = find_doc(h)) write_doc(*d);
        return;
      case record_kind::step_end: {
        // Its barrier is answered once every record before it was handled, the folders they
        // began included (the jobs run in order: waiting for each is waiting for the last).
        for (auto &[key, d] : docs_) await_folder(d);
        auto it = docs_.find({h.step, h.rank, h.run});
        if (it != docs_.end()) {
          // msprobe makes dump_tensor_data/ with the folder wherever tensors may be saved
          // (dump.json names it), also in a step that saved none: an overflow_check step without
          // an overflow.
          if (it->second.session.tensor_data) (void)tensor_dir(it->second);
          write_doc(it->second);
          // A step's document (a few vectors an entry) is freed later: not while the training
          // thread waits on this step's barrier, which stage_io answers at the next receive.
          entries_expected_ = std::max(entries_expected_, it->second.data.size());
          leaf_text_expected_ = std::max(leaf_text_expected_, it->second.data.text().size());
          finished_ = std::make_unique<dump_doc>(std::move(it->second));
          if (last_doc_ == &*it) last_doc_ = nullptr;
          docs_.erase(it);
        }
        return;
      }
      default: return;
    }
  }

  void maybe_flush() {
    if (coarse_steady_now() < next_flush_) return;  // asked once a record; the interval is seconds
    const auto start = clock_type::now();
    for (auto &[key, d] : docs_)
      if (d.dirty) {
        write_doc(d);
        prepare_files(d);  // for the step's last write, which the training thread may wait on
      }
    // Rewrites cost grows with the dump: never spend more than a fifth of the time rewriting.
    const auto took = clock_type::now() - start;
    next_flush_ = clock_type::now() +
                  std::max<clock_type::duration>(std::chrono::duration_cast<clock_type::duration>(
                                                     std::chrono::duration<double>(options_.flush_interval)),
                                                 took * 4);
  }

  void finish() {
    for (auto &[key, d] : docs_) write_doc(d);
  }

  const writer_stage_result &result() const { return result_; }

  // Refused records: each is a line of its folder's dump_error_info.log (msprobe's file for what
  // the tool could not dump), the first few also on stderr as they come, all counted.
  void refuse(dump_doc &d, const std::string &why) {
    ++result_.records_refused;
    if (result_.first_refusal.empty()) result_.first_refusal = why;
    if (result_.records_refused <= refusals_printed)
      fmt::print(stderr, "tprobe-writer: error: not dumped: {}{}\n", why,
                 result_.records_refused == refusals_printed ? " (further refusals: dump_error_info.log only)" : "");
    d.errors.push_back(why);
    d.dirty = true;
  }

 private:
  struct doc_key {
    int64_t step;
    int32_t rank;
    std::string run;
    auto operator<=>(const doc_key &) const = default;
  };

  const session_info &session(const record_header &h) {
    auto it = sessions_.find(h.run);
    if (it != sessions_.end()) return it->second;
    return sessions_[h.run];  // a producer without a session record: defaults
  }

  // Checks `root` (msprobe's path rule), makes it and locks `rank`'s folders in it, once each.
  void lock(const std::string &root, int32_t rank) {
    const std::string path = path_check_create(root, "dump path");
    auto it = locks_.find(path);
    if (it == locks_.end()) {
      safe_mkdirs(path);
      it = locks_.emplace(path, std::make_unique<dump_path_lock>(path)).first;
    }
    it->second->take(rank);
    written_ranks_[path].insert(rank < 0 ? "rank" : fmt::format("rank{}", rank));
  }

 public:
  // The folders of the ranks this writer wrote, in its dump paths, that it did not write: what an
  // earlier run left there ("DUMP/step7/rank0"), sorted by step. Other ranks' folders are not
  // looked at: they may be another rank's of the same job, written by a pipeline of its own.
  std::vector<std::string> earlier_run_folders() const {
    static const std::regex step_name("step(0|[1-9][0-9]*)");
    std::vector<std::string> out;
    for (const auto &[root, ranks] : written_ranks_) {
      std::vector<std::pair<long long, std::string>> steps;
      std::error_code error;
      for (std::filesystem::directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
        const std::string name = it->path().filename().string();
        if (std::regex_match(name, step_name) && it->is_directory(error) && !it->is_symlink(error))
          steps.emplace_back(std::stoll(name.substr(4)), name);
      }
      std::sort(steps.begin(), steps.end());
      for (const auto &[step, step_folder] : steps)
        for (const auto &rank : ranks) {  // "rank" < "rank0" < "rank1" < "rank10": good enough
          const std::string dir = root + "/" + step_folder + "/" + rank;
          if (!reopened_.count(dir) && std::filesystem::is_directory(dir, error)) out.push_back(dir);
        }
    }
    return out;
  }

 private:
  dump_doc *find_doc(const record_header &h) {
    auto it = docs_.find({h.step, h.rank, h.run});
    return it == docs_.end() ? nullptr : &it->second;
  }

  dump_doc &doc(const record_header &h) {
    // Records come a step and rank at a time: the last folder is almost always the one (and a
    // key would copy the run's id, a malloc per record).
    if (last_doc_ && last_doc_->first.step == h.step && last_doc_->first.rank == h.rank &&
        last_doc_->first.run == h.run)
      return last_doc_->second;
    const doc_key key{h.step, h.rank, h.run};
    auto it = docs_.find(key);
    if (it != docs_.end()) {
      last_doc_ = &*it;
      return it->second;
    }
    dump_doc d;
    d.session = session(h);
    const std::string root = options_.dump_path.empty() ? d.session.dump_path : options_.dump_path;
    if (root.empty())
      throw usage_error(fmt::format("{}: no dump path: give --dump-path or a session record with dump_path",
                                    r_describe(h)));
    lock(root, h.rank);
    d.relative = h.rank < 0 ? fmt::format("step{}/rank", h.step) : fmt::format("step{}/rank{}", h.step, h.rank);
    d.dir = (std::filesystem::absolute(root) / d.relative).lexically_normal().string();
    // A folder finished earlier (step_end) that receives more: continue from what is on disk
    // rather than overwrite it, now. One this writer never wrote is made in the background (an
    // earlier run's files there removed) while its records are placed.
    const bool reopened = reopened_.count(d.dir) != 0;
    if (reopened) {
      safe_mkdirs(root, d.relative);
      if (const std::string existing = d.dir + "/" + data_file_name(d.session); std::filesystem::exists(existing)) {
        json old = pyjson_load_file(existing);
        if (old.contains("data") && old["data"].is_object())
          for (const auto &[name, value] : old["data"].items()) d.data.set_json(d.data.entry(name).node, value, 2);
        const std::string construct = d.dir + "/construct.json";
        if (std::filesystem::exists(construct)) {
          d.construct = pyjson_load_file(construct);
          if (!d.construct.is_object())
            throw usage_error(fmt::format("{}: not a JSON object; move it away to write this folder again", construct));
          index_keys(d.construct, d.construct_index);
        }
        load_stacks(d);
      }
      prepare_files(d);
    }
    // Decided here, where docs_ is: the job never looks at other folders.
    const bool prepare_later = !reopened && prepare_allowed(nullptr);
    // A step has about as many entries and as much leaf text as the one before.
    d.data.reserve(entries_expected_, leaf_text_expected_);
    ++result_.dumps;
    reopened_.insert(d.dir);
    last_doc_ = &*docs_.emplace(key, std::move(d)).first;
    dump_doc &made = last_doc_->second;
    if (!reopened) {
      made.prepares_in_background = prepare_later;
      made.folder_ready = jobs_.submit([&made, root, prepare_later] {
        safe_mkdirs(root, made.relative);
        discard_earlier_files(made);
        if (prepare_later) create_prepared_files(made);
      });
    }
    return made;
  }

  // A folder this writer has not written yet whose files an earlier run left: they are replaced
  // when the step ends, and a rename over a file unlinks the old one there, which on ext4 frees its
  // blocks while the training thread waits on the step's barrier (~1 ms for a transformer step's
  // 425 kB dump.json, against 0.1 ms to write the new one). Unlinked now, as the step's first
  // record arrives, that work falls in the step, when this stage has time to spare.
  static void discard_earlier_files(const dump_doc &d) {
    for (const std::string name : {data_file_name(d.session), std::string("stack.json"), std::string("construct.json")})
      (void)::unlink((d.dir + "/" + name).c_str());  // missing, or kept by a failure the write will name
  }

  // Each key of an ordered object (which only ever appends) → its position.
  static void index_keys(const json &object, std::unordered_map<std::string, size_t> &index) {
    const auto &items = static_cast<const json::object_t::Container &>(object.get_ref<const json::object_t &>());
    for (size_t i = 0; i < items.size(); ++i) index.emplace(items[i].first, i);
  }

  static void load_stacks(dump_doc &d) {
    const std::string path = d.dir + "/stack.json";
    if (!std::filesystem::exists(path)) return;
    json old = pyjson_load_file(path);
    for (const auto &[k, v] : old.items()) {
      if (!v.is_array() || v.size() != 2) continue;
      std::vector<std::string> names = v[0].get<std::vector<std::string>>();
      std::vector<std::string> lines = v[1].get<std::vector<std::string>>();
      d.stack_index[fmt::format("{}", fmt::join(lines, "\n"))] = d.stacks.size();
      d.stacks.emplace_back(std::move(names), std::move(lines));
    }
  }

  static std::string r_describe(const record_header &h) {
    return fmt::format("{} record {} (rank {}, step {})", record_kind_name(h.kind), h.entry, h.rank, h.step);
  }

  // The entry's node, made with the sections msprobe writes for it when new. `parsed`:
  // entry_parse(entry), when the caller has it already.
  dump_node &entry_node(dump_doc &d, const std::string &entry, const json *meta, const entry_name *parsed = nullptr) {
    if (entry.empty()) throw usage_error("a record without an entry name cannot be placed in dump.json");
    const auto found = d.data.entry(entry);
    dump_node &e = found.node;  // a reference, not a structured binding: the lambda below captures it
    if (!found.created) return e;
    e.type = dump_node::kind::object;
    e.keys.reserve(4);
    e.items.reserve(4);
    const data_mode_filter &modes = d.session.data_mode;
    const entry_name name = parsed ? *parsed : entry_parse(entry);
    const json *is_recompute = nullptr;
    if (meta && meta->is_object())
      if (const auto it = meta->find("is_recompute"); it != meta->end()) is_recompute = &*it;
    // The sections msprobe's analyze_forward / analyze_backward write, empty until filled.
    entry_skeleton(name, modes, is_recompute != nullptr, [&](const char *key, entry_section kind) {
      switch (kind) {
        case entry_section::list: e.member(key).type = dump_node::kind::array; break;
        case entry_section::dict: e.member(key).type = dump_node::kind::object; break;
        case entry_section::is_recompute: d.data.set_json(e.member(key), *is_recompute, 3); break;
      }
    });
    ++result_.entries;
    d.dirty = true;
    // L0 and mix list every entry in construct.json, null parent unless an entry record says.
    construct_node(d, name, entry, nullptr);
    return e;
  }

  static bool has_structure(const dump_doc &d) { return d.session.level == "L0" || d.session.level == "mix"; }

  // Sets the entry's parent in construct.json where the level has a tree and the entry is a node
  // of it: parameter gradients are not (msprobe's update_construct never sees them).
  static void construct_node(dump_doc &d, const entry_name &name, const std::string &entry, json parent) {
    if (has_structure(d) && !name.is_parameters_grad()) construct_set(d, entry, std::move(parent));
  }

  // Sets construct.json's parent of entry. The entry is almost always the last one added, which is
  // checked first; any other is found through construct_index, and a new one appended.
  static void construct_set(dump_doc &d, const std::string &entry, json parent) {
    d.construct_dirty = true;
    auto &entries = static_cast<json::object_t::Container &>(d.construct.get_ref<json::object_t &>());
    if (!entries.empty() && entries.back().first == entry) {
      entries.back().second = std::move(parent);
    } else if (const auto it = d.construct_index.find(entry); it != d.construct_index.end()) {
      entries[it->second].second = std::move(parent);
    } else {
      d.construct_index.emplace(entry, entries.size());
      entries.emplace_back(entry, std::move(parent));
    }
  }

  void entry_metadata(const record &r) {
    const auto &h = r.header;
    dump_doc &d = doc(h);
    const entry_name name = entry_parse(h.entry);
    const bool meta = h.meta.is_object();
    const auto parent = meta ? h.meta.find("parent") : h.meta.end();
    // A boolean of the entry's meta that is `value` (record.h: skipped, data).
    const auto meta_is = [&](const char *key, bool value) {
      const auto it = meta ? h.meta.find(key) : h.meta.end();
      return it != h.meta.end() && it->is_boolean() && it->get<bool>() == value;
    };
    // An entry the scope or list filters skipped is a node of construct.json and nothing else.
    const bool skipped = meta_is("skipped", true);
    // A call whose values are not dumped (tprobe-overflow's clean calls) keeps its construct.json
    // node and its stack.
    const bool without_data = meta_is("data", false);
    // An entry of a direction data_mode leaves out is not in dump.json (msprobe's analyze_forward
    // / analyze_backward return nothing for it), but its stack and its place in construct.json
    // are kept, as msprobe's forward_data_collect records them before it filters.
    if (!skipped && !without_data && d.session.data_mode.allows_entry(name)) {
      dump_node &e = entry_node(d, h.entry, &h.meta, &name);  // its construct node too
      if (meta && h.meta.contains("is_recompute") && name.is_module() && name.is_forward())
        d.data.set_json(e.member("is_recompute"), h.meta["is_recompute"], 3);
    } else if (parent == h.meta.end() && !d.construct_index.contains(h.entry)) {
      construct_node(d, name, h.entry, nullptr);
    }
    if (parent != h.meta.end()) construct_node(d, name, h.entry, *parent);
    if (skipped || !meta) return;
    // A stack by id (record.h section 5) is looked up by its id; its lines are read once.
    const auto id = record_stack_id(h);
    if (auto known = id ? d.stack_id_index.find(*id) : d.stack_id_index.end(); known != d.stack_id_index.end()) {
      d.stacks[known->second].first.push_back(h.entry);
      d.stacks_dirty = true;
    } else if (const json *stack = record_stack_lines(h)) {
      std::vector<std::string> lines;
      for (const auto &l : *stack) lines.push_back(l.is_string() ? l.get<std::string>() : l.dump());
      const std::string key = fmt::format("{}", fmt::join(lines, "\n"));
      auto [it, inserted] = d.stack_index.emplace(key, d.stacks.size());
      if (inserted) d.stacks.emplace_back(std::vector<std::string>{}, std::move(lines));
      if (id) d.stack_id_index.emplace(*id, it->second);
      d.stacks[it->second].first.push_back(h.entry);
      d.stacks_dirty = true;
    } else if (id) {
      throw framing_error(fmt::format("{}: stack_id {} was never defined on this stream", r_describe(h), *id));
    }
    d.dirty = true;
  }

  // The leaf's text, made for the depth it goes to (dump_document.h), appended to the folder's
  // text buffer.
  void tensor_leaf_append(const record &r, dump_doc &d, const std::string &data_name, int level) {
    // No stats: a statistics-less tensor, Max/Min/Mean/Norm null.
    const record_leaf_names names = record_leaf_names_of(r.header, d.session.framework);
    tensor_leaf_text_append(d.data.text(), record_tensor_facts(r.header, names, data_name), level);
  }

  // dump_tensor_data/, made at its first use.
  safe_dir &tensor_dir(dump_doc &d) {
    if (!d.tensor_dir) {
      await_folder(d);
      const std::string root = std::filesystem::path(d.dir).parent_path().parent_path().string();
      safe_mkdirs(root, d.relative + "/dump_tensor_data");
      d.tensor_dir.emplace(d.dir + "/dump_tensor_data");
    }
    return *d.tensor_dir;
  }

  std::string save_tensor(const record &r, dump_doc &d) {
    const auto &h = r.header;
    const bool pt = d.session.tensor_format == "pt";
    const std::string name = record_data_name(h, d.session.tensor_format);
    if (const std::string problem = dump_name_problem(name); !problem.empty())
      throw usage_error(fmt::format("{} {}: tensor file name \"{}\" {}", r_describe(h), h.slot, name, problem));
    const auto bytes = r.payload_bytes();
    if (pt) torch_save_write(tensor_dir(d), name, h.type, h.shape, bytes);
    else npy_write(tensor_dir(d), name, h.type, h.shape, bytes);
    ++result_.tensor_files;
    result_.tensor_bytes += bytes.size();
    return name;
  }

  // A tensor that arrives with its data but without (all of) its statistics gets them here, with
  // core's computation: the capture computes them in place for most tensors and tprobe-stats for
  // the rest, but a pipeline whose statistics stage was replaced by a user's own stage
  // (docs/stage-protocol.md) must still write a complete dump.
  void fill_missing_stats(record &r) {
    const auto it = sessions_.find(r.header.run);
    if (record_fill_missing_stats(r, it != sessions_.end() ? it->second.stats : stats_options{})) ++result_.stats_computed;
  }

  void place(record &r, dump_doc &d) {
    const auto &h = r.header;
    const entry_name name = entry_parse(h.entry);
    if (!d.session.data_mode.allows(name, h.slot)) return;
    dump_node &e = entry_node(d, h.entry, nullptr, &name);

    // Where in the entry: section and nesting path (the record's own path when it has one).
    const slot_location where = record_slot_location(h, name);
    const std::string &section = where.section;
    const auto &path = where.path;
    for (const auto &element : path)
      if (const auto *index = std::get_if<int64_t>(&element); index && (*index < 0 || *index > max_list_index))
        throw framing_error(fmt::format("{} {}: list index {} in its path is not in 0..{}", r_describe(h), h.slot,
                                        *index, max_list_index));
    if (!where.whole_entry && e.type == dump_node::kind::text)
      throw framing_error(fmt::format("{} {}: the entry holds a whole value (a debug save); a slot cannot go in it",
                                      r_describe(h), h.slot));
    // A path through a filled list by key, or through a filled dict by index, would turn the one
    // into the other (dump_node converts), losing what it held.
    const dump_node *probe = where.whole_entry ? &e : e.find(section);
    for (size_t i = 0; probe && i < path.size(); ++i) {
      const auto *index = std::get_if<int64_t>(&path[i]);
      const auto clash = index ? dump_node::kind::object : dump_node::kind::array;
      if (probe->type == clash && !probe->items.empty())
        throw usage_error(fmt::format("{} {}: its path goes through a {} by {}, which would lose what it holds",
                                      r_describe(h), h.slot, index ? "dict" : "list", index ? "index" : "key"));
      if (index)
        probe = probe->type == dump_node::kind::array && static_cast<size_t>(*index) < probe->items.size()
                    ? &probe->items[static_cast<size_t>(*index)]
                    : nullptr;
      else
        probe = const_cast<dump_node *>(probe)->find(std::get<std::string>(path[i]));
    }

    // The leaf's depth in dump.json: the document {"data": {entry: {section: ...}}} puts a
    // section's value at level 3 (the entry itself at 2), and each path element one deeper.
    const int level = (where.whole_entry ? 2 : 3) + static_cast<int>(path.size());
    std::string data_name;
    if (record_tensor_saved(r)) data_name = save_tensor(r, d);
    const size_t leaf_start = d.data.text().size();
    if (h.kind == record_kind::tensor) tensor_leaf_append(r, d, data_name, level);
    else record_meta_pyjson_append(d.data.text(), h, 1, level);

    // A module forward keeps is_recompute last, after a section that arrives later (parameters),
    // as msprobe writes it (docs/msprobe-compat.md §2.5).
    if (name.is_module() && name.is_forward() && e.find("is_recompute") && !e.find(section)) {
      dump_node flag = e.take("is_recompute");
      e.append(section, {});
      e.append("is_recompute", std::move(flag));
    }
    dump_node *node = where.whole_entry ? &e : &e.member(section);
    for (const auto &element : path) {
      if (const auto *index = std::get_if<int64_t>(&element)) node = &node->item(static_cast<size_t>(*index));
      else node = &node->member(std::get<std::string>(element));
    }
    d.data.set_text(*node, leaf_start);
    d.dirty = true;
  }

  // A path's list index past this is a broken record, not a list: the nulls before it would
  // take the writer's memory.
  static constexpr int64_t max_list_index = 1 << 20;

  // Each prepared temporary holds two descriptors (itself and its folder), six a folder: a writer
  // fed by many ranks at once prepares only for the first prepared_folders_max folders open, so
  // that it stays far from the usual limit of 1024 descriptors; the others create theirs as before.
  static constexpr size_t prepared_folders_max = 16;

  // Whether another folder (than `self`) may prepare its temporaries.
  bool prepare_allowed(const dump_doc *self) const {
    size_t prepared = 0;
    for (const auto &[key, other] : docs_) {
      if (&other == self) continue;
      // A folder whose job may still run is not looked into (its job writes next_*).
      prepared += other.folder_ready.valid()
                      ? other.prepares_in_background
                      : !(other.next_data.empty() && other.next_stacks.empty() && other.next_construct.empty());
    }
    return prepared < prepared_folders_max;
  }

  // Synchronously: d's folder exists (as after a rewrite, which waited for it).
  void prepare_files(dump_doc &d) {
    if (prepare_allowed(&d)) create_prepared_files(d);
  }

  static void create_prepared_files(dump_doc &d) {
    const auto prepare = [&](prepared_file &file, const std::string &name) {
      if (file.empty()) file = prepared_file(d.dir + "/" + name);
    };
    prepare(d.next_data, data_file_name(d.session));
    prepare(d.next_stacks, "stack.json");
    prepare(d.next_construct, "construct.json");
  }

  // The folder's background job is done (its failure thrown here, at every wait).
  static void await_folder(dump_doc &d) {
    if (!d.folder_ready.valid()) return;
    d.folder_ready.get();
    d.folder_ready = {};
  }

  // Into the temporary made ahead of time if there is one (dump_doc::next_data).
  static void replace_file(prepared_file &prepared, const std::string &path, std::string_view text) {
    if (prepared.empty()) atomic_write_file(path, text);
    else prepared.commit(text);
  }

  void write_doc(dump_doc &d) {
    await_folder(d);  // also before a clean folder is moved away (step_end): its job holds it
    if (!d.dirty) return;
    // {"task": …, "level": …, "framework": …, "dump_data_dir": …, "data": {…}}, as msprobe's
    // json.dump(…, indent=1) writes it.
    std::string text;
    text.reserve(last_text_size_ + last_text_size_ / 8);  // a step's dump.json is about the last one's size
    const auto key = [&](const char *name) {
      text.append(text.empty() ? "{\n \"" : ",\n \"").append(name).append("\": ");
    };
    key("task"), pyjson_string_append(text, d.session.task);
    key("level"), pyjson_string_append(text, d.session.level);
    key("framework"), pyjson_string_append(text, d.session.framework);
    key("dump_data_dir");
    if (d.session.tensor_data) pyjson_string_append(text, d.dir + "/dump_tensor_data");
    else text.append("null");
    key("data"), d.data.render(text, 1);
    text.append("\n}");
    last_text_size_ = text.size();
    replace_file(d.next_data, d.dir + "/" + data_file_name(d.session), text);
    if (d.stacks_dirty) {
      text.clear();  // dump.json's buffer, written already
      stack_json_text_append(text, d.stacks);
      replace_file(d.next_stacks, d.dir + "/stack.json", text);
      d.stacks_dirty = false;
    }
    if (d.construct_dirty) {
      replace_file(d.next_construct, d.dir + "/construct.json", pyjson_dump(d.construct, 1));
      d.construct_dirty = false;
    }
    if (d.errors.size() != d.errors_written) {
      text.clear();
      for (const auto &e : d.errors) text.append(e).append("\n");
      atomic_write_file(d.dir + "/dump_error_info.log", text);
      d.errors_written = d.errors.size();
    }
    d.dirty = false;
    ++result_.json_rewrites;
  }

  static constexpr uint64_t refusals_printed = 10;

  writer_stage_options options_;
  writer_stage_result result_;
  size_t last_text_size_ = 0;  // of the last dump.json written
  size_t entries_expected_ = 256;  // entries reserved for a new folder: the most a finished one had
  size_t leaf_text_expected_ = 0;  // leaf text reserved for a new folder: the most a finished one had
  std::map<std::string, session_info> sessions_;
  std::map<doc_key, dump_doc> docs_;
  std::map<doc_key, dump_doc>::value_type *last_doc_ = nullptr;  // the folder doc() gave last
  std::unique_ptr<dump_doc> finished_;
  std::set<std::string> reopened_;
  // Every dump path written into (absolute, normalised) → its lock, held until the writer ends.
  std::map<std::string, std::unique_ptr<dump_path_lock>> locks_;
  std::map<std::string, std::set<std::string>> written_ranks_;  // dump path → its rank folders written
  clock_type::time_point next_flush_;
  // Last: destroyed (its thread joined) before the folders its jobs write into.
  background_jobs jobs_;
};

}  // namespace

const stage_description &writer_stage_description() {
  static const stage_description d{
      "writer",
      "write records as an msprobe dump: step{S}/rank{R}/dump.json, stack.json, construct.json, .npy or .pt",
      true,
      false,
      {
          {"dump-path", "string", "", "dump root; default: the dump_path of the producer's config"},
          {"flush-interval", "float", "2", "seconds between atomic rewrites of dump.json while records arrive", 0.001,
           86400},
      }};
  return d;
}

writer_stage_result writer_run(stage_io &io, const writer_stage_options &options) {
  dump_writer writer(options);
  try {
    while (record *r = io.next()) {
      writer.handle(*r);
      writer.maybe_flush();
    }
  } catch (...) {
    // Whatever went wrong with the stream, what was received is written and parses.
    writer.finish();
    throw;
  }
  writer.finish();
  writer_stage_result result = writer.result();
  result.earlier_run_folders = writer.earlier_run_folders();
  return result;
}

}  // namespace tprobe
