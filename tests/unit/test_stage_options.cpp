// The one option validator (stage_main.h: stage_option_check), shared by the binaries and the
// launcher, and the typed options it checks: ranges, choices (an enum), required.
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "errors.h"
#include "stage_main.h"

using tprobe::stage_option_spec;

namespace {

// The message stage_option_check throws for `value`, or "" when it accepts it.
std::string check(const stage_option_spec &spec, const std::optional<std::string> &value) {
  try {
    tprobe::stage_option_check(spec, value, "--" + spec.name);
  } catch (const tprobe::usage_error &e) {
    return e.what();
  }
  return "";
}

const stage_option_spec THREADS{"threads", "int", "1", "worker threads", 1, 64};
const stage_option_spec OFFSET{"offset", "int", "0", "an unbounded integer"};
const stage_option_spec INTERVAL{"flush-interval", "float", "1", "seconds", 0, 3600};
const stage_option_spec LOUD{"loud", "bool", "false", "a flag"};
const stage_option_spec LABEL{"label", "string", "", "any text"};
const stage_option_spec MATCH{"match", "string", "auto", "pairing", {}, {}, {}, {"auto", "name"}};
const stage_option_spec KINDS{"kinds", "list", "tensor", "kinds", {}, {}, {}, {"tensor", "value"}};
const stage_option_spec API{.name = "api", .type = "string", .default_value = "", .doc = "the API call", .required = true};

}  // namespace

TEST(StageOptionCheck, OneTableOfValuesAndMessages) {
  struct row {
    const stage_option_spec &spec;
    std::optional<std::string> value;
    std::string message;  // "" = accepted
  };
  const std::vector<row> rows{
      // int: text, range, bounds included, 64-bit limit
      {THREADS, "4", ""},
      {THREADS, "1", ""},
      {THREADS, "64", ""},
      {THREADS, "0", "--threads must be in [1, 64], got 0"},
      {THREADS, "65", "--threads must be in [1, 64], got 65"},
      {THREADS, "abc", "--threads must be an integer, got \"abc\""},
      {THREADS, "4.5", "--threads must be an integer, got \"4.5\""},
      {THREADS, "", "--threads must be an integer, got \"\""},
      {OFFSET, "-7", ""},
      {OFFSET, "99999999999999999999", "--offset must be in [-9223372036854775808, 9223372036854775807], got 99999999999999999999"},
      // float: finite numbers in the range
      {INTERVAL, "0.5", ""},
      {INTERVAL, "3600", ""},
      {INTERVAL, "-1", "--flush-interval must be in [0, 3600], got -1"},
      {INTERVAL, "soon", "--flush-interval must be a number, got \"soon\""},
      {INTERVAL, "nan", "--flush-interval must be a number, got \"nan\""},
      {INTERVAL, "inf", "--flush-interval must be a number, got \"inf\""},
      // bool
      {LOUD, "true", ""},
      {LOUD, "false", ""},
      {LOUD, "yes", "--loud must be true or false, got \"yes\""},
      // string: anything; with choices one of them
      {LABEL, "", ""},
      {LABEL, "x y", ""},
      {MATCH, "auto", ""},
      {MATCH, "name", ""},
      {MATCH, "loose", "--match must be one of auto, name, got \"loose\""},
      {MATCH, "", "--match must be one of auto, name, got \"\""},
      {MATCH, "Auto", "--match must be one of auto, name, got \"Auto\""},
      // list: each comma-separated element one of the choices
      {KINDS, "tensor,value", ""},
      {KINDS, "tensor,step_end", "--kinds must be one of tensor, value, got \"step_end\""},
      // not given: only a required option minds
      {LABEL, std::nullopt, ""},
      {MATCH, std::nullopt, ""},
      {API, std::nullopt, "--api is required"},
      {API, "Functional.linear.0", ""},
  };
  for (const auto &r : rows) EXPECT_EQ(check(r.spec, r.value), r.message) << r.spec.name << " " << r.value.value_or("(none)");
}

TEST(StageOptionCheck, TheSubjectNamesTheOptionAsTheCallerSaysIt) {
  try {
    tprobe::stage_option_check(MATCH, "x", "pipelines/x.json: stage \"compare\": option \"match\"");
    FAIL() << "accepted";
  } catch (const tprobe::usage_error &e) {
    EXPECT_STREQ(e.what(), "pipelines/x.json: stage \"compare\": option \"match\" must be one of auto, name, got \"x\"");
  }
}

TEST(StageOptionCheck, DescribeAndHelpShowChoicesAndRequired) {
  const tprobe::stage_description d{"t", "a test tool", false, false, {THREADS, MATCH, API}};
  const auto j = nlohmann::json::parse(tprobe::stage_describe_json(d));
  ASSERT_EQ(j["options"].size(), 3u);
  EXPECT_FALSE(j["options"][0].contains("choices"));
  EXPECT_FALSE(j["options"][0].contains("required"));
  EXPECT_EQ(j["options"][1]["choices"], nlohmann::json::parse(R"(["auto", "name"])"));
  EXPECT_EQ(j["options"][2]["required"], true);

  CLI::App app{d.summary, "tprobe-t"};
  tprobe::stage_option_values values;
  tprobe::stage_add_declared_options(app, d, values);
  const std::string help = app.help();
  EXPECT_NE(help.find("pairing (one of auto, name)"), std::string::npos) << help;
  EXPECT_NE(help.find("the API call (required)"), std::string::npos) << help;
  EXPECT_NE(help.find("worker threads (in [1, 64])"), std::string::npos) << help;
}

// The binaries' side: after the parse, every value goes through the same check.
TEST(StageOptionCheck, DeclaredOptionsAreCheckedAfterTheParse) {
  const tprobe::stage_description d{"t", "a test tool", false, false, {THREADS, MATCH, API}};
  auto parse = [&](std::vector<std::string> args) -> std::string {
    CLI::App app{d.summary, "tprobe-t"};
    tprobe::stage_option_values values;
    tprobe::stage_add_declared_options(app, d, values);
    std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse
    try {
      app.parse(args);
      tprobe::stage_check_declared_options(d, values);
    } catch (const tprobe::usage_error &e) {
      return e.what();
    }
    return values.text("match") + " " + std::to_string(values.integer("threads")) + " " + values.text("api");
  };
  EXPECT_EQ(parse({"--api", "a.0"}), "auto 1 a.0");
  EXPECT_EQ(parse({"--api", "a.0", "--match", "name", "--threads", "8"}), "name 8 a.0");
  EXPECT_EQ(parse({"--match", "name"}), "--api is required");
  EXPECT_EQ(parse({"--api", "a.0", "--match", "fuzzy"}), "--match must be one of auto, name, got \"fuzzy\"");
  EXPECT_EQ(parse({"--api", "a.0", "--threads", "0"}), "--threads must be in [1, 64], got 0");
}
