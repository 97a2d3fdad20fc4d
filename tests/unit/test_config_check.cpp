// The rules of core/config_check.h on hand-made packs, against what msprobe 8.3.3's checkers give
// for the same input (figures checked by hand with msprobe's config_check -c).
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "config_check.h"
#include "errors.h"

namespace tprobe {
namespace {

using ojson = nlohmann::ordered_json;

TEST(ConfigCheckEnv, PairsNcclWithHcclAndSwapsColumnsAsMsprobe) {
  // An NPU bench (an ASCEND_* variable) against a GPU cmp: HCCL_DETERMINISTIC pairs with
  // NCCL_DETERMINISTIC. msprobe's bench_* columns hold the cmp pack's side.
  const ojson npu = {{"ASCEND_HOME", "/x"}, {"HCCL_DETERMINISTIC", "True"}};
  const ojson gpu = {{"NCCL_DETERMINISTIC", "True"}, {"CUDA_LAUNCH_BLOCKING", "1"}};
  const config_sheet s = config_check_env(npu, gpu);
  ASSERT_EQ(s.header[0], "bench_env_name");
  // HCCL/NCCL_DETERMINISTIC equal: no row. HCCL_INTRA_ROCE_ENABLE (twice, NPU only): warnings.
  // ASCEND_LAUNCH_BLOCKING default 0 (int) vs CUDA_LAUNCH_BLOCKING "1": error.
  ASSERT_EQ(s.rows.size(), 3u);
  EXPECT_EQ(s.rows[0][0], "only cmp has this env");
  EXPECT_EQ(s.rows[0][1], "HCCL_INTRA_ROCE_ENABLE");
  EXPECT_EQ(s.rows[0][3], 0);
  EXPECT_EQ(s.rows[1][3], 1);
  EXPECT_EQ(s.rows[2], (std::vector<ojson>{"CUDA_LAUNCH_BLOCKING", "ASCEND_LAUNCH_BLOCKING", "1", 0, "error"}));
  EXPECT_EQ(s.pass_check, "error");

  const ojson gpu2 = {{"NCCL_DETERMINISTIC", "False"}, {"PATH", "/bin"}};
  const config_sheet t = config_check_env(gpu2, {{"HOME", "/root"}});
  // "False" (a string) is not the default False (a bool): msprobe says error.
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0], (std::vector<ojson>{"NCCL_DETERMINISTIC", "NCCL_DETERMINISTIC", false, "False", "error"}));
  EXPECT_EQ(config_check_env({{"A", "1"}}, {{"B", "2"}}).pass_check, "pass");
}

TEST(ConfigCheckPip, VersionDiffersIsError) {
  const config_sheet s = config_check_pip("numpy=1.24.0\ntorch=1.13\npeft=0.1\n", "numpy=1.26.4\ntorch=2.1\nbroken\n", "pytorch");
  ASSERT_EQ(s.rows.size(), 2u);
  EXPECT_EQ(s.rows[0], (std::vector<ojson>{"numpy", "1.24.0", "1.26.4", "error"}));
  EXPECT_EQ(s.rows[1], (std::vector<ojson>{"peft", "0.1", "None", "error"}));
  EXPECT_EQ(s.pass_check, "error");
  // torch is not among msprobe's packages (it looks up "pytorch"): equal otherwise.
  EXPECT_EQ(config_check_pip("numpy=1\ntorch=1\n", "numpy=1\ntorch=2\n", "pytorch").pass_check, "pass");
}

TEST(ConfigCheckHyperparameters, FuzzyMatchAsMsprobe) {
  EXPECT_EQ(config_hyperparameter_match("lr", {"learning_rate", "seed"}), std::make_pair(std::string("learning_rate"), std::string("mapping")));
  EXPECT_EQ(config_hyperparameter_match("learning_rate", {"seed", "lr"}), std::make_pair(std::string("lr"), std::string("mapping")));
  EXPECT_EQ(config_hyperparameter_match("seed", {"seed"}), std::make_pair(std::string("seed"), std::string("pure name")));
  // difflib: "hidden_size" vs "hiden_size" = 2*10/21.
  EXPECT_DOUBLE_EQ(difflib_ratio("hidden_size", "hiden_size"), 20.0 / 21.0);
  EXPECT_EQ(config_hyperparameter_match("hidden_size", {"hiden_size"}).second, "similarity:0.9523809523809523");
  EXPECT_EQ(config_hyperparameter_match("abc", {"xyz"}).first, "");

  const ojson bench = {{"lr", 0.0001}, {"model.num-layers", "2"}, {"seed", 1}};
  const ojson cmp = {{"learning_rate", 0.0002}, {"num_layers", "2"}, {"extra", true}};
  const auto rows = config_check_hyperparameter_rows(bench, cmp, "hyperparameters_static.json");
  ASSERT_EQ(rows.size(), 3u);
  // Sorted as Python sorts the lists: "Only in comparison" < "lr" < "seed".
  EXPECT_EQ(rows[0], (std::vector<ojson>{"hyperparameters_static.json", "Only in comparison", "extra", "", true, "", "warning"}));
  EXPECT_EQ(rows[1], (std::vector<ojson>{"hyperparameters_static.json", "lr", "learning_rate", "0.0001", "0.0002", "mapping", "error"}));
  EXPECT_EQ(rows[2], (std::vector<ojson>{"hyperparameters_static.json", "seed", "Only in benchmark", "1", "", "", "warning"}));
}

config_pack weights_pack(double max) {
  const ojson w = {{"fc.weight", {{"max", max}, {"min", -1.0}, {"mean", 0.5}, {"norm", 2.0}}},
                   {"fc.bias", {{"max", 0.0}, {"min", 0.0}, {"mean", 0.0}, {"norm", 0.0}}}};
  return {{"weights/step0/rank0/weight.json", w.dump()}};
}

TEST(ConfigCheckWeights, EqualAndRelativeDiffs) {
  auto same = config_check_compare(weights_pack(1.0), weights_pack(1.0), "a.zip", "b.zip");
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0].name, "weights");
  EXPECT_EQ(same[0].pass_check, "pass");
  ASSERT_EQ(same[0].rows.size(), 2u);
  EXPECT_EQ(same[0].rows[0][2], "fc.bias");
  EXPECT_EQ(same[0].rows[0][3], true);
  EXPECT_TRUE(same[0].rows[0][4].is_null());  // bench 0: no relative diff

  auto diff = config_check_compare(weights_pack(1.0), weights_pack(1.5), "a.zip", "b.zip");
  EXPECT_EQ(diff[0].pass_check, "error");
  EXPECT_EQ(diff[0].rows[1][2], "fc.weight");
  EXPECT_EQ(diff[0].rows[1][3], false);
  EXPECT_DOUBLE_EQ(diff[0].rows[1][4].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(diff[0].rows[1][5].get<double>(), 0.0);
}

TEST(ConfigCheckWeights, NullFeaturesOfAnEmptyTensorCompareWithoutDiffs) {
  // tprobe's dynamic pack writes null for an empty tensor's max and min: equal when both are null,
  // no relative difference, and never a refused pack.
  const ojson empty = {{"max", nullptr}, {"min", nullptr}, {"mean", 1.0}, {"norm", 0.0}};
  const ojson other = {{"max", 2.0}, {"min", nullptr}, {"mean", 1.0}, {"norm", 0.0}};
  const config_pack a = {{"dataset/step0/rank0/dataset.json", ojson{{"args", {{"0", empty}}}}.dump()}};
  const config_pack b = {{"dataset/step0/rank0/dataset.json", ojson{{"args", {{"0", other}}}}.dump()}};
  auto same = config_check_compare(a, a, "a.zip", "a.zip");
  ASSERT_EQ(same[0].rows.size(), 1u);
  EXPECT_EQ(same[0].rows[0][3], true);
  EXPECT_TRUE(same[0].rows[0][4].is_null());
  EXPECT_DOUBLE_EQ(same[0].rows[0][6].get<double>(), 0.0);
  auto diff = config_check_compare(a, b, "a.zip", "b.zip");
  EXPECT_EQ(diff[0].rows[0][3], false);
  EXPECT_EQ(diff[0].pass_check, "error");
}

TEST(ConfigCheckCompare, RandomStacksAndDatasetTags) {
  // difflib's ratio, autojunk included (b of 200 characters or more), as Python gives it.
  std::string long_a = "y = ", long_b = "y = ";
  for (int i = 0; i < 30; ++i) long_a += "a + b * c - ";
  for (int i = 0; i < 29; ++i) long_b += "a + b * c - ";
  long_b += "q";
  EXPECT_DOUBLE_EQ(difflib_ratio(long_a, long_b), 0.9818688981868898);
  EXPECT_DOUBLE_EQ(difflib_ratio("x = torch.randn(3, 4)", "x = torch.randn(3, 5)"), 0.9523809523809523);
  std::string junk_a = "x = ", junk_b = "x = ";  // b's popular characters are junk: 0.036, not 0.52
  for (int i = 0; i < 80; ++i) junk_a += "ab ", junk_b += "ba ";
  EXPECT_DOUBLE_EQ(difflib_ratio(junk_a + "tail", junk_b + "tail"), 0.036290322580645164);
  // Frames match on the file's base name, the function and the code line: /a/ vs /b/ and
  // another line number still match; another file does not.
  const std::vector<std::string> s1 = {"File /a/train.py, line 5, in main, x = torch.randn(3, 4)"};
  const std::vector<std::string> s2 = {"File /b/train.py, line 6, in main, x = torch.randn(3, 5)"};
  const std::vector<std::string> s3 = {"File /a/data.py, line 5, in main, x = torch.randn(3, 4)"};
  EXPECT_TRUE(config_stack_match(s1, s2));
  EXPECT_FALSE(config_stack_match(s1, s3));  // (0 + 1 + 1) / 3 < 0.8
  const auto stats = [](const std::vector<std::string> &stack, int count) {
    return ojson{{"torch.randn", {{{"count", count}, {"stack", stack}}}}}.dump();
  };
  const config_pack rb = {{"random/rank0.json", stats(s1, 2)}};
  const auto same = config_check_compare(rb, {{"random/rank0.json", stats(s2, 2)}}, "a.zip", "b.zip");
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0].name, "random");
  EXPECT_EQ(same[0].pass_check, "pass");
  EXPECT_EQ(same[0].rows[0][6], true);
  const auto other = config_check_random(rb, {{"random/rank0.json", stats(s3, 2)}}, "a.zip", "b.zip");
  ASSERT_EQ(other.rows.size(), 2u);
  EXPECT_EQ(other.rows[0][3], "no match stack");
  EXPECT_EQ(other.rows[1][2], "no match stack");
  EXPECT_EQ(other.pass_check, "error");
  EXPECT_THROW((void)config_check_random({{"random/rankX.json", "{}"}}, rb, "a.zip", "b.zip"), usage_error);

  const ojson f = {{"max", 1.0}, {"min", 0.0}, {"mean", 0.5}, {"norm", 1.0}};
  const config_pack a = {{"dataset/step0/rank0/dataset.json", ojson{{"args", {{"0", f}}}, {"kwargs", ojson::object()}}.dump()}};
  const config_pack b = {{"dataset/step0/rank0/dataset.json", ojson{{"args", {{"1", f}}}, {"kwargs", ojson::object()}}.dump()}};
  const auto s = config_check_compare(a, b, "a.zip", "b.zip");
  ASSERT_EQ(s.size(), 1u);
  ASSERT_EQ(s[0].rows.size(), 2u);
  EXPECT_EQ(s[0].rows[0][2], "args.0");
  EXPECT_EQ(s[0].rows[1][2], "args.1");
  EXPECT_EQ(s[0].pass_check, "error");
}

TEST(ConfigCheckPack, ShellAndYamlParsersAndZipRoundTrip) {
  const ojson h = config_hyperparameters_from_shell(
      "# c\nLR=0.0001\nGPT_ARGS=\"--num-layers 2 \\\n --lr $LR\"\ntorchrun --nproc_per_node 8 x.py $GPT_ARGS --bf16 --seed 1  # c\n");
  EXPECT_EQ(h, (ojson{{"nproc_per_node", "8"}, {"num-layers", "2"}, {"lr", "0.0001"}, {"bf16", "--seed"}}));
  ojson y = ojson::object();
  config_hyperparameters_from_yaml(ojson::parse(R"({"m": {"lr": 0.1, "l": [1, 2], "o": [{"n": "a"}], "x": null}})"), y);
  EXPECT_EQ(y, (ojson{{"m.lr", 0.1}, {"m.l", {1, 2}}, {"m.o.0.n", "a"}}));
  ojson u = {{"a", 1}};
  config_update_dict(u, {{"a", 2}});
  EXPECT_EQ(u["a"]["description"], "duplicate_value");

  const std::string dir = std::string(std::getenv("TPROBE_TEST_TMP") ? std::getenv("TPROBE_TEST_TMP") : "/tmp") + "/config_check_unit";
  std::filesystem::create_directories(dir);
  const std::string zip = dir + "/p.zip";
  config_pack_write(zip, {{"env", "{}"}, {"hyperparameters/hyperparameters_static.json", std::string(5000, 'x')}});
  const config_pack p = config_pack_read(zip);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p.at("hyperparameters/hyperparameters_static.json"), std::string(5000, 'x'));
  std::ofstream(dir + "/bad.zip") << "not a zip";
  EXPECT_THROW((void)config_pack_read(dir + "/bad.zip"), usage_error);
}

}  // namespace
}  // namespace tprobe
