// The pre-check's LibTorch replay (tools/precheck/replay.h): argument binding through the
// dispatcher, msprobe's Python forms, the bench's raised dtypes, backward pairing, random mode and
// the reasons an API is skipped.
#include <map>
#include <string>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "precheck_verdict.h"
#include "replay.h"

namespace tprobe::precheck {
namespace {

using json = nlohmann::ordered_json;
using ::testing::HasSubstr;

// Tensors served from memory by data_name, as the live stage serves payloads.
class memory_source : public tensor_source {
 public:
  std::optional<at::Tensor> load(const json &entry) override {
    const auto it = tensors.find(entry.value("data_name", ""));
    if (it == tensors.end()) return std::nullopt;
    return it->second;
  }
  std::map<std::string, at::Tensor> tensors;
};

std::string dtype_name(const at::Tensor &t) {
  switch (t.scalar_type()) {
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kLong: return "torch.int64";
    case at::kBool: return "torch.bool";
    default: return "torch.int32";
  }
}

// An entry for `t`, its data registered under `name` (statistics only when name is empty).
json tensor_entry(memory_source &src, const std::string &name, const at::Tensor &t, bool requires_grad = false) {
  json e = {{"type", "torch.Tensor"}, {"dtype", dtype_name(t)}, {"shape", t.sizes().vec()},
            {"Max", t.max().item<double>()}, {"Min", t.min().item<double>()},
            {"Mean", t.to(at::kDouble).mean().item<double>()}, {"Norm", t.to(at::kDouble).norm().item<double>()},
            {"requires_grad", requires_grad}};
  if (!name.empty()) {
    e["data_name"] = name + ".npy";
    src.tensors[name + ".npy"] = t;
  }
  return e;
}

json scalar(const char *type, json value) { return {{"type", type}, {"value", std::move(value)}}; }

const tensor_values &tensor_at(const std::vector<output_value> &v, size_t i) { return std::get<tensor_values>(v.at(i)); }

TEST(Replay, LinearForwardAndBackwardOnePrecisionHigher) {
  memory_source src;
  at::manual_seed(0);
  const auto x = at::randn({4, 8}), w = at::randn({3, 8}), b = at::randn({3});
  const auto y = at::linear(x, w, b);
  const auto gy = at::randn({3, 4}).t().contiguous();
  json fwd = {{"input_args", {tensor_entry(src, "x", x, true), tensor_entry(src, "w", w, true), tensor_entry(src, "b", b, true)}},
              {"input_kwargs", json::object()},
              {"output", {tensor_entry(src, "y", y, true)}}};
  // The device's input gradients, as training computed them.
  json bwd = {{"input", {tensor_entry(src, "gy", gy)}},
              {"output", {tensor_entry(src, "gx", gy.mm(w)), tensor_entry(src, "gw", gy.t().mm(x)),
                          tensor_entry(src, "gb", gy.sum(0))}}};
  const api_replay r = replay_api("Functional.linear.0", fwd, &bwd, src, {});
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  ASSERT_EQ(r.forward_bench.size(), 1u);
  EXPECT_EQ(tensor_at(r.forward_bench, 0).dtype, "torch.float64");
  EXPECT_EQ(tensor_at(r.forward_device, 0).dtype, "torch.float32");
  const auto expected = at::linear(x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble));
  EXPECT_NEAR(tensor_at(r.forward_bench, 0).values[5], expected.view(-1)[5].item<double>(), 1e-12);
  ASSERT_EQ(r.backward_bench.size(), 3u);
  ASSERT_EQ(r.backward_device.size(), 3u);
  EXPECT_EQ(tensor_at(r.backward_bench, 1).shape, (std::vector<int64_t>{3, 8}));
  EXPECT_NEAR(tensor_at(r.backward_bench, 2).values[1], gy.sum(0)[1].item<double>(), 1e-5);
  const api_judgement j = judge_api(r, dialect::msprobe_8_3_3);
  EXPECT_EQ(j.result.forward, status::pass);
  EXPECT_EQ(j.result.backward, status::pass);
}

TEST(Replay, BackwardPairsTprobesOneGradientPerArgument) {
  // tprobe dumps layer_norm's input gradients one per argument up to the last tensor:
  // [input, None (normalized_shape), weight, bias]; msprobe one per tensor.
  memory_source src;
  at::manual_seed(2);
  auto x = at::randn({4, 6}).requires_grad_(), w = at::randn({6}).requires_grad_(), b = at::randn({6}).requires_grad_();
  const auto y = at::layer_norm(x, {6}, w, b);
  const auto gy = at::randn({4, 6});
  y.backward(gy);
  json fwd = {{"input_args", {tensor_entry(src, "x", x.detach(), true), scalar("torch.Size", {6}),
                              tensor_entry(src, "w", w.detach(), true), tensor_entry(src, "b", b.detach(), true)}},
              {"input_kwargs", json::object()},
              {"output", {tensor_entry(src, "y", y.detach(), true)}}};
  for (const bool per_argument : {true, false}) {
    json grads = {tensor_entry(src, "gx", x.grad())};
    if (per_argument) grads.push_back(nullptr);
    grads.push_back(tensor_entry(src, "gw", w.grad()));
    grads.push_back(tensor_entry(src, "gb", b.grad()));
    json bwd = {{"input", {tensor_entry(src, "gy", gy)}}, {"output", grads}};
    const auto r = replay_api("Functional.layer_norm.0", fwd, &bwd, src, {});
    ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
    const api_judgement j = judge_api(r, dialect::msprobe_head);
    ASSERT_EQ(j.details.size(), 4u);
    EXPECT_EQ(j.result.backward, status::pass) << j.details[2].message;
    EXPECT_EQ(j.details[2].shape, "(6,)");
  }
}

// Whether this LibTorch's CPU bfloat16 gemm accumulates in bfloat16 (torch 1.13 on a CPU without
// AVX-512: 4096 ones sum to 256, not 4096): then a linear's gradients are worse than rounding, and
// precheck is right to call them errors.
bool bf16_gemm_accumulates_in_bf16() {
  const auto ones = at::ones({8, 4096}, at::kBFloat16);  // 8 rows: a 1-row product takes a dot kernel that accumulates in float32
  return at::mm(ones, ones.t().contiguous())[0][0].item<float>() != 4096.0f;
}

TEST(Replay, AutocastStartsFromTheInputsTheKernelReceived) {
  // Under autocast(bfloat16) F.linear gets float32 tensors, casts them, returns bfloat16; its input
  // gradients are float32 carrying bfloat16 rounding. Correct kernels pass.
  memory_source src;
  at::manual_seed(3);
  const auto x = at::randn({16, 32}), w = at::randn({24, 32});
  const auto xb = x.to(at::kBFloat16).requires_grad_(), wb = w.to(at::kBFloat16).requires_grad_();
  const auto y = at::linear(xb, wb);
  const auto gy = at::randn({16, 24}).to(at::kBFloat16);
  y.backward(gy);
  json fwd = {{"input_args", {tensor_entry(src, "x", x, true), tensor_entry(src, "w", w, true)}},
              {"input_kwargs", json::object()},
              {"output", {tensor_entry(src, "y", y.detach(), true)}}};
  json bwd = {{"input", {tensor_entry(src, "gy", gy)}},
              {"output", {tensor_entry(src, "gx", xb.grad().to(at::kFloat)), tensor_entry(src, "gw", wb.grad().to(at::kFloat))}}};
  const auto r = replay_api("Functional.linear.0", fwd, &bwd, src, {});
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  EXPECT_EQ(r.autocast_dtype, "torch.bfloat16");
  EXPECT_EQ(tensor_at(r.forward_bench, 0).dtype, "torch.float32");  // one step above the kernel's bf16
  for (const auto d : {dialect::msprobe_8_3_3, dialect::msprobe_head}) {
    api_judgement j = judge_api(r, d);
    judge_against_rounding(j, r, d);
    EXPECT_EQ(j.result.forward, status::pass) << j.details.at(0).message;
    if (bf16_gemm_accumulates_in_bf16())
      EXPECT_NE(j.result.backward, status::pass) << "this torch's bf16 gemm accumulates in bf16: its gradients are worse than rounding";
    else
      EXPECT_EQ(j.result.backward, status::pass) << j.details.at(1).message;
  }
}

TEST(Replay, AWrongDeviceOutputIsAnError) {
  memory_source src;
  at::manual_seed(1);
  const auto x = at::randn({64});
  auto wrong = at::gelu(x);
  wrong.mul_(1.05);  // a kernel 5% off
  json fwd = {{"input_args", {tensor_entry(src, "x", x)}}, {"input_kwargs", {{"approximate", scalar("str", "none")}}},
              {"output", {tensor_entry(src, "y", wrong)}}};
  const api_replay r = replay_api("Functional.gelu.0", fwd, nullptr, src, {});
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  EXPECT_EQ(judge_api(r, dialect::msprobe_8_3_3).result.forward, status::error);
}

TEST(Replay, TprobeAtenFormsBind) {
  memory_source src;
  const auto x = at::randn({2, 3, 4});
  // aten::softmax.int(self, dim, dtype=None), as tprobe dumps it.
  json softmax = {{"input_args", {tensor_entry(src, "x", x), scalar("int", -1), nullptr}},
                  {"input_kwargs", json::object()},
                  {"output", {tensor_entry(src, "s", at::softmax(x, -1))}}};
  auto r = replay_api("Functional.softmax.0", softmax, nullptr, src, {});
  EXPECT_FALSE(r.skip_reason) << r.skip_reason.value_or("");
  // aten::ones_like with the keyword-only dtype/layout/device of a factory.
  json ones = {{"input_args", {tensor_entry(src, "x", x)}},
               {"input_kwargs", {{"dtype", scalar("torch.dtype", "torch.float32")},
                                 {"layout", scalar("torch.layout", "torch.strided")},
                                 {"device", scalar("torch.device", "cpu")},
                                 {"pin_memory", scalar("bool", false)},
                                 {"memory_format", {{"type", "torch.memory_format"}, {"format", "preserve_format"}}}}},
               {"output", {tensor_entry(src, "o", at::ones_like(x))}}};
  r = replay_api("Torch.ones_like.0", ones, nullptr, src, {});
  EXPECT_FALSE(r.skip_reason) << r.skip_reason.value_or("");
  EXPECT_EQ(tensor_at(r.forward_bench, 0).dtype, "torch.float64");  // the dtype argument is raised too
}

TEST(Replay, MsprobePythonFormsBind) {
  memory_source src;
  const auto idx = at::randint(0, 10, {4, 5});
  const auto w = at::randn({10, 8});
  // F.embedding(input, weight): the operands in Python's order.
  json emb = {{"input_args", {tensor_entry(src, "i", idx), tensor_entry(src, "w", w, true)}},
              {"input_kwargs", {{"padding_idx", nullptr}, {"max_norm", nullptr}}},
              {"output", {tensor_entry(src, "e", at::embedding(w, idx))}}};
  auto r = replay_api("Functional.embedding.0", emb, nullptr, src, {});
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  EXPECT_EQ(judge_api(r, dialect::msprobe_8_3_3).result.forward, status::pass);
  // x.view(5, 4): Python's varargs fill the schema's int list.
  const auto v = idx.to(at::kFloat);
  json view = {{"input_args", {tensor_entry(src, "v", v), scalar("int", 5), scalar("int", 4)}},
               {"input_kwargs", json::object()},
               {"output", {tensor_entry(src, "vo", v.view({5, 4}))}}};
  r = replay_api("Tensor.view.0", view, nullptr, src, {});
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  EXPECT_EQ(tensor_at(r.forward_bench, 0).shape, (std::vector<int64_t>{5, 4}));
  // x + 1 through Tensor.__add__: the Scalar overload.
  json add = {{"input_args", {tensor_entry(src, "v", v), scalar("int", 1)}},
              {"input_kwargs", json::object()},
              {"output", {tensor_entry(src, "a", v + 1)}}};
  r = replay_api("Tensor.__add__.0", add, nullptr, src, {});
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  EXPECT_EQ(judge_api(r, dialect::msprobe_8_3_3).result.forward, status::pass);
  // F.cross_entropy(input, target, reduction="sum"): the string becomes the operator's enum.
  const auto logits = at::randn({6, 4});
  const auto target = at::randint(0, 4, {6});
  json ce = {{"input_args", {tensor_entry(src, "l", logits, true), tensor_entry(src, "t", target)}},
             {"input_kwargs", {{"reduction", scalar("str", "sum")}}},
             {"output", {tensor_entry(src, "c", at::cross_entropy_loss(logits, target, {}, at::Reduction::Sum))}}};
  r = replay_api("Functional.cross_entropy.0", ce, nullptr, src, {});
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  EXPECT_EQ(judge_api(r, dialect::msprobe_8_3_3).result.forward, status::pass);
}

TEST(Replay, LowPrecisionBenchIsOneStepUp) {
  memory_source src;
  // F.linear: LibTorch's CPU bf16 kernel accumulates in fp32 and rounds once.
  const auto a = at::randn({8, 16}).to(at::kBFloat16), w = at::randn({8, 16}).to(at::kBFloat16);
  json mm = {{"input_args", {tensor_entry(src, "a", a), tensor_entry(src, "w", w)}},
             {"input_kwargs", json::object()},
             {"output", {tensor_entry(src, "m", at::linear(a, w))}}};
  const auto r = replay_api("Functional.linear.0", mm, nullptr, src, {});
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  EXPECT_EQ(tensor_at(r.forward_bench, 0).dtype, "torch.float32");
  EXPECT_EQ(tensor_at(r.forward_device, 0).dtype, "torch.bfloat16");
  // A kernel no worse than bf16 rounding is never an error, whatever stage 1 says.
  for (const auto d : {dialect::msprobe_8_3_3, dialect::msprobe_head}) {
    api_judgement j = judge_api(r, d);
    judge_against_rounding(j, r, d);
    EXPECT_NE(j.result.forward, status::error) << j.details.at(0).message;
  }
}

TEST(Replay, RandomModeDrawsFromStatisticsWithExtremes) {
  memory_source src;  // holds nothing: a statistics dump
  const auto x = at::linspace(-3, 5, 100);
  json fwd = {{"input_args", {tensor_entry(src, "", x)}}, {"input_kwargs", json::object()},
              {"output", {tensor_entry(src, "", at::tanh(x))}}};
  replay_tensors kept;
  const auto r = replay_api("Torch.tanh.0", fwd, nullptr, src, {}, &kept);
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  ASSERT_EQ(kept.forward_input.size(), 1u);
  const auto drawn = kept.forward_input[0];
  EXPECT_DOUBLE_EQ(drawn.view(-1)[0].item<double>(), -3.0);  // msprobe puts Min first, Max last
  EXPECT_DOUBLE_EQ(drawn.view(-1)[-1].item<double>(), 5.0);
  EXPECT_GE(drawn.min().item<double>(), -3.0);
  EXPECT_LE(drawn.max().item<double>(), 5.0);
  // The same seed and name draw the same tensor.
  replay_tensors again;
  (void)replay_api("Torch.tanh.0", fwd, nullptr, src, {}, &again);
  EXPECT_TRUE(at::equal(again.forward_input[0], drawn));
  EXPECT_EQ(judge_api(r, dialect::msprobe_8_3_3).result.forward, status::pass);
}

TEST(Replay, UnreplayableApisSaySkipWithTheReason) {
  memory_source src;
  const auto x = at::randn({4});
  json fwd = {{"input_args", {tensor_entry(src, "x", x)}}, {"input_kwargs", json::object()},
              {"output", {tensor_entry(src, "y", x)}}};
  EXPECT_THAT(replay_api("Torch.randn_like.0", fwd, nullptr, src, {}).skip_reason.value_or(""), HasSubstr("random"));
  EXPECT_THAT(replay_api("Distributed.all_reduce.0", fwd, nullptr, src, {}).skip_reason.value_or(""),
              HasSubstr("not support for acc_check"));
  EXPECT_THAT(replay_api("Torch.empty_like.0", fwd, nullptr, src, {}).skip_reason.value_or(""), HasSubstr("black list"));
  EXPECT_THAT(replay_api("Torch.no_such_operator.0", fwd, nullptr, src, {}).skip_reason.value_or(""),
              HasSubstr("no ATen operator aten::no_such_operator"));
  // Arguments the operator does not take are a SKIP naming them, never a pass.
  json bad = fwd;
  bad["input_kwargs"]["bogus"] = scalar("int", 1);
  EXPECT_THAT(replay_api("Torch.tanh.0", bad, nullptr, src, {}).skip_reason.value_or(""), HasSubstr("bogus"));
}

TEST(Replay, BackwardPairsTheGradientsOfAListArgument) {
  // torch.einsum("...", [q, k]): the operands are one list argument, and the capture dumps their
  // gradients as [None (the equation), [gq, gk]]; they pair with the operands in order.
  memory_source src;
  at::manual_seed(3);
  auto q = at::randn({2, 3, 4}).requires_grad_(), k = at::randn({2, 5, 4}).requires_grad_();
  const auto y = at::einsum("btd,bsd->bts", {q, k});
  const auto gy = at::randn({2, 3, 5});
  y.backward(gy);
  json fwd = {{"input_args", {scalar("str", "btd,bsd->bts"),
                              json::array({tensor_entry(src, "q", q.detach(), true), tensor_entry(src, "k", k.detach(), true)})}},
              {"input_kwargs", {{"path", nullptr}}},
              {"output", {tensor_entry(src, "y", y.detach(), true)}}};
  json bwd = {{"input", {tensor_entry(src, "gy", gy)}},
              {"output", {nullptr, json::array({tensor_entry(src, "gq", q.grad()), tensor_entry(src, "gk", k.grad())})}}};
  const auto r = replay_api("Torch.einsum.0", fwd, &bwd, src, {});
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  ASSERT_EQ(r.backward_device.size(), 2u);
  EXPECT_EQ(tensor_at(r.backward_device, 1).shape, (std::vector<int64_t>{2, 5, 4}));
  const api_judgement j = judge_api(r, dialect::msprobe_8_3_3);
  EXPECT_EQ(j.result.forward, status::pass);
  EXPECT_EQ(j.result.backward, status::pass) << j.details.back().message;
}

TEST(Replay, UninitializedInputsReplayOnlyWhereOverwritten) {
  // The capture marks memory nothing had written ("uninitialized": true, no data, no statistics).
  memory_source src;
  const json garbage = {{"type", "torch.Tensor"}, {"dtype", "torch.float32"}, {"shape", {3}}, {"Max", nullptr},
                        {"Min", nullptr}, {"Mean", nullptr}, {"Norm", nullptr}, {"requires_grad", false},
                        {"uninitialized", true}};
  const auto ones = at::ones({3});
  // add_ reads it: nothing to replay it from.
  json add = {{"input_args", {garbage, scalar("int", 1)}}, {"input_kwargs", json::object()},
              {"output", {tensor_entry(src, "a", ones)}}};
  EXPECT_THAT(replay_api("Tensor.add_.0", add, nullptr, src, {}).skip_reason.value_or(""),
              HasSubstr("uninitialized memory"));
  // fill_ overwrites it: replayed and judged.
  json fill = {{"input_args", {garbage, scalar("float", 1.0)}}, {"input_kwargs", json::object()},
               {"output", {tensor_entry(src, "f", ones)}}};
  const auto r = replay_api("Tensor.fill_.0", fill, nullptr, src, {});
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  EXPECT_EQ(judge_api(r, dialect::msprobe_8_3_3).result.forward, status::pass);
}

TEST(Replay, AMemoryFormatArgumentTakesTheSchemaDefault) {
  // x.contiguous() is dumped with memory_format={"type": "torch.memory_format", "format": …}; the
  // schema's MemoryFormat takes no None, so the default stands for it.
  memory_source src;
  const auto x = at::randn({3, 4}).t();
  json fwd = {{"input_args", {tensor_entry(src, "x", x)}},
              {"input_kwargs", {{"memory_format", {{"type", "torch.memory_format"}, {"format", "contiguous_format"}}}}},
              {"output", {tensor_entry(src, "y", x.contiguous())}}};
  const auto r = replay_api("Tensor.contiguous.0", fwd, nullptr, src, {});
  ASSERT_FALSE(r.skip_reason) << *r.skip_reason;
  EXPECT_EQ(judge_api(r, dialect::msprobe_8_3_3).result.forward, status::pass);
}

}  // namespace
}  // namespace tprobe::precheck
