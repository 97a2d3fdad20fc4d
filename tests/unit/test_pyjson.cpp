// Tests for core/pyjson: byte-compatibility with Python's json.dump(obj, f, indent=1).
// Every expected string below is what CPython 3.11's json module printed for the same value.
#include "pyjson.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <thread>

#include "errors.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;

double from_bits(uint64_t bits) { return std::bit_cast<double>(bits); }

struct float_case {
  uint64_t bits;
  const char *python;
};

// (bits, json.dumps(float)) pairs printed by Python.
const float_case float_cases[] = {
    {0x3fb999999999999aULL, "0.1"},
    {0x3fd5555555555555ULL, "0.3333333333333333"},
    {0x3fe5555555555555ULL, "0.6666666666666666"},
    {0x4341c37937e08000ULL, "1e+16"},
    {0x430c6bf526340000ULL, "1000000000000000.0"},
    {0x437b69b4ba630f35ULL, "1.2345678901234568e+17"},
    {0x3ee4f8b588e368f1ULL, "1e-05"},
    {0x3f1a36e2eb1c432dULL, "0.0001"},
    {0x3ee9e0fcaf9380fcULL, "1.234e-05"},
    {0x3e55948760000000ULL, "2.0098118724831693e-08"},
    {0x406d869f20000000ULL, "236.20692443847656"},
    {0x3fb99999a0000000ULL, "0.10000000149011612"},  // float32(0.1)
    {0x3fd5555560000000ULL, "0.3333333432674408"},   // float32(1/3)
    {0x400921fa00000000ULL, "3.141590118408203"},    // float32(3.14159)
    {0x3e45798ee0000000ULL, "9.99999993922529e-09"},  // float32(1e-8)
    {0x40effc0000000000ULL, "65504.0"},
    {0x0000000000000001ULL, "5e-324"},
    {0x0010000000000000ULL, "2.2250738585072014e-308"},
    {0x000fffffffffffffULL, "2.225073858507201e-308"},
    {0x7fefffffffffffffULL, "1.7976931348623157e+308"},
    {0x8000000000000000ULL, "-0.0"},
    {0x0000000000000000ULL, "0.0"},
    {0x4000000000000000ULL, "2.0"},
    {0xc004000000000000ULL, "-2.5"},
    {0x7e41eb2d66005835ULL, "1.5e+300"},
    {0x4340000000000000ULL, "9007199254740992.0"},
    {0x4480f0cf064dd592ULL, "1e+22"},
    {0x444b1ae4d6e2ef50ULL, "1e+21"},
    {0x4341c37937e07fffULL, "9999999999999998.0"},
    {0x43118b54f22aeb03ULL, "1234567890123456.8"},
    {0x3fd3333333333334ULL, "0.30000000000000004"},
    {0x4059000000000000ULL, "100.0"},
    {0x3f1a36e2eb1c432cULL, "9.999999999999999e-05"},
    {0xbe7ad7f29abcaf48ULL, "-1e-07"},
    {0x3fb9980000000000ULL, "0.0999755859375"},  // float16(0.1)
    {0x47efffffe0000000ULL, "3.4028234663852886e+38"},
    {0x3810000000000000ULL, "1.1754943508222875e-38"},
    {0x36a0000000000000ULL, "1.401298464324817e-45"},
};

TEST(PyJson, FloatsAreWrittenLikePythonRepr) {
  for (const auto &c : float_cases) {
    const double d = from_bits(c.bits);
    EXPECT_EQ(pyjson_dump(json(d)), c.python) << std::hex << c.bits;
    EXPECT_EQ(py_float_repr(d), c.python) << std::hex << c.bits;
  }
}

// An independent cross-check over many values: fmt's shortest form ("{}", Dragonbox) places the
// point as Python's repr does (exponent below -4 or from 16 on), but writes an integral value
// without Python's ".0". Random bit patterns, float32 values (what statistics of float32 tensors
// are) and values near every power of ten.
TEST(PyJson, FloatsAgreeWithAnIndependentShortestFormatting) {
  std::mt19937_64 rng(20261127);
  const auto reference = [](double d) {
    std::string s = fmt::format("{}", d);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
  };
  int failures = 0;
  for (int i = 0; i < 400000 && failures < 10; ++i) {
    const uint64_t bits = rng();
    double d = 0;
    switch (i % 3) {
      case 0: d = from_bits(bits); break;
      case 1: d = static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(bits))); break;
      default: d = static_cast<double>(static_cast<int64_t>(bits >> 11) % 100000) * std::pow(10.0, static_cast<int>(bits % 50) - 25);
    }
    if (!std::isfinite(d)) continue;
    const std::string got = py_float_repr(d), want = reference(d);
    if (got != want) {
      ++failures;
      ADD_FAILURE() << std::hex << std::bit_cast<uint64_t>(d) << ": " << got << " != " << want;
    }
  }
}

// py_float_repr_write keeps the texts it wrote last by their bits: a real written again, or one
// that took its slot from another (a pool larger than the cache, drawn at random), is the same
// text as the independent formatting gives, and so are the reals written on another thread.
TEST(PyJson, FloatsWrittenAgainAreTheSameText) {
  const auto reference = [](double d) {
    std::string s = fmt::format("{}", d);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
  };
  const auto check = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<double> pool;
    for (int i = 0; i < 200; ++i) pool.push_back(static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(rng()))));
    pool.push_back(0.0), pool.push_back(-0.0), pool.push_back(1e16), pool.push_back(1e-5);
    int failures = 0;
    for (int i = 0; i < 100000 && failures < 10; ++i) {
      const double d = pool[rng() % (i % 2 ? pool.size() : 8)];  // half the draws from 8 values: hits
      if (!std::isfinite(d)) continue;
      char text[py_float_repr_max];
      const std::string got(text, py_float_repr_write(text, d)), want = reference(d);
      if (got != want) ++failures, ADD_FAILURE() << std::hex << std::bit_cast<uint64_t>(d) << ": " << got << " != " << want;
    }
  };
  check(1);
  std::thread other(check, 2);
  check(3);
  other.join();
  EXPECT_EQ(py_float_repr(-0.0), "-0.0");
  EXPECT_EQ(py_float_repr(0.0), "0.0");
}

TEST(PyJson, FloatsParseBackToTheSameBits) {
  for (const auto &c : float_cases) {
    const json v = pyjson_parse(c.python, "test");
    ASSERT_TRUE(v.is_number_float()) << c.python;
    EXPECT_EQ(std::bit_cast<uint64_t>(v.get<double>()), c.bits) << c.python;
  }
}

TEST(PyJson, NonFiniteFloats) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(pyjson_dump(json(nan)), "NaN");
  EXPECT_EQ(pyjson_dump(json(-nan)), "NaN");
  EXPECT_EQ(pyjson_dump(json(inf)), "Infinity");
  EXPECT_EQ(pyjson_dump(json(-inf)), "-Infinity");
  EXPECT_EQ(py_float_repr(nan), "nan");
  EXPECT_EQ(py_float_repr(inf), "inf");
  EXPECT_EQ(py_float_repr(-inf), "-inf");
}

TEST(PyJson, Integers) {
  EXPECT_EQ(pyjson_dump(json(std::numeric_limits<int64_t>::max())), "9223372036854775807");
  EXPECT_EQ(pyjson_dump(json(std::numeric_limits<int64_t>::min())), "-9223372036854775808");
  EXPECT_EQ(pyjson_dump(json(std::numeric_limits<uint64_t>::max())), "18446744073709551615");
  EXPECT_EQ(pyjson_dump(json(0)), "0");
  EXPECT_EQ(pyjson_dump(json(-1)), "-1");
  EXPECT_EQ(pyjson_dump(json(12345678901234567LL)), "12345678901234567");
  EXPECT_EQ(pyjson_dump(json(true)), "true");
  EXPECT_EQ(pyjson_dump(json(false)), "false");
  EXPECT_EQ(pyjson_dump(json(nullptr)), "null");
}

TEST(PyJson, StringsAreEscapedLikeEnsureAscii) {
  const std::pair<std::string, std::string> cases[] = {
      {"plain", R"("plain")"},
      {"tab\there", R"("tab\there")"},
      {"nl\nq\"b\\s/", R"("nl\nq\"b\\s/")"},
      {std::string("\x00\x01\x1f\x7f", 4), R"("\u0000\u0001\u001f\u007f")"},
      {"\b\f\r", R"("\b\f\r")"},
      {"caf\xc3\xa9", R"("caf\u00e9")"},
      {"\xe4\xb8\xad\xe6\x96\x87", R"("\u4e2d\u6587")"},
      {"\xf0\x9f\x98\x80 emoji", R"("\ud83d\ude00 emoji")"},
      {"\xe2\x80\xa8\xe2\x80\xa9", R"("\u2028\u2029")"},
      {"\xef\xbf\xbf", R"("\uffff")"},
      {"\xf4\x8f\xbf\xbf", R"("\udbff\udfff")"},
      {"NaN Infinity", R"("NaN Infinity")"},
      {"", R"("")"},
  };
  for (const auto &[in, out] : cases) {
    EXPECT_EQ(pyjson_dump(json(in)), out);
    EXPECT_EQ(pyjson_parse(out, "test").get<std::string>(), in) << out;
  }
}

// Every byte at every place around the 16-byte blocks the plain runs are scanned in: the text is
// what ensure_ascii writes byte by byte (a byte from 0x80 on, alone, is not UTF-8: \ufffd).
TEST(PyJson, EveryByteAtEveryPlaceIsEscapedAsAlone) {
  const auto alone = [](unsigned char c) -> std::string {
    switch (c) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\n': return "\\n";
      case '\r': return "\\r";
      case '\t': return "\\t";
      case '\b': return "\\b";
      case '\f': return "\\f";
      default:
        if (c >= 0x80) return "\\ufffd";
        if (c < 0x20 || c == 0x7f) return fmt::format("\\u{:04x}", c);
        return std::string(1, static_cast<char>(c));
    }
  };
  for (int c = 0; c < 256; ++c)
    for (size_t at = 0; at < 40; ++at) {
      std::string s(41, 'a');
      s[at] = static_cast<char>(c);
      std::string want = "\"" + std::string(at, 'a') + alone(static_cast<unsigned char>(c)) + std::string(40 - at, 'a') + "\"";
      std::string got;
      pyjson_string_append(got, s);
      ASSERT_EQ(got, want) << "byte " << c << " at " << at;
    }
}

TEST(PyJson, LoneSurrogatesRoundTrip) {
  // Python: json.dumps("\ud800x\udc00") == '"\\ud800x\\udc00"'
  const std::string text = R"("\ud800x\udc00")";
  const json v = pyjson_parse(text, "test");
  EXPECT_EQ(v.get<std::string>(), "\xed\xa0\x80x\xed\xb0\x80");  // WTF-8
  EXPECT_EQ(pyjson_dump(v), text);
}

TEST(PyJson, InvalidUtf8IsWrittenAsReplacementCharacter) {
  EXPECT_EQ(pyjson_dump(json(std::string("a\xff" "b\xc3"))), R"("a\ufffdb\ufffd")");
  EXPECT_EQ(pyjson_dump(json(std::string("\xc0\xaf"))), R"("\ufffd\ufffd")");  // overlong '/'
}

// json.dumps({...}, indent=1) as printed by Python.
const char *const nested_python = R"({
 "a": [],
 "b": {},
 "c": [
  1,
  {
   "d": null,
   "e": true,
   "f": false
  }
 ],
 "g": NaN,
 "h": Infinity,
 "i": -Infinity
})";

TEST(PyJson, NestedDocumentWithIndentOne) {
  json doc = json::object();
  doc["a"] = json::array();
  doc["b"] = json::object();
  doc["c"] = json::array({1, json{{"d", nullptr}, {"e", true}, {"f", false}}});
  doc["g"] = std::numeric_limits<double>::quiet_NaN();
  doc["h"] = std::numeric_limits<double>::infinity();
  doc["i"] = -std::numeric_limits<double>::infinity();
  EXPECT_EQ(pyjson_dump(doc), nested_python);
  std::string appended = "prefix:";
  pyjson_dump_append(appended, doc);
  EXPECT_EQ(appended, std::string("prefix:") + nested_python);
}

TEST(PyJson, EmptyContainersAndOtherIndents) {
  EXPECT_EQ(pyjson_dump(json::array()), "[]");
  EXPECT_EQ(pyjson_dump(json::object()), "{}");
  EXPECT_EQ(pyjson_dump(json::array({json::array(), json::object()})), "[\n [],\n {}\n]");
  const json doc = {{"x", {1, 2.5, "s"}}};
  EXPECT_EQ(pyjson_dump(doc, -1), R"({"x": [1, 2.5, "s"]})");  // json.dumps(doc)
  EXPECT_EQ(pyjson_dump(doc, 0), "{\n\"x\": [\n1,\n2.5,\n\"s\"\n]\n}");
  EXPECT_EQ(pyjson_dump(doc, 2), "{\n  \"x\": [\n    1,\n    2.5,\n    \"s\"\n  ]\n}");
}

// A dump.json as msprobe writes it (json.dump(..., indent=1)).
const char *const dump_json_python = R"({
 "task": "statistics",
 "level": "L1",
 "framework": "pytorch",
 "dump_data_dir": null,
 "data": {
  "Functional.linear.0.forward": {
   "input_args": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.float32",
     "shape": [
      2,
      3
     ],
     "Max": NaN,
     "Min": -Infinity,
     "Mean": 0.10000000149011612,
     "Norm": 236.20692443847656,
     "requires_grad": true,
     "md5": "NaN"
    },
    {
     "type": "float",
     "value": Infinity
    }
   ],
   "input_kwargs": {},
   "is_recompute": false,
   "output": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.bfloat16",
     "shape": [],
     "Max": 1e-05,
     "Min": -0.0,
     "Mean": 1e+16,
     "Norm": 2.0098118724831693e-08,
     "requires_grad": false,
     "data_name": "Functional.linear.0.forward.output.0.npy \u4e2d \ud83d\ude00"
    }
   ]
  },
  "Tensor.__add__.0.forward": {
   "input_args": [
    {
     "type": "int",
     "value": -9223372036854775808
    },
    {
     "type": "int",
     "value": 18446744073709551615
    }
   ],
   "output": []
  }
 }
})";

TEST(PyJson, ParseAndDumpRoundTripIsByteExact) {
  const json doc = pyjson_parse(dump_json_python, "dump.json");
  EXPECT_EQ(pyjson_dump(doc), dump_json_python);

  // Key order is the file's order, not sorted.
  std::string keys;
  for (const auto &[k, v] : doc.items()) keys += k + ",";
  EXPECT_EQ(keys, "task,level,framework,dump_data_dir,data,");
  const auto &t = doc["data"]["Functional.linear.0.forward"]["input_args"][0];
  EXPECT_TRUE(std::isnan(t["Max"].get<double>()));
  EXPECT_EQ(t["Min"].get<double>(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(t["md5"].get<std::string>(), "NaN");  // a string, not the token
  EXPECT_TRUE(t["shape"][0].is_number_unsigned());
  const auto &o = doc["data"]["Functional.linear.0.forward"]["output"][0];
  EXPECT_TRUE(std::signbit(o["Min"].get<double>()));
  EXPECT_EQ(o["data_name"].get<std::string>(),
            "Functional.linear.0.forward.output.0.npy \xe4\xb8\xad \xf0\x9f\x98\x80");
  EXPECT_EQ(doc["data"]["Tensor.__add__.0.forward"]["input_args"][0]["value"].get<int64_t>(),
            std::numeric_limits<int64_t>::min());
}

TEST(PyJson, ParseNumbers) {
  EXPECT_TRUE(pyjson_parse("-0", "t").is_number_integer());
  EXPECT_EQ(pyjson_parse("-0", "t").get<int64_t>(), 0);
  EXPECT_TRUE(std::signbit(pyjson_parse("-0.0", "t").get<double>()));
  EXPECT_EQ(pyjson_parse("1e400", "t").get<double>(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(pyjson_parse("-1e400", "t").get<double>(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(pyjson_parse("123.4e500", "t").get<double>(), std::numeric_limits<double>::infinity());
  const double tiny = pyjson_parse("-1e-400", "t").get<double>();
  EXPECT_EQ(tiny, 0.0);
  EXPECT_TRUE(std::signbit(tiny));
  EXPECT_EQ(pyjson_parse("0.0000e999", "t").get<double>(), 0.0);
  EXPECT_EQ(pyjson_parse("2.4703282292062328e-324", "t").get<double>(), 5e-324);
  EXPECT_EQ(pyjson_parse("18446744073709551615", "t").get<uint64_t>(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(pyjson_parse("-9223372036854775808", "t").get<int64_t>(), std::numeric_limits<int64_t>::min());
  const json big = pyjson_parse("123456789012345678901234567890", "t");
  EXPECT_TRUE(big.is_number_float());
  EXPECT_EQ(big.get<double>(), 1.2345678901234568e+29);
  EXPECT_EQ(pyjson_parse("1E2", "t").get<double>(), 100.0);
  EXPECT_EQ(pyjson_parse("[NaN,-Infinity,Infinity]", "t").size(), 3u);
}

TEST(PyJson, RepeatedKeysBehaveLikeAPythonDict) {
  // Python: json.loads('{"a": 1, "b": 2, "a": 3}') == {'a': 3, 'b': 2}
  const json small = pyjson_parse(R"({"a": 1, "b": 2, "a": 3})", "t");
  EXPECT_EQ(pyjson_dump(small, -1), R"({"a": 3, "b": 2})");
  std::string text = "{";
  for (int i = 0; i < 40; ++i) text += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
  text += "\"k5\": \"last\"}";
  const json large = pyjson_parse(text, "t");
  EXPECT_EQ(large.size(), 40u);
  EXPECT_EQ(large["k5"], "last");
  const auto &members = large.get_ref<const json::object_t &>();
  EXPECT_EQ((members.begin() + 0)->first, "k0");
  EXPECT_EQ((members.begin() + 5)->first, "k5");
  EXPECT_EQ((members.begin() + 39)->first, "k39");
}

void expect_parse_error(const std::string &text, const std::string &message) {
  try {
    (void)pyjson_parse(text, "in.json");
    ADD_FAILURE() << "no error for " << text;
  } catch (const usage_error &e) {
    EXPECT_EQ(std::string(e.what()), "in.json: invalid JSON at " + message) << text;
  }
}

TEST(PyJson, ParseErrorsNameLineAndColumnLikePython) {
  // Line and column are those of Python's JSONDecodeError for the same text.
  expect_parse_error("{\n \"a\": 1,\n \"b\": }", "line 3 column 7: Expecting value");
  expect_parse_error("[1, 2", "line 1 column 6: Expecting ',' delimiter");
  expect_parse_error("{\"a\" 1}", "line 1 column 6: Expecting ':' delimiter");
  expect_parse_error("{\"a\": 1,}", "line 1 column 9: Expecting property name enclosed in double quotes");
  expect_parse_error("[1 2]", "line 1 column 4: Expecting ',' delimiter");
  expect_parse_error("\"abc", "line 1 column 1: Unterminated string");
  expect_parse_error("\"a\\qb\"", "line 1 column 3: Invalid \\escape");
  expect_parse_error("{\"k\": \"\xc3\xa9\xc3\xa9\", x}",
                     "line 1 column 13: Expecting property name enclosed in double quotes");
  expect_parse_error("[1] x", "line 1 column 5: Extra data");
  expect_parse_error("", "line 1 column 1: Expecting value");
  expect_parse_error("   ", "line 1 column 4: Expecting value");
  expect_parse_error("\"\\u12G4\"", "line 1 column 3: Invalid \\uXXXX escape");
  expect_parse_error("[-]", "line 1 column 2: Expecting value");
  expect_parse_error("tru", "line 1 column 1: Expecting value");
  expect_parse_error("\"a\tb\"", "line 1 column 3: Invalid control character in string");
  expect_parse_error("{\"a\":1}\n\n  ]", "line 3 column 3: Extra data");
  expect_parse_error("[01]", "line 1 column 3: Expecting ',' delimiter");
  expect_parse_error("[1.]", "line 1 column 3: Expecting ',' delimiter");
  expect_parse_error("[+1]", "line 1 column 2: Expecting value");
  expect_parse_error("[-NaN]", "line 1 column 2: Expecting value");
  expect_parse_error("\"\xff\"", "line 1 column 2: invalid UTF-8 byte in string");
}

TEST(PyJson, DeepNestingIsAnErrorNotACrash) {
  const std::string deep(100000, '[');
  EXPECT_THROW((void)pyjson_parse(deep, "deep.json"), usage_error);
  const std::string ok = std::string(500, '[') + std::string(500, ']');
  EXPECT_EQ(pyjson_parse(ok, "ok.json").size(), 1u);
}

TEST(PyJson, ByteOrderMarkIsSkipped) { EXPECT_EQ(pyjson_parse("\xEF\xBB\xBF[1]", "t").size(), 1u); }

TEST(PyJson, BinaryValuesCannotBeWritten) {
  EXPECT_THROW((void)pyjson_dump(json::binary({1, 2})), usage_error);
  EXPECT_THROW((void)pyjson_dump(json::binary({1, 2}, 7)), usage_error);  // another subtype
}

// A value's text at a level (what a document of text leaves copies whole) is its level-0 text
// with every line after the first moved right by that many spaces, and reads back as the value.
TEST(PyJson, TextAtALevelIsTheTopLevelTextIndented) {
  const json leaf = {{"type", "torch.Tensor"}, {"shape", {2, 3}}, {"Max", 1.5}, {"n", {{"a", json::array({1})}}},
                     {"text", "line\nbreak \u00e9"}};
  for (const json &value : {leaf, json::array({leaf, 3}), json::array(), json::object(), json("x"), json(nullptr)}) {
    for (int level = 0; level <= 6; ++level) {
      std::string text = "prefix";
      pyjson_dump_append(text, value, 1, level);
      std::string reindented = "prefix";
      for (const char c : pyjson_dump(value, 1)) {
        reindented.push_back(c);
        if (c == '\n') reindented.append(static_cast<size_t>(level), ' ');
      }
      EXPECT_EQ(text, reindented);
      EXPECT_EQ(pyjson_parse(std::string_view(text).substr(6), "t"), value);
    }
  }
}

TEST(PyJson, LargeDocumentRoundTrips) {
  json doc = {{"task", "statistics"}, {"data", json::object()}};
  auto &data = doc["data"];
  for (int i = 0; i < 20000; ++i) {
    json entry = json::object();
    entry["input_args"] = json::array({json{{"type", "torch.Tensor"},
                                             {"shape", {i, 3}},
                                             {"Max", i * 0.1},
                                             {"Min", -i / 3.0},
                                             {"Mean", 1.0 / (i + 1)},
                                             {"Norm", std::sqrt(static_cast<double>(i))}}});
    data.get_ref<json::object_t &>().emplace_back("Torch.op." + std::to_string(i) + ".forward", std::move(entry));
  }
  const std::string text = pyjson_dump(doc);
  const json back = pyjson_parse(text, "big.json");
  EXPECT_EQ(back["data"].size(), 20000u);
  EXPECT_EQ(pyjson_dump(back), text);
}

class PyJsonFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "tprobe_pyjson_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(PyJsonFile, LoadFile) {
  const std::string path = dir_ + "/dump.json";
  std::ofstream(path) << dump_json_python;
  EXPECT_EQ(pyjson_dump(pyjson_load_file(path)), dump_json_python);

  const std::string bad = dir_ + "/bad.json";
  std::ofstream(bad) << "{\n \"a\": [1,\n";
  try {
    (void)pyjson_load_file(bad);
    ADD_FAILURE() << "no error";
  } catch (const usage_error &e) {
    EXPECT_EQ(std::string(e.what()), bad + ": invalid JSON at line 3 column 1: Expecting value");
  }
}

TEST_F(PyJsonFile, MissingFileIsASystemError) {
  const std::string path = dir_ + "/missing.json";
  try {
    (void)pyjson_load_file(path);
    ADD_FAILURE() << "no error";
  } catch (const system_error &e) {
    EXPECT_EQ(std::string(e.what()), "unable to open " + path + ": No such file or directory");
  }
}

}  // namespace
}  // namespace tprobe
