// monitor.cpp: the torch.ops.tprobe operators of python/tprobe/monitor.py (TrainerMon, msprobe's
// training monitor; docs/msprobe-compat.md §9). The monitor's session is its own, apart from the one
// PrecisionDebugger holds (capture_state.h): a process may run both, each to its own pipeline.
//
//   monitor_open(str config_path, int rank, str options) -> str
//     Opens the monitor session (tprobe_monitor_open: the config validated as msprobe's
//     validate_config, defaults filled). options: {"endpoint": "", "watch_pid": 0, "group":
//     {"pp_stage": 0, "group_mates": [0]}} (group optional: anomaly.json's fields). Returns the
//     session config (its "monitor" is the validated monitor config). Throws RuntimeError, one
//     line naming the file and field, for a bad config; and when a monitor session is open.
//   monitor_config_check(str config_path) -> str
//     The session config monitor_open would return, nothing sent anywhere (DYNAMIC_MONITOR's
//     reload; the check before a direct-mode pipeline starts).
//   monitor_reduce(Tensor?[] xs, str ops, float eps) -> Tensor
//     msprobe's statistics (module_metric.py, features.py) of every tensor, computed where the
//     tensors are: a float64 [len(xs), len(ops)] tensor on their device (the first non-CPU
//     tensor's, else the CPU; each tensor is reduced where it is and its row moved there, so a
//     device tensor is never read to the host here). A float8 tensor is reduced as float32
//     (msprobe's). ops: comma-separated, of
//     min, max, norm, mean, zeros, nans, id (shape and dtype are the caller's). No host sync: the
//     caller stacks a step's results and reads them once.
//       min / max   torch.min / torch.max in x's dtype (NaN propagates)
//       norm        the 2-norm of x.to(float64) (torch.norm's kernel of this LibTorch)
//       mean        mean of x.to(float64)
//       zeros       sum(|x| < eps) / numel, the comparison in x's dtype (so an fp16 x with eps
//                   1e-8 compares against 0 and counts nothing: msprobe's, V-5), the quotient in
//                   float32 as torch's true division of an int64 sum gives it; NaN when empty
//       nans        isnan(x).sum()
//       id          x itself when 0-dimensional, else NaN (msprobe's None, written "nan")
//     An op that throws (torch's RuntimeError: min of an empty tensor, abs of a bool) gives NaN,
//     as msprobe's Metric.get_metric; a None (msprobe's non-tensor input or output) gives NaN
//     for every op.
//   monitor_reduce_start(Tensor?[] xs, str ops, float eps, bool early=False) -> int
//     monitor_reduce's result, begun and not waited for: a ticket for monitor_reduce_finish. CPU
//     tensors are reduced on the monitor's worker thread, in the order started, while the training
//     thread goes on (the backward pass, the optimizer step), unless they are fewer than 2^18
//     elements in all (then at once, here: cheaper than the hand-over and the wait for it soon
//     after) and not `early` (the caller finishes the ticket long after: the optimizer step's
//     grads, the moments read for the next step); any other device's reductions are
//     queued on that device now, as monitor_reduce queues them. The caller must not change the
//     tensors until it has finished the ticket (TrainerMon finishes a backward pass's grads in the
//     pass's final callback, and the step's grads before optimizer.step returns) and checks their
//     version counters then. A bad ops text throws here.
//   monitor_reduce_finish(int[] tickets) -> Tensor[]
//     Waits for the tickets' results, in order, and forgets them (each ticket finishes once; an
//     unknown one throws). The tensors a ticket read are released here, on the caller's thread, not
//     on the worker (a tensor whose Python object C++ keeps alive takes the GIL to be freed). A
//     reduction that threw rethrows here, once all the tickets are forgotten.
//   monitor_send(str prefix, int step, str meta) -> bool
//     Hands one csv prefix's rows of a step to the session (tprobe_capture_monitor; meta is the
//     record meta of monitor-common: {"step","ops","micro_step","rows"}). true: sent; false: the
//     session does not take it (detached, stopped by a stage). Throws on TPROBE_ERROR.
//   monitor_rowset(str rows_json) -> int
//     Registers a prefix's fixed rows (tprobe_monitor_rowset: monitor_send's meta whose values are
//     templates, a JSON int marking an int column); returns its handle for monitor_send_rows.
//     Handles live as long as the session.
//   monitor_send_rows(str prefix, int step, int rowset, Tensor[] blocks, int[] spans) -> bool
//     monitor_send with a row set and the step's numbers (no JSON per step): the rows, in order,
//     of spans, triples (index into blocks, first row, rows); every block a contiguous float64 CPU
//     [n, k] tensor (monitor_reduce's, read to the host). A span outside its block throws.
//   monitor_control() -> str
//     "off" / "on" when a stage turned the monitor off or on through the control path since the
//     last call (tprobe_monitor_control), else "". TrainerMon asks after each optimizer step.
//   monitor_counters() -> str
//     The session's counters (records, skipped, undelivered, detached, step) and control_pending:
//     a control command has come that the session has not applied yet.
//   monitor_close() -> str
//     Closes the session (flush, end-of-stream); returns its counters as JSON. "{}" when none.
//
// Reductions run with autograd and RecordFunction off: they are not the model's operators, and a
// PrecisionDebugger capture in the same process must not dump them.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <nlohmann/json.hpp>
#include <torch/library.h>
#include <torch/version.h>

#include "monitor_one_pass.h"
#include "tprobe_capture.h"

namespace {

enum class op { min, max, norm, mean, zeros, nans, id };

std::vector<op> parse_ops(const std::string &text) {
  std::vector<op> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string name = text.substr(start, comma - start);
    start = comma + 1;
    if (name.empty()) continue;
    if (name == "min") out.push_back(op::min);
    else if (name == "max") out.push_back(op::max);
    else if (name == "norm") out.push_back(op::norm);
    else if (name == "mean") out.push_back(op::mean);
    else if (name == "zeros") out.push_back(op::zeros);
    else if (name == "nans") out.push_back(op::nans);
    else if (name == "id") out.push_back(op::id);
    else throw std::runtime_error("tprobe: monitor_reduce: unknown op \"" + name + "\" (min, max, norm, mean, zeros, nans, id)");
  }
  return out;
}

// The tensor a statistic reads: detached, dense, and float8 (torch >= 2.1) widened to float32, as
// msprobe's monitor does before its statistics (the name test keeps this source building on the
// torch versions without those dtypes).
at::Tensor readable(const at::Tensor &given) {
  at::Tensor x = given.detach();
  if (x.is_sparse()) x = x.to_dense();
  if (std::string_view(c10::toString(x.scalar_type())).substr(0, 6) == "Float8") x = x.to(at::kFloat);
  return x;
}

at::Tensor norm_of(const at::Tensor &x64) {
#if TORCH_VERSION_MAJOR >= 2
  return at::linalg_vector_norm(x64, 2);  // torch.norm(x, p=2) since torch 2.0
#else
  std::vector<int64_t> dims(static_cast<size_t>(x64.dim()));
  for (int64_t i = 0; i < x64.dim(); ++i) dims[static_cast<size_t>(i)] = i;
  return at::norm(x64, 2, dims, false);  // torch 1.13's torch.norm: _VF.norm(x, p, dim=all)
#endif
}

// One statistic as a 0-dim tensor on x's device: float64, except min and max (x's dtype), zeros
// (float32) and nans (int64), which the caller casts (.to(kDouble) on a device, .item<double>()
// on the host: the same value).
at::Tensor statistic(op o, const at::Tensor &x, at::Tensor &x64, double eps, const at::Tensor &nan) {
  auto wide = [&]() -> const at::Tensor & {
    if (!x64.defined()) x64 = x.scalar_type() == at::kDouble ? x : x.to(at::kDouble);
    return x64;
  };
  switch (o) {
    case op::min: return at::min(x);
    case op::max: return at::max(x);
    case op::norm: return norm_of(wide());
    case op::mean: return at::mean(wide());
    case op::zeros:
      if (x.numel() == 0) return nan;
      // torch.sum(torch.abs(x) < eps) / x.numel(): the Python float eps is a wrapped number, which
      // leaves the comparison in x's dtype; int64 / int is float32 (the default dtype).
      return at::div(at::lt(at::abs(x), c10::Scalar(eps)).sum(), c10::Scalar(x.numel()));
    case op::nans: return at::isnan(x).sum();
    case op::id: return x.dim() == 0 ? x.to(at::kDouble) : nan;
  }
  return nan;
}

// One read of a large contiguous float32 or float64 CPU tensor for all of its statistics, where
// msprobe's formulas (statistic() above) read it once per op and make a float64 copy: min and max
// in x's dtype (NaN when there is one), norm and mean from float64 sums, zeros compared in x's
// dtype and divided in float32, nans counted. The sums run in a fixed order over 16 float64 lanes
// (core/monitor_one_pass.h), so mean and norm may differ from torch's in the last bits (its own
// order differs by ISA and version). Every size takes this path: a step's many small tensors (a
// bias, a LayerNorm's weight) cost torch four kernels, a float64 copy and their allocations each,
// which was most of the monitor's time on a small model.

template <class T>
int64_t nan_count(const T *x, int64_t n) {
  int64_t nans = 0;
  for (int64_t i = 0; i < n; ++i) nans += x[i] != x[i];
  return nans;
}

template <class T>
void one_pass(const T *x, int64_t n, const std::vector<op> &ops, double eps, double *row) {
  const bool want_zeros = std::find(ops.begin(), ops.end(), op::zeros) != ops.end();
  const T eps_t = static_cast<T>(eps);  // torch's wrapped Python float takes x's dtype
  const tprobe::lane_sums<T> s = tprobe::one_pass_sums(x, n, eps_t, want_zeros);
  double total = 0, squares = 0;
  T low = s.lo[0], high = s.hi[0];
  for (int l = 0; l < tprobe::one_pass_lanes; ++l) {
    total += s.sum[l];
    squares += s.sumsq[l];
    low = s.lo[l] < low ? s.lo[l] : low;
    high = s.hi[l] > high ? s.hi[l] : high;
  }
  const int64_t zeros = s.zeros;
  // A NaN makes the sum NaN (so does +Inf with -Inf): only then, or when nans is asked for, are
  // the NaNs counted, in a second read.
  const bool want_nans = std::find(ops.begin(), ops.end(), op::nans) != ops.end();
  const int64_t nans = want_nans || std::isnan(total) ? nan_count(x, n) : 0;
  const double quiet_nan = std::numeric_limits<double>::quiet_NaN();
  for (size_t j = 0; j < ops.size(); ++j) {
    switch (ops[j]) {
      case op::min: row[j] = nans ? quiet_nan : static_cast<double>(low); break;
      case op::max: row[j] = nans ? quiet_nan : static_cast<double>(high); break;
      case op::norm: row[j] = std::sqrt(squares); break;  // NaN and Inf propagate through the sums
      case op::mean: row[j] = total / static_cast<double>(n); break;
      case op::zeros: row[j] = static_cast<double>(static_cast<float>(zeros) / static_cast<float>(n)); break;
      case op::nans: row[j] = static_cast<double>(nans); break;
      case op::id: row[j] = quiet_nan; break;  // n > 0 elements: not 0-dimensional
    }
  }
}

// Whether one_pass reads x: a contiguous float32/float64 CPU tensor with at least one dimension
// and one element (a 0-dimensional one's id is its value; an empty one's min throws: torch's).
bool one_pass_fits(const at::Tensor &x) {
  return x.device().is_cpu() && x.layout() == c10::kStrided && x.is_contiguous() && x.dim() > 0 && x.numel() > 0 &&
         (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble);
}

// The CPU case: each statistic's value goes straight into the result (.item(), no sync on the host),
// instead of a 0-dim tensor per value, its cast to float64 and one stack of them all: a CPU step's
// small tensors cost their statistics' kernels, not twice as many allocations. The values are the
// same: a float, half or integer scalar read as double is the cast .to(kDouble) makes. Every tensor
// given here is on the CPU (monitor_reduce sends any list with a device tensor to the general path).
at::Tensor reduce_on_host(const c10::List<c10::optional<at::Tensor>> &xs, const std::vector<op> &ops, double eps,
                          int64_t n, int64_t k) {
  const double quiet_nan = std::numeric_limits<double>::quiet_NaN();
  at::Tensor out = at::empty({n, k}, at::TensorOptions().dtype(at::kDouble));
  double *row = out.data_ptr<double>();
  const at::Tensor nan = at::full({}, quiet_nan, at::TensorOptions().dtype(at::kDouble));
  for (size_t i = 0; i < xs.size(); ++i, row += k) {
    const c10::optional<at::Tensor> given = xs.get(i);
    if (!given || !given->defined()) {
      std::fill(row, row + k, quiet_nan);
      continue;
    }
    if (one_pass_fits(*given)) {  // read in place: no detached alias to make (a small model's many tensors)
      if (given->scalar_type() == at::kFloat) one_pass(given->data_ptr<float>(), given->numel(), ops, eps, row);
      else one_pass(given->data_ptr<double>(), given->numel(), ops, eps, row);
      continue;
    }
    const at::Tensor x = readable(*given);
    at::Tensor x64;
    for (int64_t j = 0; j < k; ++j) {
      try {
        const at::Tensor v = statistic(ops[static_cast<size_t>(j)], x, x64, eps, nan);
        row[j] = v.item<double>();
      } catch (const std::exception &) {  // c10::Error is torch's RuntimeError: msprobe's NaN
        row[j] = quiet_nan;
      }
    }
  }
  return out;
}

at::Tensor monitor_reduce(const c10::List<c10::optional<at::Tensor>> &xs, const std::string &ops_text, double eps) {
  const std::vector<op> ops = parse_ops(ops_text);
  at::DisableRecordFunctionGuard no_record;
  at::NoGradGuard no_grad;
  c10::Device device(c10::kCPU);  // the first non-CPU tensor's: no device tensor read to the host here
  for (size_t i = 0; i < xs.size(); ++i) {
    const c10::optional<at::Tensor> t = xs.get(i);
    if (t && t->defined() && !t->device().is_cpu()) {
      device = t->device();
      break;
    }
  }
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(device);
  const int64_t n = static_cast<int64_t>(xs.size()), k = static_cast<int64_t>(ops.size());
  if (n == 0 || k == 0) return at::empty({n, k}, f64);
  if (device.is_cpu()) return reduce_on_host(xs, ops, eps, n, k);
  const at::Tensor nan = at::full({}, std::numeric_limits<double>::quiet_NaN(), f64);
  std::vector<at::Tensor> cells;
  cells.reserve(static_cast<size_t>(n * k));
  for (size_t i = 0; i < xs.size(); ++i) {
    const c10::optional<at::Tensor> given = xs.get(i);
    if (!given || !given->defined()) {
      cells.insert(cells.end(), ops.size(), nan);
      continue;
    }
    const at::Tensor x = readable(*given);
    at::Tensor x64;
    for (op o : ops) {
      at::Tensor v;
      try {
        v = statistic(o, x, x64, eps, nan);
        if (v.scalar_type() != at::kDouble) v = v.to(at::kDouble);
      } catch (const std::exception &) {  // c10::Error is torch's RuntimeError: msprobe's NaN
        v = nan;
      }
      cells.push_back(v.device() == device ? v : v.to(device));
    }
  }
  return at::stack(cells).reshape({n, k});
}

// ---- reductions off the training thread ----
//
// One worker thread per process (a fork's child makes its own: the parent's thread is not in it),
// started on first use and never joined: it sleeps on a condition variable between jobs, and a
// process may exit with it asleep. Its jobs are CPU reductions only: the training thread's own
// kernels already run while a device reduces.

struct reduce_job {
  int64_t ticket = 0;
  c10::List<c10::optional<at::Tensor>> xs;
  std::string ops;
  double eps = 0;
};

struct reduce_result {
  bool done = false;
  at::Tensor block;
  std::exception_ptr error;
  c10::List<c10::optional<at::Tensor>> xs;  // released by monitor_reduce_finish, on its thread
};

struct reduce_worker {
  std::mutex mutex;
  std::condition_variable wake, finished;
  std::deque<reduce_job> jobs;
  std::unordered_map<int64_t, reduce_result> results;
  int64_t next_ticket = 1;
  pid_t owner = 0;

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return !jobs.empty(); });
      reduce_job job = std::move(jobs.front());
      jobs.pop_front();
      lock.unlock();
      reduce_result r;
      try {
        r.block = monitor_reduce(job.xs, job.ops, job.eps);
      } catch (...) {
        r.error = std::current_exception();
      }
      r.xs = std::move(job.xs);
      r.done = true;
      lock.lock();
      results[job.ticket] = std::move(r);
      finished.notify_all();
    }
  }
};

reduce_worker &the_worker() {
  static std::mutex made;
  static reduce_worker *w = nullptr;
  std::lock_guard lock(made);
  if (!w || w->owner != getpid()) {
    w = new reduce_worker;  // a fork's child leaves its parent's (its mutex may be held) behind
    w->owner = getpid();
    std::thread([worker = w] { worker->run(); }).detach();
  }
  return *w;
}

// Below this many elements a CPU reduction runs on the caller's thread (monitor_reduce_start).
constexpr int64_t worker_min_elements = int64_t{1} << 18;

int64_t monitor_reduce_start(const c10::List<c10::optional<at::Tensor>> &xs, const std::string &ops_text, double eps,
                             bool early) {
  (void)parse_ops(ops_text);  // a bad ops text is the caller's error, thrown on its thread
  bool on_host = true;
  int64_t elements = 0;
  for (size_t i = 0; i < xs.size() && on_host; ++i) {
    const c10::optional<at::Tensor> t = xs.get(i);
    if (t && t->defined()) on_host = t->device().is_cpu(), elements += t->numel();
  }
  reduce_worker &w = the_worker();
  // Queued on the device now (nothing for the worker to do), or so few elements that reading them
  // here costs less than handing them over (one pass reads 2^18 float32s in about 45 µs; waking the
  // worker and waiting for it costs more): a small model's grads stay on this thread.
  if (!on_host || (elements < worker_min_elements && !early)) {
    reduce_result r;
    r.block = monitor_reduce(xs, ops_text, eps);
    r.done = true;
    std::lock_guard lock(w.mutex);
    const int64_t ticket = w.next_ticket++;
    w.results[ticket] = std::move(r);
    return ticket;
  }
  std::lock_guard lock(w.mutex);
  const int64_t ticket = w.next_ticket++;
  w.results[ticket];  // known, not done
  w.jobs.push_back({ticket, xs, ops_text, eps});
  w.wake.notify_one();
  return ticket;
}

std::vector<at::Tensor> monitor_reduce_finish(std::vector<int64_t> tickets) {
  reduce_worker &w = the_worker();
  std::vector<reduce_result> got;
  got.reserve(tickets.size());
  {
    std::unique_lock lock(w.mutex);
    for (int64_t ticket : tickets) {
      auto it = w.results.find(ticket);
      if (it == w.results.end())
        throw std::runtime_error("tprobe: monitor_reduce_finish: no reduction has ticket " + std::to_string(ticket));
      const reduce_result &slot = it->second;  // a rehash (another start) moves iterators, not elements
      w.finished.wait(lock, [&] { return slot.done; });
      got.push_back(std::move(w.results.at(ticket)));
      w.results.erase(ticket);
    }
  }
  std::vector<at::Tensor> blocks;
  blocks.reserve(got.size());
  for (auto &r : got)
    if (r.error) std::rethrow_exception(r.error);
  for (auto &r : got) blocks.push_back(std::move(r.block));
  return blocks;
}

// ---- the monitor's session ----

struct monitor_session {
  std::mutex mutex;
  tprobe_session *session = nullptr;
  pid_t owner = 0;  // a fork's child must not use its parent's session
};

monitor_session &the_monitor() {
  static auto *m = new monitor_session;  // never destroyed: hooks may run during exit
  return *m;
}

[[noreturn]] void fail(const std::string &what) { throw std::runtime_error(what + ": " + tprobe_last_error()); }

std::string monitor_open(std::string config_path, int64_t rank, std::string options_json) {
  monitor_session &m = the_monitor();
  std::lock_guard lock(m.mutex);
  if (m.session && m.owner == getpid()) throw std::runtime_error("tprobe: a monitor session is already open in this process");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(options_json);
  } catch (const nlohmann::json::exception &e) {
    throw std::runtime_error(std::string("tprobe: monitor_open: options are not JSON: ") + e.what());
  }
  const std::string endpoint = j.value("endpoint", std::string{});
  const std::string group = j.contains("group") ? j["group"].dump() : std::string{};
  tprobe_open_options o = tprobe_open_options_default();
  o.rank = static_cast<int>(rank);
  o.framework = "pytorch";
  if (!endpoint.empty()) o.endpoint = endpoint.c_str();
  o.watch_pid = j.value("watch_pid", int64_t{0});
  tprobe_session *session = nullptr;
  if (tprobe_monitor_open(config_path.c_str(), group.empty() ? nullptr : group.c_str(), &o, &session) != TPROBE_OK)
    throw std::runtime_error(tprobe_last_error());
  m.session = session;
  m.owner = getpid();
  const char *config = tprobe_session_config(session);
  return config ? config : "{}";
}

std::string monitor_config_check(std::string config_path) {
  const char *config = tprobe_monitor_config_check(config_path.c_str(), nullptr);
  if (!config) throw std::runtime_error(tprobe_last_error());
  return config;
}

tprobe_session *open_session(monitor_session &m) {
  if (!m.session || m.owner != getpid()) throw std::runtime_error("tprobe: no monitor session is open in this process");
  return m.session;
}

bool monitor_send(std::string prefix, int64_t step, std::string meta) {
  monitor_session &m = the_monitor();
  std::lock_guard lock(m.mutex);
  const int rc = tprobe_capture_monitor(open_session(m), prefix.c_str(), step, meta.c_str());
  if (rc == TPROBE_ERROR) fail("tprobe: monitor");
  return rc == TPROBE_OK;
}

int64_t monitor_rowset(std::string rows_json) {
  monitor_session &m = the_monitor();
  std::lock_guard lock(m.mutex);
  const int handle = tprobe_monitor_rowset(open_session(m), rows_json.c_str());
  if (handle == TPROBE_ERROR) fail("tprobe: monitor");
  return handle;
}

bool monitor_send_rows(std::string prefix, int64_t step, int64_t rowset, std::vector<at::Tensor> blocks,
                       std::vector<int64_t> spans) {
  if (spans.size() % 3 != 0)
    throw std::runtime_error("tprobe: monitor_send_rows: spans are not (block, row, rows) triples");
  for (const at::Tensor &b : blocks)
    if (!b.device().is_cpu() || b.scalar_type() != at::kDouble || b.dim() != 2 || !b.is_contiguous())
      throw std::runtime_error("tprobe: monitor_send_rows: a block is not a contiguous float64 CPU matrix");
  std::vector<double> values;
  for (size_t i = 0; i < spans.size(); i += 3) {
    const int64_t which = spans[i], first = spans[i + 1], rows = spans[i + 2];
    if (which < 0 || which >= static_cast<int64_t>(blocks.size()))
      throw std::runtime_error("tprobe: monitor_send_rows: a span names no block");
    const at::Tensor &b = blocks[static_cast<size_t>(which)];
    if (first < 0 || rows < 0 || first + rows > b.size(0))
      throw std::runtime_error("tprobe: monitor_send_rows: a span is outside its block");
    const double *from = b.data_ptr<double>() + first * b.size(1);
    values.insert(values.end(), from, from + rows * b.size(1));
  }
  monitor_session &m = the_monitor();
  std::lock_guard lock(m.mutex);
  const int rc = tprobe_capture_monitor_values(open_session(m), prefix.c_str(), step, static_cast<int>(rowset),
                                               values.data(), values.size());
  if (rc == TPROBE_ERROR) fail("tprobe: monitor");
  return rc == TPROBE_OK;
}

std::string monitor_control() {
  monitor_session &m = the_monitor();
  std::lock_guard lock(m.mutex);
  const int rc = tprobe_monitor_control(open_session(m));
  if (rc == TPROBE_ERROR) fail("tprobe: monitor");
  return rc == TPROBE_MONITOR_ON ? "on" : rc == TPROBE_MONITOR_OFF ? "off" : "";
}

std::string counters_of(const tprobe_session_counts &c, int64_t step) {
  return nlohmann::json{{"records", c.records},         {"skipped", c.skipped},
                        {"undelivered", c.undelivered}, {"detached", c.detached != 0},
                        {"first_step_not_dumped", c.first_step_not_dumped}, {"step", step}}
      .dump();
}

std::string monitor_counters() {
  monitor_session &m = the_monitor();
  std::lock_guard lock(m.mutex);
  tprobe_session_counts c{};
  tprobe_session *s = open_session(m);
  tprobe_session_counts_get(s, &c);
  std::string text = counters_of(c, tprobe_current_step(s));
  text.insert(text.size() - 1, std::string(",\"control_pending\":") + (tprobe_control_pending(s) ? "true" : "false"));
  return text;
}

std::string monitor_close() {
  monitor_session &m = the_monitor();
  std::lock_guard lock(m.mutex);
  if (!m.session || m.owner != getpid()) return "{}";
  tprobe_session *s = m.session;
  m.session = nullptr;
  tprobe_session_counts c{};
  tprobe_session_counts_get(s, &c);
  const int64_t step = tprobe_current_step(s);
  if (tprobe_session_close(s) == TPROBE_ERROR) fail("tprobe: closing the monitor");
  return counters_of(c, step);
}

}  // namespace

// A fragment of torch_ops.cpp's library: the monitor lives apart from the dump's operators.
TORCH_LIBRARY_FRAGMENT(tprobe, m) {
  m.def("monitor_open(str config_path, int rank, str options) -> str", &monitor_open);
  m.def("monitor_config_check(str config_path) -> str", &monitor_config_check);
  m.def("monitor_reduce(Tensor?[] xs, str ops, float eps) -> Tensor", &monitor_reduce);
  m.def("monitor_reduce_start(Tensor?[] xs, str ops, float eps, bool early=False) -> int", &monitor_reduce_start);
  m.def("monitor_reduce_finish(int[] tickets) -> Tensor[]", &monitor_reduce_finish);
  m.def("monitor_rowset(str rows_json) -> int", &monitor_rowset);
  m.def("monitor_send_rows(str prefix, int step, int rowset, Tensor[] blocks, int[] spans) -> bool", &monitor_send_rows);
  m.def("monitor_send(str prefix, int step, str meta) -> bool", &monitor_send);
  m.def("monitor_control() -> str", &monitor_control);
  m.def("monitor_counters() -> str", &monitor_counters);
  m.def("monitor_close() -> str", &monitor_close);
}
