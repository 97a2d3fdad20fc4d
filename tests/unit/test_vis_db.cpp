// Tests for core/graph/vis_db: msprobe 8.3.3's graph file, read back with SQLite's C API.
// The DDL texts below are copied from sqlite_master of a build_*.vis.db and a compare_*.vis.db
// that msprobe 8.3.3 itself wrote (docs/stages/graph.md); the JSON texts are what Python's
// json.dumps prints for the same values.
#include "vis_db.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <sqlite3.h>
#include <sys/stat.h>

#include "errors.h"
#include "test_support.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;

// sqlite_master (type, name, tbl_name, sql) of msprobe's file, in rowid order; "" stands for NULL.
const std::vector<std::tuple<std::string, std::string, std::string, std::string>> msprobe_master = {
    {"table", "tb_nodes", "tb_nodes",
     "CREATE TABLE tb_nodes (\n    id TEXT PRIMARY KEY,\n    graph_id TEXT NOT NULL,\n    node_order INTEGER NOT "
     "NULL,\n    node_name TEXT NOT NULL,\n    node_type TEXT NOT NULL,\n    up_node TEXT,\n    sub_nodes TEXT,\n   "
     " precision_index INTEGER,\n    overflow_level TEXT,\n    micro_step_id INTEGER NOT NULL,\n    "
     "matched_node_link TEXT,\n    stack_id TEXT,\n    parallel_merge_info TEXT,\n    matched_distributed TEXT,\n  "
     "  modified INTEGER NOT NULL,\n    input_data TEXT,\n    output_data TEXT,\n    data_source TEXT,\n    "
     "dump_data_dir TEXT,\n    step INTEGER NOT NULL,\n    rank INTEGER NOT NULL\n)"},
    {"index", "sqlite_autoindex_tb_nodes_1", "tb_nodes", ""},
    {"table", "tb_stack", "tb_stack", "CREATE TABLE tb_stack (\n    id TEXT PRIMARY KEY,\n    stack_info TEXT\n)"},
    {"index", "sqlite_autoindex_tb_stack_1", "tb_stack", ""},
    {"table", "tb_config", "tb_config",
     "CREATE TABLE tb_config (\n    id TEXT PRIMARY KEY,\n    graph_type TEXT NOT NULL,\n    task TEXT,\n    "
     "tool_tip TEXT,\n    micro_steps INTEGER,\n    overflow_check INTEGER,\n    node_colors TEXT NOT NULL,\n    "
     "rank_list TEXT NOT NULL,\n    step_list TEXT NOT NULL\n)"},
    {"index", "sqlite_autoindex_tb_config_1", "tb_config", ""},
    {"index", "index1", "tb_nodes", "CREATE INDEX index1 ON tb_nodes (step, rank, data_source, up_node, node_order)"},
    {"index", "index2", "tb_nodes", "CREATE INDEX index2 ON tb_nodes (step, rank, data_source, node_name)"},
    {"index", "index3", "tb_nodes", "CREATE INDEX index3 ON tb_nodes (step, rank, data_source, node_order)"},
    {"index", "index4", "tb_nodes", "CREATE INDEX index4 ON tb_nodes (step, rank, node_order)"},
    {"index", "index5", "tb_nodes", "CREATE INDEX index5 ON tb_nodes (step, rank, micro_step_id, node_order)"},
    {"index", "index6", "tb_nodes", "CREATE INDEX index6 ON tb_nodes (step, rank, modified, matched_node_link)"},
};

// A read-only view of a written file, each query's cells as text with their typeof().
class db_reader {
 public:
  explicit db_reader(const std::string &path) {
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK) << path;
  }
  ~db_reader() { sqlite3_close(db_); }
  db_reader(const db_reader &) = delete;
  db_reader &operator=(const db_reader &) = delete;

  struct cell {
    std::string type;  // typeof(): "null", "integer", "real", "text"
    std::string text;  // sqlite3_column_text; "" for NULL
  };
  // All rows of `sql`, each a list of cells.
  std::vector<std::vector<cell>> query(const std::string &sql) {
    std::vector<std::vector<cell>> rows;
    sqlite3_stmt *s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db_);
    if (!s) return rows;
    while (sqlite3_step(s) == SQLITE_ROW) {
      std::vector<cell> row;
      for (int i = 0; i < sqlite3_column_count(s); ++i) {
        static const char *names[] = {"", "integer", "real", "text", "blob", "null"};
        const auto *text = reinterpret_cast<const char *>(sqlite3_column_text(s, i));
        row.push_back({names[sqlite3_column_type(s, i)], text ? text : ""});
      }
      rows.push_back(std::move(row));
    }
    sqlite3_finalize(s);
    return rows;
  }
  // The single text of a one-row, one-column query.
  std::string scalar(const std::string &sql) {
    auto rows = query(sql);
    EXPECT_EQ(rows.size(), 1u) << sql;
    return rows.empty() || rows[0].empty() ? std::string() : rows[0][0].text;
  }

 private:
  sqlite3 *db_ = nullptr;
};

int add_node(graph &g, const std::string &name, graph_node_kind kind, int parent) {
  graph_node n;
  n.name = name;
  n.kind = kind;
  n.parent = parent;
  g.nodes.push_back(std::move(n));
  int index = static_cast<int>(g.nodes.size()) - 1;
  g.index[name] = index;
  if (parent >= 0) g.nodes[static_cast<size_t>(parent)].children.push_back(index);
  return index;
}

// root DefaultModel -> [Module.layer.Block.forward.0 -> [conv2d, relu], Apis_Between_Modules.0 -> [add, mul]].
// Post-order: conv2d 0, relu 1, Block 2, add 3, mul 4, Apis 5, DefaultModel 6.
graph small_graph(const std::string &source, int64_t step, int64_t rank) {
  graph g;
  g.source = source;
  g.step = step;
  g.rank = rank;
  int root = add_node(g, "DefaultModel", graph_node_kind::module, -1);
  int block = add_node(g, "Module.layer.Block.forward.0", graph_node_kind::module, root);
  int conv = add_node(g, "Functional.conv2d.0.forward", graph_node_kind::api, block);
  int relu = add_node(g, "Functional.relu.0.forward", graph_node_kind::api, block);
  int apis = add_node(g, "Apis_Between_Modules.0", graph_node_kind::api_collection, root);
  add_node(g, "Torch.add.0.forward", graph_node_kind::api, apis);
  int mul = add_node(g, "Torch.mul.0.forward", graph_node_kind::api, apis);
  auto &nodes = g.nodes;
  const std::string conv_frame = "File /x/conv.py, line 459, in _conv_forward, \n return F.conv2d(input)";
  nodes[static_cast<size_t>(conv)].stack = {conv_frame, "File /x/conv.py, line 463, in forward"};
  nodes[static_cast<size_t>(relu)].stack = {"File /x/functional.py, line 1, in relu"};
  // The module's stack equals conv2d's: one tb_stack row for both.
  nodes[static_cast<size_t>(block)].stack = nodes[static_cast<size_t>(conv)].stack;
  // Torch.add has none ("[]", shared with the collection and the root); mul's is not ASCII.
  nodes[static_cast<size_t>(mul)].stack = {"File /x/caf\xc3\xa9.py, line 2, in f"};
  nodes[static_cast<size_t>(conv)].input_data = json::parse(
      R"({"Functional.conv2d.0.forward.input.0": {"type": "torch.Tensor", "dtype": "torch.float32",
          "shape": "[2, 8]", "Max": "2.862488", "requires_grad": "True", "data_name": "-1"}})");
  nodes[static_cast<size_t>(conv)].output_data =
      json::parse(R"({"Functional.conv2d.0.forward.output.0": {"type": "torch.Tensor", "Max": "1.0", "note": "\u4e2d"}})");
  nodes[static_cast<size_t>(relu)].micro_step = 1;
  return g;
}

vis_db_config build_config() { return vis_db_config{}; }

class VisDb : public ::testing::Test {
 protected:
  test::temp_dir dir;
};

TEST_F(VisDb, BuildFileHasMsprobesSchemaWalModeAndMode0640) {
  graph g = small_graph("NPU", 0, 0);
  std::string path = dir / "build_20261206215023.vis.db";
  vis_db_write(path, {&g}, build_config());

  // The writer's close checkpointed the WAL and removed its files (checked before any reader opens).
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  // vis_db_read_nodes leaves none behind either.
  EXPECT_EQ(vis_db_read_nodes(path).size(), 7u);
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));

  db_reader db(path);
  auto master = db.query("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid");
  ASSERT_EQ(master.size(), msprobe_master.size());
  for (size_t i = 0; i < master.size(); ++i) {
    const auto &[type, name, tbl_name, sql] = msprobe_master[i];
    EXPECT_EQ(master[i][0].text, type) << i;
    EXPECT_EQ(master[i][1].text, name) << i;
    EXPECT_EQ(master[i][2].text, tbl_name) << i;
    EXPECT_EQ(master[i][3].text, sql) << name;
    EXPECT_EQ(master[i][3].type, sql.empty() ? "null" : "text") << name;
  }
  EXPECT_EQ(db.scalar("PRAGMA journal_mode"), "wal");
}

TEST_F(VisDb, BuildRowsArePostOrderWithMsprobesTypesAndTexts) {
  graph g = small_graph("NPU", 0, 0);
  std::string path = dir / "build.vis.db";
  vis_db_write(path, {&g}, build_config());
  db_reader db(path);

  // rowid order is node_order order; ids, orders, types, parents, children.
  auto rows = db.query(
      "SELECT id, graph_id, node_order, node_name, node_type, up_node, sub_nodes, stack_id, micro_step_id "
      "FROM tb_nodes ORDER BY rowid");
  const std::vector<std::vector<std::string>> expected = {
      {"NPU_0_0_Functional.conv2d.0.forward", "NPU_0_0", "0", "Functional.conv2d.0.forward", "1",
       "Module.layer.Block.forward.0", "", "NPU_0_0_0", "0"},
      {"NPU_0_0_Functional.relu.0.forward", "NPU_0_0", "1", "Functional.relu.0.forward", "1",
       "Module.layer.Block.forward.0", "", "NPU_0_0_1", "1"},
      {"NPU_0_0_Module.layer.Block.forward.0", "NPU_0_0", "2", "Module.layer.Block.forward.0", "0", "DefaultModel",
       R"(["Functional.conv2d.0.forward", "Functional.relu.0.forward"])", "NPU_0_0_0", "0"},
      {"NPU_0_0_Torch.add.0.forward", "NPU_0_0", "3", "Torch.add.0.forward", "1", "Apis_Between_Modules.0", "",
       "NPU_0_0_2", "0"},
      {"NPU_0_0_Torch.mul.0.forward", "NPU_0_0", "4", "Torch.mul.0.forward", "1", "Apis_Between_Modules.0", "",
       "NPU_0_0_3", "0"},
      {"NPU_0_0_Apis_Between_Modules.0", "NPU_0_0", "5", "Apis_Between_Modules.0", "9", "DefaultModel",
       R"(["Torch.add.0.forward", "Torch.mul.0.forward"])", "NPU_0_0_2", "0"},
      {"NPU_0_0_DefaultModel", "NPU_0_0", "6", "DefaultModel", "0", "",
       R"(["Module.layer.Block.forward.0", "Apis_Between_Modules.0"])", "NPU_0_0_2", "0"},
  };
  ASSERT_EQ(rows.size(), expected.size());
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < expected[r].size(); ++c) EXPECT_EQ(rows[r][c].text, expected[r][c]) << r << "," << c;

  // typeof() of every column, as msprobe's build file stores them (all rows alike).
  const std::vector<std::pair<std::string, std::string>> types = {
      {"id", "text"},           {"graph_id", "text"},          {"node_order", "integer"},
      {"node_name", "text"},    {"node_type", "text"},         {"up_node", "text"},
      {"sub_nodes", "text"},    {"precision_index", "null"},   {"overflow_level", "null"},
      {"micro_step_id", "integer"}, {"matched_node_link", "text"}, {"stack_id", "text"},
      {"parallel_merge_info", "text"}, {"matched_distributed", "text"}, {"modified", "integer"},
      {"input_data", "text"},   {"output_data", "text"},       {"data_source", "text"},
      {"dump_data_dir", "null"}, {"step", "integer"},          {"rank", "integer"},
  };
  for (const auto &[column, type] : types) {
    auto got = db.query("SELECT DISTINCT typeof(" + column + ") FROM tb_nodes");
    ASSERT_EQ(got.size(), 1u) << column;
    EXPECT_EQ(got[0][0].text, type) << column;
  }
  // The columns a build always fills alike.
  auto fixed = db.query(
      "SELECT DISTINCT matched_node_link, parallel_merge_info, matched_distributed, modified, data_source, step, rank "
      "FROM tb_nodes");
  ASSERT_EQ(fixed.size(), 1u);
  EXPECT_EQ(fixed[0][0].text, "[]");
  EXPECT_EQ(fixed[0][1].text, "");
  EXPECT_EQ(fixed[0][2].text, "{}");
  EXPECT_EQ(fixed[0][3].text, "0");
  EXPECT_EQ(fixed[0][4].text, "NPU");

  // json.dumps bytes: ", " / ": " separators, key order kept, non-ASCII as \uXXXX.
  EXPECT_EQ(db.scalar("SELECT input_data FROM tb_nodes WHERE node_order = 0"),
            R"({"Functional.conv2d.0.forward.input.0": {"type": "torch.Tensor", "dtype": "torch.float32", )"
            R"("shape": "[2, 8]", "Max": "2.862488", "requires_grad": "True", "data_name": "-1"}})");
  EXPECT_EQ(db.scalar("SELECT output_data FROM tb_nodes WHERE node_order = 0"),
            R"({"Functional.conv2d.0.forward.output.0": {"type": "torch.Tensor", "Max": "1.0", "note": "\u4e2d"}})");
  EXPECT_EQ(db.scalar("SELECT input_data || output_data FROM tb_nodes WHERE node_order = 6"), "{}{}");

  // tb_stack: the distinct stacks in order of first appearance, "[]" among them.
  auto stacks = db.query("SELECT id, stack_info, typeof(stack_info) FROM tb_stack ORDER BY rowid");
  ASSERT_EQ(stacks.size(), 4u);
  EXPECT_EQ(stacks[0][0].text, "NPU_0_0_0");
  EXPECT_EQ(stacks[0][1].text,
            R"x(["File /x/conv.py, line 459, in _conv_forward, \n return F.conv2d(input)", )x"
            R"("File /x/conv.py, line 463, in forward"])");
  EXPECT_EQ(stacks[1][0].text, "NPU_0_0_1");
  EXPECT_EQ(stacks[1][1].text, R"(["File /x/functional.py, line 1, in relu"])");
  EXPECT_EQ(stacks[2][0].text, "NPU_0_0_2");
  EXPECT_EQ(stacks[2][1].text, "[]");
  EXPECT_EQ(stacks[3][0].text, "NPU_0_0_3");
  EXPECT_EQ(stacks[3][1].text, R"(["File /x/caf\u00e9.py, line 2, in f"])");
  for (const auto &row : stacks) EXPECT_EQ(row[2].text, "text");

  // tb_config of a build: task '', tool_tip NULL, node_colors the text null.
  auto config = db.query(
      "SELECT id, typeof(id), graph_type, task, typeof(task), typeof(tool_tip), micro_steps, typeof(micro_steps), "
      "overflow_check, typeof(overflow_check), node_colors, typeof(node_colors), rank_list, step_list FROM tb_config");
  ASSERT_EQ(config.size(), 1u);
  const std::vector<std::string> expected_config = {"1", "text", "build", "", "text", "null", "1",
                                                    "integer", "0", "integer", "null", "text", "[0]", "[0]"};
  for (size_t c = 0; c < expected_config.size(); ++c) EXPECT_EQ(config[0][c].text, expected_config[c]) << c;
}

TEST_F(VisDb, CompareWritesNpuThenBenchWithIndexesAndLinks) {
  graph npu = small_graph("NPU", 1, 3);
  graph bench = small_graph("Bench", 1, 3);
  bench.dump_data_dir = "/data/bench/dump_tensor_data";
  auto at = [](graph &g, const std::string &name) -> graph_node & { return g.nodes[static_cast<size_t>(g.index.at(name))]; };
  at(npu, "Functional.conv2d.0.forward").precision_index = 0.0;                // integral: INTEGER 0
  at(npu, "Functional.relu.0.forward").precision_index = 0.341423723299473;     // REAL
  at(npu, "Module.layer.Block.forward.0").precision_index = 1.0;                // integral: INTEGER 1
  at(npu, "Apis_Between_Modules.0").precision_index = 2.11248521008866616552e-06;  // REAL
  // Torch.add, Torch.mul, DefaultModel: none (NULL); every Bench node too.
  at(npu, "Functional.conv2d.0.forward").matched_link = {"DefaultModel", "Module.layer.Block.forward.0",
                                                         "Functional.conv2d.0.forward"};
  at(bench, "Functional.conv2d.0.forward").matched_link = at(npu, "Functional.conv2d.0.forward").matched_link;
  at(npu, "DefaultModel").matched_link = {"DefaultModel"};
  at(npu, "Torch.add.0.forward").matched_distributed =
      json::parse(R"({"communications_type": "send", "nodes_info": {"1": ["0", "Torch.add.0.forward"]}})");

  vis_db_config config;
  config.graph_type = "compare";
  config.task = "summary";
  config.tool_tip = json::parse("{\"Max diff\": \"NPU\xe4\xb8\x8e\xe6\xa0\x87\xe6\x9d\x86\"}");
  config.node_colors = json::parse(R"({"#FFFCF3": {"value": [0, 0.2], "description": "x"}, "#C7C7C7": {"value": [], "description": "y"}})");
  config.rank_list = {0, 3};
  config.step_list = {0, 1};
  std::string path = dir / "compare.vis.db";
  vis_db_write(path, {&npu, &bench}, config);
  db_reader db(path);

  auto rows = db.query(
      "SELECT graph_id, node_order, node_name, precision_index, typeof(precision_index), matched_node_link, "
      "dump_data_dir, typeof(dump_data_dir), data_source, step, rank, stack_id FROM tb_nodes ORDER BY rowid");
  ASSERT_EQ(rows.size(), 14u);
  for (size_t r = 0; r < rows.size(); ++r) {
    bool is_npu = r < 7;
    EXPECT_EQ(rows[r][0].text, is_npu ? "NPU_1_3" : "Bench_1_3") << r;
    EXPECT_EQ(rows[r][1].text, std::to_string(r % 7)) << r;  // node_order restarts per graph
    EXPECT_EQ(rows[r][8].text, is_npu ? "NPU" : "Bench") << r;
    EXPECT_EQ(rows[r][9].text, "1");
    EXPECT_EQ(rows[r][10].text, "3");
    EXPECT_EQ(rows[r][7].text, is_npu ? "null" : "text") << r;
    if (!is_npu) {
      EXPECT_EQ(rows[r][6].text, "/data/bench/dump_tensor_data");
      EXPECT_EQ(rows[r][4].text, "null") << "bench rows have no index";
    }
  }
  EXPECT_EQ(rows[0][4].text, "integer");
  EXPECT_EQ(rows[0][3].text, "0");
  EXPECT_EQ(rows[1][4].text, "real");
  EXPECT_EQ(rows[1][3].text, "0.341423723299473");
  EXPECT_EQ(rows[2][4].text, "integer");
  EXPECT_EQ(rows[2][3].text, "1");
  EXPECT_EQ(rows[3][4].text, "null");
  EXPECT_EQ(rows[4][4].text, "null");
  EXPECT_EQ(rows[5][4].text, "real");
  EXPECT_EQ(rows[6][4].text, "null");  // the root
  EXPECT_EQ(rows[0][5].text,
            R"(["DefaultModel", "Module.layer.Block.forward.0", "Functional.conv2d.0.forward"])");
  EXPECT_EQ(rows[7][5].text, rows[0][5].text);
  EXPECT_EQ(rows[1][5].text, "[]");
  EXPECT_EQ(rows[6][5].text, R"(["DefaultModel"])");
  EXPECT_EQ(rows[7][11].text, "Bench_1_3_0");
  EXPECT_EQ(db.scalar("SELECT matched_distributed FROM tb_nodes WHERE id = 'NPU_1_3_Torch.add.0.forward'"),
            R"({"communications_type": "send", "nodes_info": {"1": ["0", "Torch.add.0.forward"]}})");

  auto stack_ids = db.query("SELECT id FROM tb_stack ORDER BY rowid");
  ASSERT_EQ(stack_ids.size(), 8u);
  EXPECT_EQ(stack_ids[3][0].text, "NPU_1_3_3");
  EXPECT_EQ(stack_ids[4][0].text, "Bench_1_3_0");

  auto cfg = db.query("SELECT graph_type, task, tool_tip, node_colors, rank_list, step_list FROM tb_config");
  ASSERT_EQ(cfg.size(), 1u);
  EXPECT_EQ(cfg[0][0].text, "compare");
  EXPECT_EQ(cfg[0][1].text, "summary");
  EXPECT_EQ(cfg[0][2].text, R"({"Max diff": "NPU\u4e0e\u6807\u6746"})");
  EXPECT_EQ(cfg[0][3].text,
            R"({"#FFFCF3": {"value": [0, 0.2], "description": "x"}, "#C7C7C7": {"value": [], "description": "y"}})");
  EXPECT_EQ(cfg[0][4].text, "[0, 3]");
  EXPECT_EQ(cfg[0][5].text, "[0, 1]");
  // The indexes exist in a compare file too.
  EXPECT_EQ(db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'index%'"), "6");
}

TEST_F(VisDb, ReadNodesGivesColumnsByNameInRowidOrder) {
  graph g = small_graph("NPU", 0, 2);
  g.nodes[static_cast<size_t>(g.index.at("Functional.relu.0.forward"))].precision_index = 0.25;
  g.nodes[static_cast<size_t>(g.index.at("Functional.conv2d.0.forward"))].precision_index = 1.0;
  std::string path = dir / "read.vis.db";
  vis_db_write(path, {&g}, build_config());

  auto rows = vis_db_read_nodes(path);
  ASSERT_EQ(rows.size(), 7u);
  std::vector<std::string> keys;
  for (const auto &[key, value] : rows[0].items()) keys.push_back(key);
  const std::vector<std::string> columns = {
      "id", "graph_id", "node_order", "node_name", "node_type", "up_node", "sub_nodes", "precision_index",
      "overflow_level", "micro_step_id", "matched_node_link", "stack_id", "parallel_merge_info",
      "matched_distributed", "modified", "input_data", "output_data", "data_source", "dump_data_dir", "step", "rank"};
  EXPECT_EQ(keys, columns);
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i]["node_order"], json(static_cast<int64_t>(i)));
  EXPECT_TRUE(rows[0]["precision_index"].is_number_integer());
  EXPECT_EQ(rows[0]["precision_index"], 1);
  EXPECT_TRUE(rows[1]["precision_index"].is_number_float());
  EXPECT_EQ(rows[1]["precision_index"].get<double>(), 0.25);
  EXPECT_TRUE(rows[6]["precision_index"].is_null());
  EXPECT_TRUE(rows[6]["dump_data_dir"].is_null());
  EXPECT_EQ(rows[6]["up_node"], "");
  EXPECT_EQ(rows[6]["node_type"], "0");
  EXPECT_EQ(rows[6]["rank"], 2);
  EXPECT_EQ(rows[0]["sub_nodes"], "");

  EXPECT_THROW((void)vis_db_read_nodes(dir / "missing.vis.db"), system_error);
}

TEST_F(VisDb, NodesTheRootDoesNotReachAreNotWritten) {
  // msprobe writes get_sorted_nodes(), the walk from the root, only.
  graph g = small_graph("NPU", 0, 0);
  add_node(g, "Module.orphan.Linear.forward.0", graph_node_kind::module, -1);
  std::string path = dir / "orphan.vis.db";
  vis_db_write(path, {&g}, build_config());
  auto rows = vis_db_read_nodes(path);
  ASSERT_EQ(rows.size(), 7u);
  EXPECT_EQ(rows.back()["node_name"], "DefaultModel");
}

TEST_F(VisDb, ExistingPathIsRefusedAndLeftAlone) {
  std::string path = dir / "taken.vis.db";
  test::write_file(path, "not mine");
  try {
    vis_db_write(path, {}, build_config());
    FAIL() << "no usage_error";
  } catch (const usage_error &e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(test::read_file(path), "not mine");
}

TEST_F(VisDb, SqliteFailureRemovesThePartialFile) {
  // Two nodes of one name: tb_nodes.id is the primary key, the second insert fails.
  graph g = small_graph("NPU", 0, 0);
  add_node(g, "Torch.add.0.forward", graph_node_kind::api, 0);
  std::string path = dir / "dup.vis.db";
  try {
    vis_db_write(path, {&g}, build_config());
    FAIL() << "no system_error";
  } catch (const system_error &e) {
    std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("UNIQUE constraint failed: tb_nodes.id"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));

  // A folder that does not exist: a system error naming the file.
  std::string nowhere = dir / "no/such/dir/x.vis.db";
  EXPECT_THROW(vis_db_write(nowhere, {&g}, build_config()), system_error);
}

TEST_F(VisDb, EmptyGraphListStillWritesSchemaAndConfig) {
  std::string path = dir / "empty.vis.db";
  vis_db_write(path, {}, build_config());
  db_reader db(path);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM tb_nodes"), "0");
  EXPECT_EQ(db.scalar("SELECT count(*) FROM tb_stack"), "0");
  EXPECT_EQ(db.scalar("SELECT graph_type FROM tb_config"), "build");
  EXPECT_EQ(db.scalar("SELECT count(*) FROM sqlite_master"), std::to_string(msprobe_master.size()));
}

}  // namespace
}  // namespace tprobe
