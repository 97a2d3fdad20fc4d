// Non-tensor values through the capture's C API (tprobe_capture.h): the checked call refuses
// invalid JSON at the call, naming the entry and slot; the unchecked one (tprobe's own PyTorch
// capture) leaves the parse to the sender thread, and what arrives is the same either way. An
// invalid text given to the unchecked call breaks the session, loudly, at its next call.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dump_semantics.h"
#include "record.h"
#include "tprobe_capture.h"
#include "capture_file_session.h"
#include "test_support.h"

using namespace tprobe;

namespace {

// The value records of the stream, once the session is closed: slot → meta.
struct file_session : test::capture_file_session {
  std::vector<std::pair<std::string, nlohmann::ordered_json>> values() {
    std::vector<std::pair<std::string, nlohmann::ordered_json>> out;
    for (const record &r : records())
      if (r.header.kind == record_kind::value) out.emplace_back(r.header.slot, r.header.meta);
    return out;
  }
};

}  // namespace

TEST(CaptureValues, checked_and_unchecked_texts_arrive_as_the_same_leaves) {
  file_session f;
  std::string real, list;
  value_real_append(real, 0.1);
  list = "[";
  value_int_append(list, 2);
  list += ",";
  value_bool_append(list, false);
  list += "]";
  const char *entry = "Torch.add.0.forward";
  ASSERT_EQ(tprobe_capture_value(f.s, entry, "input.1", real.c_str()), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_capture_value_unchecked(f.s, entry, "input.2", real.c_str()), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_capture_value_unchecked(f.s, entry, "kwargs.size", list.c_str()), TPROBE_OK);
  ASSERT_EQ(tprobe_capture_value_unchecked(f.s, entry, "kwargs.out", nullptr), TPROBE_OK);  // None
  ASSERT_EQ(tprobe_stop(f.s), TPROBE_OK) << tprobe_last_error();
  const auto got = f.values();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].first, "input.1");
  EXPECT_EQ(got[0].second, value_real(0.1));
  EXPECT_TRUE(got[0].second["value"].is_number_float());
  EXPECT_EQ(got[1].second, got[0].second);
  EXPECT_EQ(got[2].second.dump(), R"([{"type":"int","value":2},{"type":"bool","value":false}])");
  EXPECT_TRUE(got[3].second.is_null());
}

// Non-finite reals are Python's json tokens in the leaf's text (as msprobe writes them), taken by
// both calls and arriving as IEEE values: masked_fill's -inf made a dump uncomparable as "-inf".
TEST(CaptureValues, non_finite_reals_travel_as_floats) {
  file_session f;
  const double inf = std::numeric_limits<double>::infinity();
  const double reals[] = {-inf, inf, std::nan("")};
  const char *entry = "Torch.masked_fill.0.forward";
  for (size_t i = 0; i < 3; ++i) {
    std::string text;
    value_real_append(text, reals[i]);
    const std::string slot = "input." + std::to_string(i);
    const auto call = i == 1 ? tprobe_capture_value_unchecked : tprobe_capture_value;
    ASSERT_EQ(call(f.s, entry, slot.c_str(), text.c_str()), TPROBE_OK) << text << tprobe_last_error();
  }
  std::string ndarray;
  value_ndarray_append(ndarray, "float64", {2}, stat_value::of_real(inf), stat_value::of_real(1),
                       stat_value::of_real(std::nan("")), stat_value::of_real(inf));
  ASSERT_EQ(tprobe_capture_value(f.s, entry, "input.3", ndarray.c_str()), TPROBE_OK) << ndarray;
  ASSERT_EQ(tprobe_stop(f.s), TPROBE_OK) << tprobe_last_error();
  const auto got = f.values();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].second["value"].get<double>(), -inf);
  EXPECT_EQ(got[1].second["value"].get<double>(), inf);
  EXPECT_TRUE(std::isnan(got[2].second["value"].get<double>()));
  EXPECT_EQ(got[0].second["type"], "float");
  EXPECT_EQ(got[3].second["Max"].get<double>(), inf);
  EXPECT_TRUE(std::isnan(got[3].second["Mean"].get<double>()));
  EXPECT_EQ(got[3].second["shape"], nlohmann::ordered_json::parse("[2]"));
}

// A dict key the slot alone cannot tell (digits, a dot, an apostrophe, empty) is quoted by the
// caller; the record carries msprobe's name as its slot and the keys as its path.
TEST(CaptureValues, quoted_dict_keys_arrive_as_a_path) {
  file_session f;
  const char *entry = "k.0.debug";
  ASSERT_EQ(tprobe_capture_value(f.s, entry, "debug.'3'", "1"), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_capture_value(f.s, entry, "debug.'head.0'.2.'it''s'", "2"), TPROBE_OK);
  ASSERT_EQ(tprobe_capture_value(f.s, "Module.m.M.forward.0", "output.0.a", "3"), TPROBE_OK);
  ASSERT_EQ(tprobe_stop(f.s), TPROBE_OK) << tprobe_last_error();
  std::vector<record> values;
  for (record &r : f.records())
    if (r.header.kind == record_kind::value) values.push_back(std::move(r));
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(values[0].header.slot, "debug.3");
  ASSERT_TRUE(values[0].header.path);
  EXPECT_EQ(*values[0].header.path, (std::vector<record_path_element>{std::string("3")}));
  EXPECT_EQ(values[1].header.slot, "debug.head.0.2.it's");
  EXPECT_EQ(*values[1].header.path,
            (std::vector<record_path_element>{std::string("head.0"), int64_t{2}, std::string("it's")}));
  EXPECT_EQ(values[2].header.slot, "output.0.a");
  EXPECT_FALSE(values[2].header.path);  // a plain slot says it all
}

TEST(CaptureValues, the_checked_call_refuses_invalid_json_at_the_call) {
  file_session f;
  EXPECT_EQ(tprobe_capture_value(f.s, "Torch.add.0.forward", "input.1", R"({"type":"int","value":)"), TPROBE_ERROR);
  const std::string error = tprobe_last_error();
  EXPECT_NE(error.find("Torch.add.0.forward input.1: value is not valid JSON"), std::string::npos) << error;
  // An empty text is refused at the call by either door.
  EXPECT_EQ(tprobe_capture_value(f.s, "Torch.add.0.forward", "input.3", ""), TPROBE_ERROR);
  EXPECT_NE(std::string(tprobe_last_error()).find("input.3: value is empty"), std::string::npos) << tprobe_last_error();
  EXPECT_EQ(tprobe_capture_value_unchecked(f.s, "Torch.add.0.forward", "input.3", ""), TPROBE_ERROR);
  // Nothing was lost or broken: the session goes on.
  EXPECT_EQ(tprobe_capture_value(f.s, "Torch.add.0.forward", "input.2", "null"), TPROBE_OK) << tprobe_last_error();
  EXPECT_EQ(tprobe_stop(f.s), TPROBE_OK) << tprobe_last_error();
  EXPECT_EQ(f.values().size(), 1u);
}

TEST(CaptureValues, invalid_json_given_unchecked_breaks_the_session_at_its_next_call) {
  file_session f;
  EXPECT_EQ(tprobe_capture_value_unchecked(f.s, "Torch.mul.0.forward", "input.1", "{not json"), TPROBE_OK);
  // The sender finds it: close, which joins the sender, reports it at the latest.
  (void)tprobe_stop(f.s);
  EXPECT_EQ(tprobe_session_close(f.s), TPROBE_ERROR);
  f.s = nullptr;
  const std::string error = tprobe_last_error();
  EXPECT_NE(error.find("Torch.mul.0.forward input.1: value is not valid JSON"), std::string::npos) << error;
}
