// free_benchmark.cpp: task free_benchmark in the operator callbacks (capture_state.h declares
// the members; fuzz.h has the perturbations and comparisons; core/free_benchmark.h the settings,
// thresholds, preheat and rows).
//
// Where the re-run happens, and why: in the training process, on the thread and device of the
// call, right after the call (its RecordFunction's end). A CPU kernel says nothing about a GPU
// kernel, `fix` must change the training's own values, and the tensors are already where the
// kernel needs them: nothing is copied but what a perturbation or msprobe's own rule (to_cpu,
// preheat's CPU sample) asks for. The re-run is invisible to the capture (RecordFunction off), to
// autograd (no grad, except the backward's vjp, which builds a graph of its own) and to the
// training's random numbers: the generators are set back to the state the call began with, so a
// dropout re-runs with the same mask, and left where the call ended after it.
//
// Forward (fuzz_stage forward): the call's arguments, kept at its start (a copy only of those it
// writes), are perturbed (fuzz_perturb), the operator re-run through the dispatcher, the two
// outputs compared (check: a row per inconsistent output; preheat: the same with adaptive
// thresholds and CPU samples) or the perturbed output written into the original (fix).
// Backward (fuzz_stage backward): at the call's end, the nodes the call created get post hooks
// that sum the gradients leaving them toward each input (the call's own share of each input's
// gradient, not what other users of the input add), and its outputs tensor hooks that keep their
// gradients. When the last node has run, the call is re-run on perturbed copies of its inputs and
// differentiated against the same output gradients (msprobe's vjp), and each input's real
// gradient compared with the perturbed one.
//
// Errors: a call that cannot be re-run (its kernel refuses the perturbed arguments, say) is said
// once per API on stderr and counted; it never fails the capture or the training.
#include <unordered_set>

#include <ATen/SequenceNumber.h>
#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "capture_state.h"
#include "dump_semantics.h"
#include "fuzz.h"

namespace tprobe::torch_capture {

using torch::autograd::Node;
using torch::autograd::variable_list;

namespace {

// The random generators a call may draw from: the CPU's, and the current CUDA device's when the
// call has CUDA tensors.
std::vector<at::Generator> generators_of(const std::vector<c10::IValue> &args) {
  std::vector<at::Generator> out{at::detail::getDefaultCPUGenerator()};
  for (const auto &a : args)
    if (a.isTensor() && a.toTensor().defined() && a.toTensor().is_cuda()) {
      out.push_back(at::globalContext().defaultGenerator(a.toTensor().device()));
      break;
    }
  return out;
}

std::vector<at::Tensor> states_of(std::vector<at::Generator> &gens) {
  std::vector<at::Tensor> states;
  for (auto &g : gens) {
    std::lock_guard lock(g.mutex());
    states.push_back(g.get_state());
  }
  return states;
}

void restore(std::vector<at::Generator> &gens, const std::vector<at::Tensor> &states) {
  for (size_t i = 0; i < gens.size() && i < states.size(); ++i) {
    std::lock_guard lock(gens[i].mutex());
    gens[i].set_state(states[i]);
  }
}

// Runs `f` with the generators as they were at the call's start, then puts them back.
template <class F>
auto with_call_randomness(fuzz_call &call, F &&f) {
  if (call.rng_states.empty()) return f();
  auto now = states_of(call.generators);
  restore(call.generators, call.rng_states);
  struct put_back {
    fuzz_call &c;
    std::vector<at::Tensor> &s;
    ~put_back() { restore(c.generators, s); }
  } guard{call, now};
  return f();
}

}  // namespace

std::unique_ptr<at::ObserverContext> state::fuzz_begin(const at::RecordFunction &fn, const op_info &info,
                                                       int depth) {
  if (!info.has_schema || !info.operator_name) return nullptr;
  std::lock_guard lock(mutex);
  if (!ops_on.load() || !session || !fuzz) return nullptr;
  try {
    const op_name &n = depth == 0 ? info.outer : info.nested;
    const int64_t count = call_counts[n.counter]++;
    // A collective re-run would wait for ranks that never join it.
    if (n.prefix == "Distributed") return nullptr;
    const std::string forward = entry_api_name(n.prefix, n.api, count, entry_direction::forward);
    const std::string asked =
        fuzz->backward() ? entry_api_name(n.prefix, n.api, count, entry_direction::backward) : forward;
    if (checked(tprobe_fuzz_query(session, asked.c_str()), "free_benchmark") != TPROBE_OK) return nullptr;
    if (fuzz->backward() && !at::GradMode::is_enabled()) return nullptr;
    auto ctx = std::make_unique<op_context>();
    ctx->forward = forward;
    ctx->fuzz = std::make_shared<fuzz_call>();
    fuzz_call &call = *ctx->fuzz;
    const auto inputs = fn.inputs();
    call.args.assign(inputs.begin(), inputs.end());
    std::vector<bool> kwarg_only;
    for (const auto &a : info.arguments) kwarg_only.push_back(a.kwarg_only);
    call.valid = fuzz_valid_input(call.args, kwarg_only);
    // A call that will not be re-run (improve_precision with nothing to raise) keeps nothing more.
    // One that may be keeps what it writes as it was before (the re-run starts from the same
    // values) and the random generators' states.
    if (fuzz_may_rerun(call.args, call.valid, fuzz->pert_mode) || fuzz->backward()) {
      for (size_t i : info.written)
        if (i < call.args.size()) call.args[i] = fuzz_perturb({call.args[i]}, -1, "no_change", {0}).args[0];
      call.generators = generators_of(call.args);
      call.rng_states = states_of(call.generators);
    }
    call.sequence_begin = at::sequence_number::peek();
    return ctx;
  } catch (const std::exception &e) {
    fail(e.what());
    return nullptr;
  }
}

void state::fuzz_warn(const std::string &api, const std::string &what, bool failed) {
  std::lock_guard lock(mutex);
  ++(failed ? fuzz_failures : fuzz_unsupported);
  const std::string pure = free_benchmark_preheat::pure_name(api);
  if (fuzz_warned.insert(pure).second)
    std::fprintf(stderr, "tprobe: free_benchmark: %s: %s (said once per API)\n", api.c_str(), what.c_str());
}

void state::fuzz_rows(const std::string &api, const char *stage, const std::vector<fuzz_finding> &findings) {
  std::lock_guard lock(mutex);
  if (!session) return;
  for (const auto &f : findings) {
    const std::string dtype = fuzz_dtype_name(f.dtype);
    tprobe_fuzz_row row{};
    row.api_name = api.c_str();
    row.stage = stage;
    row.verdict = f.no_ratio ? TPROBE_FUZZ_NO_RATIO : f.symbol_flipping ? TPROBE_FUZZ_SYMBOL_FLIPPING : TPROBE_FUZZ_RATIO;
    row.ratio = f.ratio;
    row.dtype = dtype.c_str();
    row.ndim = static_cast<int>(f.shape.size());
    row.shape = f.shape.data();
    row.output_index = f.index;
    if (checked(tprobe_capture_fuzz_row(session, &row), "free_benchmark row") == TPROBE_OK) ++fuzz_found;
  }
}

void state::fuzz_end(const at::RecordFunction &fn, op_context &ctx) {
  fuzz_call &call = *ctx.fuzz;
  const op_info &info = info_of(fn);
  try {
    at::DisableRecordFunctionGuard no_record;
    const int valid = call.valid;
    if (valid < 0) {
      // msprobe's warning (无标杆工具不支持当前算子的输入类型), once per API here.
      fuzz_warn(ctx.forward, "no floating-point tensor or list among its positional arguments: not fuzzed", false);
      return;
    }
    const auto op = c10::Dispatcher::singleton().findSchema(*info.operator_name);
    if (!op) return;
    const std::vector<c10::IValue> outputs(fn.outputs().begin(), fn.outputs().end());
    if (fuzz->backward()) {
      fuzz_link_backward(ctx, *op, outputs);
      return;
    }
    const auto original = fuzz_output_tensors(outputs);
    if (original.empty()) return;
    const std::string &mode = fuzz->pert_mode;
    int64_t step = 0;
    {
      std::lock_guard lock(mutex);
      if (!session) return;
      step = tprobe_current_step(session);
    }
    at::NoGradGuard no_grad;
    fuzz_arguments perturbed = fuzz_perturb(call.args, valid, mode, info.written);
    if (!perturbed.perturbed) return;
    // Preheat counts a call as msprobe's handler does: once its perturbed result holds a floating
    // tensor (the re-run's outputs have the original's kinds). Step 0 only counts: no re-run.
    const bool any_float = std::any_of(original.begin(), original.end(), [](const auto &o) {
      return o.second.defined() && o.second.is_floating_point();
    });
    std::string pure, first_dtype;
    int64_t order = 0;
    if (fuzz->preheat()) {
      if (!any_float) return;
      pure = free_benchmark_preheat::pure_name(ctx.forward);
      std::lock_guard lock(mutex);
      if (!free_benchmark_preheat::compares(step)) {
        preheat->count_call(pure, step);
        return;
      }
      if (step < fuzz->preheat_step) order = preheat->count_call(pure, step);
    }
    const auto results = with_call_randomness(call, [&] { return fuzz_rerun(*op, std::move(perturbed.args)); });
    const auto rerun = fuzz_output_tensors(results);
    ++fuzz_reruns;
    if (fuzz->fix()) {
      if (!fuzz_fix_outputs(original, rerun)) fuzz_warn(ctx.forward, "fix: the re-run's outputs do not pair with the call's");
      return;
    }
    const at::ScalarType dtype = original.front().second.scalar_type();
    first_dtype = fuzz_dtype_name(dtype);
    double threshold = free_benchmark_threshold(first_dtype, mode);
    if (fuzz->preheat()) {
      std::lock_guard lock(mutex);
      threshold = preheat->threshold(pure, first_dtype);
    }
    double largest = 1.0;
    const auto findings = fuzz_compare(original, rerun, mode, false, threshold, &largest);
    fuzz_rows(ctx.forward, "forward", findings);
    if (fuzz->preheat() && step < fuzz->preheat_step) {
      bool sampled = false;
      {
        std::lock_guard lock(mutex);
        sampled = preheat->sampled(pure, first_dtype, step, order);
      }
      if (!sampled) return;
      // The sample's verdict from the CPU in float32 (msprobe's compare_npu_and_cpu).
      fuzz_arguments cpu = fuzz_perturb(call.args, valid, "to_cpu", info.written);
      const auto golden = fuzz_output_tensors(with_call_randomness(call, [&] { return fuzz_rerun(*op, std::move(cpu.args)); }));
      bool cpu_consistent = true;
      for (size_t i = 0; i < original.size() && i < golden.size(); ++i)
        if (original[i].second.is_floating_point() && original[i].second.sizes() == golden[i].second.sizes())
          cpu_consistent = cpu_consistent && fuzz_single_compare(original[i].second, golden[i].second);
      std::lock_guard lock(mutex);
      preheat->add_sample(pure, first_dtype, step, largest, cpu_consistent);
    }
  } catch (const std::exception &e) {
    fuzz_warn(ctx.forward, std::string("could not be re-run: ") + e.what());
  }
}

// ---- Backward ----

// One call's backward check: what the call's nodes and outputs report, and when all have.
struct fuzz_backward_check {
  std::string api;
  std::shared_ptr<fuzz_call> call;
  c10::OperatorHandle op;
  std::vector<size_t> grad_args;        // argument positions of the inputs that require grad
  std::vector<at::Tensor> real;         // their gradients from the call's nodes, summed
  std::vector<at::Tensor> outputs;      // the call's floating outputs that require grad
  std::vector<at::Tensor> grad_outputs; // their gradients, as the hooks saw them
  int pending = 0;                      // nodes whose post hook has yet to run
  std::mutex mutex;
  explicit fuzz_backward_check(c10::OperatorHandle h) : op(std::move(h)) {}
};

namespace {

class leaving_hook : public torch::autograd::FunctionPostHook {
 public:
  leaving_hook(std::shared_ptr<fuzz_backward_check> check, std::vector<std::pair<size_t, size_t>> leaving)
      : check_(std::move(check)), leaving_(std::move(leaving)) {}
  variable_list operator()(const variable_list &outputs, const variable_list & /*inputs*/) override {
    bool last = false;
    {
      std::lock_guard lock(check_->mutex);
      for (const auto &[k, j] : leaving_) {
        if (k >= outputs.size() || !outputs[k].defined()) continue;
        check_->real[j] = check_->real[j].defined() ? check_->real[j] + outputs[k].detach() : outputs[k].detach();
      }
      last = --check_->pending == 0;
    }
    if (last) the_state().fuzz_backward_compare(*check_);
    return outputs;
  }

 private:
  std::shared_ptr<fuzz_backward_check> check_;
  std::vector<std::pair<size_t, size_t>> leaving_;  // node output → input j
};

}  // namespace

void state::fuzz_link_backward(op_context &ctx, const c10::OperatorHandle &op, const std::vector<c10::IValue> &outputs) {
  fuzz_call &call = *ctx.fuzz;
  const uint64_t end = at::sequence_number::peek();
  if (end <= call.sequence_begin) return;  // no autograd node: nothing to differentiate
  auto check = std::make_shared<fuzz_backward_check>(op);
  check->api = ctx.forward;
  check->call = ctx.fuzz;
  // The inputs that require grad, and the edges their gradients leave the call through.
  std::vector<std::pair<const Node *, uint32_t>> targets;
  for (size_t i = 0; i < call.args.size(); ++i) {
    if (!call.args[i].isTensor()) continue;
    const at::Tensor &t = call.args[i].toTensor();
    if (!t.defined() || !t.requires_grad()) continue;
    if (const auto &fn = t.grad_fn()) targets.emplace_back(fn.get(), static_cast<uint32_t>(t.output_nr()));
    else targets.emplace_back(torch::autograd::impl::try_get_grad_accumulator(t).get(), 0);
    check->grad_args.push_back(i);
  }
  if (check->grad_args.empty()) return;
  check->real.resize(check->grad_args.size());
  // The re-run must start from the inputs as they are now, whatever later calls do to them.
  for (size_t i : check->grad_args) call.args[i] = c10::IValue(call.args[i].toTensor().detach().clone());
  const uint64_t thread = at::RecordFunction::currentThreadId();
  auto inside = [&](const Node *n) {
    return n->sequence_nr() >= call.sequence_begin && n->sequence_nr() < end && n->thread_id() == thread;
  };
  std::vector<Node *> frontier;
  std::unordered_set<const Node *> seen;
  for (const auto &[index, t] : fuzz_output_tensors(outputs)) {
    if (!t.defined() || !t.requires_grad() || !t.is_floating_point()) continue;
    const auto &fn = t.grad_fn();
    if (!fn || !inside(fn.get())) continue;
    const size_t k = check->outputs.size();
    check->outputs.push_back(t.detach());
    check->grad_outputs.emplace_back();
    std::weak_ptr<fuzz_backward_check> weak = check;
    at::Tensor(t).register_hook([weak, k](const at::Tensor &g) {
      if (auto c = weak.lock()) {
        std::lock_guard lock(c->mutex);
        c->grad_outputs[k] = g.detach();
      }
    });
    if (seen.insert(fn.get()).second) frontier.push_back(fn.get());
  }
  std::vector<std::pair<Node *, std::vector<std::pair<size_t, size_t>>>> hooks;
  while (!frontier.empty()) {
    Node *n = frontier.back();
    frontier.pop_back();
    std::vector<std::pair<size_t, size_t>> leaving;
    const auto &next = n->next_edges();
    for (size_t k = 0; k < next.size(); ++k) {
      const Node *f = next[k].function.get();
      if (!f) continue;
      for (size_t j = 0; j < targets.size(); ++j)
        if (targets[j].first == f && targets[j].second == next[k].input_nr) leaving.emplace_back(k, j);
      if (inside(f) && seen.insert(f).second) frontier.push_back(const_cast<Node *>(f));
    }
    if (!leaving.empty()) hooks.emplace_back(n, std::move(leaving));
  }
  if (hooks.empty() || check->outputs.empty()) return;
  check->pending = static_cast<int>(hooks.size());
  for (auto &[n, leaving] : hooks) n->add_post_hook(std::make_unique<leaving_hook>(check, std::move(leaving)));
}

void state::fuzz_backward_compare(fuzz_backward_check &check) {
  if (!fuzz) return;  // a backward after the session's end and a new open of another task
  try {
    at::DisableRecordFunctionGuard no_record;
    fuzz_call &call = *check.call;
    std::vector<at::Tensor> grad_outputs;
    for (size_t k = 0; k < check.outputs.size(); ++k)
      grad_outputs.push_back(check.grad_outputs[k].defined() ? check.grad_outputs[k] : at::zeros_like(check.outputs[k]));
    // msprobe perturbs [inputs that need grad, output gradients, the other arguments], the first
    // list being its valid input: a noise mode changes the first input, improve_precision every
    // half-precision tensor of the three.
    c10::List<at::Tensor> need;
    for (size_t i : check.grad_args) need.push_back(call.args[i].toTensor());
    c10::List<at::Tensor> gout;
    for (const auto &g : grad_outputs) gout.push_back(g);
    std::vector<c10::IValue> packed{need, gout};
    for (size_t i = 0; i < call.args.size(); ++i)
      if (std::find(check.grad_args.begin(), check.grad_args.end(), i) == check.grad_args.end())
        packed.push_back(call.args[i]);
    fuzz_arguments p = fuzz_perturb(packed, 0, fuzz->pert_mode, {});
    if (!p.perturbed) return;
    std::vector<at::Tensor> inputs;
    for (const at::Tensor &t : p.args[0].toTensorList()) inputs.push_back(t.detach().requires_grad_(true));
    std::vector<at::Tensor> gouts;
    for (const at::Tensor &t : p.args[1].toTensorList()) gouts.push_back(t);
    std::vector<c10::IValue> args = call.args;
    size_t next_other = 2;
    for (size_t i = 0; i < args.size(); ++i) {
      const auto it = std::find(check.grad_args.begin(), check.grad_args.end(), i);
      if (it != check.grad_args.end()) args[i] = inputs[static_cast<size_t>(it - check.grad_args.begin())];
      else args[i] = p.args[next_other++];
    }
    std::vector<at::Tensor> perturbed_grads;
    {
      at::AutoGradMode grad(true);
      const auto results = with_call_randomness(call, [&] { return fuzz_rerun(check.op, std::move(args)); });
      std::vector<at::Tensor> outs;
      for (const auto &[index, t] : fuzz_output_tensors(results))
        if (t.defined() && t.is_floating_point() && t.requires_grad()) outs.push_back(t);
      if (outs.size() != gouts.size()) {
        fuzz_warn(check.api, "backward: the re-run's outputs do not pair with the call's");
        return;
      }
      for (size_t k = 0; k < gouts.size(); ++k) gouts[k] = gouts[k].to(outs[k].scalar_type());
      perturbed_grads = torch::autograd::grad(outs, inputs, gouts, /*retain_graph=*/false, /*create_graph=*/false,
                                              /*allow_unused=*/true);
    }
    {
      std::lock_guard lock(mutex);
      ++fuzz_reruns;
    }
    std::vector<std::pair<int64_t, at::Tensor>> real, perturbed;
    for (size_t j = 0; j < check.real.size(); ++j) {
      if (!check.real[j].defined() || j >= perturbed_grads.size() || !perturbed_grads[j].defined()) continue;
      real.emplace_back(static_cast<int64_t>(j), check.real[j]);
      perturbed.emplace_back(static_cast<int64_t>(j), perturbed_grads[j]);
    }
    if (real.empty()) return;
    const double threshold = free_benchmark_threshold(fuzz_dtype_name(real.front().second.scalar_type()), fuzz->pert_mode);
    fuzz_rows(check.api, "backward", fuzz_compare(real, perturbed, fuzz->pert_mode, true, threshold));
  } catch (const std::exception &e) {
    fuzz_warn(check.api, std::string("backward could not be re-run: ") + e.what());
  }
}

}  // namespace tprobe::torch_capture
