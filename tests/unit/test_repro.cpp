// tprobe repro's library (tools/repro/repro.h): which dump.json it reads, the files it writes and
// their names, the call it writes into the script (operator, arguments in schema order, random
// mode, dumped gradients paired with their inputs) and what it refuses. The scripts themselves run
// in tests/python/test_repro.py.
#include <filesystem>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "errors.h"
#include "pyjson.h"
#include "repro/repro.h"
#include "test_support.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;
using ::testing::HasSubstr;
using ::testing::Not;

json tensor(const std::string &dtype, json shape, const std::string &data_name = "", bool requires_grad = false) {
  json t = {{"type", "torch.Tensor"}, {"dtype", dtype}, {"shape", std::move(shape)}, {"Max", 1.5},
            {"Min", -2.0},            {"Mean", 0.1},    {"Norm", 3.0},              {"requires_grad", requires_grad}};
  if (!data_name.empty()) t["data_name"] = data_name;
  return t;
}

json linear_forward(bool with_names) {
  const auto n = [&](const std::string &s) { return with_names ? "Functional.linear.0.forward." + s : std::string(); };
  return {{"input_args",
           {tensor("torch.float32", {2, 4}, n("input.0.npy"), true), tensor("torch.float32", {3, 4}, n("input.1.npy"), true),
            tensor("torch.float32", {3}, n("input.2.npy"), true)}},
          {"input_kwargs", json::object()},
          {"output", {tensor("torch.float32", {2, 3}, n("output.0.npy"))}}};
}

json linear_backward() {
  return {{"input", {tensor("torch.float32", {2, 3}, "Functional.linear.0.backward.input.0.npy")}},
          {"output",
           {tensor("torch.float32", {2, 4}, "Functional.linear.0.backward.output.0.npy"),
            tensor("torch.float32", {3, 4}, "Functional.linear.0.backward.output.1.npy"),
            tensor("torch.float32", {3}, "Functional.linear.0.backward.output.2.npy")}}};
}

// A rank folder with dump.json and (with_data) every tensor file it names, each holding its name.
void write_rank(const std::string &dir, const json &data, bool with_data) {
  std::filesystem::create_directories(dir + "/dump_tensor_data");
  json doc = {{"task", with_data ? "tensor" : "statistics"}, {"level", "L1"}, {"framework", "pytorch"},
              {"dump_data_dir", with_data ? json(dir + "/dump_tensor_data") : json()}, {"data", data}};
  test::write_file(dir + "/dump.json", pyjson_dump(doc));
  std::function<void(const json &)> files = [&](const json &e) {
    if (e.is_object() && e.contains("data_name")) test::write_file(dir + "/dump_tensor_data/" + e["data_name"].get<std::string>(), e["data_name"].get<std::string>());
    if (e.is_structured())
      for (const auto &item : e) files(item);
  };
  if (with_data) files(data);
}

json linear_data() {
  return {{"Functional.linear.0.forward", linear_forward(true)}, {"Functional.linear.0.backward", linear_backward()}};
}

TEST(Repro, WritesTheScriptAndCopiesTheTensorsOfTheCall) {
  test::temp_dir dir;
  write_rank(dir / "step0/rank0", linear_data(), true);
  test::write_file(dir / "step0/rank0/dump_tensor_data/Other.api.0.forward.input.0.npy", "x");
  const repro_report r = repro_write({dir / "step0", "Functional.linear.0.forward", dir / "out"});
  EXPECT_EQ(r.dump_json, dir / "step0/rank0/dump.json");
  EXPECT_EQ(r.api, "Functional.linear.0");
  EXPECT_EQ(r.op, "aten::linear");
  EXPECT_EQ(r.script, dir / "out/repro_Functional.linear.0.py");
  EXPECT_TRUE(r.backward);
  EXPECT_EQ(r.random_tensors, 0u);
  // The forward inputs with their dumped gradients, the output, the output's gradient; nothing else.
  EXPECT_EQ(test::files_in(dir / "out"),
            (std::vector<std::string>{"Functional.linear.0.backward.input.0.npy", "Functional.linear.0.backward.output.0.npy",
                                      "Functional.linear.0.backward.output.1.npy", "Functional.linear.0.backward.output.2.npy",
                                      "Functional.linear.0.forward.input.0.npy", "Functional.linear.0.forward.input.1.npy",
                                      "Functional.linear.0.forward.input.2.npy", "Functional.linear.0.forward.output.0.npy",
                                      "repro_Functional.linear.0.py"}));
  EXPECT_EQ(test::read_file(dir / "out/Functional.linear.0.forward.input.1.npy"), "Functional.linear.0.forward.input.1.npy");
  const std::string script = test::read_file(r.script);
  EXPECT_THAT(script, HasSubstr("# Run: python3 repro_Functional.linear.0.py"));
  EXPECT_THAT(script, HasSubstr("OP = torch.ops.aten.linear"));
  EXPECT_THAT(script, HasSubstr("Tensor(\"Functional.linear.0.forward.input.1.npy\", \"torch.float32\", [3, 4], max=1.5, "
                                "min=-2.0, requires_grad=True,\n"));
  EXPECT_THAT(script, HasSubstr("grad=Tensor(\"Functional.linear.0.backward.output.1.npy\""));
  EXPECT_THAT(script, HasSubstr("GRAD_OUTPUT = Tensor(\"Functional.linear.0.backward.input.0.npy\""));
  EXPECT_THAT(script, Not(HasSubstr("<<the call>>")));
  EXPECT_THAT(script, Not(HasSubstr("__repro")));
}

TEST(Repro, FindsTheDumpJsonOfAFileARankFolderOrAStepFolderOfOneRank) {
  test::temp_dir dir;
  write_rank(dir / "step0/rank", linear_data(), false);
  EXPECT_EQ(repro_dump_json(dir / "step0/rank/dump.json"), dir / "step0/rank/dump.json");
  EXPECT_EQ(repro_dump_json(dir / "step0/rank"), dir / "step0/rank/dump.json");
  EXPECT_EQ(repro_dump_json(dir / "step0"), dir / "step0/rank/dump.json");
  write_rank(dir / "step0/rank1", linear_data(), false);
  try {
    (void)repro_dump_json(dir / "step0");
    FAIL() << "two ranks accepted";
  } catch (const usage_error &e) {
    EXPECT_THAT(e.what(), HasSubstr("2 rank folders; give one of them"));
  }
  EXPECT_THROW((void)repro_dump_json(dir / "nothing"), usage_error);
  std::filesystem::create_directories(dir / "empty");
  EXPECT_THROW((void)repro_dump_json(dir / "empty"), usage_error);
}

TEST(Repro, RefusesAnApiTheDumpDoesNotHoldOrThePrecheckNeverReplays) {
  test::temp_dir dir;
  json data = linear_data();
  data["Torch.rand_like.0.forward"] = {{"input_args", {tensor("torch.float32", {2})}}, {"input_kwargs", json::object()},
                                       {"output", {tensor("torch.float32", {2})}}};
  data["Distributed.all_reduce.0.forward"] = data["Torch.rand_like.0.forward"];
  write_rank(dir / "rank0", data, false);
  const auto message = [&](const std::string &api) -> std::string {
    try {
      (void)repro_write({dir / "rank0", api, dir / "out"});
    } catch (const usage_error &e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_THAT(message("Functional.linear.1"), HasSubstr("no API Functional.linear.1"));
  EXPECT_THAT(message("Torch.rand_like.0"),
              HasSubstr("Torch.rand_like.0 is not reproduced: rand_like draws random numbers"));
  EXPECT_THAT(message("Distributed.all_reduce.0"), HasSubstr("not support for acc_check"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));  // nothing is written for a refused call
}

TEST(Repro, AMissingTensorFileIsASystemError) {
  test::temp_dir dir;
  write_rank(dir / "rank0", linear_data(), true);
  std::filesystem::remove(dir / "rank0/dump_tensor_data/Functional.linear.0.forward.input.2.npy");
  try {
    (void)repro_write({dir / "rank0", "Functional.linear.0", dir / "out"});
    FAIL() << "accepted";
  } catch (const system_error &e) {
    EXPECT_THAT(e.what(), HasSubstr("Functional.linear.0.forward.input.2.npy"));
  }
}

TEST(Repro, AStatisticsDumpDrawsEveryTensorFromItsStatistics) {
  repro_report r;
  const std::string script =
      repro_script_text("Functional.linear.0", linear_forward(false), linear_backward(), false, "/d/dump.json", r);
  EXPECT_TRUE(r.tensor_files.empty());
  EXPECT_EQ(r.random_tensors, 4u);  // three inputs and the output's gradient
  EXPECT_THAT(script, HasSubstr("Tensor(None, \"torch.float32\", [2, 4], max=1.5, min=-2.0, requires_grad=True,\n"));
  // The output keeps all its statistics, for the line the script prints beside the bench's.
  EXPECT_THAT(script, HasSubstr("Tensor(None, \"torch.float32\", [2, 3], max=1.5, min=-2.0, mean=0.1, norm=3.0)"));
}

TEST(Repro, MsprobesPythonFormIsWrittenInTheOperatorsOrder) {
  // msprobe dumps F.embedding(input, weight, padding_idx, max_norm, …): aten::embedding takes
  // (weight, indices, padding_idx, scale_grad_by_freq, sparse).
  const json forward = {{"input_args", {tensor("torch.int64", {2, 3}), tensor("torch.float16", {10, 4}, "", true)}},
                        {"input_kwargs", {{"padding_idx", {{"type", "int"}, {"value", 1}}}}},
                        {"output", {tensor("torch.float16", {2, 3, 4})}}};
  const json backward = {{"input", {tensor("torch.float16", {2, 3, 4})}},
                         {"output", {nullptr, tensor("torch.float16", {10, 4})}}};
  repro_report r;
  const std::string script = repro_script_text("Functional.embedding.0", forward, backward, false, "/d.json", r);
  EXPECT_EQ(r.op, "aten::embedding");
  EXPECT_THAT(script, HasSubstr("ARGS = [\n]\nKWARGS = {\n    \"weight\": Tensor(None, \"torch.float16\", [10, 4]"));
  EXPECT_THAT(script, HasSubstr("\"indices\": Tensor(None, \"torch.int64\", [2, 3]"));
  EXPECT_THAT(script, HasSubstr("\"padding_idx\": 1,"));
  EXPECT_THAT(script, HasSubstr("grad=Tensor(None, \"torch.float16\", [10, 4]"));  // paired by position
}

TEST(Repro, ArgumentsBecomePythonLiterals) {
  const json forward = {
      {"input_args",
       {tensor("torch.bfloat16", {4}), {{"type", "float"}, {"value", std::numeric_limits<double>::infinity()}},
        {{"type", "str"}, {"value", "a\"b\n\\"}}, {{"type", "torch.Size"}, {"value", {2, 2}}},
        json::array({{{"type", "int"}, {"value", 1}}, {{"type", "bool"}, {"value", true}}}), nullptr,
        {{"type", "slice"}, {"value", {0, nullptr, 2}}}}},
      {"input_kwargs",
       {{"dtype", {{"type", "torch.dtype"}, {"value", "torch.float16"}}},
        {"device", {{"type", "torch.device"}, {"value", "cuda:0"}}},
        {"reduction", {{"type", "str"}, {"value", "sum"}}}}},
      {"output", {tensor("torch.bfloat16", {4})}}};
  repro_report r;
  const std::string script = repro_script_text("Torch.some_op.0", forward, json(), false, "/d.json", r);
  EXPECT_EQ(r.op, "aten::some_op");
  EXPECT_FALSE(r.backward);
  EXPECT_THAT(script, HasSubstr("    float(\"inf\"),\n    \"a\\\"b\\n\\\\\",\n    [2, 2],\n    [1, True],\n    None,\n"
                                "    slice(0, None, 2),\n]"));
  EXPECT_THAT(script, HasSubstr("\"dtype\": torch.float16,"));
  EXPECT_THAT(script, HasSubstr("\"reduction\": \"sum\","));  // the script makes it at::Reduction's int
  EXPECT_THAT(script, Not(HasSubstr("cuda:0")));              // where a result lives is the run's choice
  EXPECT_THAT(script, HasSubstr("GRAD_OUTPUT = None"));
}

TEST(Repro, RefusesWhatItCannotWriteSafely) {
  repro_report r;
  json forward = {{"input_args", {tensor("torch.float32); import os #", {2})}}, {"output", json::array()}};
  EXPECT_THROW((void)repro_script_text("Torch.abs.0", forward, json(), false, "/d.json", r), usage_error);
  forward = {{"input_args", {tensor("torch.float32", {2}, "../../etc/passwd")}}, {"output", json::array()}};
  EXPECT_THROW((void)repro_script_text("Torch.abs.0", forward, json(), true, "/d.json", r), usage_error);
  forward = {{"input_args", {{{"type", "torch.dtype"}, {"value", "os.system"}}}}, {"output", json::array()}};
  EXPECT_THROW((void)repro_script_text("Torch.abs.0", forward, json(), true, "/d.json", r), usage_error);
}

}  // namespace
}  // namespace tprobe
