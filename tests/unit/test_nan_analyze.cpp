// core/nan_analyze: producer/propagator classification, layers across ranks (collectives and
// directed send/recv), allow rules (defaults, config, uninitialised leaves), the result schema and
// the step-folder reader, on synthetic dumps.
#include <cmath>
#include <filesystem>
#include <limits>

#include <gtest/gtest.h>

#include "errors.h"
#include "nan_analyze.h"
#include "pyjson.h"
#include "test_support.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;
constexpr double inf = std::numeric_limits<double>::infinity();
const double nan_v = std::nan("");

json t(double max = 1.0, double min = -1.0) {
  return {{"type", "torch.Tensor"}, {"dtype", "torch.float32"}, {"shape", {2}}, {"Max", max},
          {"Min", min},             {"Mean", 0.0},               {"Norm", 1.0},  {"requires_grad", false}};
}
json i(int64_t v) { return {{"type", "int"}, {"value", v}}; }
json fwd(json args, json out, json kwargs = json::object()) {
  return {{"input_args", std::move(args)}, {"input_kwargs", std::move(kwargs)}, {"output", std::move(out)}};
}
// all_reduce as tprobe's c10d capture dumps it: [[tensor], group, op, timeout] and the buffers after.
json all_reduce(json in, json out) { return fwd({json::array({in}), nullptr, nullptr, i(-1)}, {json::array({out})}); }

nan_rank rank_with(int32_t r, std::vector<std::pair<std::string, json>> entries) {
  nan_rank k;
  k.rank = r;
  for (auto &[name, data] : entries) k.entries.push_back({name, std::move(data), {}});
  return k;
}

std::optional<nan_verdict> analyse(const std::vector<nan_rank> &ranks) { return nan_analyze(ranks, nan_rules_default()); }

TEST(NanAnalyze, LeafState) {
  EXPECT_EQ(nan_leaf_state(t()), nan_state::clean);
  EXPECT_EQ(nan_leaf_state(t(inf)), nan_state::inf);
  EXPECT_EQ(nan_leaf_state(t(1, -inf)), nan_state::inf);
  EXPECT_EQ(nan_leaf_state(t(nan_v, -inf)), nan_state::nan);
  json s = t();
  s["Max"] = "Inf\t";  // msprobe accepts the strings too
  EXPECT_EQ(nan_leaf_state(s), nan_state::inf);
  json m = t();
  m["Mean"] = nan_v;  // Mean and Norm are not looked at
  EXPECT_EQ(nan_leaf_state(m), nan_state::clean);
  json u = t(nan_v, nan_v);
  u["uninitialized"] = true;
  EXPECT_EQ(nan_leaf_state(u), nan_state::clean);
  EXPECT_EQ(nan_leaf_state(json{{"type", "float"}, {"value", "-inf"}}), nan_state::clean);  // not a tensor
}

TEST(NanAnalyze, CleanDumpHasNoVerdict) {
  EXPECT_FALSE(analyse({rank_with(0, {{"Torch.mul.0.forward", fwd({t()}, {t()})}})}));
}

TEST(NanAnalyze, ProducerNotPropagators) {
  const auto v = analyse({rank_with(0, {{"Torch.matmul.0.forward", fwd({t(), t()}, {t(700)})},
                                        {"Torch.exp.0.forward", fwd({t(700)}, {t(inf, 0)})},
                                        {"Torch.mul.0.forward", fwd({t(inf, 0)}, {t(inf, 0)})},
                                        {"Torch.sub.0.forward", fwd({t(inf, 0), t(inf, 0)}, {t(nan_v, nan_v)})}})});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.entry, "Torch.exp.0.forward");
  EXPECT_EQ(v->first.rank, 0);
  EXPECT_EQ(v->first.role, nan_role::producer);
  EXPECT_EQ(v->first.layer, 0);
  EXPECT_EQ(v->anomalous, 3u);
  // inf - inf = nan is a new event (a producer too), but later than exp.
  ASSERT_EQ(v->producers.size(), 2u);
  EXPECT_EQ(v->producers[1].entry, "Torch.sub.0.forward");
  EXPECT_NE(nan_answer_line(*v).find("first producer: rank 0 Torch.exp.0.forward"), std::string::npos);
}

// The issue's job: rank 1's exp after a first clean all_reduce, a second all_reduce spreads the
// Inf to rank 0. msprobe names rank 0's second all_reduce; the producer is rank 1's exp.
std::vector<nan_rank> spread_job(bool mask) {
  std::vector<std::pair<std::string, json>> r0{{"Torch.matmul.0.forward", fwd({t(), t()}, {t()})},
                                               {"Distributed.all_reduce.0.forward", all_reduce(t(), t(2))}};
  auto r1 = r0;
  if (mask)
    for (auto *r : {&r0, &r1}) {
      r->push_back({"Torch.masked_fill.0.forward", fwd({t(), t(), json{{"type", "float"}, {"value", "-inf"}}}, {t(5, -inf)})});
      r->push_back({"Functional.softmax.0.forward", fwd({t(5, -inf), i(-1)}, {t(1, 0)})});
    }
  r0.push_back({"Torch.mul.0.forward", fwd({t(2)}, {t(4)})});
  r0.push_back({"Distributed.all_reduce.1.forward", all_reduce(t(4), t(inf, -3))});
  r0.push_back({"Torch.tanh.0.forward", fwd({t(inf, -3)}, {t(1, -1)})});
  r1.push_back({"Torch.mul.0.forward", fwd({t(2)}, {t(600)})});
  r1.push_back({"Torch.exp.0.forward", fwd({t(600)}, {t(inf, 0)})});
  r1.push_back({"Distributed.all_reduce.1.forward", all_reduce(t(inf, 0), t(inf, -3))});
  r1.push_back({"Torch.tanh.0.forward", fwd({t(inf, -3)}, {t(1, -1)})});
  return {rank_with(0, r0), rank_with(1, r1)};
}

TEST(NanAnalyze, CollectivePropagatesPeersProducer) {
  for (bool mask : {false, true}) {
    SCOPED_TRACE(mask ? "with -inf mask" : "without mask");
    const auto v = analyse(spread_job(mask));
    ASSERT_TRUE(v);
    EXPECT_EQ(v->first.rank, 1);
    EXPECT_EQ(v->first.entry, "Torch.exp.0.forward");
    EXPECT_EQ(v->first.layer, 1);  // after the first all_reduce (layer 0), before the second (layer 1)
    EXPECT_TRUE(v->also.empty());
    ASSERT_EQ(v->producers.size(), 1u);  // rank 0's all_reduce.1 is a propagator, the masks are allowed
    EXPECT_EQ(v->allowed, mask ? 2u : 0u);
  }
}

TEST(NanAnalyze, CollectiveWithoutPeerDataIsAProducerSayingSo) {
  auto job = spread_job(false);
  job.pop_back();  // rank 1 not dumped
  const auto v = analyse(job);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.entry, "Distributed.all_reduce.1.forward");
  EXPECT_TRUE(v->first.communication);
  EXPECT_TRUE(v->first.peers_missing);
  EXPECT_NE(v->first.why.find("no peer"), std::string::npos);
}

TEST(NanAnalyze, CollectiveOverflowIsItsOwnProducer) {
  // An fp16 sum that overflows: every input finite, every output inf.
  auto rank = [](int32_t r) {
    return rank_with(r, {{"Distributed.all_reduce.0.forward", all_reduce(t(60000), t(inf, 0))},
                         {"Torch.tanh.0.forward", fwd({t(inf, 0)}, {t()})}});
  };
  const auto v = analyse({rank(0), rank(1)});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.rank, 0);
  EXPECT_EQ(v->first.entry, "Distributed.all_reduce.0.forward");
  EXPECT_FALSE(v->first.peers_missing);
  ASSERT_EQ(v->also.size(), 1u);  // the same communication on rank 1, same layer
  EXPECT_EQ(v->also[0].rank, 1);
}

TEST(NanAnalyze, LayersOrderRanksByCommunicationNotByPosition) {
  // Rank 0's producer comes after all_reduce.0 (early in its dump); rank 1's comes before it, after
  // many calls: rank 1's is earlier.
  std::vector<std::pair<std::string, json>> r1;
  for (int k = 0; k < 6; ++k) r1.push_back({"Torch.add." + std::to_string(k) + ".forward", fwd({t()}, {t()})});
  r1.push_back({"Torch.log.0.forward", fwd({t(1, 0)}, {t(0, -inf)})});
  r1.push_back({"Distributed.all_reduce.0.forward", all_reduce(t(0, -inf), t(0, -inf))});
  const auto v = analyse({rank_with(0, {{"Distributed.all_reduce.0.forward", all_reduce(t(), t(0, -inf))},
                                        {"Torch.div.0.forward", fwd({t(), t(0, 0)}, {t(inf, -inf)})}}),
                          rank_with(1, r1)});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.rank, 1);
  EXPECT_EQ(v->first.entry, "Torch.log.0.forward");
  EXPECT_EQ(v->first.layer, 0);
  ASSERT_EQ(v->producers.size(), 2u);
  EXPECT_EQ(v->producers[0].entry, "Torch.div.0.forward");
  EXPECT_EQ(v->producers[0].layer, 1);
}

TEST(NanAnalyze, DirectedSendRecvPairsAndReceiveBuffer) {
  // tprobe's c10d layout: send(tensors, group, dstRank, tag), recv_(tensors, group, srcRank, tag).
  // Rank 1's receive buffer holds garbage (NaN): a receive buffer, ignored; its received Inf comes
  // from rank 0's send, whose input was non-finite: rank 0's exp is the producer.
  const auto v = analyse(
      {rank_with(0, {{"Torch.exp.0.forward", fwd({t(800)}, {t(inf, 1)})},
                     {"Distributed.send.0.forward", fwd({json::array({t(inf, 1)}), nullptr, i(1), i(0)}, {json::array({t(inf, 1)})})}}),
       rank_with(1, {{"Torch.add.0.forward", fwd({t()}, {t()})},
                     {"Distributed.recv.0.forward", fwd({json::array({t(nan_v, nan_v)}), nullptr, i(0), i(0)}, {json::array({t(inf, 1)})})},
                     {"Torch.sqrt.0.forward", fwd({t()}, {t(nan_v, nan_v)})}})});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.rank, 0);
  EXPECT_EQ(v->first.entry, "Torch.exp.0.forward");
  EXPECT_EQ(v->first.layer, 0);
  // The recv is joined with the send: rank 1's sqrt, after it, is a producer of the next layer.
  ASSERT_EQ(v->producers.size(), 2u);
  EXPECT_EQ(v->producers[1].entry, "Torch.sqrt.0.forward");
  EXPECT_EQ(v->producers[1].layer, 1);
  EXPECT_TRUE(v->also.empty());
}

TEST(NanAnalyze, DirectedByKeywordAndBroadcastReceiver) {
  // msprobe's layout: broadcast(tensor, src=0): rank 1's tensor is a receive buffer (type dst).
  json bad_buffer = fwd({t(nan_v, nan_v)}, {t(inf, 0)}, {{"src", i(0)}});
  const auto v = analyse({rank_with(0, {{"Torch.exp.0.forward", fwd({t(900)}, {t(inf, 0)})},
                                        {"Distributed.broadcast.0.forward", fwd({t(inf, 0)}, {t(inf, 0)}, {{"src", i(0)}})}}),
                          rank_with(1, {{"Distributed.broadcast.0.forward", bad_buffer}})});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.entry, "Torch.exp.0.forward");
  ASSERT_EQ(v->producers.size(), 1u);
  // On the source rank the same slot is data, not a buffer: a NaN there is its input.
  const auto w = analyse({rank_with(0, {{"Distributed.broadcast.0.forward", fwd({t(nan_v, 0)}, {t(nan_v, 0)}, {{"src", i(0)}})}})});
  EXPECT_FALSE(w);  // a propagator only
}

TEST(NanAnalyze, AllowRulesMaskEmptyUninitialised) {
  json uninit = t(nan_v, nan_v);
  uninit["uninitialized"] = true;
  const auto v = analyse({rank_with(0, {{"Torch.empty.0.forward", fwd({json::array({i(2)})}, {t(nan_v, nan_v)})},
                                        {"Tensor.new_empty.0.forward", fwd({t()}, {t(inf, -inf)})},
                                        {"Torch.full.0.forward", fwd({json::array({i(2)}), json{{"type", "float"}, {"value", "-inf"}}}, {t(-inf, -inf)})},
                                        {"Tensor.masked_fill_.0.forward", fwd({t(), t()}, {t(1, -inf)})},
                                        {"Torch.zeros_like.0.forward", fwd({t()}, {uninit})},
                                        {"Functional.softmax.0.forward", fwd({t(1, -inf)}, {t(1, 0)})}})});
  EXPECT_FALSE(v);
  // A fully masked row: softmax of -inf only gives NaN: a producer behind an allowed mask.
  const auto w = analyse({rank_with(0, {{"Torch.masked_fill.0.forward", fwd({t(), t()}, {t(-inf, -inf)})},
                                        {"Functional.softmax.0.forward", fwd({t(-inf, -inf)}, {t(nan_v, nan_v)})}})});
  ASSERT_TRUE(w);
  EXPECT_EQ(w->first.entry, "Functional.softmax.0.forward");
  EXPECT_NE(w->first.why.find("nan from inputs with inf only"), std::string::npos);
  // masked_fill of an input that is not clean is no allowed mask: it propagates (not a producer).
  const auto x = analyse({rank_with(0, {{"Torch.masked_fill.0.forward", fwd({t(inf, 0), t()}, {t(inf, -inf)})}})});
  EXPECT_FALSE(x);
}

TEST(NanAnalyze, ConfigRules) {
  const json mask_job = fwd({t(), t()}, {t(1, -inf)});
  const std::vector<nan_rank> job{rank_with(0, {{"Torch.masked_fill.0.forward", mask_job},
                                                {"Torch.my_mask.0.forward", fwd({t()}, {t(1, -inf)})}})};
  // Defaults: masked_fill allowed, my_mask a producer.
  auto v = nan_analyze(job, nan_rules_from_json(nullptr, "cfg"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.entry, "Torch.my_mask.0.forward");
  // The config adds my_mask.
  v = nan_analyze(job, nan_rules_from_json(json::parse(R"({"allow": [{"op": "Torch.my_mask", "slots": ["output"]}]})"), "cfg"));
  EXPECT_FALSE(v);
  // Without the defaults, masked_fill is reported (msprobe's answer).
  v = nan_analyze(job, nan_rules_from_json(json::parse(R"({"default_allow": false, "allow": [{"op": "my_mask", "slots": ["output.0"]}]})"), "cfg"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.entry, "Torch.masked_fill.0.forward");
  // A prefix matches whole segments only.
  v = nan_analyze(job, nan_rules_from_json(json::parse(R"({"default_allow": false, "allow": [{"op": "*", "slots": ["output.01"]}]})"), "cfg"));
  ASSERT_TRUE(v);

  for (const char *bad : {R"([1])", R"({"allow": {}})", R"({"allow": [{"op": "x"}]})", R"({"allow": [{"op": "x", "slots": ["outputs"]}]})",
                          R"({"allow": [{"op": "x", "slots": ["output"], "when": 1}]})", R"({"defaults": true})",
                          R"({"default_allow": 1})"}) {
    SCOPED_TRACE(bad);
    try {
      (void)nan_rules_from_json(json::parse(bad), "config.json: field \"tprobe.nan_analyze\"");
      ADD_FAILURE() << "accepted";
    } catch (const usage_error &e) {
      EXPECT_NE(std::string(e.what()).find("tprobe.nan_analyze"), std::string::npos) << e.what();
    }
  }
}

TEST(NanAnalyze, BackwardAndModules) {
  // A backward entry: input = output grads, output = input grads. A module entry never matches a
  // rule and is classified like a call.
  const auto v = analyse({rank_with(0, {{"Torch.exp.0.forward", fwd({t()}, {t()})},
                                        {"Torch.exp.0.backward", json{{"input", {t()}}, {"output", {t(nan_v, 0)}}}},
                                        {"Module.fc.Linear.parameters_grad.0", json{{"weight", {t(nan_v, nan_v)}}}}})});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.entry, "Torch.exp.0.backward");
  EXPECT_EQ(v->producers.size(), 1u);  // parameters_grad entries are never candidates
}

TEST(NanAnalyze, MismatchedCommunicationOrderTerminates) {
  const auto v = analyse({rank_with(0, {{"Distributed.all_reduce.0.forward", all_reduce(t(), t())},
                                        {"Distributed.broadcast.0.forward", fwd({t()}, {t()}, {{"src", i(0)}})},
                                        {"Torch.log.0.forward", fwd({t()}, {t(0, -inf)})}}),
                          rank_with(1, {{"Distributed.broadcast.0.forward", fwd({t()}, {t()}, {{"src", i(0)}})},
                                        {"Distributed.all_reduce.0.forward", all_reduce(t(), t())}})});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.entry, "Torch.log.0.forward");
}

TEST(NanAnalyze, ResultSchema) {
  auto job = spread_job(false);
  job[1].parent_of["Torch.exp.0.forward"] = "Module.block.Block.forward.0";
  job[1].parent_of["Module.block.Block.forward.0"] = "Module.Net.forward.0";
  job[1].entries[3].stack = {"File train.py, line 3, in f, \n y = torch.exp(x)"};
  ASSERT_EQ(job[1].entries[3].name, "Torch.exp.0.forward");
  const auto v = analyse(job);
  ASSERT_TRUE(v);
  const json r = nan_result_json(job, *v);
  ASSERT_TRUE(r.contains("rank_1"));
  EXPECT_FALSE(r.contains("rank_0"));
  const json &n = r["rank_1"][0];
  EXPECT_EQ(n["op_name"], "Torch.exp.0.forward");
  EXPECT_EQ(n["data_info"]["input_args"][0]["Max"], 600.0);
  EXPECT_TRUE(std::isinf(n["data_info"]["output"][0]["Max"].get<double>()));
  EXPECT_TRUE(n["data_info"]["input_kwargs"].is_object());
  EXPECT_EQ(n["construct_info"], json({"Module.Net.forward.0", "Module.block.Block.forward.0", "Torch.exp.0.forward"}));
  EXPECT_EQ(n["stack_info"][0], "File train.py, line 3, in f, \n y = torch.exp(x)");
  // Written as Python writes it: Infinity, not null.
  test::temp_dir dir;
  const std::string path = nan_write_result(dir.path(), r);
  EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("anomaly_analyze_", 0), 0u);
  EXPECT_NE(test::read_file(path).find("Infinity"), std::string::npos);
  EXPECT_EQ(pyjson_load_file(path), r);
}

TEST(NanAnalyze, LoadStep) {
  test::temp_dir dir;
  std::vector<std::string> warnings;
  EXPECT_THROW((void)nan_load_step(dir.path(), warnings), usage_error);  // no rank folders
  EXPECT_THROW((void)nan_load_step(dir / "absent", warnings), system_error);
  const auto job = spread_job(true);
  for (const auto &[name, rank_job] : {std::pair{std::string("rank0"), 0}, std::pair{std::string("rank1"), 1}}) {
    std::filesystem::create_directories(dir / name);
    json data = json::object();
    for (const auto &e : job[static_cast<size_t>(rank_job)].entries) data[e.name] = e.data;
    test::write_file(dir / name + "/dump.json", pyjson_dump({{"task", "statistics"}, {"data", data}}));
  }
  // New stack format on rank 1, old on rank 0; construct.json on rank 1 only.
  test::write_file(dir / "rank1/stack.json",
                   R"({"0": [["Torch.exp.0.forward", "Torch.exp.0.backward"], ["File a.py, line 1, in f, \n exp"]]})");
  test::write_file(dir / "rank0/stack.json", R"({"Torch.tanh.0.forward": ["File b.py, line 2, in g, \n tanh"]})");
  test::write_file(dir / "rank1/construct.json", R"({"Torch.exp.0.forward": "Module.m.M.forward.0"})");
  std::filesystem::create_directories(dir / "other");  // not a rank folder: ignored
  const auto ranks = nan_load_step(dir.path(), warnings);
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[1].rank, 1);
  EXPECT_EQ(warnings.size(), 1u);  // rank0's construct.json
  const auto v = analyse(ranks);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.rank, 1);
  EXPECT_EQ(v->first.entry, "Torch.exp.0.forward");
  const json r = nan_result_json(ranks, *v);
  EXPECT_EQ(r["rank_1"][0]["stack_info"][0], "File a.py, line 1, in f, \n exp");
  EXPECT_EQ(r["rank_1"][0]["construct_info"][0], "Module.m.M.forward.0");
  EXPECT_EQ(ranks[0].entries.back().stack, std::vector<std::string>{"File b.py, line 2, in g, \n tanh"});

  // A rank folder whose dump.json cannot be read is an error naming it, never a pass.
  std::filesystem::create_directories(dir / "rank2");
  try {
    (void)nan_load_step(dir.path(), warnings);
    ADD_FAILURE() << "rank2 without dump.json accepted";
  } catch (const system_error &e) {
    EXPECT_NE(std::string(e.what()).find("rank2/dump.json"), std::string::npos) << e.what();
  }
  test::write_file(dir / "rank2/dump.json", "{\"data\": {\"x\": ");
  EXPECT_THROW((void)nan_load_step(dir.path(), warnings), usage_error);

  // With an error list, the bad rank is named there and left out; the others are read.
  std::vector<nan_rank_error> errors;
  const auto read = nan_load_step(dir.path(), warnings, &errors);
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[1].rank, 1);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rank, 2);
  EXPECT_FALSE(errors[0].system);
  EXPECT_NE(errors[0].message.find("rank2/dump.json"), std::string::npos) << errors[0].message;
  std::filesystem::remove(dir / "rank2/dump.json");
  errors.clear();
  EXPECT_EQ(nan_load_step(dir.path(), warnings, &errors).size(), 2u);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_TRUE(errors[0].system);
}

}  // namespace
}  // namespace tprobe
