// Call stacks by reference (transport/record_stacks.cpp, record.h section 5): the book, an entry's
// lines and id, and one link's side of the rule.
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

namespace {

record entry_with_stack(const std::string &run, uint64_t id, const nlohmann::ordered_json *lines) {
  return test::stack_entry_record(run, id, id, lines);
}

}  // namespace

TEST(RecordStacks, a_link_that_takes_references_sends_the_lines_once_per_id) {
  const nlohmann::ordered_json a = {"File a.py, line 1, in f", "File a.py, line 9, in main"};
  const nlohmann::ordered_json b = {"File b.py, line 2, in g"};
  stack_book_define("stacks-run-1", 1, a);
  stack_book_define("stacks-run-1", 2, b);
  stack_link link;
  // A reference its link never defined gets the lines from the book; then goes as it is.
  auto first = link.adapt(entry_with_stack("stacks-run-1", 1, nullptr).header, true);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->meta["stack"], a);
  EXPECT_EQ(first->meta["stack_id"], 1);
  EXPECT_FALSE(link.adapt(entry_with_stack("stacks-run-1", 1, nullptr).header, true));
  // Lines it defined already are taken out; lines of a new id go as they are.
  auto again = link.adapt(entry_with_stack("stacks-run-1", 1, &a).header, true);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->meta.contains("stack"));
  EXPECT_FALSE(link.adapt(entry_with_stack("stacks-run-1", 2, &b).header, true));
  EXPECT_FALSE(link.adapt(entry_with_stack("stacks-run-1", 2, nullptr).header, true));
  // Ids are per run: the same number in another run is another stack.
  stack_book_define("stacks-run-2", 1, b);
  auto other = link.adapt(entry_with_stack("stacks-run-2", 1, nullptr).header, true);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->meta["stack"], b);
  // A record without an id, or not an entry, is never touched.
  record plain(record_kind::entry);
  plain.header.meta = {{"stack", a}};
  EXPECT_FALSE(link.adapt(plain.header, true));
  EXPECT_FALSE(link.adapt(record_header_of(record_kind::value), true));
}

TEST(RecordStacks, a_consumer_without_references_gets_the_lines_every_time) {
  const nlohmann::ordered_json a = {"File c.py, line 3, in h"};
  stack_book_define("stacks-run-3", 5, a);
  stack_link link;
  for (int i = 0; i < 3; ++i) {
    auto out = link.adapt(entry_with_stack("stacks-run-3", 5, nullptr).header, false);
    ASSERT_TRUE(out);
    EXPECT_EQ(out->meta["stack"], a);
    EXPECT_FALSE(link.adapt(entry_with_stack("stacks-run-3", 5, &a).header, false));
  }
}

TEST(RecordStacks, lines_are_found_in_the_record_or_the_book) {
  const nlohmann::ordered_json a = {"File d.py, line 4, in k"};
  record with = entry_with_stack("stacks-run-4", 3, &a);
  EXPECT_EQ(*record_stack_lines(with.header), a);
  EXPECT_EQ(record_stack_id(with.header), 3u);
  record by_id = entry_with_stack("stacks-run-4", 3, nullptr);
  EXPECT_EQ(record_stack_lines(by_id.header), nullptr);  // nobody defined it yet
  stack_book_define("stacks-run-4", 3, a);
  ASSERT_NE(record_stack_lines(by_id.header), nullptr);
  EXPECT_EQ(*record_stack_lines(by_id.header), a);
  // A reference nobody defined cannot be sent: the stream would be broken.
  stack_link link;
  EXPECT_THROW(link.adapt(entry_with_stack("stacks-run-4", 99, nullptr).header, true), framing_error);
  // The id survives the wire.
  auto frames = record_encode(by_id);
  const record decoded = record_decode(frames);
  EXPECT_EQ(record_stack_id(decoded.header), 3u);
}
