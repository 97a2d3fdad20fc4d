// core/graph: the graph of a dump (graph_build), its node data (graph_data) and two graphs matched
// and compared (graph_compare), on synthetic dumps written here; tools/graph's name mapping.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "graph/graph_run.h"
#include "graph_build.h"
#include "graph_compare.h"
#include "graph_data.h"
#include "graph_distributed.h"
#include "pyjson.h"
#include "test_support.h"

namespace {

using json = nlohmann::ordered_json;
using tprobe::graph;
using tprobe::graph_node_kind;

json tensor(double mx, double mn, double mean, double norm, json shape = {2, 4}) {
  return {{"type", "torch.Tensor"}, {"dtype", "torch.float32"}, {"shape", shape}, {"Max", mx},
          {"Min", mn},              {"Mean", mean},             {"Norm", norm},   {"requires_grad", true}};
}

// A small model's mix dump: block(fc, act), a lone root API, head, a run of two root APIs, and the
// backward pass with parameters_grad. `scale` multiplies fc's weight and everything after it;
// `rename` renames the module attribute "block"; `count` is the call count of fc's linear.
struct dump_spec {
  double scale = 1.0;
  std::string block = "block";
  int linear_count = 0;
  bool relu_shape_changed = false;
};

void write_dump(const std::string &dir, const dump_spec &s) {
  std::filesystem::create_directories(dir);
  const std::string b = "Module." + s.block;
  const std::string linear = "Functional.linear." + std::to_string(s.linear_count) + ".forward";
  const std::string head_linear = "Functional.linear." + std::to_string(s.linear_count + 1) + ".forward";
  json construct = json::object();
  construct[linear] = b + ".fc.Linear.forward.0";
  construct[b + ".fc.Linear.forward.0"] = b + ".Block.forward.0";
  construct["Functional.relu.0.forward"] = b + ".act.ReLU.forward.0";
  construct[b + ".act.ReLU.forward.0"] = b + ".Block.forward.0";
  construct[b + ".Block.forward.0"] = nullptr;
  construct["Torch.add.0.forward"] = nullptr;
  construct[head_linear] = "Module.head.Linear.forward.0";
  construct["Module.head.Linear.forward.0"] = nullptr;
  construct["Functional.cross_entropy.0.forward"] = nullptr;
  construct["Torch.ones_like.0.forward"] = nullptr;
  construct["Module.head.Linear.backward.0"] = nullptr;
  construct[b + ".fc.Linear.backward.0"] = nullptr;  // re-parented: its forward twin's parent's backward
  construct[b + ".Block.backward.0"] = nullptr;

  const double k = s.scale;
  const json x = tensor(1, -1, 0, 4);
  json data = json::object();
  data[linear] = {{"input_args", {x, tensor(0.5 * k, -0.5 * k, 0, 2 * k, {4, 4}), tensor(0.1, -0.1, 0, 0.2, {4})}},
                  {"input_kwargs", json::object()},
                  {"output", {tensor(2 * k, -2 * k, 0.1 * k, 8 * k)}}};
  data[b + ".fc.Linear.forward.0"] = {
      {"input", {x}},
      {"output", {tensor(2 * k, -2 * k, 0.1 * k, 8 * k)}},
      {"parameters", {{"weight", tensor(0.5 * k, -0.5 * k, 0, 2 * k, {4, 4})}, {"bias", tensor(0.1, -0.1, 0, 0.2, {4})}}}};
  const json relu_out = s.relu_shape_changed ? tensor(2 * k, 0, 0.5 * k, 6 * k, {2, 5}) : tensor(2 * k, 0, 0.5 * k, 6 * k);
  data["Functional.relu.0.forward"] = {{"input_args", {tensor(2 * k, -2 * k, 0.1 * k, 8 * k)}},
                                       {"input_kwargs", {{"inplace", {{"type", "bool"}, {"value", false}}}}},
                                       {"output", {relu_out}}};
  data[b + ".act.ReLU.forward.0"] = {{"input", {tensor(2 * k, -2 * k, 0.1 * k, 8 * k)}}, {"output", {relu_out}}};
  data[b + ".Block.forward.0"] = {{"input", {x}}, {"output", {relu_out}}};
  data["Torch.add.0.forward"] = {{"input_args", {relu_out, {{"type", "float"}, {"value", 1.0}}}},
                                 {"input_kwargs", {{"alpha", {{"type", "int"}, {"value", 1}}}}},
                                 {"output", {tensor(3 * k, 1, 1.5 * k, 9 * k)}}};
  data[head_linear] = {{"input_args", {tensor(3 * k, 1, 1.5 * k, 9 * k)}}, {"input_kwargs", json::object()},
                       {"output", {tensor(1 * k, -1 * k, 0.01 * k, 3 * k, {2, 3})}}};
  data["Module.head.Linear.forward.0"] = data[head_linear];
  data["Functional.cross_entropy.0.forward"] = {{"input_args", {tensor(1 * k, -1 * k, 0.01 * k, 3 * k, {2, 3})}},
                                                {"output", {tensor(1.1 * k, 1.1 * k, 1.1 * k, 1.1 * k, json::array())}}};
  data["Torch.ones_like.0.forward"] = {{"input_args", {tensor(1, 1, 1, 1, json::array())}},
                                       {"output", {tensor(1, 1, 1, 1, json::array())}}};
  data["Module.head.Linear.backward.0"] = {{"input", {tensor(0.1, -0.1, 0, 0.3, {2, 3})}},
                                           {"output", {tensor(0.2 * k, -0.2 * k, 0, 0.5 * k)}}};
  data[b + ".fc.Linear.backward.0"] = {{"input", {tensor(0.2 * k, -0.2 * k, 0, 0.5 * k)}},
                                       {"output", {tensor(0.3 * k, -0.3 * k, 0, 0.7 * k)}}};
  data[b + ".fc.Linear.parameters_grad.0"] = {{"weight", {tensor(0.01, -0.01, 0, 0.03, {4, 4})}},
                                              {"bias", {tensor(0.02, -0.02, 0, 0.04, {4})}}};
  data[b + ".Block.backward.0"] = {{"input", {tensor(0.2 * k, -0.2 * k, 0, 0.5 * k)}},
                                   {"output", {tensor(0.3 * k, -0.3 * k, 0, 0.7 * k)}}};
  json dump = {{"task", "statistics"}, {"level", "mix"}, {"framework", "pytorch"}, {"dump_data_dir", nullptr}, {"data", data}};
  json stack = json::object();
  stack["0"] = {{linear, b + ".fc.Linear.forward.0"}, {"File model.py, line 10, in forward, \n y = self.fc(x)"}};
  tprobe::test::write_file(dir + "/construct.json", tprobe::pyjson_dump(construct));
  tprobe::test::write_file(dir + "/dump.json", tprobe::pyjson_dump(dump));
  tprobe::test::write_file(dir + "/stack.json", tprobe::pyjson_dump(stack));
}

std::vector<std::string> child_names(const graph &g, const std::string &name) {
  std::vector<std::string> out;
  for (int c : g.find(name)->children) out.push_back(g.nodes[static_cast<size_t>(c)].name);
  return out;
}

TEST(GraphBuild, TreeCollectionsBackwardAndParameterGrads) {
  tprobe::test::temp_dir t;
  write_dump(t / "run", {});
  const graph g = tprobe::graph_build(t / "run", "NPU", 0, 0);
  EXPECT_EQ(g.nodes[0].name, "DefaultModel");
  EXPECT_EQ(child_names(g, "DefaultModel"),
            (std::vector<std::string>{"Module.block.Block.forward.0", "Torch.add.0.forward", "Module.head.Linear.forward.0",
                                      "Apis_Between_Modules.0", "Module.head.Linear.backward.0", "Module.block.Block.backward.0"}));
  // Two consecutive root APIs are one collection; the lone one stays.
  EXPECT_EQ(g.find("Apis_Between_Modules.0")->kind, graph_node_kind::api_collection);
  EXPECT_EQ(child_names(g, "Apis_Between_Modules.0"),
            (std::vector<std::string>{"Functional.cross_entropy.0.forward", "Torch.ones_like.0.forward"}));
  // A backward module without a parent hangs under its forward twin's parent's backward twin, and
  // its parameters_grad is its last child.
  EXPECT_EQ(child_names(g, "Module.block.Block.backward.0"), (std::vector<std::string>{"Module.block.fc.Linear.backward.0"}));
  EXPECT_EQ(child_names(g, "Module.block.fc.Linear.backward.0"),
            (std::vector<std::string>{"Module.block.fc.Linear.parameters_grad.0"}));
  EXPECT_EQ(g.find("Module.block.fc.Linear.parameters_grad.0")->kind, graph_node_kind::module);
  EXPECT_EQ(g.find("Functional.linear.0.forward")->kind, graph_node_kind::api);
  // Stacks: its own; a backward node takes its forward twin's.
  ASSERT_EQ(g.find("Module.block.fc.Linear.forward.0")->stack.size(), 1u);
  EXPECT_EQ(g.find("Module.block.fc.Linear.backward.0")->stack, g.find("Module.block.fc.Linear.forward.0")->stack);
  EXPECT_TRUE(g.find("Apis_Between_Modules.0")->stack.empty());
  // Node data: flattened leaves, msprobe's texts.
  const json &in = g.find("Torch.add.0.forward")->input_data;
  ASSERT_TRUE(in.contains("Torch.add.0.forward.input.1"));
  EXPECT_EQ(in["Torch.add.0.forward.input.1"]["dtype"], "<class float>");
  EXPECT_EQ(in["Torch.add.0.forward.input.1"]["Max"], "1.0");
  EXPECT_EQ(in["Torch.add.0.forward.input.alpha"]["Max"], "1");
  EXPECT_EQ(in["Torch.add.0.forward.input.0"]["shape"], "[2, 4]");
  EXPECT_EQ(in["Torch.add.0.forward.input.0"]["requires_grad"], "True");
  EXPECT_EQ(in["Torch.add.0.forward.input.0"]["data_name"], "-1");
  const json &params = g.find("Module.block.fc.Linear.forward.0")->input_data;
  EXPECT_TRUE(params.contains("Module.block.fc.Linear.forward.0.parameters.weight"));
  EXPECT_TRUE(g.find("Module.block.fc.Linear.forward.0")->output_data.contains("Module.block.fc.Linear.forward.0.output.0"));
  EXPECT_TRUE(g.find("Module.block.fc.Linear.parameters_grad.0")->input_data.contains(
      "Module.block.fc.Linear.parameters_grad.0.weight"));
}

TEST(GraphBuild, RefusesDumpsWithoutStructure) {
  tprobe::test::temp_dir t;
  write_dump(t / "run", {});
  tprobe::test::write_file(t / "run/construct.json", "{}");
  try {
    (void)tprobe::graph_build(t / "run", "NPU", 0, 0);
    FAIL() << "an empty construct.json was taken";
  } catch (const tprobe::usage_error &e) {
    EXPECT_NE(std::string(e.what()).find("construct.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("L0 or mix"), std::string::npos) << e.what();
  }
  std::filesystem::remove(t / "run/construct.json");
  EXPECT_THROW((void)tprobe::graph_build(t / "run", "NPU", 0, 0), tprobe::usage_error);
}

TEST(GraphData, MsprobesTexts) {
  using tprobe::graph_format_value;
  EXPECT_EQ(graph_format_value(json(0.05838)), "0.05838");
  EXPECT_EQ(graph_format_value(json(22.927900012)), "22.9279");
  EXPECT_EQ(graph_format_value(json(1e-05)), "1.000000e-05");
  EXPECT_EQ(graph_format_value(json(-4.72923e-09)), "-4.729230e-09");
  EXPECT_EQ(graph_format_value(json(0.0)), "0.0");
  EXPECT_EQ(graph_format_value(json(3)), "3");
  EXPECT_EQ(graph_format_value(json(true)), "True");
  EXPECT_EQ(graph_format_value(json(nullptr)), "null");
  EXPECT_EQ(graph_format_value(json("None")), "null");
  EXPECT_EQ(graph_format_value(json("<class 'int'>")), "<class int>");
  EXPECT_EQ(graph_format_value(json("34.14237232994731%")), "34.142372%");
  EXPECT_EQ(graph_format_value(json("77.87064000000001%")), "77.870640%");
  EXPECT_EQ(graph_format_value(json("0.0%")), "0.0%");
  EXPECT_EQ(graph_format_value(json::array({2, 3})), "[2, 3]");
}

struct compared {
  graph npu, bench;
  tprobe::graph_compare_result result;
};

compared compare_runs(const tprobe::test::temp_dir &t, const dump_spec &bench_spec, tprobe::graph_compare_options o = {}) {
  write_dump(t / "npu", {});
  write_dump(t / "bench", bench_spec);
  compared c{tprobe::graph_build(t / "npu", "NPU", 0, 0), tprobe::graph_build(t / "bench", "Bench", 0, 0), {}};
  c.result = tprobe::graph_compare(c.npu, c.bench, t / "npu/dump.json", t / "bench/dump.json", o);
  return c;
}

TEST(GraphCompare, IdenticalRunsPass) {
  tprobe::test::temp_dir t;
  const compared c = compare_runs(t, {});
  EXPECT_EQ(c.result.task, "summary");
  EXPECT_EQ(c.result.unmatched, 0u);
  EXPECT_EQ(c.result.matched, c.npu.nodes.size() - 1);
  EXPECT_TRUE(c.result.first_error_node.empty());
  for (size_t i = 1; i < c.npu.nodes.size(); ++i) {
    ASSERT_TRUE(c.npu.nodes[i].precision_index.has_value()) << c.npu.nodes[i].name;
    EXPECT_EQ(*c.npu.nodes[i].precision_index, 0.0) << c.npu.nodes[i].name;
  }
  EXPECT_FALSE(c.npu.nodes[0].precision_index.has_value());
  // Both sides link to the same path; the bench side has no index and no compare fields.
  const auto *fc = c.npu.find("Module.block.fc.Linear.forward.0");
  EXPECT_EQ(fc->matched_link, (std::vector<std::string>{"DefaultModel", "Module.block.Block.forward.0", fc->name}));
  EXPECT_EQ(c.bench.find(fc->name)->matched_link, fc->matched_link);
  EXPECT_FALSE(c.bench.find(fc->name)->precision_index.has_value());
  const json &out = fc->output_data["Module.block.fc.Linear.forward.0.output.0"];
  EXPECT_EQ(out["Max diff"], "0.0");
  EXPECT_EQ(out["NormRelativeErr"], "0.0%");
  EXPECT_EQ(out["Requires_grad Consistent"], "True");
  EXPECT_FALSE(c.bench.find(fc->name)->output_data["Module.block.fc.Linear.forward.0.output.0"].contains("Max diff"));
}

TEST(GraphCompare, LevelsBlameTheLayerWhoseWeightDiffersAndColourItsAncestors) {
  tprobe::test::temp_dir t;
  const compared c = compare_runs(t, {.scale = 1.5});
  auto index = [&](const std::string &name) { return c.npu.find(name)->precision_index.value_or(-1); };
  EXPECT_EQ(index("Module.block.fc.Linear.forward.0"), 1.0);  // its parameters differ
  EXPECT_EQ(index("Module.block.Block.forward.0"), 1.0);      // carries it
  // The API inside gets a weight that differs as an input: not where the runs part.
  EXPECT_EQ(index("Functional.linear.0.forward"), 0.0);
  // Later nodes see inputs that already differ: not blamed.
  EXPECT_EQ(index("Module.head.Linear.forward.0"), 0.0);
  EXPECT_EQ(index("Torch.add.0.forward"), 0.0);
  EXPECT_EQ(c.result.first_error_node, "Module.block.fc.Linear.forward.0");
  // The NPU items carry the relative error of the norm: |1 - 1.5| / 1.5.
  const json &w = c.npu.find("Module.block.fc.Linear.forward.0")->input_data["Module.block.fc.Linear.forward.0.parameters.weight"];
  EXPECT_EQ(w["NormRelativeErr"], "33.333333%");
}

TEST(GraphCompare, Msprobe833RuleIsTheOutputsLargestRelativeError) {
  tprobe::test::temp_dir t;
  tprobe::graph_compare_options o;
  o.rule = tprobe::graph_rule::msprobe_833;
  const compared c = compare_runs(t, {.scale = 1.25}, o);
  // Output Max 2 vs 2.5: 20 %; every statistic of the output scales alike.
  EXPECT_NEAR(*c.npu.find("Functional.linear.0.forward")->precision_index, 0.2, 1e-12);
  // A module uses its own data, not its children's.
  EXPECT_NEAR(*c.npu.find("Module.block.Block.forward.0")->precision_index, 0.2, 1e-12);
  // The collection takes its children's worst.
  const auto &apis = *c.npu.find("Apis_Between_Modules.0");
  double worst = 0;
  for (int k : apis.children) worst = std::max(worst, c.npu.nodes[static_cast<size_t>(k)].precision_index.value_or(0));
  EXPECT_EQ(*apis.precision_index, worst);
  EXPECT_GT(worst, 0.0);
  // Nothing reaches 8.3.3's red band (0.8): no first failing node.
  EXPECT_TRUE(c.result.first_error_node.empty());
}

TEST(GraphCompare, ShapesThatDifferLeaveANodeUnmatched) {
  tprobe::test::temp_dir t;
  const compared c = compare_runs(t, {.relu_shape_changed = true});
  EXPECT_FALSE(c.npu.find("Functional.relu.0.forward")->precision_index.has_value());
  EXPECT_TRUE(c.npu.find("Functional.relu.0.forward")->matched_link.empty());
  EXPECT_TRUE(c.bench.find("Functional.relu.0.forward")->matched_link.empty());
  EXPECT_GE(c.result.unmatched, 1u);
  EXPECT_TRUE(c.npu.find("Functional.linear.0.forward")->precision_index.has_value());  // its sibling still matches
}

TEST(GraphCompare, FuzzyMatchesApisWhoseCallCountsMoved) {
  tprobe::test::temp_dir t;
  const compared strict = compare_runs(t, {.linear_count = 3});
  EXPECT_FALSE(strict.npu.find("Functional.linear.0.forward")->precision_index.has_value());
  tprobe::test::temp_dir u;
  tprobe::graph_compare_options o;
  o.fuzzy = true;
  const compared fuzzy = compare_runs(u, {.linear_count = 3}, o);
  const auto *linear = fuzzy.npu.find("Functional.linear.0.forward");
  ASSERT_TRUE(linear->precision_index.has_value());
  EXPECT_EQ(linear->matched_link.back(), "Functional.linear.3.forward");  // the bench node's path
  EXPECT_EQ(fuzzy.bench.find("Functional.linear.3.forward")->matched_link.back(), "Functional.linear.0.forward");
}

TEST(GraphCompare, LayerMappingMatchesRenamedLayers) {
  EXPECT_EQ(tprobe::graph_mapped_name("Module.block.fc.Linear.forward.0", {{"block", "blk"}}), "Module.blk.fc.Linear.forward.0");
  EXPECT_EQ(tprobe::graph_mapped_name("Module.block.fc.Linear.forward.0", {{"block.fc", "blk.dense"}}),
            "Module.blk.dense.Linear.forward.0");
  EXPECT_EQ(tprobe::graph_mapped_name("Module.blockx.fc.Linear.forward.0", {{"block", "blk"}}),
            "Module.blockx.fc.Linear.forward.0");  // whole attribute names only
  EXPECT_EQ(tprobe::graph_mapped_name("Functional.relu.0.forward", {{"Functional.relu.0.forward", "Functional.gelu.0.forward"}}),
            "Functional.gelu.0.forward");

  tprobe::test::temp_dir t;
  const compared unmapped = compare_runs(t, {.block = "blk"});
  EXPECT_FALSE(unmapped.npu.find("Module.block.fc.Linear.forward.0")->precision_index.has_value());
  tprobe::test::temp_dir u;
  write_dump(u / "npu", {});
  const graph probe = tprobe::graph_build(u / "npu", "NPU", 0, 0);
  tprobe::graph_compare_options o;
  for (const auto &n : probe.nodes)
    if (const std::string m = tprobe::graph_mapped_name(n.name, {{"block", "blk"}}); m != n.name) o.layer_map.emplace(n.name, m);
  const compared mapped = compare_runs(u, {.block = "blk"}, o);
  const auto *fc = mapped.npu.find("Module.block.fc.Linear.forward.0");
  ASSERT_TRUE(fc->precision_index.has_value());
  EXPECT_EQ(*fc->precision_index, 0.0);
  EXPECT_EQ(fc->matched_link.back(), "Module.blk.fc.Linear.forward.0");
}

TEST(GraphCompare, ModesMustAgree) {
  tprobe::test::temp_dir t;
  write_dump(t / "npu", {});
  write_dump(t / "bench", {});
  json dump = tprobe::pyjson_load_file(t / "bench/dump.json");
  dump["task"] = "tensor";
  tprobe::test::write_file(t / "bench/dump.json", tprobe::pyjson_dump(dump));
  graph npu = tprobe::graph_build(t / "npu", "NPU", 0, 0), bench = tprobe::graph_build(t / "bench", "Bench", 0, 0);
  EXPECT_THROW((void)tprobe::graph_compare(npu, bench, t / "npu/dump.json", t / "bench/dump.json", {}), tprobe::usage_error);
}

}  // namespace

namespace {

// A rank's dump of tprobe's form for communication calls: positional (tensors, group, peer, tag).
void write_comm_dump(const std::string &dir, int rank, double sent_max) {
  std::filesystem::create_directories(dir);
  const json t = json::array({tensor(sent_max, 0, 0.1, 1)});
  auto call = [&](json args) { return json{{"input_args", args}, {"input_kwargs", json::object()}, {"output", {t}}}; };
  const json one = {{"type", "int"}, {"value", 1}}, zero = {{"type", "int"}, {"value", 0}};
  json construct = json::object(), data = json::object();
  const std::string p2p = rank == 0 ? "Distributed.send.0.forward" : "Distributed.recv.0.forward";
  for (const std::string &name : {p2p, std::string("Distributed.all_reduce.0.forward"), std::string("Distributed.broadcast.0.forward")})
    construct[name] = nullptr;
  data[p2p] = call({t, nullptr, rank == 0 ? one : zero, zero});
  data["Distributed.all_reduce.0.forward"] = call({t, nullptr, nullptr, {{"type", "int"}, {"value", -1}}});
  data["Distributed.broadcast.0.forward"] = call({t, nullptr, zero, zero, {{"type", "int"}, {"value", -1}}});
  json dump = {{"task", "statistics"}, {"level", "mix"}, {"framework", "pytorch"}, {"dump_data_dir", nullptr}, {"data", data}};
  tprobe::test::write_file(dir + "/construct.json", tprobe::pyjson_dump(construct));
  tprobe::test::write_file(dir + "/dump.json", tprobe::pyjson_dump(dump));
}

json links(const graph &g, const std::string &name) { return g.find(name)->matched_distributed; }

TEST(GraphDistributed, SendRecvAndCollectivesLinkedAcrossRanks) {
  tprobe::test::temp_dir t;
  write_comm_dump(t / "rank0", 0, 1.0);
  write_comm_dump(t / "rank1", 1, 1.0);
  graph r0 = tprobe::graph_build(t / "rank0", "NPU", 0, 0), r1 = tprobe::graph_build(t / "rank1", "NPU", 0, 1);
  EXPECT_EQ(tprobe::graph_link_communications({&r0, &r1}), 6u);
  EXPECT_EQ(links(r0, "Distributed.send.0.forward"),
            json::parse(R"({"communications_type": "send", "nodes_info": {"1": ["Nan", "Distributed.recv.0.forward"]}})"));
  EXPECT_EQ(links(r1, "Distributed.recv.0.forward"),
            json::parse(R"({"communications_type": "receive", "nodes_info": {"0": ["Nan", "Distributed.send.0.forward"]}})"));
  EXPECT_EQ(links(r0, "Distributed.all_reduce.0.forward")["communications_type"], "send_receive");
  EXPECT_EQ(links(r1, "Distributed.all_reduce.0.forward")["nodes_info"]["0"][1], "Distributed.all_reduce.0.forward");
  // broadcast from rank 0: the root sends, the other receives.
  EXPECT_EQ(links(r0, "Distributed.broadcast.0.forward")["communications_type"], "send");
  EXPECT_EQ(links(r1, "Distributed.broadcast.0.forward")["communications_type"], "receive");
  // The other node's index travels with the link.
  r1.nodes[static_cast<size_t>(r1.index.at("Distributed.recv.0.forward"))].precision_index = 0.25;
  for (auto &n : r0.nodes) n.matched_distributed = json::object();
  for (auto &n : r1.nodes) n.matched_distributed = json::object();
  (void)tprobe::graph_link_communications({&r0, &r1});
  EXPECT_EQ(links(r0, "Distributed.send.0.forward")["nodes_info"]["1"][0], "0.25");
}

TEST(GraphDistributed, ASendWhoseReceiverGotOtherDataIsNotLinked) {
  tprobe::test::temp_dir t;
  write_comm_dump(t / "rank0", 0, 1.0);
  write_comm_dump(t / "rank1", 1, 2.0);
  graph r0 = tprobe::graph_build(t / "rank0", "NPU", 0, 0), r1 = tprobe::graph_build(t / "rank1", "NPU", 0, 1);
  (void)tprobe::graph_link_communications({&r0, &r1});
  EXPECT_TRUE(links(r0, "Distributed.send.0.forward").empty());
  EXPECT_TRUE(links(r1, "Distributed.recv.0.forward").empty());
  EXPECT_FALSE(links(r0, "Distributed.all_reduce.0.forward").empty());  // collectives are joined by name
}

}  // namespace

namespace {

TEST(GraphBuild, RecomputedLayersMoveUnderTheBackwardPass) {
  tprobe::test::temp_dir t;
  std::filesystem::create_directories(t / "run");
  json construct = json::object();
  construct["Module.model.Model.forward.0"] = nullptr;
  construct["Module.model.layers.0.Layer.forward.0"] = "Module.model.Model.forward.0";
  construct["Module.model.layers.0.Layer.forward.1"] = nullptr;   // re-run for the backward pass
  construct["Module.model.layers.0.Layer.backward.1"] = nullptr;
  construct["Module.model.Model.backward.0"] = nullptr;
  json data = json::object();
  for (const auto &[name, parent] : construct.items()) data[name] = {{"input", {tensor(1, 0, 0.5, 2)}}, {"output", {tensor(1, 0, 0.5, 2)}}};
  tprobe::test::write_file(t / "run/construct.json", tprobe::pyjson_dump(construct));
  tprobe::test::write_file(t / "run/dump.json", tprobe::pyjson_dump(json{{"task", "statistics"}, {"level", "L0"}, {"data", data}}));
  const graph g = tprobe::graph_build(t / "run", "NPU", 0, 0);
  EXPECT_EQ(child_names(g, "DefaultModel"),
            (std::vector<std::string>{"Module.model.Model.forward.0", "Module.model.Model.backward.0"}));
  EXPECT_EQ(child_names(g, "Module.model.Model.backward.0"),
            (std::vector<std::string>{"Module.model.layers.0.Layer.forward.1", "Module.model.layers.0.Layer.backward.1"}));
  EXPECT_EQ(child_names(g, "Module.model.Model.forward.0"), (std::vector<std::string>{"Module.model.layers.0.Layer.forward.0"}));
}

}  // namespace
