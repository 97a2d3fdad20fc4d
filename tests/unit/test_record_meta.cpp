// A header's meta in its quick forms (transport/record_meta.cpp): a meta given as JSON text
// packs as its value by either path, and a value's meta kept as its msgpack bytes renders and
// travels as the tree every other stage builds of the same bytes.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <msgpack.hpp>

#include "errors.h"
#include "pyjson.h"
#include "record.h"
#include "record_test_support.h"
#include "test_support.h"

using namespace tprobe;
using namespace record_test;

// A meta given as JSON text is sent as the value the text holds: decoded, it is that tree.
TEST(RecordMeta, meta_given_as_json_text_arrives_as_its_value) {
  const std::vector<std::string> texts = {
      R"({"type":"float","value":2.0})",
      R"({"type":"int","value":-9223372036854775808,"u":18446744073709551615})",
      R"({"n":[1,-2,{"a":null,"b":[true,false]}],"s":"q\"uote \u00e9","e":{},"l":[],"d":{"d":{"d":[[[]]]}}})",
      R"([1.5e300,-0.0,0.1])", R"("just text")", "7", "null",
      // a key given twice: as the tree has it, in its first place with its last value
      R"({"k":1,"j":2,"k":3})"};
  for (const auto &text : texts) {
    record_header h = record_header_of(record_kind::value);
    h.entry = "Torch.add.0.forward";
    h.slot = "kwargs.alpha";
    h.meta = record_meta_text(text);
    const record_header back = record_header_decode(header_bytes(h));
    const auto expected = nlohmann::ordered_json::parse(text);
    EXPECT_EQ(back.meta, expected) << text;
    EXPECT_EQ(back.meta.dump(), expected.dump()) << text;  // floats stay floats, order kept
  }
  // Counts past a byte and past two (every container is written with a 4-byte count): an array
  // of 70,000, a map of 300 keys. (A map that large would take the decoder's tree seconds.)
  std::string big = "[";
  for (int i = 0; i < 70000; ++i) big += (i ? "," : "") + std::to_string(i);
  big += "]";
  record_header h = record_header_of(record_kind::value);
  h.meta = record_meta_text(big);
  const auto back = record_header_decode(header_bytes(h)).meta;
  ASSERT_EQ(back.size(), 70000u);
  EXPECT_EQ(back[69999], 69999);
  std::string keys = "{";
  for (int i = 0; i < 300; ++i) keys += (i ? ",\"" : "\"") + std::to_string(i) + "\":" + std::to_string(i);
  keys += "}";
  h.meta = record_meta_text(keys);
  EXPECT_EQ(record_header_decode(header_bytes(h)).meta, nlohmann::ordered_json::parse(keys));
  // Not JSON: encoding says so, and the next header encodes as if nothing happened.
  h.meta = record_meta_text(R"({"type":"int","value":)");
  EXPECT_THROW((void)record_header_encode(h), std::invalid_argument);
  h.meta = record_meta_text("[1] 2");
  EXPECT_THROW((void)record_header_encode(h), std::invalid_argument);
  EXPECT_EQ(record_header_decode(header_bytes(tensor_record({2}).header)).shape, (std::vector<int64_t>{2}));
  // Only a whole meta may be text.
  h.meta = {{"inner", record_meta_text("1")}};
  EXPECT_THROW((void)record_header_encode(h), std::logic_error);
}

// The header encoder packs a plain meta text (the captures' values) without nlohmann's parse:
// its bytes must be the general path's, and a text the general path refuses must be refused.
TEST(RecordMeta, plain_texts_pack_as_nlohmanns_parse_packs_them) {
  std::vector<std::string> texts = {
      R"({"type": "float", "value": 0.9})", R"({"type": "int", "value": -3})", R"({"type": "bool", "value": true})",
      R"({"type": "slice", "value": [1, null, -1]})", R"([{"type":"int","value":2},{"type":"bool","value":false}])",
      "null", "true", "false", "0", "-0", "7", "-7", "0.5", "-2.5e-3", "1E5", "1e+5", "2.0", "-0.0",
      "123456789012345678", "-123456789012345678", "1234567890123456789", "18446744073709551615",
      "18446744073709551616", "-9223372036854775808", "-9223372036854775809", "1e400", "-1e400", "5e-324",
      "1e-400", "0.1000000000000000055511151231257827", "{}", "[]", " { } ", "[[[]]]", "{\"a\":{\"b\":[]}}",
      "{\"a\":1,\"a\":2}", "\"\"", "\"plain\"", "\"esc\\\"aped\"", "\"tab\\t\"", "\"\\u00e9\"", "\"\xc3\xa9\"",
      "\xef\xbb\xbf{}", " \t\r\n[1,\n 2]\n", "",
      "{", "}", "[1,]", "[,1]", "01", "-01", "1.", ".5", "+1", "-", "1e", "1e+", "tru", "nul", "nulls", "[1 2]",
      "{\"a\" 1}", "{\"a\":1,}", "{1:2}", "\"abc", "1 2", "{}x", "\"a\x01\"", "[" + std::string(100, '['),
      std::string(70, '[') + std::string(70, ']'), "// c\n1", "NaN", "Infinity",
      "-Infinity", R"({"type": "float", "value": -Infinity})", "[NaN,Infinity,-Infinity]",
      R"({"s": "\u00e9", "v": NaN})", "-Inf", "nan", "-NaN", "Infinityx", "[NaN"};
  // Random values, and each cut or with a byte changed.
  std::mt19937 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::function<std::string(int)> random_value = [&](int depth) -> std::string {
    const std::string space[] = {"", " ", "\n", "\t "};
    switch (depth > 3 ? pick(5) : pick(7)) {
      case 0: return std::to_string(static_cast<int64_t>(rng()) - (int64_t{1} << 31));
      case 1: return fmt::format("{}", std::ldexp(static_cast<double>(rng()), pick(200) - 100));
      case 2: return std::string("\"") + "abc xyz_.0"[pick(10)] + "\"";
      case 3: return pick(2) ? "true" : "null";
      case 4: return std::to_string(rng()) + std::to_string(rng());  // up to 20 digits
      case 5: {
        std::string a = "[" + space[pick(4)];
        for (int i = pick(4); i > 0; --i) a += random_value(depth + 1) + (i > 1 ? "," + space[pick(4)] : "");
        return a + space[pick(4)] + "]";
      }
      default: {
        std::string o = "{";
        for (int i = pick(4); i > 0; --i)
          o += space[pick(4)] + "\"k" + std::to_string(pick(3)) + "\"" + space[pick(4)] + ":" + random_value(depth + 1) +
               (i > 1 ? "," : "");
        return o + "}";
      }
    }
  };
  for (int i = 0; i < 3000; ++i) {
    std::string t = random_value(0);
    texts.push_back(t);
    if (!t.empty()) {
      std::string cut = t.substr(0, static_cast<size_t>(pick(static_cast<int>(t.size()))));
      texts.push_back(cut);
      t[static_cast<size_t>(pick(static_cast<int>(t.size())))] = "{}[],:\"-.e0 x"[pick(13)];
      texts.push_back(t);
    }
  }
  size_t valid = 0;
  for (const auto &t : texts) {
    std::optional<std::string> general;
    try {
      general = record_meta_text_msgpack(t, true);
    } catch (const std::invalid_argument &) {
    }
    if (general) {
      ++valid;
      EXPECT_EQ(record_meta_text_msgpack(t), *general) << t;
    } else {
      EXPECT_THROW(record_meta_text_msgpack(t), std::invalid_argument) << t;
    }
  }
  EXPECT_GT(valid, 3000u);  // both kinds were tried
  EXPECT_LT(valid, texts.size() - 1000);
}

// Non-finite reals travel as Python's json writes them (NaN, Infinity, -Infinity tokens, the
// value leaves' form): packed as float64 by both paths, decoded as the IEEE values.
TEST(RecordMeta, python_non_finite_tokens_pack_as_doubles) {
  for (const bool general : {false, true}) {
    record_header h;
    h.kind = record_kind::value;
    h.meta = record_meta_text(general ? R"({"s": "\u00e9", "value": [NaN, Infinity, -Infinity]})"
                                      : R"({"s": "e", "value": [NaN, Infinity, -Infinity]})");
    const auto v = record_header_decode(header_bytes(h)).meta["value"];
    ASSERT_EQ(v.size(), 3u);
    EXPECT_TRUE(std::isnan(v[0].get<double>()));
    EXPECT_EQ(v[1].get<double>(), std::numeric_limits<double>::infinity());
    EXPECT_EQ(v[2].get<double>(), -std::numeric_limits<double>::infinity());
  }
}

// ---- a value record's meta kept as its msgpack bytes (record_decode_options) ----


namespace {

// One header decoded as the writer decodes it (value_meta_as_msgpack) and as every other stage
// does, from the same bytes.
struct decoded_both_ways {
  record raw, tree;
};
decoded_both_ways decode_both_ways(const std::vector<std::byte> &header) {
  decoded_both_ways d;
  std::vector<zmq::message_t> frames;
  frames.push_back(message_of(header));
  record_decode(frames, d.raw, record_decode_options{.value_meta_as_msgpack = true});
  frames.clear();
  frames.push_back(message_of(header));
  record_decode(frames, d.tree);
  return d;
}

// A random msgpack value of every format a meta may hold: `plain` turns false where it packs what
// the decoder must still build as a tree (a key given twice, bin, more than 16 keys).
template <class Packer>
void pack_random_meta(Packer &p, std::mt19937 &rng, int depth, bool &plain) {
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int kind = depth >= 4 ? pick(9) : pick(12);
  switch (kind) {
    case 0: p.pack_nil(); return;
    case 1: p.pack(pick(2) == 1); return;
    case 2: {  // unsigned of every width, and the signed formats msgpack-c never writes for them
      const uint64_t widths[] = {0, 127, 128, 255, 65535, 65536, 4294967295u, 4294967296u, UINT64_MAX};
      const uint64_t v = widths[pick(9)] - static_cast<uint64_t>(pick(2));
      if (pick(3) == 0 && v <= static_cast<uint64_t>(INT64_MAX)) {
        const char b[9] = {'\xd3', static_cast<char>(v >> 56), static_cast<char>(v >> 48), static_cast<char>(v >> 40),
                           static_cast<char>(v >> 32), static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                           static_cast<char>(v >> 8), static_cast<char>(v)};
        p.pack_bin_body(b, 9);  // raw bytes: an int64 format holding a non-negative number
      } else {
        p.pack(v);
      }
      return;
    }
    case 3: {
      const int64_t widths[] = {-1, -32, -33, -128, -129, -32768, -32769, INT32_MIN, int64_t{INT32_MIN} - 1, INT64_MIN};
      p.pack(widths[pick(10)]);
      return;
    }
    case 4: {
      const double reals[] = {0.0, -0.0, 0.1, 1e16, 1e-5, 123456.789, 5e-324, 1.7976931348623157e308,
                              std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                              -std::numeric_limits<double>::infinity(), -2.5};
      const double d = reals[pick(12)];
      if (pick(2)) {
        p.pack_float(static_cast<float>(d));
      } else {
        uint64_t bits;
        std::memcpy(&bits, &d, 8);
        char b[9] = {'\xcb'};
        for (int i = 0; i < 8; ++i) b[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
        p.pack_bin_body(b, 9);  // float64 as it is: msgpack-c packs integral doubles as integers
      }
      return;
    }
    case 5: case 6: {
      const char *texts[] = {"", "int", "a \"quoted\" \\ path\n\t", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                             "bad \xff byte", "\x01\x1f control", "torch.float32"};
      const std::string s = texts[pick(7)];
      p.pack(s);
      return;
    }
    case 7: {
      plain = false;
      p.pack_bin(2), p.pack_bin_body("\x00\x01", 2);
      return;
    }
    case 8: {  // an empty container
      if (pick(2)) p.pack_array(0);
      else p.pack_map(0);
      return;
    }
    case 9: case 10: {
      const int n = pick(5);
      p.pack_array(static_cast<uint32_t>(n));
      for (int i = 0; i < n; ++i) pack_random_meta(p, rng, depth + 1, plain);
      return;
    }
    default: {
      const int n = pick(6) == 0 ? 17 + pick(3) : pick(5);
      if (n > 16) plain = false;
      p.pack_map(static_cast<uint32_t>(n));
      std::vector<std::string> keys;
      for (int i = 0; i < n; ++i) {
        std::string key = pick(8) == 0 && !keys.empty() ? keys[static_cast<size_t>(pick(static_cast<int>(keys.size())))]
                                                         : fmt::format("k{}\xc3\xa9", i);
        if (std::find(keys.begin(), keys.end(), key) != keys.end()) plain = false;
        keys.push_back(key);
        p.pack(key);
        pack_random_meta(p, rng, depth + 1, plain);
      }
      return;
    }
  }
}

}  // namespace

// The writer renders a value's meta from its bytes: what it writes must be what the tree every
// other stage builds of the same bytes renders to, at every indent and depth, and the bytes must
// travel on as the same meta.
TEST(RecordMeta, a_value_meta_kept_as_bytes_renders_as_its_tree) {
  std::mt19937 rng(16);
  int kept_as_bytes = 0, built_as_trees = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    bool plain = true;
    const auto header = raw_header([&](auto &p) {
      p.pack_map(3), p.pack("kind"), p.pack("value"), p.pack("entry"), p.pack("Torch.add.0.forward");
      p.pack("meta");
      pack_random_meta(p, rng, 0, plain);
    });
    SCOPED_TRACE(trial);
    const auto d = decode_both_ways(header);
    ASSERT_TRUE(d.tree.header.meta_msgpack.empty());
    if (plain) {
      ASSERT_FALSE(d.raw.header.meta_msgpack.empty());
      ASSERT_TRUE(d.raw.header.meta.is_null());
      ++kept_as_bytes;
    } else {
      ASSERT_TRUE(d.raw.header.meta_msgpack.empty());
      ASSERT_EQ(header_bytes(d.raw.header), header_bytes(d.tree.header));  // NaN != NaN in a tree
      ++built_as_trees;
    }
    for (const int indent : {1, -1, 0, 2}) {
      const int level = static_cast<int>(rng() % 5);
      std::string from_bytes = "prefix", from_tree = "prefix";
      try {
        pyjson_dump_append(from_tree, d.tree.header.meta, indent, level);
      } catch (const usage_error &) {  // bin has no JSON text: the bytes are not kept for it
        ASSERT_FALSE(plain);
        EXPECT_THROW(record_meta_pyjson_append(from_bytes, d.raw.header, indent, level), usage_error);
        continue;
      }
      record_meta_pyjson_append(from_bytes, d.raw.header, indent, level);
      ASSERT_EQ(from_bytes, from_tree) << "indent " << indent << " level " << level;
    }
    // Passed on, the bytes are the same meta to the next stage.
    std::vector<zmq::message_t> frames = record_encode(d.raw);
    const record again = record_decode(frames);
    ASSERT_EQ(header_bytes(again.header), header_bytes(d.tree.header));
  }
  EXPECT_GT(kept_as_bytes, 1000);
  EXPECT_GT(built_as_trees, 100);
}

// What the bytes cannot stand for is built as a tree: another kind's meta, a barrier's, a meta
// read before the kind, and one whose kind a later key changed.
TEST(RecordMeta, a_meta_kept_as_bytes_only_where_the_tree_would_say_the_same) {
  const auto value_meta = [](auto &p) { p.pack_map(2), p.pack("type"), p.pack("int"), p.pack("value"), p.pack(3); };
  {
    const auto d = decode_both_ways(raw_header([&](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), value_meta(p); }));
    EXPECT_FALSE(d.raw.header.meta_msgpack.empty());
  }
  {
    const auto d = decode_both_ways(raw_header([&](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("entry"), p.pack("meta"), value_meta(p); }));
    EXPECT_TRUE(d.raw.header.meta_msgpack.empty());
    EXPECT_EQ(d.raw.header.meta, d.tree.header.meta);
  }
  {
    const auto d = decode_both_ways(raw_header([&](auto &p) {
      p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_map(1), p.pack("barrier"), p.pack(7);
    }));
    EXPECT_TRUE(d.raw.header.meta_msgpack.empty());
    EXPECT_TRUE(record_is_barrier(d.raw.header));
  }
  {
    const auto d = decode_both_ways(raw_header([&](auto &p) { p.pack_map(2), p.pack("meta"), value_meta(p), p.pack("kind"), p.pack("value"); }));
    EXPECT_TRUE(d.raw.header.meta_msgpack.empty());
    EXPECT_EQ(d.raw.header.meta, d.tree.header.meta);
  }
  {
    const auto d = decode_both_ways(raw_header([&](auto &p) {
      p.pack_map(3), p.pack("kind"), p.pack("value"), p.pack("meta"), value_meta(p), p.pack("kind"), p.pack("entry");
    }));
    EXPECT_EQ(d.raw.header.kind, record_kind::entry);
    EXPECT_TRUE(d.raw.header.meta_msgpack.empty());
    EXPECT_EQ(d.raw.header.meta, d.tree.header.meta);
  }
  {  // meta given twice: the last one counts, whichever form the first was kept in
    const auto d = decode_both_ways(raw_header([&](auto &p) {
      p.pack_map(3), p.pack("kind"), p.pack("value"), p.pack("meta"), value_meta(p);
      p.pack("meta"), p.pack_map(2), p.pack("a"), p.pack(1), p.pack("a"), p.pack(2);
    }));
    EXPECT_TRUE(d.raw.header.meta_msgpack.empty());
    EXPECT_EQ(d.raw.header.meta, d.tree.header.meta);
    const auto e = decode_both_ways(raw_header([&](auto &p) {
      p.pack_map(3), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_map(2), p.pack("a"), p.pack(1), p.pack("a"), p.pack(2);
      p.pack("meta"), value_meta(p);
    }));
    EXPECT_FALSE(e.raw.header.meta_msgpack.empty());
    EXPECT_TRUE(e.raw.header.meta.is_null());
  }
}

// A broken meta is named the same either way.
TEST(RecordMeta, a_broken_meta_is_named_alike_kept_as_bytes_or_not) {
  const auto message = [](const std::vector<std::byte> &header, bool as_bytes) {
    std::vector<zmq::message_t> frames;
    frames.push_back(message_of(header));
    record r;
    try {
      record_decode(frames, r, record_decode_options{.value_meta_as_msgpack = as_bytes});
    } catch (const framing_error &e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::vector<std::vector<std::byte>> broken = {
      raw_header([](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_map(1), p.pack("e"), p.pack_ext(1, 1), p.pack_ext_body("x", 1); }),
      raw_header([](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_map(1), p.pack(5), p.pack(1); }),
      raw_header([](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_array(3), p.pack(1); }),
      raw_header([](auto &p) { p.pack_map(2), p.pack("kind"), p.pack("value"), p.pack("meta"), p.pack_bin_body("\xc1", 1); }),
  };
  for (const auto &header : broken) {
    const std::string as_tree = message(header, false);
    EXPECT_NE(as_tree, "accepted");
    EXPECT_EQ(message(header, true), as_tree);
  }
}
