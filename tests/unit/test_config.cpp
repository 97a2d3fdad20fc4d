// Tests for core/capture_config.h: msprobe's config.json parsing, validation, overrides and the
// capture filter built from it.
#include "capture_config.h"

#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "errors.h"

namespace tprobe {
namespace {

using nlohmann::ordered_json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// msprobe's packaged msprobe/config.json (docs/msprobe-compat.md §3).
constexpr const char *packaged_default_config = R"({
  "task": "statistics", "dump_path": "./dump_path", "rank": [], "step": [], "level": "L1",
  "enable_dataloader": false, "async_dump": false,
  "tensor": {"scope": [], "list":[], "data_mode": ["all"], "file_format": "npy"},
  "statistics": {"scope": [], "list":[], "data_mode": ["all"], "summary_mode": "statistics"},
  "overflow_check": {"overflow_nums": 1, "check_mode":"all"},
  "run_ut": {"white_list": [], "black_list": [], "error_data_path": "./"},
  "grad_probe": {"grad_level": "L1", "param_list": [], "bounds": [-1, 0, 1]},
  "free_benchmark": {"scope": [], "list": [], "fuzz_device": "npu", "pert_mode": "improve_precision",
     "handler_type": "check", "fuzz_level": "L1", "fuzz_stage": "forward", "if_preheat": false,
     "preheat_step": 15, "max_sample": 20} })";

ordered_json default_doc() { return ordered_json::parse(packaged_default_config); }

std::string cwd_path(const std::string &relative) {
  return (std::filesystem::current_path() / relative).lexically_normal().string();
}

// The usage_error message config_parse throws for `doc`, or a marker when it accepts it.
std::string parse_error(const ordered_json &doc) {
  try {
    (void)config_parse(doc, "config.json");
  } catch (const usage_error &e) {
    return e.what();
  }
  return "<accepted>";
}

// The default document with one top-level field replaced.
ordered_json with(const std::string &key, const ordered_json &value) {
  ordered_json doc = default_doc();
  doc[key] = value;
  return doc;
}

// The default document with one field of a task section replaced (and that task selected).
ordered_json with_section(const std::string &task, const std::string &key, const ordered_json &value) {
  ordered_json doc = default_doc();
  doc["task"] = task;
  doc[task][key] = value;
  return doc;
}

std::string rank_error(const ordered_json &value) {
  try {
    (void)config_parse_rank_or_step(value, "rank", "config.json");
  } catch (const usage_error &e) {
    return e.what();
  }
  return "<accepted>";
}

// ---- parsing ------------------------------------------------------------------------------

TEST(ConfigParse, PackagedDefaultParses) {
  const capture_config cfg = config_parse(default_doc(), "config.json");
  EXPECT_EQ(cfg.task, "statistics");
  EXPECT_EQ(cfg.level, "L1");
  EXPECT_EQ(cfg.dump_path, cwd_path("dump_path"));
  EXPECT_THAT(cfg.rank, IsEmpty());
  EXPECT_THAT(cfg.step, IsEmpty());
  EXPECT_FALSE(cfg.enable_dataloader);
  EXPECT_FALSE(cfg.async_dump);
  EXPECT_EQ(cfg.precision, "low");
  EXPECT_THAT(cfg.data_mode, ElementsAre("all"));
  EXPECT_EQ(cfg.summary_mode, "statistics");
  EXPECT_EQ(cfg.file_format, "npy");
  EXPECT_EQ(cfg.overflow_nums, 1);
  EXPECT_EQ(cfg.source, default_doc());
  EXPECT_EQ(cfg.source_name, "config.json");
}

TEST(ConfigParse, EveryTaskOfThePackagedDefaultParses) {
  for (const char *task : {"tensor", "statistics", "overflow_check", "free_benchmark", "run_ut", "grad_probe",
                           "structure"}) {
    SCOPED_TRACE(task);
    EXPECT_EQ(config_parse(with("task", task), "config.json").task, task);
  }
}

TEST(ConfigParse, MinimalDocumentGetsMsprobeDefaults) {
  const capture_config cfg = config_parse(ordered_json{{"dump_path", "/tmp/d"}}, "config.json");
  EXPECT_EQ(cfg.task, "statistics");
  EXPECT_EQ(cfg.level, "L1");
  EXPECT_EQ(cfg.dump_path, "/tmp/d");
  EXPECT_THAT(cfg.data_mode, ElementsAre("all"));
}

TEST(ConfigParse, NullMeansDefault) {
  ordered_json doc = default_doc();
  doc["task"] = nullptr;
  doc["level"] = nullptr;
  doc["rank"] = nullptr;
  doc["statistics"]["data_mode"] = nullptr;
  const capture_config cfg = config_parse(doc, "config.json");
  EXPECT_EQ(cfg.task, "statistics");
  EXPECT_EQ(cfg.level, "L1");
  EXPECT_THAT(cfg.rank, IsEmpty());
  EXPECT_THAT(cfg.data_mode, ElementsAre("all"));
}

TEST(ConfigParse, SessionMetaIsTheEffectiveConfig) {
  ordered_json doc = default_doc();
  doc["step"] = ordered_json::array({"1-2"});
  doc["statistics"]["list"] = {"linear"};
  const ordered_json meta = config_parse(doc, "config.json").session_meta();
  std::vector<std::string> keys;
  for (const auto &[key, value] : meta.items()) keys.push_back(key);
  EXPECT_THAT(keys, ElementsAre("task", "level", "framework", "dump_path", "rank", "step", "precision", "summary_mode",
                                "data_mode", "scope", "list", "tensor_list", "async_dump", "tensor_format"));
  EXPECT_EQ(meta["framework"], "pytorch");
  EXPECT_EQ(meta["tensor_format"], "npy");
  EXPECT_EQ(meta["step"], ordered_json::parse("[1, 2]"));
  EXPECT_EQ(meta["rank"], ordered_json::array());
  EXPECT_EQ(meta["list"], ordered_json::parse(R"(["linear"])"));
  EXPECT_EQ(meta["dump_path"], cwd_path("dump_path"));
}

// tprobe.tensor_format picks the writer's tensor files: "npy" by default, "pt" (torch.save) on
// request, anything else refused in one line naming the key; it reaches the writer in the session
// meta, and survives overrides (the config is re-derived from its document).
TEST(ConfigParse, TensorFormatIsNpyOrPt) {
  EXPECT_EQ(config_parse(default_doc(), "config.json").tensor_format, "npy");
  ordered_json doc = default_doc();
  doc["task"] = "tensor";
  doc["tprobe"] = {{"tensor_format", "pt"}};
  capture_config cfg = config_parse(doc, "config.json");
  EXPECT_EQ(cfg.tensor_format, "pt");
  EXPECT_EQ(cfg.session_meta()["tensor_format"], "pt");
  config_overrides level;
  level.level = "mix";
  config_apply_overrides(cfg, level);
  EXPECT_EQ(cfg.tensor_format, "pt");
  cfg.source = nullptr;  // a config built by hand is re-derived from its fields
  config_apply_overrides(cfg, level);
  EXPECT_EQ(cfg.tensor_format, "pt");

  doc["tprobe"]["tensor_format"] = "npz";
  EXPECT_EQ(parse_error(doc), "config.json: field \"tprobe.tensor_format\": \"npz\" is not one of npy, pt");
  doc["tprobe"]["tensor_format"] = "PT";
  EXPECT_THAT(parse_error(doc), HasSubstr("field \"tprobe.tensor_format\""));
  doc["tprobe"]["tensor_format"] = 1;
  EXPECT_THAT(parse_error(doc), HasSubstr("field \"tprobe.tensor_format\""));
  // Also at the top level, as the issue spells it; tprobe's section wins when both are given.
  ordered_json top = default_doc();
  top["tensor_format"] = "pt";
  EXPECT_EQ(config_parse(top, "config.json").tensor_format, "pt");
  top["tprobe"] = {{"tensor_format", "npy"}};
  EXPECT_EQ(config_parse(top, "config.json").tensor_format, "npy");
  top["tensor_format"] = "npz";
  EXPECT_EQ(parse_error(top), "config.json: field \"tensor_format\": \"npz\" is not one of npy, pt");
}

// tprobe.nan_analyze: the NaN/Inf analysis' allow rules (core/nan_analyze.h), checked at parse time
// and carried to the stages in the session meta; absent by default (the built-in rules).
TEST(ConfigParse, NanAnalyzeRules) {
  EXPECT_TRUE(config_parse(default_doc(), "config.json").nan_analyze.is_null());
  EXPECT_FALSE(config_parse(default_doc(), "config.json").session_meta().contains("nan_analyze"));
  ordered_json doc = default_doc();
  doc["tprobe"] = {{"nan_analyze", {{"allow", {{{"op", "my_mask"}, {"slots", {"output"}}}}}}}};
  capture_config cfg = config_parse(doc, "config.json");
  EXPECT_EQ(cfg.session_meta()["nan_analyze"], doc["tprobe"]["nan_analyze"]);
  config_overrides level;
  level.level = "mix";
  cfg.source = nullptr;  // re-derived from the fields: the rules stay
  config_apply_overrides(cfg, level);
  EXPECT_EQ(cfg.nan_analyze, doc["tprobe"]["nan_analyze"]);
  doc["tprobe"]["nan_analyze"]["allow"][0]["slots"] = {"outputs"};
  EXPECT_THAT(parse_error(doc), HasSubstr("config.json: field \"tprobe.nan_analyze\": allow[0]: slots: \"outputs\""));
  doc["tprobe"]["nan_analyze"] = {{"allow", {{{"op", "x"}, {"slots", {"output"}}}}}, {"default", false}};
  EXPECT_THAT(parse_error(doc), HasSubstr("unknown key \"default\""));
}

TEST(ConfigParse, TopLevelMustBeAnObject) {
  EXPECT_THAT(parse_error(ordered_json::array()), HasSubstr("expected a JSON object"));
}

// ---- rank / step --------------------------------------------------------------------------

TEST(ConfigRankStep, RangesExpandSortedAndDeduplicated) {
  EXPECT_THAT(config_parse_rank_or_step(ordered_json::parse(R"([0, 1, 2, "4-6"])"), "rank", "c"),
              ElementsAre(0, 1, 2, 4, 5, 6));
  EXPECT_THAT(config_parse_rank_or_step(ordered_json::parse(R"([5, "3-6", 0, 5, "4-4"])"), "step", "c"),
              ElementsAre(0, 3, 4, 5, 6));
  EXPECT_THAT(config_parse_rank_or_step(ordered_json::parse(R"([1000000, "0-0"])"), "step", "c"),
              ElementsAre(0, 1000000));
  EXPECT_THAT(config_parse_rank_or_step(nullptr, "rank", "c"), IsEmpty());
  EXPECT_THAT(config_parse_rank_or_step(ordered_json::array(), "rank", "c"), IsEmpty());
  EXPECT_EQ(config_parse_rank_or_step(ordered_json::parse(R"(["0-1000000"])"), "step", "c").size(), 1000001u);
}

TEST(ConfigRankStep, ReversedRangeMessage) {
  EXPECT_EQ(rank_error(ordered_json::parse(R"(["5-3"])")),
            "config.json: field \"rank\": element \"5-3\" is not a valid range (a <= b required)");
}

TEST(ConfigRankStep, BadElementsNameTheFieldAndElement) {
  struct bad_case {
    const char *json, *expected;
  };
  const bad_case cases[] = {
      {R"(["3-1"])", "element \"3-1\" is not a valid range (a <= b required)"},
      {R"(["a-b"])", "element \"a-b\" is not a valid range (the hyphen"},
      {R"(["1-"])", "element \"1-\" is not a valid range"},
      {R"(["-1"])", "element \"-1\" is not a valid range"},
      {R"(["1-2-3"])", "element \"1-2-3\" is not of the form \"a-b\""},
      {R"(["5"])", "element \"5\" is not of the form \"a-b\""},
      {R"([" 1-2"])", "is not a valid range"},
      {R"(["0-1000001"])", "both ends must be in [0, 1000000]"},
      {R"(["0-99999999999999999999999"])", "both ends must be in [0, 1000000]"},
      {R"([true])", "element true is a boolean"},
      {R"([0, false])", "element false is a boolean"},
      {R"([1000001])", "element 1000001 is out of range [0, 1000000]"},
      {R"([-1])", "element -1 is out of range [0, 1000000]"},
      {R"([18446744073709551615])", "is out of range"},
      {R"([1.5])", "element 1.5 is a float"},
      {R"([[1]])", "is a list"},
      {R"([null])", "element null is null"},
      {R"("0-3")", "expected a list of ints"},
      {R"(3)", "expected a list of ints"},
      {R"({"a": 1})", "expected a list of ints"},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(c.json);
    const std::string message = rank_error(ordered_json::parse(c.json));
    EXPECT_THAT(message, StartsWith("config.json: field \"rank\": "));
    EXPECT_THAT(message, HasSubstr(c.expected));
  }
}

TEST(ConfigRankStep, ParseNamesTheStepField) {
  EXPECT_THAT(parse_error(with("step", ordered_json::parse(R"(["2-1"])"))), HasSubstr("field \"step\""));
  EXPECT_THAT(parse_error(with("rank", ordered_json::parse("[true]"))), HasSubstr("field \"rank\""));
  const capture_config cfg = config_parse(with("rank", ordered_json::parse(R"([0, 1, 2, "4-6"])")), "config.json");
  EXPECT_THAT(cfg.rank, ElementsAre(0, 1, 2, 4, 5, 6));
}

// ---- common fields ----------------------------------------------------------------------------

TEST(ConfigCommon, WrongTypesNameTheField) {
  struct bad_case {
    const char *field;
    ordered_json value;
    const char *expected;
  };
  const bad_case cases[] = {
      {"task", 1, "expected a string, got an integer"},
      {"dump_path", 5, "expected a string, got an integer"},
      {"level", true, "expected a string, got a boolean"},
      {"enable_dataloader", "yes", "expected a boolean, got a string"},
      {"async_dump", 1, "expected a boolean, got an integer"},
      {"precision", 0, "expected a string"},
      {"statistics", ordered_json::array(), "expected an object, got a list"},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(c.field);
    const std::string message = parse_error(with(c.field, c.value));
    EXPECT_THAT(message, StartsWith(std::string("config.json: field \"") + c.field + "\": "));
    EXPECT_THAT(message, HasSubstr(c.expected));
  }
}

TEST(ConfigCommon, BadEnumValuesNameTheField) {
  EXPECT_EQ(parse_error(with("task", "tensors")),
            "config.json: field \"task\": \"tensors\" is not one of tensor, statistics, overflow_check, "
            "free_benchmark, run_ut, grad_probe, structure, exception_dump");
  EXPECT_THAT(parse_error(with("level", "L3")), HasSubstr("field \"level\": \"L3\" is not one of L0, L1, L2, mix, debug"));
  EXPECT_THAT(parse_error(with("level", "l1")), HasSubstr("field \"level\""));
  EXPECT_THAT(parse_error(with("precision", "medium")), HasSubstr("field \"precision\": \"medium\""));
  EXPECT_EQ(config_parse(with("precision", "high"), "c").precision, "high");
}

TEST(ConfigCommon, DumpPathRequired) {
  ordered_json doc = default_doc();
  doc.erase("dump_path");
  EXPECT_THAT(parse_error(doc), HasSubstr("field \"dump_path\": the dump_path not found"));
  EXPECT_THAT(parse_error(with("dump_path", "")), HasSubstr("field \"dump_path\": the dump_path not found"));
  EXPECT_THAT(parse_error(with("dump_path", nullptr)), HasSubstr("field \"dump_path\": the dump_path not found"));
}

TEST(ConfigCommon, DumpPathCharactersAndLengths) {
  EXPECT_THAT(parse_error(with("dump_path", "a b")), HasSubstr("field \"dump_path\": absolute path"));
  EXPECT_THAT(parse_error(with("dump_path", "a b")), HasSubstr("contains \" \""));
  EXPECT_THAT(parse_error(with("dump_path", "abc++")), HasSubstr("contains \"+\""));
  EXPECT_THAT(parse_error(with("dump_path", "/tmp/x:y")), HasSubstr("field \"dump_path\""));
  EXPECT_THAT(parse_error(with("dump_path", "/tmp/\xc3\xa9")), HasSubstr("field \"dump_path\""));
  EXPECT_THAT(parse_error(with("dump_path", "/tmp/a\nb")), HasSubstr("\\x0a"));
  EXPECT_THAT(parse_error(with("dump_path", "/tmp/" + std::string(256, 'a'))), HasSubstr("path component"));
  EXPECT_EQ(parse_error(with("dump_path", "/tmp/" + std::string(255, 'a'))), "<accepted>");
  std::string deep = "/tmp";
  while (deep.size() <= 4096) deep += "/" + std::string(200, 'd');
  EXPECT_THAT(parse_error(with("dump_path", deep)), HasSubstr("at most 4096"));
}

// Whether `s` is well-formed UTF-8 (no sequence cut short, no stray continuation byte).
bool valid_utf8(const std::string &s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Messages show whole characters: a long non-ASCII value is shortened on a character boundary,
// and a dump_path's first non-ASCII character is named whole.
TEST(ConfigMessages, PrintWholeUtf8Characters) {
  const std::string e_acute = "\xc3\xa9", han = "\xe8\xbe\x93";  // é (2 bytes), 输 (3 bytes)
  for (size_t pad = 0; pad < 3; ++pad) {
    // A step element that is neither an int nor a string is shown by its JSON text, cut at 80.
    std::string name = std::string(pad, 'a');
    for (int i = 0; i < 40; ++i) name += i % 2 ? han : e_acute;
    const std::string message = parse_error(with("step", ordered_json::array({ordered_json::array({name})})));
    EXPECT_THAT(message, HasSubstr("field \"step\": element [\"" + std::string(pad, 'a') + e_acute));
    EXPECT_THAT(message, HasSubstr("..."));
    EXPECT_TRUE(valid_utf8(message)) << "pad " << pad << ": " << message;
  }
  const std::string path_message = parse_error(with("dump_path", "/tmp/" + han + e_acute));
  EXPECT_THAT(path_message, HasSubstr("contains \"" + han + "\";"));
  EXPECT_TRUE(valid_utf8(path_message)) << path_message;
  // A byte that is no character at all is escaped, so the line stays valid UTF-8.
  const std::string stray = parse_error(with("dump_path", "/tmp/a\xa9"));
  EXPECT_THAT(stray, HasSubstr("contains \"\\xa9\""));
  EXPECT_TRUE(valid_utf8(stray)) << stray;
}

TEST(ConfigCommon, DumpPathIsMadeAbsoluteAndNormal) {
  EXPECT_EQ(config_parse(with("dump_path", "./x/../y/"), "c").dump_path, cwd_path("y"));
  EXPECT_EQ(config_parse(with("dump_path", "/tmp//dump/"), "c").dump_path, "/tmp/dump");
  EXPECT_EQ(config_parse(with("dump_path", "/"), "c").dump_path, "/");
}

TEST(ConfigCommon, UnknownTopLevelKeyIsRejectedWithTheAllowedOnes) {
  const std::string message = parse_error(with("dumppath", "x"));
  EXPECT_THAT(message, StartsWith("config.json: field \"dumppath\": unknown key; allowed top-level keys: task, "));
  EXPECT_THAT(message, HasSubstr("dump_path"));
  EXPECT_THAT(message, HasSubstr("grad_probe"));
}

TEST(ConfigCommon, UnknownKeyInTheSelectedSectionIsRejected) {
  const std::string message = parse_error(with_section("statistics", "sumary_mode", "md5"));
  EXPECT_EQ(message,
            "config.json: field \"statistics.sumary_mode\": unknown key; allowed keys in \"statistics\": scope, "
            "list, tensor_list, data_mode, summary_mode, device");
  EXPECT_THAT(parse_error(with_section("tensor", "tensor_list", ordered_json::array())),
              HasSubstr("field \"tensor.tensor_list\": unknown key"));
  EXPECT_THAT(parse_error(with_section("structure", "scope", ordered_json::array())),
              HasSubstr("allowed keys in \"structure\": none"));
}

TEST(ConfigCommon, OtherTaskSectionsAreIgnored) {
  ordered_json doc = default_doc();
  doc["tensor"] = ordered_json{{"not_a_key", 1}, {"file_format", "pt"}};
  doc["free_benchmark"] = "not even an object";
  EXPECT_EQ(parse_error(doc), "<accepted>");
}

// ---- statistics / tensor sections ---------------------------------------------------------------

TEST(ConfigSection, SummaryMode) {
  EXPECT_THAT(parse_error(with_section("statistics", "summary_mode", "sha")),
              HasSubstr("field \"statistics.summary_mode\": \"sha\" is not one of statistics, md5"));
  EXPECT_THAT(parse_error(with_section("statistics", "summary_mode", ordered_json::array({"max"}))),
              HasSubstr("field \"statistics.summary_mode\": expected a string"));
  EXPECT_EQ(config_parse(with_section("tensor", "summary_mode", "md5"), "c").summary_mode, "md5");
}

TEST(ConfigSection, DataMode) {
  auto error = [](const char *json) {
    return parse_error(with_section("statistics", "data_mode", ordered_json::parse(json)));
  };
  EXPECT_THAT(error(R"(["all", "input"])"), HasSubstr("field \"statistics.data_mode\": \"all\" cannot be combined"));
  EXPECT_THAT(error(R"(["all", "all"])"), HasSubstr("\"all\" cannot be combined"));
  EXPECT_THAT(error(R"(["inputs"])"), HasSubstr("field \"statistics.data_mode\": element \"inputs\" is not one of"));
  EXPECT_THAT(error(R"(["forward", "backward", "input", "output", "forward"])"), HasSubstr("at most 4"));
  EXPECT_THAT(error(R"("all")"), HasSubstr("field \"statistics.data_mode\": expected a list of strings"));
  EXPECT_THAT(error(R"([1])"), HasSubstr("element 1 is an integer"));
  EXPECT_EQ(error(R"(["forward", "backward", "input", "output"])"), "<accepted>");
  EXPECT_EQ(error(R"([])"), "<accepted>");
}

TEST(ConfigSection, ScopeCountAndTypes) {
  auto error = [](const char *json) { return parse_error(with_section("statistics", "scope", ordered_json::parse(json))); };
  EXPECT_THAT(error(R"(["Functional.linear.0.forward"])"),
              HasSubstr("field \"statistics.scope\": must be empty or exactly 2 entry names"));
  EXPECT_THAT(error(R"(["Tensor.add.0.forward", "Tensor.add.1.forward", "Tensor.add.2.forward"])"), HasSubstr("got 3"));
  EXPECT_THAT(error(R"([1, 2])"), HasSubstr("field \"statistics.scope\": element 1 is an integer"));
  EXPECT_THAT(error(R"("Functional.linear.0.forward")"), HasSubstr("field \"statistics.scope\": expected a list"));
}

TEST(ConfigSection, ScopeNamesMatchTheLevel) {
  const ordered_json apis = ordered_json::parse(R"(["Functional.linear.0.forward", "Tensor.__add__.3.backward"])");
  const ordered_json modules = ordered_json::parse(R"(["Module.conv1.Conv2d.forward.0", "Module.fc.Linear.backward.1"])");
  const ordered_json mixed = ordered_json::parse(R"(["Module.conv1.Conv2d.forward.0", "Functional.relu.2.forward"])");
  auto error = [](const ordered_json &scope, const char *level) {
    ordered_json doc = with_section("statistics", "scope", scope);
    doc["level"] = level;
    return parse_error(doc);
  };
  EXPECT_EQ(error(apis, "L1"), "<accepted>");
  EXPECT_THAT(error(modules, "L1"), HasSubstr("field \"statistics.scope\": element \"Module.conv1.Conv2d.forward.0\" "
                                              "is not an API entry name"));
  EXPECT_THAT(error(mixed, "L1"), HasSubstr("is not an API entry name"));
  EXPECT_EQ(error(modules, "L0"), "<accepted>");
  EXPECT_THAT(error(apis, "L0"), HasSubstr("field \"statistics.scope\": element \"Functional.linear.0.forward\" is not "
                                           "a module entry name"));
  EXPECT_THAT(error(mixed, "L0"), HasSubstr("is not a module entry name"));
  EXPECT_EQ(error(apis, "mix"), "<accepted>");
  EXPECT_EQ(error(modules, "mix"), "<accepted>");
  EXPECT_EQ(error(mixed, "mix"), "<accepted>");
  EXPECT_THAT(error(ordered_json::parse(R"(["linear", "relu"])"), "mix"), HasSubstr("is neither an API entry name"));
  // Prefixes outside msprobe's list, and the module order of count and direction, are checked.
  EXPECT_THAT(error(ordered_json::parse(R"(["Foo.linear.0.forward", "Tensor.add.0.forward"])"), "L1"),
              HasSubstr("\"Foo.linear.0.forward\""));
  EXPECT_THAT(error(ordered_json::parse(R"(["Module.fc.Linear.0.forward", "Module.fc.Linear.forward.1"])"), "L0"),
              HasSubstr("\"Module.fc.Linear.0.forward\""));
  // The edges of msprobe's patterns: `.*` may be empty, the count is all digits, prefixes are whole.
  EXPECT_EQ(error(ordered_json::parse(R"(["Tensor..0.forward", "MintFunctional.relu.12.backward"])"), "L1"), "<accepted>");
  EXPECT_EQ(error(ordered_json::parse(R"(["Cell.a.B.backward.3", "Module..forward.0"])"), "L0"), "<accepted>");
  for (const char *bad : {"Tensor.0.forward", "Tensor.add.0a.forward", "Tensor.add..forward", "TensorX.add.0.forward",
                          "Tensor.add.0.forwards", "Tensor.add.0.forward.0"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(error(ordered_json::array({bad, "Tensor.add.0.forward"}), "L1"), HasSubstr("is not an API entry name"));
  }
  for (const char *bad : {"Module.forward.0", "Module.fc.Linear.forward.x", "Modules.fc.Linear.forward.0",
                          "Module.fc.Linear.0.forward"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(error(ordered_json::array({"Module.fc.Linear.forward.0", bad}), "L0"), HasSubstr("is not a module entry name"));
  }
}

TEST(ConfigSection, ListAndTensorList) {
  EXPECT_THAT(parse_error(with_section("statistics", "list", "linear")), HasSubstr("field \"statistics.list\": expected a list"));
  EXPECT_THAT(parse_error(with_section("statistics", "list", ordered_json::array({1}))),
              HasSubstr("field \"statistics.list\": element 1 is an integer"));
  EXPECT_THAT(parse_error(with_section("statistics", "tensor_list", ordered_json::array({true}))),
              HasSubstr("field \"statistics.tensor_list\": element true is a boolean"));
  EXPECT_THAT(parse_error(with_section("tensor", "list", ordered_json::object())), HasSubstr("field \"tensor.list\""));
}

TEST(ConfigSection, FileFormatAndDevice) {
  EXPECT_THAT(parse_error(with_section("tensor", "file_format", "pt")),
              HasSubstr("field \"tensor.file_format\": \"pt\" is not one of npy, bin"));
  EXPECT_EQ(config_parse(with_section("tensor", "file_format", "bin"), "c").file_format, "bin");
  EXPECT_THAT(parse_error(with_section("statistics", "device", "gpu")), HasSubstr("field \"statistics.device\""));
  EXPECT_EQ(parse_error(with_section("statistics", "device", "host")), "<accepted>");
}

TEST(ConfigSection, OverflowNums) {
  for (const ordered_json &bad : {ordered_json(0), ordered_json(-2), ordered_json("1"), ordered_json(true), ordered_json(1.0)}) {
    SCOPED_TRACE(bad.dump());
    EXPECT_THAT(parse_error(with_section("overflow_check", "overflow_nums", bad)),
                HasSubstr("field \"overflow_check.overflow_nums\""));
  }
  EXPECT_EQ(config_parse(with_section("overflow_check", "overflow_nums", -1), "c").overflow_nums, -1);
  EXPECT_EQ(config_parse(with_section("overflow_check", "overflow_nums", 5), "c").overflow_nums, 5);
  EXPECT_THAT(parse_error(with_section("overflow_check", "check_mode", "x")), HasSubstr("field \"overflow_check.check_mode\""));
}

TEST(ConfigSection, FreeBenchmarkRules) {
  auto doc = [](std::initializer_list<std::pair<const char *, ordered_json>> fields) {
    ordered_json d = default_doc();
    d["task"] = "free_benchmark";
    for (const auto &[key, value] : fields) d["free_benchmark"][key] = value;
    return d;
  };
  EXPECT_EQ(parse_error(doc({})), "<accepted>");
  EXPECT_THAT(parse_error(doc({{"fuzz_device", "cpu"}})), HasSubstr("field \"free_benchmark.fuzz_device\""));
  EXPECT_THAT(parse_error(doc({{"pert_mode", "to_cpu"}})), HasSubstr("field \"free_benchmark.fuzz_device\""));
  EXPECT_EQ(parse_error(doc({{"fuzz_device", "cpu"}, {"pert_mode", "to_cpu"}})), "<accepted>");
  EXPECT_THAT(parse_error(doc({{"pert_mode", "noise"}})), HasSubstr("field \"free_benchmark.pert_mode\""));
  EXPECT_THAT(parse_error(doc({{"fuzz_stage", "backward"}})), HasSubstr("field \"free_benchmark.list\""));
  EXPECT_THAT(parse_error(doc({{"handler_type", "fix"}, {"pert_mode", "add_noise"}})),
              HasSubstr("field \"free_benchmark.handler_type\""));
  EXPECT_THAT(parse_error(doc({{"handler_type", "fix"}, {"if_preheat", true}})),
              HasSubstr("field \"free_benchmark.handler_type\""));
  EXPECT_THAT(parse_error(doc({{"fuzz_level", "L2"}})), HasSubstr("field \"free_benchmark.fuzz_level\""));
  // preheat_step and max_sample are checked, as msprobe checks them, only with if_preheat.
  EXPECT_THAT(parse_error(doc({{"if_preheat", true}, {"preheat_step", 0}})),
              HasSubstr("field \"free_benchmark.preheat_step\""));
  EXPECT_THAT(parse_error(doc({{"if_preheat", true}, {"max_sample", "20"}})),
              HasSubstr("field \"free_benchmark.max_sample\""));
  EXPECT_EQ(parse_error(doc({{"preheat_step", 0}, {"max_sample", "20"}})), "<accepted>");
  EXPECT_THAT(parse_error(doc({{"if_preheat", "true"}})), HasSubstr("field \"free_benchmark.if_preheat\""));
  EXPECT_THAT(parse_error(doc({{"if_preheat", 1}})), HasSubstr("field \"free_benchmark.if_preheat\""));
  EXPECT_THAT(parse_error(doc({{"scope", ordered_json::parse(R"(["Torch.add.0.forward", "Torch.add.1.forward"])")},
                               {"list", ordered_json::array({"add"})}})),
              HasSubstr("field \"free_benchmark.scope\": cannot be combined"));
  EXPECT_THAT(parse_error(doc({{"fuzz_typo", 1}})), HasSubstr("field \"free_benchmark.fuzz_typo\": unknown key"));
}

// The section as validated reaches the session meta with every default filled in; scope is
// msprobe's ListScope (any number of exact names, no name pattern); the level is msprobe's:
// any but L2 (kernel dump, task tensor only).
TEST(ConfigSection, FreeBenchmarkMetaScopeAndLevel) {
  ordered_json d = default_doc();
  d["task"] = "free_benchmark";
  d["free_benchmark"] = {{"scope", {"Torch.add.0.forward", "Torch.mul.3.forward", "x"}}, {"pert_mode", "add_noise"}};
  const capture_config cfg = config_parse(d, "config.json");
  EXPECT_THAT(cfg.scope, ElementsAre("Torch.add.0.forward", "Torch.mul.3.forward", "x"));
  const ordered_json meta = cfg.session_meta();
  ASSERT_TRUE(meta.contains("free_benchmark"));
  EXPECT_EQ(meta["free_benchmark"].dump(),
            R"({"scope":["Torch.add.0.forward","Torch.mul.3.forward","x"],"list":[],"fuzz_device":"npu",)"
            R"("pert_mode":"add_noise","handler_type":"check","fuzz_level":"L1","fuzz_stage":"forward",)"
            R"("if_preheat":false,"preheat_step":15,"max_sample":15})");
  // No section: msprobe's defaults.
  d.erase("free_benchmark");
  EXPECT_EQ(config_parse(d, "config.json").session_meta()["free_benchmark"]["pert_mode"], "improve_precision");
  // Other tasks carry none.
  EXPECT_FALSE(config_parse(default_doc(), "config.json").session_meta().contains("free_benchmark"));
  EXPECT_TRUE(config_parse(default_doc(), "config.json").free_benchmark.is_null());
  // Overrides re-derive the config: the section survives a re-derivation from the fields.
  capture_config by_hand = config_parse(with("task", "free_benchmark"), "config.json");
  by_hand.source = nullptr;
  config_apply_overrides(by_hand, config_overrides{});
  EXPECT_EQ(by_hand.free_benchmark["max_sample"], 20);  // the packaged config's, unchecked outside preheat but kept
  for (const char *level : {"L0", "L1", "mix", "debug"}) {
    ordered_json e = with("task", "free_benchmark");
    e["level"] = level;
    EXPECT_EQ(parse_error(e), "<accepted>") << level;
  }
  ordered_json l2 = with("task", "free_benchmark");
  l2["level"] = "L2";
  EXPECT_THAT(parse_error(l2), HasSubstr("level \"L2\" (kernel dump) requires task \"tensor\""));
  EXPECT_THAT(config_built_tasks(), ::testing::Contains("free_benchmark"));
}

TEST(ConfigSection, RunUtAndGradProbe) {
  EXPECT_THAT(parse_error(with_section("run_ut", "white_list", "conv2d")), HasSubstr("field \"run_ut.white_list\""));
  EXPECT_THAT(parse_error(with_section("run_ut", "error_data_path", "/nonexistent/tprobe")),
              HasSubstr("field \"run_ut.error_data_path\": path \"/nonexistent/tprobe\" does not exist"));
  EXPECT_THAT(parse_error(with_section("grad_probe", "grad_level", "L3")), HasSubstr("field \"grad_probe.grad_level\""));
  EXPECT_THAT(parse_error(with_section("grad_probe", "param_list", "w")), HasSubstr("field \"grad_probe.param_list\""));
  EXPECT_THAT(parse_error(with_section("grad_probe", "bounds", ordered_json::parse("[0, 0]"))),
              HasSubstr("field \"grad_probe.bounds\": must be strictly ascending"));
  EXPECT_THAT(parse_error(with_section("grad_probe", "bounds", ordered_json::parse("[0, true]"))),
              HasSubstr("element true is a boolean"));
  EXPECT_THAT(parse_error(with_section("grad_probe", "bounds", ordered_json::parse("[1e30]"))),
              HasSubstr("out of the int64 range"));
  EXPECT_EQ(parse_error(with_section("grad_probe", "bounds", ordered_json::parse("[-1.5, 0, 0.5, 9223372036854775807]"))),
            "<accepted>");
}

// ---- cross-field rules ----------------------------------------------------------------------

TEST(ConfigCrossField, LevelL2IsATensorKernelDumpOfOneApi) {
  ordered_json doc = default_doc();
  doc["level"] = "L2";
  EXPECT_THAT(parse_error(doc), HasSubstr("field \"level\": level \"L2\" (kernel dump) requires task \"tensor\""));
  doc["task"] = "tensor";
  EXPECT_THAT(parse_error(doc), HasSubstr("field \"tensor.list\": must contain exactly one API name at level \"L2\", got 0"));
  doc["tensor"]["list"] = {"Functional.linear.0.forward", "Functional.relu.0.forward"};
  EXPECT_THAT(parse_error(doc), HasSubstr("got 2"));
  doc["tensor"]["list"] = {"Functional.linear.0.forward"};
  EXPECT_EQ(parse_error(doc), "<accepted>");
  doc["tensor"]["scope"] = {"Functional.linear.0.forward", "Functional.relu.0.forward"};
  EXPECT_THAT(parse_error(doc), HasSubstr("field \"tensor.scope\": must be empty at level \"L2\""));
}

TEST(ConfigCrossField, AsyncDumpRules) {
  ordered_json doc = with_section("statistics", "summary_mode", "md5");
  doc["async_dump"] = true;
  EXPECT_THAT(parse_error(doc), HasSubstr("field \"async_dump\": true cannot be combined with summary_mode \"md5\""));

  ordered_json tensor = with("task", "tensor");
  tensor["async_dump"] = true;
  EXPECT_THAT(parse_error(tensor), HasSubstr("field \"tensor.list\": must not be empty when async_dump"));
  tensor["level"] = "debug";
  EXPECT_EQ(parse_error(tensor), "<accepted>");
  tensor["level"] = "L1";
  tensor["tensor"]["list"] = {"linear"};
  EXPECT_EQ(parse_error(tensor), "<accepted>");
  tensor["level"] = "debug";
  EXPECT_THAT(config_parse(tensor, "c").list, IsEmpty());  // msprobe clears it at debug
}

TEST(ConfigCrossField, StructureForcesMix) {
  ordered_json doc = with("task", "structure");
  EXPECT_EQ(config_parse(doc, "c").level, "mix");
  doc["level"] = "L0";
  EXPECT_EQ(config_parse(doc, "c").level, "L0");
  doc["level"] = "L2";
  EXPECT_EQ(config_parse(doc, "c").level, "mix");
}

TEST(ConfigCrossField, ExceptionDumpNeedsL2) {
  ordered_json doc = with("task", "exception_dump");
  EXPECT_THAT(parse_error(doc), HasSubstr("field \"level\": task \"exception_dump\" requires level \"L2\""));
  doc["level"] = "L2";
  EXPECT_EQ(parse_error(doc), "<accepted>");
}

// ---- config_load ----------------------------------------------------------------------------

class ConfigLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tprobe_test_config_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string &name, const std::string &text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(ConfigLoad, ReadsAFile) {
  const capture_config cfg = config_load(write("config.json", packaged_default_config));
  EXPECT_EQ(cfg.task, "statistics");
  EXPECT_EQ(cfg.source_name, (dir_ / "config.json").string());
}

TEST_F(ConfigLoad, MissingFileIsASystemError) {
  const std::string path = (dir_ / "missing.json").string();
  try {
    (void)config_load(path);
    FAIL() << "no exception";
  } catch (const system_error &e) {
    EXPECT_EQ(std::string(e.what()), "unable to open " + path + ": No such file or directory");
  }
  EXPECT_THROW((void)config_load(dir_.string()), system_error);  // a directory cannot be read
}

TEST_F(ConfigLoad, InvalidJsonNamesTheFileAndPosition) {
  const std::string path = write("bad.json", "{\n  \"task\": \"statistics\",\n  \"dump_path\": ./dump\n}\n");
  try {
    (void)config_load(path);
    FAIL() << "no exception";
  } catch (const usage_error &e) {
    const std::string message = e.what();
    EXPECT_THAT(message, StartsWith(path + ": invalid JSON: parse error at line 3, column"));
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

TEST_F(ConfigLoad, InvalidConfigNamesTheFile) {
  const std::string path = write("typo.json", R"({"dump_path": "/tmp/d", "levle": "L0"})");
  try {
    (void)config_load(path);
    FAIL() << "no exception";
  } catch (const usage_error &e) {
    EXPECT_THAT(std::string(e.what()), StartsWith(path + ": field \"levle\": unknown key"));
  }
}

// ---- overrides --------------------------------------------------------------------------------

TEST(ConfigOverrides, ReplaceFieldsBeforeValidation) {
  ordered_json doc = default_doc();
  doc["tensor"]["list"] = {"linear"};
  capture_config cfg = config_parse(doc, "config.json");
  config_overrides overrides;
  overrides.task = "tensor";
  overrides.dump_path = "./elsewhere";
  overrides.step = std::vector<int64_t>{3, 1, 3};
  config_apply_overrides(cfg, overrides);
  EXPECT_EQ(cfg.task, "tensor");
  EXPECT_THAT(cfg.list, ElementsAre("linear"));  // the tensor section now applies
  EXPECT_EQ(cfg.dump_path, cwd_path("elsewhere"));
  EXPECT_THAT(cfg.step, ElementsAre(1, 3));
  EXPECT_EQ(cfg.source, doc);
  EXPECT_EQ(cfg.source_name, "config.json");
}

TEST(ConfigOverrides, CrossFieldRulesRunAgain) {
  capture_config cfg = config_parse(default_doc(), "config.json");
  const capture_config before = cfg;
  config_overrides overrides;
  overrides.level = "L2";
  try {
    config_apply_overrides(cfg, overrides);
    FAIL() << "no exception";
  } catch (const usage_error &e) {
    EXPECT_THAT(std::string(e.what()), StartsWith("config.json (with overrides): field \"level\": level \"L2\""));
  }
  EXPECT_EQ(cfg.level, before.level);  // unchanged on error
  overrides.level = "L9";
  EXPECT_THROW(config_apply_overrides(cfg, overrides), usage_error);
  overrides = {};
  overrides.step = std::vector<int64_t>{-1};
  EXPECT_THROW(config_apply_overrides(cfg, overrides), usage_error);
}

TEST(ConfigOverrides, StructureLevelIsRedecided) {
  capture_config cfg = config_parse(with("task", "structure"), "config.json");
  EXPECT_EQ(cfg.level, "mix");
  config_overrides overrides;
  overrides.task = "statistics";
  config_apply_overrides(cfg, overrides);
  EXPECT_EQ(cfg.level, "L1");  // the file's level, no longer forced
}

TEST(ConfigOverrides, ConfigBuiltByHand) {
  capture_config cfg;
  cfg.dump_path = "/tmp/hand";
  cfg.list = {"linear"};
  config_overrides overrides;
  overrides.level = "mix";
  config_apply_overrides(cfg, overrides);
  EXPECT_EQ(cfg.level, "mix");
  EXPECT_THAT(cfg.list, ElementsAre("linear"));
  EXPECT_EQ(cfg.dump_path, "/tmp/hand");
}

class ConfigEnv : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    ::unsetenv("TPROBE_TASK");
    ::unsetenv("TPROBE_DUMP_PATH");
    ::unsetenv("TPROBE_LEVEL");
  }
  static std::string error() {
    try {
      (void)config_overrides_from_env();
    } catch (const usage_error &e) {
      return e.what();
    }
    return "<accepted>";
  }
};

TEST_F(ConfigEnv, UnsetMeansNoOverride) {
  const config_overrides overrides = config_overrides_from_env();
  EXPECT_FALSE(overrides.task || overrides.dump_path || overrides.level || overrides.step);
}

TEST_F(ConfigEnv, ValuesAreReadAndApplied) {
  ::setenv("TPROBE_TASK", "tensor", 1);
  ::setenv("TPROBE_DUMP_PATH", "/tmp/env_dump", 1);
  ::setenv("TPROBE_LEVEL", "mix", 1);
  const config_overrides overrides = config_overrides_from_env();
  EXPECT_EQ(overrides.task, "tensor");
  EXPECT_EQ(overrides.dump_path, "/tmp/env_dump");
  EXPECT_EQ(overrides.level, "mix");
  capture_config cfg = config_parse(default_doc(), "config.json");
  config_apply_overrides(cfg, overrides);
  EXPECT_EQ(cfg.task, "tensor");
  EXPECT_EQ(cfg.level, "mix");
  EXPECT_EQ(cfg.dump_path, "/tmp/env_dump");
}

TEST_F(ConfigEnv, InvalidValuesNameTheVariable) {
  ::setenv("TPROBE_TASK", "stats", 1);
  EXPECT_THAT(error(), StartsWith("TPROBE_TASK: \"stats\" is not one of"));
  clear();
  ::setenv("TPROBE_LEVEL", "L5", 1);
  EXPECT_THAT(error(), StartsWith("TPROBE_LEVEL: \"L5\" is not one of"));
  clear();
  ::setenv("TPROBE_DUMP_PATH", "/tmp/a b", 1);
  EXPECT_THAT(error(), StartsWith("TPROBE_DUMP_PATH: absolute path"));
  ::setenv("TPROBE_DUMP_PATH", "", 1);
  EXPECT_THAT(error(), StartsWith("TPROBE_DUMP_PATH: the dump_path not found"));
}

// ---- capture_filter -------------------------------------------------------------------------

capture_config filter_config(const ordered_json &section = ordered_json::object(), const char *task = "statistics",
                             const char *level = "L1") {
  ordered_json doc = default_doc();
  doc["task"] = task;
  doc["level"] = level;
  for (const auto &[key, value] : section.items()) doc[task][key] = value;
  return config_parse(doc, "config.json");
}

TEST(CaptureFilter, RanksAndSteps) {
  capture_config cfg = filter_config();
  capture_filter all(cfg);
  EXPECT_TRUE(all.rank_enabled(-1));
  EXPECT_TRUE(all.rank_enabled(7));
  EXPECT_TRUE(all.step_enabled(123));
  EXPECT_FALSE(all.past_last_step(1'000'000'000));

  cfg.rank = {0, 2};
  cfg.step = {1, 4, 5};
  capture_filter some(cfg);
  EXPECT_TRUE(some.rank_enabled(-1));  // not distributed = rank 0
  EXPECT_TRUE(some.rank_enabled(2));
  EXPECT_FALSE(some.rank_enabled(1));
  EXPECT_FALSE(some.step_enabled(0));
  EXPECT_TRUE(some.step_enabled(4));
  EXPECT_FALSE(some.past_last_step(5));
  EXPECT_TRUE(some.past_last_step(6));

  cfg.rank = {1};
  EXPECT_FALSE(capture_filter(cfg).rank_enabled(-1));
}

std::vector<bool> run_entries(capture_filter &filter, const std::vector<std::string> &names) {
  std::vector<bool> out;
  for (const auto &name : names) out.push_back(filter.entry_enabled(name));
  return out;
}

// entry_wanted, asked before each entry_enabled, gives its answer and changes nothing: the same
// names through a filter nobody asks give the same answers.
std::vector<bool> run_entries_asking_first(capture_filter &filter, const std::vector<std::string> &names) {
  std::vector<bool> out;
  for (const auto &name : names) {
    const bool wanted = filter.entry_wanted(name);
    EXPECT_EQ(filter.entry_wanted(name), wanted) << name;
    out.push_back(filter.entry_enabled(name));
    EXPECT_EQ(out.back(), wanted) << name;
  }
  return out;
}

TEST(CaptureFilter, EntryWantedAnswersAsEntryEnabledWillWithoutMovingTheScope) {
  const std::vector<std::string> names = {
      "Functional.linear.0.forward", "Functional.linear.1.forward", "Functional.relu.0.forward",
      "Tensor.__add__.0.forward", "Functional.linear.2.forward", "Functional.linear.2.backward",
      "Tensor.__add__.0.backward", "Functional.relu.0.backward", "Functional.linear.1.backward",
      "Module.fc.Linear.parameters_grad.0"};
  for (const auto &options : std::vector<std::map<std::string, std::vector<std::string>>>{
           {{"scope", {"Functional.linear.1.forward", "Tensor.__add__.0.forward"}}},
           {{"scope", {"Functional.relu.0.forward", "Functional.linear.2.forward"}}, {"list", {"linear"}}},
           {{"list", {"relu", "__add__"}}},
           {}}) {
    capture_filter asked(filter_config(options)), plain(filter_config(options));
    EXPECT_EQ(run_entries_asking_first(asked, names), run_entries(plain, names));
  }
}

TEST(CaptureFilter, ApiScopeRange) {
  capture_filter filter(filter_config({{"scope", {"Functional.linear.1.forward", "Tensor.__add__.0.forward"}}}));
  EXPECT_THAT(run_entries(filter, {"Functional.linear.0.forward", "Functional.linear.1.forward", "Functional.relu.0.forward",
                                   "Tensor.__add__.0.forward", "Functional.linear.2.forward",
                                   // backward, in reverse order: in range when their forward was
                                   "Functional.linear.2.backward", "Tensor.__add__.0.backward",
                                   "Functional.relu.0.backward", "Functional.linear.1.backward",
                                   "Functional.linear.0.backward"}),
              ElementsAre(false, true, true, true, false, false, true, true, true, false));
  // The range is per step: the next step starts outside it.
  filter.reset_step();
  EXPECT_THAT(run_entries(filter, {"Functional.relu.0.forward", "Functional.relu.0.backward", "Functional.linear.1.forward"}),
              ElementsAre(false, false, true));
}

TEST(CaptureFilter, ScopeOfOneEntry) {
  capture_filter filter(filter_config({{"scope", {"Torch.matmul.0.forward", "Torch.matmul.0.forward"}}}));
  EXPECT_THAT(run_entries(filter, {"Torch.matmul.0.forward", "Torch.matmul.1.forward", "Torch.matmul.0.backward"}),
              ElementsAre(true, false, true));
}

TEST(CaptureFilter, ModuleScopeIncludesBackwardAndParameterGrads) {
  capture_filter filter(filter_config({{"scope", {"Module.conv1.Conv2d.forward.0", "Module.fc.Linear.forward.0"}}},
                                      "statistics", "L0"));
  EXPECT_THAT(run_entries(filter, {"Module.embed.Embedding.forward.0", "Module.conv1.Conv2d.forward.0",
                                   "Module.forward_net.Linear.forward.0", "Module.fc.Linear.forward.0",
                                   "Module.head.Linear.forward.0", "Module.head.Linear.backward.0",
                                   "Module.forward_net.Linear.backward.0", "Module.forward_net.Linear.parameters_grad.0",
                                   "Module.embed.Embedding.parameters_grad.0", "Module.conv1.Conv2d.backward.0"}),
              ElementsAre(false, true, true, true, false, false, true, true, false, true));
}

// What runs inside a module is in a range that starts at that module: the module begins (its
// pre-hook) before the entries inside it are announced, and its own entry comes last (msprobe's
// begin_module / end_module; its dump of this case holds the block and its five submodules).
TEST(CaptureFilter, ModuleScopeStartsWhenTheModuleBegins) {
  capture_filter filter(filter_config({{"scope", {"Module.block.Block.forward.0", "Module.block.Block.forward.0"}}},
                                      "statistics", "L0"));
  EXPECT_FALSE(filter.entry_enabled("Module.emb.Embedding.forward.0"));
  filter.module_begin("Module.block.Block.forward.0");
  filter.module_begin("Module.block.fc.Linear.forward.0");
  EXPECT_TRUE(filter.entry_enabled("Module.block.fc.Linear.forward.0"));
  filter.module_end("Module.block.fc.Linear.forward.0");
  EXPECT_TRUE(filter.entry_enabled("Module.block.Block.forward.0"));
  filter.module_end("Module.block.Block.forward.0");
  EXPECT_FALSE(filter.entry_enabled("Module.head.Linear.forward.0"));
  EXPECT_TRUE(filter.entry_enabled("Module.block.fc.Linear.backward.0"));

  // At mix the operators inside are in range too, from the module's beginning.
  capture_filter mix(filter_config({{"scope", {"Module.block.Block.forward.0", "Module.head.Linear.forward.0"}}},
                                   "statistics", "mix"));
  EXPECT_FALSE(mix.entry_enabled("Functional.embedding.0.forward"));
  mix.module_begin("Module.block.Block.forward.0");
  EXPECT_TRUE(mix.entry_wanted("Functional.linear.0.forward"));
  EXPECT_TRUE(mix.entry_enabled("Functional.linear.0.forward"));
  EXPECT_TRUE(mix.entry_enabled("Module.block.Block.forward.0"));
  mix.module_end("Module.block.Block.forward.0");
  mix.module_begin("Module.head.Linear.forward.0");
  EXPECT_TRUE(mix.entry_enabled("Functional.linear.1.forward"));
  EXPECT_TRUE(mix.entry_enabled("Module.head.Linear.forward.0"));
  mix.module_end("Module.head.Linear.forward.0");
  EXPECT_FALSE(mix.entry_enabled("Functional.cross_entropy.0.forward"));
}

// At mix, a module whose name contains a list element is dumped with everything inside it
// (msprobe's MixRangeScope): its operators and submodules whatever their names, and their
// backward; at L0 and L1 the list stays a match on each entry's own name.
TEST(CaptureFilter, ListAtMixTakesEverythingInsideAMatchingModule) {
  capture_filter mix(filter_config({{"list", {"Block"}}}, "statistics", "mix"));
  EXPECT_FALSE(mix.entry_enabled("Functional.embedding.0.forward"));
  mix.module_begin("Module.emb.Embedding.forward.0");
  EXPECT_FALSE(mix.entry_enabled("Module.emb.Embedding.forward.0"));
  mix.module_end("Module.emb.Embedding.forward.0");
  mix.module_begin("Module.block.Block.forward.0");
  mix.module_begin("Module.block.fc.Linear.forward.0");
  EXPECT_TRUE(mix.entry_wanted("Functional.linear.0.forward"));
  EXPECT_TRUE(mix.entry_enabled("Functional.linear.0.forward"));
  EXPECT_TRUE(mix.entry_enabled("Module.block.fc.Linear.forward.0"));
  mix.module_end("Module.block.fc.Linear.forward.0");
  EXPECT_TRUE(mix.entry_enabled("Tensor.__add__.0.forward"));
  EXPECT_TRUE(mix.entry_enabled("Module.block.Block.forward.0"));
  mix.module_end("Module.block.Block.forward.0");
  EXPECT_FALSE(mix.entry_enabled("Functional.linear.1.forward"));
  // The backward: of what was captured inside, and of what matches by name.
  EXPECT_FALSE(mix.entry_wanted("Functional.linear.1.backward"));
  EXPECT_FALSE(mix.entry_enabled("Functional.linear.1.backward"));
  EXPECT_TRUE(mix.entry_wanted("Tensor.__add__.0.backward"));
  EXPECT_TRUE(mix.entry_enabled("Tensor.__add__.0.backward"));
  EXPECT_TRUE(mix.entry_enabled("Module.block.fc.Linear.backward.0"));
  EXPECT_TRUE(mix.entry_enabled("Functional.linear.0.backward"));
  EXPECT_FALSE(mix.entry_enabled("Functional.embedding.0.backward"));
  // Per step.
  mix.reset_step();
  EXPECT_FALSE(mix.entry_enabled("Functional.linear.0.backward"));

  capture_filter l1(filter_config({{"list", {"Block"}}}, "statistics", "L1"));
  l1.module_begin("Module.block.Block.forward.0");
  EXPECT_FALSE(l1.entry_enabled("Functional.linear.0.forward"));
}

TEST(CaptureFilter, ListIsASubstringMatchWithinTheScope) {
  capture_filter list_only(filter_config({{"list", {"linear", "Tensor.__add__"}}}));
  EXPECT_THAT(run_entries(list_only, {"Functional.linear.0.forward", "Functional.relu.0.forward",
                                      "Tensor.__add__.3.backward", "Torch.matmul.0.forward"}),
              ElementsAre(true, false, true, false));

  capture_filter both(filter_config({{"scope", {"Functional.relu.0.forward", "Functional.relu.1.forward"}},
                                     {"list", {"linear"}}}));
  EXPECT_THAT(run_entries(both, {"Functional.linear.0.forward", "Functional.relu.0.forward",
                                 "Functional.linear.1.forward", "Functional.relu.1.forward",
                                 "Functional.linear.2.forward"}),
              ElementsAre(false, false, true, false, false));
}

TEST(CaptureFilter, DataModeCombinations) {
  struct slot_case {
    const char *entry, *slot;
  };
  const slot_case slots[] = {
      {"Functional.linear.0.forward", "input.0"},      {"Functional.linear.0.forward", "kwargs.bias"},
      {"Functional.linear.0.forward", "output.0"},     {"Functional.linear.0.backward", "input.0"},
      {"Functional.linear.0.backward", "output.1"},    {"Module.fc.Linear.forward.0", "parameters.weight"},
      {"Module.fc.Linear.parameters_grad.0", "weight"},
  };
  auto allowed = [&](const ordered_json &data_mode) {
    const capture_filter filter(filter_config({{"data_mode", data_mode}}, "statistics", "mix"));
    std::vector<bool> out;
    for (const auto &s : slots) out.push_back(filter.slot_enabled(s.entry, s.slot));
    return out;
  };
  // Parameters follow the forward direction alone (msprobe's analyze_forward writes them into any
  // forward entry it writes) and parameter gradients the direction axis alone (its hook manager
  // registers them unless data_mode names "forward" without "backward"): core/dump_semantics.h.
  //                                                fwd in, kwargs, fwd out, bwd in, bwd out, params, param grad
  EXPECT_THAT(allowed({"all"}), ElementsAre(true, true, true, true, true, true, true));
  EXPECT_THAT(allowed(ordered_json::array()), ElementsAre(true, true, true, true, true, true, true));
  EXPECT_THAT(allowed({"forward"}), ElementsAre(true, true, true, false, false, true, false));
  EXPECT_THAT(allowed({"backward"}), ElementsAre(false, false, false, true, true, false, true));
  EXPECT_THAT(allowed({"input"}), ElementsAre(true, true, false, true, false, true, true));
  EXPECT_THAT(allowed({"output"}), ElementsAre(false, false, true, false, true, true, true));
  EXPECT_THAT(allowed({"forward", "input"}), ElementsAre(true, true, false, false, false, true, false));
  EXPECT_THAT(allowed({"backward", "output"}), ElementsAre(false, false, false, false, true, false, true));
  EXPECT_THAT(allowed({"forward", "backward", "output"}), ElementsAre(false, false, true, false, true, true, true));
}

TEST(CaptureFilter, DataModeUsesWholeSegments) {
  const capture_filter filter(filter_config({{"data_mode", {"backward"}}}, "statistics", "L0"));
  // "forward_net" is a module path, not the direction.
  EXPECT_TRUE(filter.slot_enabled("Module.forward_net.Linear.backward.0", "input.0"));
  EXPECT_FALSE(filter.slot_enabled("Module.backward_net.Linear.forward.0", "input.0"));
  EXPECT_TRUE(filter.slot_enabled("Functional.linear.0.backward", "input_args.0"));
  EXPECT_FALSE(filter.slot_enabled("Functional.linear.0.forward", "output"));
}

TEST(CaptureFilter, SaveTensorAndCrc32) {
  const capture_filter tensor(filter_config({}, "tensor"));
  EXPECT_TRUE(tensor.save_tensor("Functional.linear.0.forward"));
  EXPECT_FALSE(tensor.want_crc32());

  const capture_filter listed(filter_config({{"tensor_list", {"linear", "Module.fc"}}, {"summary_mode", "md5"}}));
  EXPECT_TRUE(listed.save_tensor("Functional.linear.0.forward"));
  EXPECT_TRUE(listed.save_tensor("Module.fc.Linear.forward.0"));
  EXPECT_FALSE(listed.save_tensor("Functional.relu.0.forward"));
  EXPECT_TRUE(listed.want_crc32());

  const capture_filter plain(filter_config());
  EXPECT_FALSE(plain.save_tensor("Functional.linear.0.forward"));
  EXPECT_FALSE(plain.want_crc32());

  const capture_filter debug(filter_config({{"tensor_list", {"linear"}}}, "statistics", "debug"));
  EXPECT_FALSE(debug.save_tensor("Functional.linear.0.forward"));  // msprobe ignores tensor_list at debug

  const capture_filter structure(filter_config({}, "structure"));
  EXPECT_FALSE(structure.save_tensor("Functional.linear.0.forward"));
}

}  // namespace
}  // namespace tprobe

namespace tprobe {
namespace {

// msprobe's pre-check task captures nothing: the capture refuses it with the way to run it.
TEST(ConfigTasks, RunUtPointsToThePrecheck) {
  capture_config cfg;
  cfg.task = "run_ut";
  cfg.source_name = "./config.json";
  try {
    config_check_task_runs(cfg, {});
    FAIL() << "run_ut was accepted";
  } catch (const usage_error &e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("./config.json: task \"run_ut\" replays a dump, it captures nothing"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("tprobe precheck DUMP -config ./config.json"));
  }
}

// free_benchmark re-runs API calls (L1); msprobe's module fuzzing at L0 and mix is refused, not run as L1.
TEST(ConfigTasks, FreeBenchmarkRunsAtL1Only) {
  capture_config cfg;
  cfg.task = "free_benchmark";
  cfg.source_name = "./config.json";
  EXPECT_NO_THROW(config_check_task_runs(cfg, {}));
  for (const char *level : {"L0", "mix", "debug"}) {
    cfg.level = level;
    try {
      config_check_task_runs(cfg, {});
      ADD_FAILURE() << level << " was accepted";
    } catch (const usage_error &e) {
      EXPECT_EQ(std::string(e.what()), fmt::format("./config.json: task \"free_benchmark\" at level \"{}\" is not built in "
                                                   "tprobe yet: it re-runs API calls, level \"L1\"", level));
    }
  }
}

}  // namespace
}  // namespace tprobe
