// End to end with the real binaries over ipc in a temp dir: the example producer through both
// shipped manifests, values checked against a float64 reference computed here, tensor files
// checked byte for byte; a stage killed mid-stream; a malformed record.
#include <cmath>
#include <cstring>
#include <filesystem>

#include <signal.h>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "example_model.h"
#include "npy.h"
#include "pyjson.h"
#include "tensor_stats.h"
#include "test_support.h"

using namespace tprobe;
using json = nlohmann::ordered_json;

namespace {

std::string write_config(const test::temp_dir &dir, const std::string &task, const std::string &extra = "") {
  const std::string path = dir / "config.json";
  test::write_file(path, R"({"task": ")" + task + R"(", "dump_path": ")" + dir.path() + R"(/dump", "level": "L1")" +
                             extra + "}");
  return path;
}

// float64 reference of the float32 statistics, rounded to float32 as msprobe reports them.
void expect_float32_stats(const example::item &it, const json &leaf) {
  std::vector<float> v(it.data.size() / 4);
  std::memcpy(v.data(), it.data.data(), it.data.size());
  double mx = -INFINITY, mn = INFINITY, sum = 0, sq = 0;
  bool nan = false;
  for (float f : v) {
    nan |= std::isnan(f);
    mx = std::max<double>(mx, f);
    mn = std::min<double>(mn, f);
    sum += f;
    sq += double(f) * f;
  }
  const std::string where = it.entry + " " + it.slot;
  if (nan) {
    EXPECT_TRUE(std::isnan(leaf["Max"].get<double>())) << where;
    return;
  }
  EXPECT_EQ(leaf["Max"].get<double>(), double(float(mx))) << where;
  EXPECT_EQ(leaf["Min"].get<double>(), double(float(mn))) << where;
  EXPECT_NEAR(leaf["Mean"].get<double>(), sum / v.size(), 1e-6 * (1 + std::fabs(sum / v.size()))) << where;
  EXPECT_NEAR(leaf["Norm"].get<double>(), std::sqrt(sq), 1e-6 * std::sqrt(sq)) << where;
}

const json &leaf_of(const json &data, const example::item &it) {
  const json &e = data.at(it.entry);
  const auto dot = it.slot.find('.');
  const std::string first = it.slot.substr(0, dot), rest = it.slot.substr(dot + 1);
  const bool backward = it.entry.ends_with(".backward");
  if (first == "kwargs") return e.at("input_kwargs").at(rest);
  const std::string section = backward ? first : (first == "input" ? "input_args" : first);
  return e.at(section).at(std::stoul(rest));
}

void check_dump(const std::string &root, int steps, const std::vector<int> &ranks, bool tensors) {
  for (int step = 0; step < steps; ++step)
    for (int rank : ranks) {
      const std::string dir = root + "/step" + std::to_string(step) + (rank < 0 ? "/rank" : "/rank" + std::to_string(rank));
      SCOPED_TRACE(dir);
      const json doc = pyjson_load_file(dir + "/dump.json");
      EXPECT_EQ(doc["task"], tensors ? "tensor" : "statistics");
      EXPECT_EQ(doc["framework"], "pytorch");
      EXPECT_EQ(doc["dump_data_dir"].is_null(), !tensors);
      const json &data = doc["data"];
      const auto items = example::example_step(1, rank, step);
      size_t entries = 0;
      std::string last;
      for (const auto &it : items) {
        if (it.entry != last) ++entries, last = it.entry;
        const json &leaf = leaf_of(data, it);
        if (!it.is_tensor) {
          EXPECT_EQ(leaf, json::parse(it.json));
          continue;
        }
        EXPECT_EQ(leaf["shape"].get<std::vector<int64_t>>(), it.shape);
        EXPECT_EQ(leaf["requires_grad"].get<bool>(), it.requires_grad);
        if (it.type == example::element::float32) {
          expect_float32_stats(it, leaf);
        } else if (it.type == example::element::int64) {
          EXPECT_EQ(leaf["Max"], 423 + step + (it.slot == "output.0"));
        } else if (it.type == example::element::boolean) {
          EXPECT_TRUE(leaf["Mean"].is_null());
        }
        ASSERT_EQ(leaf.contains("data_name"), tensors);
        if (tensors && it.type != example::element::bfloat16) {
          const auto arr = npy_read(dir + "/dump_tensor_data/" + leaf["data_name"].get<std::string>());
          EXPECT_EQ(arr.shape, it.shape);
          ASSERT_EQ(arr.data.size(), it.data.size()) << it.entry << " " << it.slot;
          EXPECT_EQ(std::memcmp(arr.data.data(), it.data.data(), it.data.size()), 0) << it.entry << " " << it.slot;
        }
      }
      EXPECT_EQ(data.size(), entries);
      const json stack = pyjson_load_file(dir + "/stack.json");
      EXPECT_EQ(stack.at("0").at(0).size(), entries);  // one shared stack for every entry
      EXPECT_EQ(pyjson_load_file(dir + "/construct.json"), json::object());  // L1
    }
}

}  // namespace

TEST(pipeline, statistics_manifest_two_ranks) {
  test::temp_dir dir;
  const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/statistics.json",
                                    "--config", write_config(dir, "statistics"), "--",
                                    test::bin("tprobe-example-producer"), "--steps", "2", "--world-size", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  check_dump(dir / "dump", 2, {0, 1}, false);
}

TEST(pipeline, tensor_manifest_writes_the_bytes_sent) {
  test::temp_dir dir;
  const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/tensor.json",
                                    "--config", write_config(dir, "statistics"), "--",
                                    test::bin("tprobe-example-producer"), "--steps", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  check_dump(dir / "dump", 2, {-1}, true);
  // bfloat16 is stored as float32, exactly.
  const auto items = example::example_step(1, -1, 0);
  for (const auto &it : items) {
    if (it.type != example::element::bfloat16) continue;
    const auto arr = npy_read(dir.path() + "/dump/step0/rank/dump_tensor_data/" + it.entry + "." + it.slot + ".npy");
    EXPECT_EQ(arr.descr, "<f4");
    for (size_t i = 0; i < arr.data.size() / 4; ++i) {
      uint16_t b;
      std::memcpy(&b, it.data.data() + 2 * i, 2);
      float f;
      std::memcpy(&f, arr.data.data() + 4 * i, 4);
      EXPECT_EQ(f, bfloat16_to_float(b));
    }
  }
}

TEST(pipeline, md5_mode_writes_crc32) {
  test::temp_dir dir;
  const auto r = test::run_process(
      {test::bin("tprobe"), "run", test::source_dir() + "/pipelines/statistics.json", "--config",
       write_config(dir, "statistics", R"(, "statistics": {"summary_mode": "md5"})"), "--",
       test::bin("tprobe-example-producer"), "--steps", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json doc = pyjson_load_file(dir.path() + "/dump/step0/rank/dump.json");
  const auto items = example::example_step(1, -1, 0);
  for (const auto &it : items) {
    if (!it.is_tensor) continue;
    const json &leaf = leaf_of(doc["data"], it);
    char expected[9];
    std::snprintf(expected, sizeof expected, "%08x", crc32_bytes(it.data.data(), it.data.size()));
    EXPECT_EQ(leaf["md5"], expected) << it.entry << " " << it.slot;
  }
}

TEST(pipeline, killed_stage_leaves_a_valid_dump) {
  test::temp_dir dir;
  const std::string writer_in = "ipc://" + dir.path() + "/writer.in", stats_in = "ipc://" + dir.path() + "/stats.in";
  test::child_process writer({test::bin("tprobe-writer"), "--input", writer_in, "--flush-interval", "0.05"},
                             dir.path(), {}, true);
  writer.wait_ready();
  test::child_process stats({test::bin("tprobe-stats"), "--input", stats_in, "--output", writer_in}, dir.path(), {},
                            true);
  stats.wait_ready();
  test::child_process producer({test::bin("tprobe-example-producer"), "--steps", "100000", "--endpoint", stats_in,
                                "--config", write_config(dir, "statistics")},
                               dir.path());
  // Wait until the writer has rewritten dump.json at least once with several steps: protocol-free
  // here because the file itself is what we observe.
  const std::string step3 = dir.path() + "/dump/step3/rank/dump.json";
  for (int i = 0; i < 6000 && !std::filesystem::exists(step3); ++i) usleep(10000);
  ASSERT_TRUE(std::filesystem::exists(step3)) << writer.err() << stats.err();
  stats.kill(SIGKILL);
  EXPECT_EQ(stats.wait(), 128 + SIGKILL);
  writer.kill(SIGTERM);  // as the launcher does when a stage dies
  EXPECT_EQ(writer.wait(), 0) << writer.err();
  producer.kill(SIGKILL);
  producer.wait();
  // Every dump.json that exists parses and holds whole entries.
  size_t folders = 0;
  for (const auto &e : std::filesystem::directory_iterator(dir.path() + "/dump")) {
    const std::string path = e.path().string() + "/rank/dump.json";
    if (!std::filesystem::exists(path)) continue;
    ++folders;
    const json doc = pyjson_load_file(path);
    EXPECT_TRUE(doc["data"].is_object());
  }
  EXPECT_GE(folders, 4u);
}

TEST(pipeline, launcher_names_the_stage_that_died) {
  test::temp_dir dir;
  const std::string manifest = dir / "m.json";
  test::write_file(manifest, R"({"stages": [
    {"name": "stats", "stage": "stats", "inputs": ["capture"]},
    {"name": "writer", "stage": "writer", "inputs": ["stats"], "options": {"dump-path": "/proc/forbidden"}}]})");
  const auto r = test::run_process({test::bin("tprobe"), "run", manifest, "--config", write_config(dir, "statistics"),
                                    "--", test::bin("tprobe-example-producer"), "--steps", "1"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("\"writer\""), std::string::npos) << r.err;
}

TEST(pipeline, malformed_record_stops_the_stage_with_a_clear_error) {
  test::temp_dir dir;
  const std::string in = "ipc://" + dir.path() + "/stats.in";
  test::child_process stats({test::bin("tprobe-stats"), "--input", in}, dir.path(), {}, true);
  stats.wait_ready();
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 1000);
  raw.connect(in);
  raw.send(zmq::str_buffer("TP\x01\x00not msgpack at all"), zmq::send_flags::none);
  EXPECT_EQ(stats.wait(), 100);
  EXPECT_NE(stats.err().find("tprobe-stats: fatal: malformed record"), std::string::npos) << stats.err();
}
