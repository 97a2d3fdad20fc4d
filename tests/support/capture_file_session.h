// A capture session (tprobe_capture.h) whose stream goes to a record file, started, for tests of
// what the C API puts in the stream; records() closes it and reads the file back.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "record.h"
#include "test_support.h"
#include "tprobe_capture.h"

namespace tprobe::test {

struct capture_file_session {
  temp_dir dir;
  std::string stream = dir / "capture.tpr";
  tprobe_session *s = nullptr;

  // `extra`: more of the config's keys, after a comma (`"statistics": {"list": ["relu"]}`).
  explicit capture_file_session(const std::string &extra = "") {
    const std::string config = dir / "config.json";
    write_file(config, R"({"task": "statistics", "level": "L1", "dump_path": ")" + (dir / "dump") + "\"" +
                           (extra.empty() ? "" : ", " + extra) + "}");
    tprobe_open_options o = tprobe_open_options_default();
    o.endpoint = stream.c_str();
    EXPECT_EQ(tprobe_session_open(config.c_str(), &o, &s), TPROBE_OK) << tprobe_last_error();
    EXPECT_EQ(tprobe_start(s), TPROBE_OK) << tprobe_last_error();
  }
  ~capture_file_session() { tprobe_session_close(s); }
  capture_file_session(const capture_file_session &) = delete;
  capture_file_session &operator=(const capture_file_session &) = delete;

  // Every record of the stream, once the session is closed.
  std::vector<record> records() {
    EXPECT_EQ(tprobe_session_close(s), TPROBE_OK) << tprobe_last_error();
    s = nullptr;
    std::vector<record> out;
    record_file_reader reader(stream);
    while (auto r = reader.read()) out.push_back(std::move(*r));
    return out;
  }
};

}  // namespace tprobe::test
