// What the capture keeps from one call to the next to spend less on the training thread (spent
// records filled again, entries remembered across steps, stacks found by their line array)
// must never show in the stream: each step announces its entries again, a record says nothing
// of the one whose storage it reuses, and a line array reused for another stack names that
// stack.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "record.h"
#include "tprobe_capture.h"
#include "capture_file_session.h"
#include "test_support.h"

using namespace tprobe;

namespace {

using file_session = test::capture_file_session;

int capture_floats(tprobe_session *s, const char *entry, const char *slot, std::vector<float> &data) {
  int64_t shape[1] = {static_cast<int64_t>(data.size())};
  DLTensor t{};
  t.data = data.data();
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  return tprobe_capture_tensor(s, entry, slot, &t, 0);
}

}  // namespace

TEST(CaptureReuse, every_step_announces_its_entries_again_and_records_carry_only_their_own_fields) {
  file_session f;
  const char *stack[] = {"File a.py, line 1, in f", "File b.py, line 2, in g"};
  std::vector<float> big(1000, 1.5f), small{2.0f};
  for (int step = 0; step < 3; ++step) {
    // The same names every step, as a training loop makes them.
    ASSERT_EQ(tprobe_entry_begin(f.s, "Functional.linear.0.forward", "Module.fc.Linear.forward.0", stack, 2, 0),
              TPROBE_OK)
        << tprobe_last_error();
    ASSERT_EQ(capture_floats(f.s, "Functional.linear.0.forward", "input.0", big), TPROBE_OK) << tprobe_last_error();
    // A second announcement of the same entry in the same step sends nothing.
    ASSERT_EQ(tprobe_entry_begin(f.s, "Functional.linear.0.forward", nullptr, nullptr, 0, -1), TPROBE_OK);
    ASSERT_EQ(tprobe_capture_value(f.s, "Tensor.mul_.0.forward", "input.1", "{\"type\": \"float\", \"value\": 0.9}"),
              TPROBE_OK)
        << tprobe_last_error();
    ASSERT_EQ(capture_floats(f.s, "Tensor.mul_.0.forward", "output.0", small), TPROBE_OK) << tprobe_last_error();
    ASSERT_EQ(tprobe_step(f.s), TPROBE_OK) << tprobe_last_error();
  }
  ASSERT_EQ(tprobe_stop(f.s), TPROBE_OK);

  std::map<int64_t, int> entry_records;  // step → entry records
  for (const record &r : f.records()) {
    const auto &h = r.header;
    if (h.kind == record_kind::entry) {
      ++entry_records[h.step];
      EXPECT_EQ(h.entry, "Functional.linear.0.forward");
      EXPECT_EQ(h.meta["parent"], "Module.fc.Linear.forward.0");
      EXPECT_EQ(h.meta["is_recompute"], false);
    } else if (h.kind == record_kind::tensor && h.slot == "input.0") {
      EXPECT_EQ(h.entry, "Functional.linear.0.forward");
      EXPECT_EQ(h.shape, (std::vector<int64_t>{1000}));
      ASSERT_TRUE(h.stats.has_value());
      EXPECT_EQ(h.stats->max, stat_value::of_real(1.5));
    } else if (h.kind == record_kind::tensor) {
      // Filled where a longer record was before: nothing of it remains.
      EXPECT_EQ(h.entry, "Tensor.mul_.0.forward");
      EXPECT_EQ(h.slot, "output.0");
      EXPECT_EQ(h.shape, (std::vector<int64_t>{1}));
      EXPECT_TRUE(h.meta.is_null());
      ASSERT_TRUE(h.stats.has_value());
      EXPECT_EQ(h.stats->max, stat_value::of_real(2.0));
    } else if (h.kind == record_kind::value) {
      EXPECT_EQ(h.entry, "Tensor.mul_.0.forward");
      EXPECT_EQ(h.meta["value"], 0.9);
      EXPECT_TRUE(h.shape.empty());
      EXPECT_FALSE(h.stats.has_value());
    }
  }
  EXPECT_EQ(entry_records, (std::map<int64_t, int>{{0, 1}, {1, 1}, {2, 1}}));
}

TEST(CaptureReuse, a_line_array_filled_with_another_stack_names_that_stack) {
  file_session f;
  std::string lines[2] = {"File a.py, line 1, in f", "File b.py, line 2, in g"};
  const char *stack[2] = {lines[0].c_str(), lines[1].c_str()};
  ASSERT_EQ(tprobe_entry_begin(f.s, "Torch.add.0.forward", nullptr, stack, 2, -1), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_entry_begin(f.s, "Torch.add.1.forward", nullptr, stack, 2, -1), TPROBE_OK);
  // The same array, other lines: the caller's buffers rewritten in place.
  lines[1] = "File c.py, line 3, in h";
  stack[1] = lines[1].c_str();
  ASSERT_EQ(tprobe_entry_begin(f.s, "Torch.add.2.forward", nullptr, stack, 2, -1), TPROBE_OK);
  ASSERT_EQ(tprobe_entry_begin(f.s, "Torch.add.3.forward", nullptr, stack, 1, -1), TPROBE_OK);
  ASSERT_EQ(tprobe_stop(f.s), TPROBE_OK);

  std::map<std::string, uint64_t> stack_of;
  std::map<uint64_t, nlohmann::ordered_json> book;  // stack id → its lines
  for (const record &r : f.records()) {
    if (r.header.kind != record_kind::entry) continue;
    const auto id = record_stack_id(r.header);
    const auto *lines_of = record_stack_lines(r.header);
    ASSERT_TRUE(id && lines_of) << r.describe();
    stack_of[r.header.entry] = *id;
    book[*id] = *lines_of;
  }
  ASSERT_EQ(stack_of.size(), 4u);
  EXPECT_EQ(stack_of["Torch.add.0.forward"], stack_of["Torch.add.1.forward"]);
  EXPECT_NE(stack_of["Torch.add.2.forward"], stack_of["Torch.add.0.forward"]);
  EXPECT_NE(stack_of["Torch.add.3.forward"], stack_of["Torch.add.2.forward"]);
  EXPECT_NE(stack_of["Torch.add.3.forward"], stack_of["Torch.add.0.forward"]);
  EXPECT_EQ(book[stack_of["Torch.add.2.forward"]],
            (nlohmann::ordered_json{"File a.py, line 1, in f", "File c.py, line 3, in h"}));
  EXPECT_EQ(book[stack_of["Torch.add.3.forward"]], (nlohmann::ordered_json{"File a.py, line 1, in f"}));
}

TEST(CaptureReuse, asking_whether_an_entry_is_wanted_announces_nothing_and_answers_as_entry_begin_will) {
  // The PyTorch capture asks before it walks an operator's Python stack (tprobe_entry_wanted).
  file_session f(R"("statistics": {"list": ["relu"], "scope": [], "data_mode": ["all"]})");
  std::vector<float> data{1.0f};
  for (const char *entry : {"Functional.relu.0.forward", "Functional.linear.0.forward"}) {
    const int wanted = tprobe_entry_wanted(f.s, entry);
    EXPECT_EQ(tprobe_entry_wanted(f.s, entry), wanted) << entry;  // asking twice changes nothing
    EXPECT_EQ(tprobe_entry_begin(f.s, entry, nullptr, nullptr, 0, -1), wanted) << entry;
    EXPECT_EQ(tprobe_entry_wanted(f.s, entry), wanted) << entry;  // and after, the step's answer
  }
  EXPECT_EQ(tprobe_entry_wanted(f.s, "Functional.relu.0.forward"), TPROBE_OK);
  EXPECT_EQ(tprobe_entry_wanted(f.s, "Functional.linear.0.forward"), TPROBE_SKIPPED);
  // Asked about, never begun: no entry record, and the next capture still announces it.
  EXPECT_EQ(tprobe_entry_wanted(f.s, "Functional.relu.1.forward"), TPROBE_OK);
  EXPECT_EQ(tprobe_entry_wanted(f.s, ""), TPROBE_ERROR);
  EXPECT_NE(std::string(tprobe_last_error()).find("entry name is empty"), std::string::npos) << tprobe_last_error();
  ASSERT_EQ(tprobe_stop(f.s), TPROBE_OK) << tprobe_last_error();
  std::vector<std::string> announced;
  for (const record &r : f.records())
    if (r.header.kind == record_kind::entry) announced.push_back(r.header.entry);
  EXPECT_EQ(announced, std::vector<std::string>{"Functional.relu.0.forward"});
}

TEST(CaptureReuse, an_unfiltered_session_wants_every_entry_until_it_stops) {
  file_session f;
  EXPECT_EQ(tprobe_entry_wanted(f.s, "Functional.linear.0.forward"), TPROBE_OK);
  EXPECT_EQ(tprobe_entry_wanted(f.s, "Module.fc.Linear.forward.0"), TPROBE_OK);
  ASSERT_EQ(tprobe_stop(f.s), TPROBE_OK) << tprobe_last_error();
  EXPECT_EQ(tprobe_entry_wanted(f.s, "Functional.linear.0.forward"), TPROBE_SKIPPED);  // capture is off
}

TEST(CaptureReuse, records_are_numbered_as_they_are_sent_and_the_eos_counts_them) {
  // Captures the filter skips, values and steps between them: the records that go out carry seq
  // 1, 2, 3, … with no gap (a record made and not sent takes no number), and eos counts them;
  // stage_io checks both (the capture's hello says numbered).
  file_session f(R"("statistics": {"list": ["relu"], "scope": [], "data_mode": ["all"]})");
  std::vector<float> data(64, 0.5f);
  for (int step = 0; step < 3; ++step) {
    for (const char *entry : {"Functional.relu.0.forward", "Functional.linear.0.forward", "Functional.relu.1.forward"}) {
      (void)tprobe_entry_begin(f.s, entry, nullptr, nullptr, 0, -1);
      (void)capture_floats(f.s, entry, "input.0", data);
      (void)tprobe_capture_value(f.s, entry, "kwargs.inplace", "{\"type\": \"bool\", \"value\": false}");
      (void)capture_floats(f.s, entry, "output.0", data);
    }
    // Refused once its record is made (the data pointer is checked after): sends nothing.
    int64_t shape[1] = {4};
    DLTensor no_data{};
    no_data.device = {kDLCPU, 0};
    no_data.ndim = 1;
    no_data.dtype = {kDLFloat, 32, 1};
    no_data.shape = shape;
    ASSERT_EQ(tprobe_capture_tensor(f.s, "Functional.relu.0.forward", "input.1", &no_data, 0), TPROBE_ERROR);
    ASSERT_EQ(tprobe_step(f.s), TPROBE_OK) << tprobe_last_error();
  }
  ASSERT_EQ(tprobe_stop(f.s), TPROBE_OK);
  uint64_t data_records = 0, linear = 0;
  std::optional<uint64_t> eos_records;
  for (const record &r : f.records()) {
    if (r.header.kind == record_kind::eos) {
      eos_records = r.header.meta.value("records", uint64_t{0});
      continue;
    }
    ASSERT_FALSE(record_kind_is_control(r.header.kind)) << r.describe();
    ASSERT_EQ(r.header.seq, ++data_records) << r.describe();
    linear += r.header.entry.find("linear") != std::string::npos;
  }
  EXPECT_EQ(linear, 0u);  // skipped, and unnumbered
  EXPECT_GT(data_records, 3u * 2 * 3);
  EXPECT_EQ(eos_records, data_records);
}
