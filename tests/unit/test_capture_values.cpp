// Non-tensor values through the capture's C API (tprobe_capture.h): the checked call refuses
// invalid JSON at the call, naming the entry and slot; the unchecked one (tprobe's own PyTorch
// capture) leaves the parse to the sender thread, and what arrives is the same either way. An
// invalid text given to the unchecked call breaks the session, loudly, at its next call.
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

TEST(capture_values, checked_and_unchecked_texts_arrive_as_the_same_leaves) {
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

TEST(capture_values, the_checked_call_refuses_invalid_json_at_the_call) {
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

TEST(capture_values, invalid_json_given_unchecked_breaks_the_session_at_its_next_call) {
  file_session f;
  EXPECT_EQ(tprobe_capture_value_unchecked(f.s, "Torch.mul.0.forward", "input.1", "{not json"), TPROBE_OK);
  // The sender finds it: close, which joins the sender, reports it at the latest.
  (void)tprobe_stop(f.s);
  EXPECT_EQ(tprobe_session_close(f.s), TPROBE_ERROR);
  f.s = nullptr;
  const std::string error = tprobe_last_error();
  EXPECT_NE(error.find("Torch.mul.0.forward input.1: value is not valid JSON"), std::string::npos) << error;
}
