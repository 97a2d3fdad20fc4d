// dump_semantics: the entry/slot grammar (parse ∘ build round trips, odd names), where slots go in
// dump.json, the data_mode table against msprobe's rules (parameters_grad included), the
// statistic, tensor and value leaves, and stack lines.
#include "dump_semantics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "pyjson.h"

namespace tprobe {
namespace {

using ojson = nlohmann::ordered_json;

TEST(DumpSemantics, ApiNamesRoundTrip) {
  const std::string f = entry_api_name("Functional", "linear", 3, entry_direction::forward);
  EXPECT_EQ(f, "Functional.linear.3.forward");
  const entry_name e = entry_parse(f);
  EXPECT_TRUE(e.is_forward());
  EXPECT_FALSE(e.count_last);
  EXPECT_FALSE(e.is_module());
  EXPECT_EQ(e.base, "Functional.linear");
  EXPECT_EQ(e.count, "3");
  EXPECT_EQ(entry_backward_of(f), "Functional.linear.3.backward");
  EXPECT_EQ(entry_with_direction("Functional.linear.3.backward", entry_direction::forward), f);
  // Ops whose name has dots or digits of its own keep them in the base.
  const entry_name dunder = entry_parse("Tensor.__add__.12.backward");
  EXPECT_TRUE(dunder.is_backward());
  EXPECT_EQ(dunder.base, "Tensor.__add__");
  EXPECT_EQ(dunder.count, "12");
  EXPECT_EQ(entry_parse("Primitive.norm.RmsNorm.0.forward").base, "Primitive.norm.RmsNorm");
}

TEST(DumpSemantics, ModuleNamesRoundTrip) {
  const std::string f = entry_module_name("Module.layers.0.mlp.Linear", 2, entry_direction::forward);
  EXPECT_EQ(f, "Module.layers.0.mlp.Linear.forward.2");
  const entry_name e = entry_parse(f);
  EXPECT_TRUE(e.is_forward());
  EXPECT_TRUE(e.count_last);
  EXPECT_TRUE(e.is_module());
  EXPECT_EQ(e.base, "Module.layers.0.mlp.Linear");
  EXPECT_EQ(e.count, "2");
  EXPECT_EQ(entry_backward_of(f), "Module.layers.0.mlp.Linear.backward.2");
  EXPECT_TRUE(entry_parse("Cell.net.Dense.backward.0").is_module());
  // A module path may contain "forward" itself: whole segments count, from the end.
  const entry_name tricky = entry_parse("Module.forward.backward_net.Linear.forward.0");
  EXPECT_TRUE(tricky.is_forward());
  EXPECT_EQ(tricky.base, "Module.forward.backward_net.Linear");
  EXPECT_EQ(entry_backward_of("Module.forward.backward_net.Linear.forward.0"),
            "Module.forward.backward_net.Linear.backward.0");
}

TEST(DumpSemantics, ParametersGradNames) {
  const std::string g = entry_parameters_grad_name("Module.fc.Linear", 4);
  EXPECT_EQ(g, "Module.fc.Linear.parameters_grad.4");
  const entry_name e = entry_parse(g);
  EXPECT_TRUE(e.is_parameters_grad());
  EXPECT_FALSE(e.is_module());
  EXPECT_EQ(e.base, "Module.fc.Linear");
  EXPECT_EQ(e.count, "4");
  // msprobe's older form without an index, as its compare reads it.
  const entry_name old = entry_parse("Module.fc.Linear.parameters_grad");
  EXPECT_TRUE(old.is_parameters_grad());
  EXPECT_EQ(old.base, "Module.fc.Linear");
  EXPECT_TRUE(old.count.empty());
  EXPECT_EQ(entry_backward_of(g), "");
  EXPECT_EQ(entry_with_direction(g, entry_direction::forward), "");
}

TEST(DumpSemantics, NamesOfNoKnownForm) {
  for (const char *name : {"", "forward", "x.0.debug", "Module.a.B.forward.x", "forward.0", "Functional.linear"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(entry_parse(name).direction, entry_direction::none);
    EXPECT_EQ(entry_backward_of(name), "");
  }
  // A direction as the last segment with no count before it is still a direction.
  EXPECT_TRUE(entry_parse("X.forward").is_forward());
  EXPECT_TRUE(entry_parse("X.forward").count.empty());
  EXPECT_EQ(entry_backward_of("X.forward"), "X.backward");
}

// msprobe's scope patterns (RangeScope.check_name_pattern), the regexes written out.
TEST(DumpSemantics, ScopePatterns) {
  EXPECT_TRUE(entry_is_api_pattern("Functional.linear.0.forward"));
  EXPECT_TRUE(entry_is_api_pattern("Tensor.__add__.12.backward"));
  EXPECT_TRUE(entry_is_api_pattern("Functional..0.forward"));   // ".*" may be empty
  EXPECT_FALSE(entry_is_api_pattern("Functional.0.forward"));   // no "\." before the count
  EXPECT_FALSE(entry_is_api_pattern("Custom.linear.0.forward"));
  EXPECT_FALSE(entry_is_api_pattern("Functional.linear.forward"));
  EXPECT_FALSE(entry_is_api_pattern("Functional.lin\near.0.forward"));
  EXPECT_FALSE(entry_is_api_pattern("Module.conv1.Conv2d.forward.0"));
  EXPECT_TRUE(entry_is_module_pattern("Module.conv1.Conv2d.forward.0"));
  EXPECT_TRUE(entry_is_module_pattern("Cell.net.Dense.backward.3"));
  EXPECT_FALSE(entry_is_module_pattern("Module.forward.0"));
  EXPECT_FALSE(entry_is_module_pattern("Module.a.B.parameters_grad.0"));
  EXPECT_FALSE(entry_is_module_pattern("Functional.linear.0.forward"));
  EXPECT_FALSE(entry_is_module_pattern("Module.a.B.forward.x"));
}

TEST(DumpSemantics, BackwardSlots) {
  EXPECT_EQ(slot_backward_of("input.1.0"), "output.1.0");
  EXPECT_EQ(slot_backward_of("input.0"), "output.0");
  EXPECT_EQ(slot_backward_of("output.2"), "input.2");
  EXPECT_EQ(slot_backward_of("output"), "input");
  EXPECT_EQ(slot_backward_of("kwargs.weight"), "");
  EXPECT_EQ(slot_backward_of("parameters.bias"), "");
  EXPECT_EQ(slot_backward_of("inputs.0"), "");  // whole segments only
}

std::vector<dump_path_element> path(std::initializer_list<dump_path_element> p) { return p; }

TEST(DumpSemantics, SlotLocations) {
  const entry_name api = entry_parse("Functional.linear.0.forward");
  auto loc = slot_locate(api, "input.1.0");
  EXPECT_EQ(loc.section, "input_args");
  EXPECT_EQ(loc.path, path({int64_t{1}, int64_t{0}}));
  loc = slot_locate(api, "kwargs.dim");
  EXPECT_EQ(loc.section, "input_kwargs");
  EXPECT_EQ(loc.path, path({std::string("dim")}));
  // A keyword is a key even when it is all digits; below it, digits are indices again.
  loc = slot_locate(api, "kwargs.0.1");
  EXPECT_EQ(loc.path, path({std::string("0"), int64_t{1}}));
  loc = slot_locate(api, "output.0.key");
  EXPECT_EQ(loc.section, "output");
  EXPECT_EQ(loc.path, path({int64_t{0}, std::string("key")}));
  const entry_name module = entry_parse("Module.conv1.Conv2d.forward.0");
  loc = slot_locate(module, "parameters.0");
  EXPECT_EQ(loc.section, "parameters");
  EXPECT_EQ(loc.path, path({std::string("0")}));
  const entry_name backward = entry_parse("Functional.linear.0.backward");
  loc = slot_locate(backward, "input.0");
  EXPECT_EQ(loc.section, "input");
  EXPECT_EQ(loc.path, path({int64_t{0}}));
  const entry_name grads = entry_parse("Module.fc.Linear.parameters_grad.0");
  loc = slot_locate(grads, "weight");
  EXPECT_EQ(loc.section, "weight");
  EXPECT_EQ(loc.path, path({int64_t{0}}));
  EXPECT_EQ(slot_locate(grads, "parameters_grad.bias").section, "bias");
  const entry_name debug = entry_parse("x.0.debug");
  EXPECT_TRUE(slot_locate(debug, "debug").whole_entry);
  loc = slot_locate(debug, "debug.2");
  EXPECT_TRUE(loc.whole_entry);
  EXPECT_EQ(loc.path, path({int64_t{2}}));
  // A count too large for int64 stays a key rather than wrapping.
  loc = slot_locate(api, "output.99999999999999999999");
  EXPECT_EQ(loc.path, path({std::string("99999999999999999999")}));
}

// Dict keys in slots (issue 60): {"a": t, 3: u} and {"head.0": y, "0": z} keep their keys.
TEST(DumpSemantics, QuotedKeysInSlots) {
  std::string slot = "output.0";
  for (const char *key : {"a", "3", "head.0", "", "it's", "'q", "\xc3\xa9"}) slot_key_append(slot, key);
  EXPECT_EQ(slot, "output.0.a.'3'.'head.0'.''.it's.'''q'.\xc3\xa9");
  EXPECT_TRUE(slot_has_quoted_key(slot));
  EXPECT_FALSE(slot_has_quoted_key("output.0.a"));
  EXPECT_EQ(slot_display(slot), "output.0.a.3.head.0..it's.'q.\xc3\xa9");
  EXPECT_EQ(slot_display("output.0.a"), "output.0.a");
  const auto loc = slot_locate(entry_parse("Module.m.M.forward.0"), slot);
  EXPECT_EQ(loc.section, "output");
  EXPECT_EQ(loc.path, path({int64_t{0}, std::string("a"), std::string("3"), std::string("head.0"), std::string(""),
                            std::string("it's"), std::string("'q"), std::string("\xc3\xa9")}));
  // Lenient with what no producer writes: an unterminated quote takes the rest.
  EXPECT_EQ(slot_locate(entry_parse("x.0.debug"), "debug.'a.b").path, path({std::string("a.b")}));
}

TEST(DumpSemantics, CompareRows) {
  using row = std::pair<std::string, std::string>;
  EXPECT_EQ(slot_compare_row("F.x.0.forward", "kwargs.dim"), row("F.x.0.forward.input.dim", "input"));
  EXPECT_EQ(slot_compare_row("F.x.0.forward", "output.0"), row("F.x.0.forward.output.0", "output"));
  EXPECT_EQ(slot_compare_row("M.a.B.parameters_grad.0", "weight"), row("M.a.B.parameters_grad.0.weight", "parameters_grad"));
  EXPECT_EQ(slot_compare_row("M.a.B.parameters_grad.0", "parameters_grad.weight"),
            row("M.a.B.parameters_grad.0.weight", "parameters_grad"));
}

// The data_mode table: for each config list, which (entry, slot) pairs are written.
TEST(DumpSemantics, DataModeTable) {
  struct probe {
    const char *entry, *slot;
  };
  const probe probes[] = {
      {"F.x.0.forward", "input.0"},           // 0 forward input
      {"F.x.0.forward", "kwargs.dim"},        // 1 forward input
      {"F.x.0.forward", "output.0"},          // 2 forward output
      {"M.a.B.forward.0", "parameters.w"},    // 3 forward parameters
      {"F.x.0.backward", "input.0"},          // 4 backward input
      {"F.x.0.backward", "output.0"},         // 5 backward output
      {"M.a.B.parameters_grad.0", "weight"},  // 6 parameter gradient
      {"x.0.debug", "debug"},                 // 7 no direction
  };
  struct row {
    std::vector<std::string> modes;
    const char *expected;  // one 0/1 per probe
  };
  const row table[] = {
      {{"all"}, "11111111"},
      {{}, "11111111"},
      {{"forward"}, "11110001"},
      {{"backward"}, "00001111"},
      {{"input"}, "11011011"},  // parameters_grad kept: no direction named
      {{"output"}, "00110111"},
      {{"forward", "backward"}, "11111111"},
      {{"input", "output"}, "11111111"},
      {{"forward", "input"}, "11010001"},
      {{"backward", "output"}, "00000111"},
      {{"forward", "output"}, "00110001"},
      {{"backward", "input"}, "00001011"},
  };
  for (const auto &r : table) {
    const data_mode_filter f(r.modes);
    std::string got;
    for (const auto &p : probes) got += f.allows(p.entry, p.slot) ? '1' : '0';
    std::string label;
    for (const auto &m : r.modes) label += m + " ";
    EXPECT_EQ(got, r.expected) << "data_mode [ " << label << "]";
  }
  EXPECT_TRUE(data_mode_filter({"all"}).allows_everything());
  EXPECT_FALSE(data_mode_filter({"input"}).allows_everything());
  EXPECT_FALSE(data_mode_filter::from_json(ojson::array({"forward"})).backward());
  EXPECT_TRUE(data_mode_filter::from_json(ojson("forward")).allows_everything());  // not a list: all
}

// A new entry as the writer begins it, the same as JSON (entry_skeleton_json, for the live stages
// that rebuild dump.json's entries), and the session's data_mode (task structure: no values).
TEST(DumpSemantics, EntrySkeletonAndSlotPlacement) {
  const ojson no = false;
  const data_mode_filter all;
  EXPECT_EQ(entry_skeleton_json(entry_parse("Functional.gelu.0.forward"), all, &no).dump(),
            R"({"input_args":[],"input_kwargs":{},"is_recompute":false,"output":[]})");
  EXPECT_EQ(entry_skeleton_json(entry_parse("Module.fc.Linear.forward.0"), all, &no).dump(),
            R"({"input_args":[],"input_kwargs":{},"output":[],"parameters":{}})");
  EXPECT_EQ(entry_skeleton_json(entry_parse("Functional.gelu.0.backward"), data_mode_filter({"output"}), nullptr).dump(),
            R"({"output":[]})");
  EXPECT_EQ(entry_skeleton_json(entry_parse("x.0.debug"), all, nullptr).dump(), "{}");

  const entry_name fwd = entry_parse("Functional.gelu.0.forward");
  ojson e = entry_skeleton_json(fwd, all, &no);
  entry_slot_json(e, fwd, slot_locate(fwd, "input.1")) = 1;
  entry_slot_json(e, fwd, slot_locate(fwd, "kwargs.approximate")) = "none";
  EXPECT_EQ(e.dump(), R"({"input_args":[null,1],"input_kwargs":{"approximate":"none"},"is_recompute":false,"output":[]})");
  EXPECT_THROW(entry_slot_json(e, fwd, slot_location{"input_args", {std::string("k")}}), std::invalid_argument);
  EXPECT_THROW(entry_slot_json(e, fwd, slot_location{"input_args", {int64_t{1} << 21}}), std::invalid_argument);
  // A module forward keeps is_recompute last when its parameters come after it.
  const entry_name mod = entry_parse("Module.fc.Linear.forward.0");
  ojson m = {{"input_args", ojson::array()}, {"is_recompute", true}};
  entry_slot_json(m, mod, slot_locate(mod, "parameters.weight")) = 2;
  EXPECT_EQ(m.dump(), R"({"input_args":[],"parameters":{"weight":2},"is_recompute":true})");

  EXPECT_TRUE(data_mode_of_session(ojson()).allows_everything());
  EXPECT_FALSE(data_mode_of_session({{"data_mode", {"forward"}}}).backward());
  EXPECT_FALSE(data_mode_of_session({{"task", "structure"}}).allows_entry(fwd));
}

TEST(DumpSemantics, StatsOptionsOfASession) {
  const stats_options plain = stats_options_of_session(ojson{{"precision", "low"}, {"task", "statistics"}});
  EXPECT_FALSE(plain.high_precision);
  EXPECT_FALSE(plain.half_mean_of_rounded_sum);
  const stats_options both = stats_options_of_session(ojson{{"precision", "high"}, {"half_mean", "rounded_sum"}});
  EXPECT_TRUE(both.high_precision);
  EXPECT_TRUE(both.half_mean_of_rounded_sum);
  EXPECT_FALSE(stats_options_of_session(ojson{{"half_mean", true}}).half_mean_of_rounded_sum);  // not its spelling
  EXPECT_FALSE(stats_options_of_session(ojson::array()).high_precision);  // not a session's meta: defaults
}

TEST(DumpSemantics, StatJson) {
  EXPECT_EQ(stat_json(stat_value::none()), ojson(nullptr));
  EXPECT_EQ(stat_json(stat_value::of_bool(true)), ojson(true));
  EXPECT_EQ(stat_json(stat_value::of_int(423)), ojson(423));
  EXPECT_TRUE(stat_json(stat_value::of_int(423)).is_number_integer());
  EXPECT_EQ(stat_json(stat_value::of_real(2.5)), ojson(2.5));
  EXPECT_TRUE(std::isnan(stat_json(stat_value::of_real(std::nan(""))).get<double>()));
}

TEST(DumpSemantics, TensorLeafKeyOrder) {
  const std::vector<int64_t> shape{2, 3};
  tensor_stats s;
  s.max = stat_value::of_real(1.5);
  s.min = stat_value::of_real(-1);
  s.mean = stat_value::of_real(0.25);
  s.norm = stat_value::of_real(std::numeric_limits<double>::infinity());
  s.crc32 = 0xabcu;
  const ojson leaf = tensor_leaf_json({"torch.Tensor", "torch.bfloat16", &shape, &s, true, "X.0.forward.input.0.npy"});
  EXPECT_EQ(pyjson_dump(leaf, -1),
            R"({"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": [2, 3], "Max": 1.5, "Min": -1.0, )"
            R"("Mean": 0.25, "Norm": Infinity, "requires_grad": true, "data_name": "X.0.forward.input.0.npy", )"
            R"("md5": "00000abc"})");
  // Statistics-less: the facts, all four null, nothing else.
  const ojson bare = tensor_leaf_json({"torch.Tensor", "torch.float8_e4m3fn", &shape, nullptr, false, ""});
  EXPECT_EQ(pyjson_dump(bare, -1),
            R"({"type": "torch.Tensor", "dtype": "torch.float8_e4m3fn", "shape": [2, 3], "Max": null, "Min": null, )"
            R"("Mean": null, "Norm": null, "requires_grad": false})");
  EXPECT_EQ(tensor_type_default("pytorch"), "torch.Tensor");
  EXPECT_EQ(tensor_type_default("mindspore"), "mindspore.Tensor");
  EXPECT_EQ(tensor_type_default("numpy"), "numpy.ndarray");
}

// The writer keeps its leaves as text (tensor_leaf_text_append): the same bytes as the tree's,
// for every kind of statistic, shape, name and flag.
TEST(DumpSemantics, TensorLeafTextIsTheTreesText) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {7}, {2, 3}, {1, 1, 4096, 3}, {-1}};
  std::vector<tensor_stats> stats(6);
  stats[1].max = stat_value::of_real(1.5), stats[1].min = stat_value::of_real(-1e-300);
  stats[1].mean = stat_value::of_real(std::nan("")), stats[1].norm = stat_value::of_real(-INFINITY);
  stats[2].max = stat_value::of_bool(true), stats[2].min = stat_value::of_bool(false);
  stats[2].mean = stat_value::of_real(0.5), stats[2].norm = stat_value::none();
  stats[3].max = stat_value::of_int(INT64_MIN), stats[3].min = stat_value::of_int(42);
  stats[3].crc32 = 0u;
  stats[4].mean = stat_value::of_real(1e16), stats[4].norm = stat_value::of_real(0.1);
  stats[4].crc32 = 0xdeadbeefu;
  stats[5].max = stat_value::of_real(-0.0), stats[5].min = stat_value::of_real(INFINITY);
  int cases = 0;
  for (const auto &shape : shapes)
    for (size_t si = 0; si <= stats.size(); ++si)
      for (const bool requires_grad : {false, true})
        for (const std::string_view data_name : {std::string_view{}, std::string_view{"X.0.forward.input.0.npy"}})
          for (const bool uninitialized : {false, true})
            for (const std::string_view type : {std::string_view{"torch.Tensor"}, std::string_view{"t\"\u00e9\n"}}) {
              const tensor_facts facts{type,          "torch.float32", &shape, si < stats.size() ? &stats[si] : nullptr,
                                       requires_grad, data_name,       uninitialized};
              std::string text = "kept";
              tensor_leaf_text_append(text, facts);
              ASSERT_EQ(text, "kept" + pyjson_dump(tensor_leaf_json(facts), 1))
                  << "shape size " << shape.size() << ", stats " << si << ", name " << data_name;
              // Made for the depth it goes to (the writer's leaves: level 4 under a section).
              for (const int level : {1, 4}) {
                std::string deep, tree;
                tensor_leaf_text_append(deep, facts, level);
                pyjson_dump_append(tree, tensor_leaf_json(facts), 1, level);
                ASSERT_EQ(deep, tree) << "level " << level;
              }
              ++cases;
            }
  EXPECT_EQ(cases, 6 * 7 * 2 * 2 * 2 * 2);
  // A shape pointer left null is the empty shape, as in the tree.
  std::string text;
  tensor_leaf_text_append(text, {"torch.Tensor", "torch.int8", nullptr, nullptr, false, ""});
  EXPECT_EQ(text, pyjson_dump(tensor_leaf_json({"torch.Tensor", "torch.int8", nullptr, nullptr, false, ""}), 1));
}

// A leaf is written into room reserved for its longest text, then cut to size: many dimensions,
// long names, deep levels and the widest reals fit, and the text is the tree's.
TEST(DumpSemantics, TensorLeafTextIsTheTreesTextAtItsLongest) {
  std::mt19937_64 rng(20261128);
  tensor_stats stats;
  int cases = 0;
  for (const size_t dims : {size_t{0}, size_t{8}, size_t{40}, size_t{300}})
    for (const size_t name_size : {size_t{0}, size_t{30}, size_t{3000}})
      for (const int level : {0, 3, 30}) {
        std::vector<int64_t> shape(dims);
        for (auto &d : shape) d = static_cast<int64_t>(rng() >> (rng() % 64));
        // Reals of any magnitude, and the widest: 17 digits and a three-digit exponent.
        const double reals[] = {-1.2345678901234567e-308, std::ldexp(static_cast<double>(rng()), -static_cast<int>(rng() % 1100)),
                                -static_cast<double>(rng()) / 3.0, 1e-5};
        stats.max = stat_value::of_real(reals[0]), stats.min = stat_value::of_real(reals[1]);
        stats.mean = stat_value::of_real(reals[2]), stats.norm = stat_value::of_real(reals[3]);
        stats.crc32 = static_cast<uint32_t>(rng());
        // A name whose every byte is escaped at the longest (six bytes each), or none is.
        const std::string name(name_size, level % 2 ? 'n' : '\x01');
        const tensor_facts facts{"torch.Tensor", "torch.bfloat16", &shape, &stats, true, name};
        std::string text = "kept", tree = "kept";
        tensor_leaf_text_append(text, facts, level);
        pyjson_dump_append(tree, tensor_leaf_json(facts), 1, level);
        ASSERT_EQ(text, tree) << dims << " dims, name of " << name_size << ", level " << level;
        ++cases;
      }
  EXPECT_EQ(cases, 4 * 3 * 3);
}

// The hot leaves are defined as text (value_*_append); the text must parse back to exactly the
// value it encodes: a float stays a float (2.0, not 2), every double round-trips bit for bit,
// and strings of any bytes survive.
TEST(DumpSemantics, ValueLeafTextsParseBackExactly) {
  const double reals[] = {0.5, 2.0, -0.0, 0.1, 1e20, 1e-7, 123456789.0, 9007199254740993.0, 5e-324,
                          std::numeric_limits<double>::max(), -std::numeric_limits<double>::min(), 1.0 / 3.0};
  for (const double d : reals) {
    std::string text;
    value_real_append(text, d, "float32");
    const auto leaf = nlohmann::ordered_json::parse(text);
    ASSERT_TRUE(leaf["value"].is_number_float()) << text;
    const double back = leaf["value"].get<double>();
    EXPECT_EQ(std::memcmp(&back, &d, sizeof d), 0) << text;
    EXPECT_EQ(leaf["type"], "float32");
  }
  for (const double d : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    std::string text;
    value_real_append(text, d);
    const auto leaf = pyjson_parse(text, "leaf");  // Python's json reads the tokens as floats
    ASSERT_TRUE(leaf["value"].is_number_float()) << text;
    const double back = leaf["value"].get<double>();
    EXPECT_TRUE(std::isnan(d) ? std::isnan(back) : back == d) << text;
  }
  for (const int64_t i : {int64_t{0}, int64_t{-7}, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    std::string text;
    value_int_append(text, i, "int64");
    const auto leaf = nlohmann::ordered_json::parse(text);
    EXPECT_EQ(leaf["value"].get<int64_t>(), i) << text;
    EXPECT_EQ(leaf.dump(), text);  // the same spelling nlohmann writes
  }
  const std::string odd = std::string("quote\" backslash\\ newline\n tab\t bell\x07 nul") + '\0' + " utf-8 \xc3\xa9";
  std::string text;
  value_text_append(text, "str", odd);
  EXPECT_EQ(nlohmann::ordered_json::parse(text)["value"].get<std::string>(), odd) << text;
  text.clear();
  value_bool_append(text, true);
  text += ',';  // appends, never replaces
  value_bool_append(text, false);
  EXPECT_EQ(text, R"({"type":"bool","value":true},{"type":"bool","value":false})");
}

TEST(DumpSemantics, ValueLeaves) {
  EXPECT_EQ(value_bool(true).dump(), R"({"type":"bool","value":true})");
  EXPECT_EQ(value_int(-7).dump(), R"({"type":"int","value":-7})");
  EXPECT_EQ(value_int(3, "int64").dump(), R"({"type":"int64","value":3})");
  EXPECT_EQ(value_real(0.5).dump(), R"({"type":"float","value":0.5})");
  // Non-finite reals as Python's json writes them (docs/msprobe-compat.md §2.4), never as strings: a
  // string "-inf" made compare refuse every masked attention's dump (issue 60).
  const auto real_text = [](double v, std::string_view type = "float") {
    std::string text;
    value_real_append(text, v, type);
    return text;
  };
  EXPECT_EQ(real_text(std::nan("")), R"({"type":"float","value":NaN})");
  EXPECT_EQ(real_text(-std::numeric_limits<double>::infinity(), "float32"), R"({"type":"float32","value":-Infinity})");
  EXPECT_EQ(real_text(std::numeric_limits<double>::infinity()), R"({"type":"float","value":Infinity})");
  EXPECT_TRUE(std::isnan(value_real(std::nan(""))["value"].get<double>()));
  EXPECT_EQ(value_real(-std::numeric_limits<double>::infinity())["value"].get<double>(),
            -std::numeric_limits<double>::infinity());
  EXPECT_EQ(pyjson_dump(value_real(std::numeric_limits<double>::infinity()), -1),
            R"({"type": "float", "value": Infinity})");
  // Readers take both forms.
  EXPECT_TRUE(std::isnan(*value_leaf_real(nlohmann::ordered_json("nan"))));
  EXPECT_EQ(*value_leaf_real(nlohmann::ordered_json("-inf")), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(*value_leaf_real(nlohmann::ordered_json(2.5)), 2.5);
  EXPECT_FALSE(value_leaf_real(nlohmann::ordered_json("x")));
  EXPECT_TRUE(value_real_type("float32"));
  EXPECT_FALSE(value_real_type("str"));
  EXPECT_EQ(value_text("str", "mean").dump(), R"({"type":"str","value":"mean"})");
  EXPECT_EQ(value_text("torch.dtype", "torch.float32").dump(), R"({"type":"torch.dtype","value":"torch.float32"})");
  EXPECT_EQ(value_text("ellipsis", "...").dump(), R"({"type":"ellipsis","value":"..."})");
  // msprobe's key order: type first, then format.
  EXPECT_EQ(value_memory_format("channels_last").dump(), R"({"type":"torch.memory_format","format":"channels_last"})");
  EXPECT_EQ(value_int_list("slice", {1, std::nullopt, 2}).dump(), R"({"type":"slice","value":[1,null,2]})");
  EXPECT_EQ(value_int_list("torch.Size", {2, 3}).dump(), R"({"type":"torch.Size","value":[2,3]})");
  EXPECT_EQ(value_complex(1, -2).dump(), R"x({"type":"complex","value":"(1.000000+-2.000000j)"})x");
  std::string ndarray;
  value_ndarray_append(ndarray, "bool", {2}, stat_value::of_bool(true), stat_value::of_bool(false), stat_value::none(),
                       stat_value::none());
  EXPECT_EQ(ndarray, R"({"type":"numpy.ndarray","dtype":"bool","shape":[2],"Max":true,"Min":false,"Mean":null,"Norm":null})");
  ndarray.clear();
  value_ndarray_append(ndarray, "float64", {}, stat_value::of_real(std::nan("")), stat_value::of_real(1),
                       stat_value::of_real(1), stat_value::of_real(1));
  EXPECT_EQ(pyjson_dump(pyjson_parse(ndarray, "ndarray"), -1),
            R"({"type": "numpy.ndarray", "dtype": "float64", "shape": [], "Max": NaN, "Min": 1.0, "Mean": 1.0, "Norm": 1.0})");
}

TEST(DumpSemantics, StackLines) {
  EXPECT_EQ(stack_line("/w/train.py", 42, "forward", "   x = F.linear(x, w)\n"),
            "File /w/train.py, line 42, in forward, \n x = F.linear(x, w)");
  EXPECT_EQ(stack_line("<stdin>", 1, "<module>", ""), "File <stdin>, line 1, in <module>, \n ");
}

}  // namespace
}  // namespace tprobe
