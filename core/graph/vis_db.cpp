// vis_db.cpp: see vis_db.h. SQLite's own C library writes the file: the format is msprobe's, and
// the viewer reads it with SQLite, so the same engine writes it (no ORM, no second format).
// What msprobe 8.3.3 does (visualization/db_utils.py), step by step, kept here:
//   node_to_db per graph: CREATE TABLE IF NOT EXISTS tb_nodes, its rows in get_sorted_nodes()
//   order; stack_to_db: CREATE TABLE IF NOT EXISTS tb_stack, the graph's distinct stacks;
//   config_to_db: tb_config, INSERT OR IGNORE id "1"; add_table_index: the six indexes;
//   change_mode 0640. Every connection sets journal_mode=WAL and synchronous=NORMAL.
// msprobe commits after each table; tprobe writes it all in one transaction so that a failure
// leaves nothing (the file is removed then).
#include "vis_db.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <memory>
#include <unordered_map>

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"
#include "pyjson.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;

// msprobe's DDL, byte for byte (create_table_sql_from_dict): SQLite keeps this text, less
// "IF NOT EXISTS" and the ";", in sqlite_master, which the viewer and our tests read.
constexpr const char *create_nodes_sql =
    "CREATE TABLE IF NOT EXISTS tb_nodes (\n"
    "    id TEXT PRIMARY KEY,\n"
    "    graph_id TEXT NOT NULL,\n"
    "    node_order INTEGER NOT NULL,\n"
    "    node_name TEXT NOT NULL,\n"
    "    node_type TEXT NOT NULL,\n"
    "    up_node TEXT,\n"
    "    sub_nodes TEXT,\n"
    "    precision_index INTEGER,\n"
    "    overflow_level TEXT,\n"
    "    micro_step_id INTEGER NOT NULL,\n"
    "    matched_node_link TEXT,\n"
    "    stack_id TEXT,\n"
    "    parallel_merge_info TEXT,\n"
    "    matched_distributed TEXT,\n"
    "    modified INTEGER NOT NULL,\n"
    "    input_data TEXT,\n"
    "    output_data TEXT,\n"
    "    data_source TEXT,\n"
    "    dump_data_dir TEXT,\n"
    "    step INTEGER NOT NULL,\n"
    "    rank INTEGER NOT NULL\n"
    ");";

constexpr const char *create_stack_sql =
    "CREATE TABLE IF NOT EXISTS tb_stack (\n"
    "    id TEXT PRIMARY KEY,\n"
    "    stack_info TEXT\n"
    ");";

constexpr const char *create_config_sql =
    "CREATE TABLE IF NOT EXISTS tb_config (\n"
    "    id TEXT PRIMARY KEY,\n"
    "    graph_type TEXT NOT NULL,\n"
    "    task TEXT,\n"
    "    tool_tip TEXT,\n"
    "    micro_steps INTEGER,\n"
    "    overflow_check INTEGER,\n"
    "    node_colors TEXT NOT NULL,\n"
    "    rank_list TEXT NOT NULL,\n"
    "    step_list TEXT NOT NULL\n"
    ");";

constexpr const char *insert_node_sql =
    "INSERT INTO tb_nodes (id, graph_id, node_order, node_name, node_type, up_node, sub_nodes, "
    "precision_index, overflow_level, micro_step_id, matched_node_link, stack_id, parallel_merge_info, "
    "matched_distributed, modified, input_data, output_data, data_source, dump_data_dir, step, rank) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

constexpr const char *insert_stack_sql = "INSERT INTO tb_stack (id, stack_info) VALUES (?, ?)";

constexpr const char *insert_config_sql =
    "INSERT OR IGNORE INTO tb_config (id, graph_type, task, tool_tip, micro_steps, overflow_check, "
    "node_colors, rank_list, step_list) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";

// add_table_index's statements (msprobe wraps them in newlines and spaces; SQLite stores the text
// from "CREATE" to the last token, so sqlite_master reads as these).
constexpr const char *create_index_sql[] = {
    "CREATE INDEX IF NOT EXISTS index1 ON tb_nodes (step, rank, data_source, up_node, node_order);",
    "CREATE INDEX IF NOT EXISTS index2 ON tb_nodes (step, rank, data_source, node_name);",
    "CREATE INDEX IF NOT EXISTS index3 ON tb_nodes (step, rank, data_source, node_order);",
    "CREATE INDEX IF NOT EXISTS index4 ON tb_nodes (step, rank, node_order);",
    "CREATE INDEX IF NOT EXISTS index5 ON tb_nodes (step, rank, micro_step_id, node_order);",
    "CREATE INDEX IF NOT EXISTS index6 ON tb_nodes (step, rank, modified, matched_node_link);",
};

struct db_closer {
  void operator()(sqlite3 *db) const { sqlite3_close_v2(db); }
};
struct stmt_finalizer {
  void operator()(sqlite3_stmt *s) const { sqlite3_finalize(s); }
};
using db_ptr = std::unique_ptr<sqlite3, db_closer>;
using stmt_ptr = std::unique_ptr<sqlite3_stmt, stmt_finalizer>;

// One connection and what failed on it, as "unable to VERB graph file PATH: SQLITE MESSAGE".
class connection {
 public:
  connection(const std::string &path, const char *verb, int flags) : path_(path), verb_(verb) {
    sqlite3 *raw = nullptr;
    int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
    db_.reset(raw);  // sqlite3_open_v2 hands back a handle (to close) even when it fails
    if (rc != SQLITE_OK) fail(raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc));
    sqlite3_extended_result_codes(raw, 1);
  }

  [[noreturn]] void fail(const std::string &message) const {
    throw system_error("unable to " + verb_ + " graph file " + path_ + ": " + message);
  }
  [[noreturn]] void fail() const { fail(sqlite3_errmsg(db_.get())); }

  void exec(const char *sql) {
    char *err = nullptr;
    if (sqlite3_exec(db_.get(), sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string message = err ? err : sqlite3_errmsg(db_.get());
      sqlite3_free(err);
      fail(message);
    }
  }

  stmt_ptr prepare(const char *sql) {
    sqlite3_stmt *raw = nullptr;
    if (sqlite3_prepare_v3(db_.get(), sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr) != SQLITE_OK) fail();
    return stmt_ptr(raw);
  }

  // Runs a bound insert to completion and readies it for the next row.
  void step_done(sqlite3_stmt *s) {
    if (sqlite3_step(s) != SQLITE_DONE) fail();
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
  }

  void close() {
    // sqlite3_close (not _v2): every statement is finalized by now, and a busy close must be an
    // error, not a deferred one (the last close checkpoints the WAL and removes -wal and -shm).
    if (sqlite3_close(db_.get()) != SQLITE_OK) fail();
    (void)db_.release();
  }

  sqlite3 *get() const { return db_.get(); }

 private:
  std::string path_;
  std::string verb_;
  db_ptr db_;
};

// Binders: texts are bound SQLITE_STATIC, so the strings must outlive the statement's step.
void bind_text(connection &c, sqlite3_stmt *s, int i, const std::string &v) {
  if (sqlite3_bind_text64(s, i, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8) != SQLITE_OK) c.fail();
}
void bind_int(connection &c, sqlite3_stmt *s, int i, int64_t v) {
  if (sqlite3_bind_int64(s, i, v) != SQLITE_OK) c.fail();
}
void bind_null(connection &c, sqlite3_stmt *s, int i) {
  if (sqlite3_bind_null(s, i) != SQLITE_OK) c.fail();
}
// msprobe binds a Python int (0, 1: the summary index's start and cap, md5's verdict) or float;
// the column's INTEGER affinity stores any integral value as INTEGER and the rest as REAL (NaN as
// NULL). Binding integral values as integers says the same thing without leaning on affinity.
void bind_index(connection &c, sqlite3_stmt *s, int i, const std::optional<double> &v) {
  if (!v) return bind_null(c, s, i);
  double d = *v;
  if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.0e18) return bind_int(c, s, i, static_cast<int64_t>(d));
  if (sqlite3_bind_double(s, i, d) != SQLITE_OK) c.fail();
}

json string_list(const std::vector<std::string> &items) {
  json out = json::array();
  for (const auto &item : items) out.push_back(item);
  return out;
}

json int_list(const std::vector<int64_t> &items) {
  json out = json::array();
  for (int64_t item : items) out.push_back(item);
  return out;
}

// msprobe's Graph.get_sorted_nodes: a post-order walk from the root with an explicit stack
// (children in order, then the node), each node once, by its first completion. Nodes the root does
// not reach are not in it (msprobe does not write them either).
std::vector<int> sorted_nodes(const graph &g) {
  std::vector<int> order;
  if (g.nodes.empty()) return order;
  order.reserve(g.nodes.size());
  std::vector<char> visited(g.nodes.size(), 0);
  std::vector<std::pair<int, bool>> stack{{0, false}};
  while (!stack.empty()) {
    auto [n, processed] = stack.back();
    stack.pop_back();
    if (visited[static_cast<size_t>(n)]) continue;
    if (processed) {
      visited[static_cast<size_t>(n)] = 1;
      order.push_back(n);
      continue;
    }
    stack.emplace_back(n, true);
    const auto &children = g.nodes[static_cast<size_t>(n)].children;
    for (auto it = children.rbegin(); it != children.rend(); ++it) {
      if (*it < 0 || static_cast<size_t>(*it) >= g.nodes.size())
        throw usage_error("graph " + g.graph_id() + ": node " + g.nodes[static_cast<size_t>(n)].name +
                          " has a child index out of range (" + std::to_string(*it) + ")");
      if (!visited[static_cast<size_t>(*it)]) stack.emplace_back(*it, false);
    }
  }
  return order;
}

// One graph's tb_nodes rows, then its tb_stack rows (node_to_db, then stack_to_db).
void write_graph(connection &c, const graph &g, sqlite3_stmt *node_stmt, sqlite3_stmt *stack_stmt) {
  const std::string graph_id = g.graph_id();
  // Distinct stack texts in order of first appearance, and their ids.
  std::vector<std::pair<std::string, std::string>> stacks;
  std::unordered_map<std::string, size_t> stack_index;

  const std::string empty;
  const std::vector<int> order = sorted_nodes(g);
  for (size_t i = 0; i < order.size(); ++i) {
    const graph_node &node = g.nodes[static_cast<size_t>(order[i])];

    std::string stack_text = pyjson_dump(string_list(node.stack), -1);
    auto [it, added] = stack_index.try_emplace(stack_text, stacks.size());
    if (added) stacks.emplace_back(stack_text, graph_id + "_" + std::to_string(stacks.size()));
    const std::string &stack_id = stacks[it->second].second;

    const std::string id = graph_id + "_" + node.name;
    const std::string node_type = std::to_string(static_cast<int>(node.kind));
    if (node.parent >= static_cast<int>(g.nodes.size()))
      throw usage_error("graph " + graph_id + ": node " + node.name + " has a parent index out of range (" +
                        std::to_string(node.parent) + ")");
    const std::string &up_node = node.parent < 0 ? empty : g.nodes[static_cast<size_t>(node.parent)].name;
    std::string sub_nodes;
    if (!node.children.empty()) {
      json names = json::array();
      for (int child : node.children) names.push_back(g.nodes[static_cast<size_t>(child)].name);
      sub_nodes = pyjson_dump(names, -1);
    }
    const std::string matched_link = pyjson_dump(string_list(node.matched_link), -1);
    const std::string matched_distributed = pyjson_dump(node.matched_distributed, -1);
    const std::string input_data = pyjson_dump(node.input_data, -1);
    const std::string output_data = pyjson_dump(node.output_data, -1);

    sqlite3_stmt *s = node_stmt;
    bind_text(c, s, 1, id);
    bind_text(c, s, 2, graph_id);
    bind_int(c, s, 3, static_cast<int64_t>(i));
    bind_text(c, s, 4, node.name);
    bind_text(c, s, 5, node_type);
    bind_text(c, s, 6, up_node);
    bind_text(c, s, 7, sub_nodes);
    bind_index(c, s, 8, node.precision_index);
    bind_null(c, s, 9);  // overflow_level: only with -oc, which tprobe's graph does not offer
    bind_int(c, s, 10, node.micro_step);
    bind_text(c, s, 11, matched_link);
    bind_text(c, s, 12, stack_id);
    bind_text(c, s, 13, empty);  // parallel_merge_info: '' unless parallel_merge
    bind_text(c, s, 14, matched_distributed);
    bind_int(c, s, 15, 0);  // modified: the viewer's, when a user edits matches
    bind_text(c, s, 16, input_data);
    bind_text(c, s, 17, output_data);
    bind_text(c, s, 18, g.source);
    if (g.dump_data_dir) {
      bind_text(c, s, 19, *g.dump_data_dir);
    } else {
      bind_null(c, s, 19);
    }
    bind_int(c, s, 20, g.step);
    bind_int(c, s, 21, g.rank);
    c.step_done(s);
  }

  for (const auto &[text, stack_id] : stacks) {
    bind_text(c, stack_stmt, 1, stack_id);
    bind_text(c, stack_stmt, 2, text);
    c.step_done(stack_stmt);
  }
}

void write_config(connection &c, const vis_db_config &config) {
  const std::string id = "1";
  const std::string tool_tip = config.tool_tip ? pyjson_dump(*config.tool_tip, -1) : std::string();
  // json.dumps(None) is "null": the build's node_colors (the column is NOT NULL).
  const std::string node_colors = config.node_colors ? pyjson_dump(*config.node_colors, -1) : std::string("null");
  const std::string rank_list = pyjson_dump(int_list(config.rank_list), -1);
  const std::string step_list = pyjson_dump(int_list(config.step_list), -1);

  c.exec(create_config_sql);
  stmt_ptr stmt = c.prepare(insert_config_sql);
  sqlite3_stmt *s = stmt.get();
  bind_text(c, s, 1, id);
  bind_text(c, s, 2, config.graph_type);
  bind_text(c, s, 3, config.task);
  if (config.tool_tip) {
    bind_text(c, s, 4, tool_tip);
  } else {
    bind_null(c, s, 4);
  }
  bind_int(c, s, 5, config.micro_steps);
  bind_int(c, s, 6, config.overflow_check ? 1 : 0);
  bind_text(c, s, 7, node_colors);
  bind_text(c, s, 8, rank_list);
  bind_text(c, s, 9, step_list);
  c.step_done(s);
}

void write_all(const std::string &path, const std::vector<const graph *> &graphs, const vis_db_config &config) {
  connection c(path, "write", SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX);
  c.exec("PRAGMA journal_mode=WAL");
  c.exec("PRAGMA synchronous=NORMAL");
  c.exec("BEGIN");
  {
    // Each table is created where msprobe creates it (before its first rows), so the pages fall in
    // msprobe's order too: tb_nodes, tb_stack, tb_config.
    c.exec(create_nodes_sql);
    stmt_ptr node_stmt = c.prepare(insert_node_sql);
    c.exec(create_stack_sql);
    stmt_ptr stack_stmt = c.prepare(insert_stack_sql);
    for (const graph *g : graphs) write_graph(c, *g, node_stmt.get(), stack_stmt.get());
  }
  write_config(c, config);
  for (const char *sql : create_index_sql) c.exec(sql);
  c.exec("COMMIT");
  c.close();
}

void remove_partial(const std::string &path) {
  for (const char *suffix : {"", "-wal", "-shm", "-journal"}) std::remove((path + suffix).c_str());
}

}  // namespace

void vis_db_write(const std::string &path, const std::vector<const graph *> &graphs, const vis_db_config &config) {
  for (const graph *g : graphs)
    if (g == nullptr) throw usage_error("vis.db " + path + ": a null graph was given");
  // Created here, exclusively: an existing file (msprobe would append to it) is refused, and
  // SQLite then opens the empty file as a new database.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) {
    int err = errno;
    if (err == EEXIST) throw usage_error("graph file " + path + " already exists; refusing to overwrite it");
    throw system_error_from_errno("create graph file", path, err);
  }
  ::close(fd);
  try {
    write_all(path, graphs, config);
    // change_mode(db, DATA_FILE_AUTHORITY): whatever the umask made of the creation mode.
    if (::chmod(path.c_str(), 0640) != 0) throw system_error_from_errno("chmod graph file", path, errno);
  } catch (...) {
    remove_partial(path);
    throw;
  }
}

std::vector<json> vis_db_read_nodes(const std::string &path) {
  // READWRITE (SQLite falls back to read-only for a write-protected file; never creates one): a
  // read-only connection to a WAL file leaves -wal and -shm behind, a read-write one removes them
  // when it closes. Only SELECT runs on it.
  connection c(path, "read", SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX);
  std::vector<json> rows;
  {
    stmt_ptr stmt = c.prepare("SELECT * FROM tb_nodes ORDER BY rowid");
    sqlite3_stmt *s = stmt.get();
    const int columns = sqlite3_column_count(s);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      json row = json::object();
      for (int i = 0; i < columns; ++i) {
        const char *name = sqlite3_column_name(s, i);
        switch (sqlite3_column_type(s, i)) {
          case SQLITE_INTEGER:
            row[name] = static_cast<int64_t>(sqlite3_column_int64(s, i));
            break;
          case SQLITE_FLOAT:
            row[name] = sqlite3_column_double(s, i);
            break;
          case SQLITE_TEXT: {
            const auto *text = reinterpret_cast<const char *>(sqlite3_column_text(s, i));
            row[name] = std::string(text, static_cast<size_t>(sqlite3_column_bytes(s, i)));
            break;
          }
          case SQLITE_BLOB: {
            const auto *data = static_cast<const char *>(sqlite3_column_blob(s, i));
            row[name] = std::string(data ? data : "", static_cast<size_t>(sqlite3_column_bytes(s, i)));
            break;
          }
          default:
            row[name] = nullptr;
        }
      }
      rows.push_back(std::move(row));
    }
    if (rc != SQLITE_DONE) c.fail();
  }
  c.close();
  return rows;
}

json vis_db_read_config(const std::string &path) {
  // As vis_db_read_nodes: a read-write connection, so a WAL file's -wal and -shm go when it closes.
  connection c(path, "read", SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX);
  json row = nullptr;
  {
    stmt_ptr stmt = c.prepare("SELECT * FROM tb_config ORDER BY rowid LIMIT 1");
    sqlite3_stmt *s = stmt.get();
    const int columns = sqlite3_column_count(s);
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
      row = json::object();
      for (int i = 0; i < columns; ++i) {
        const char *name = sqlite3_column_name(s, i);
        switch (sqlite3_column_type(s, i)) {
          case SQLITE_INTEGER: row[name] = static_cast<int64_t>(sqlite3_column_int64(s, i)); break;
          case SQLITE_FLOAT: row[name] = sqlite3_column_double(s, i); break;
          case SQLITE_TEXT:
          case SQLITE_BLOB: {
            const auto *text = static_cast<const char *>(sqlite3_column_blob(s, i));
            row[name] = std::string(text ? text : "", static_cast<size_t>(sqlite3_column_bytes(s, i)));
            break;
          }
          default: row[name] = nullptr;
        }
      }
    } else if (rc != SQLITE_DONE) {
      c.fail();
    }
  }
  c.close();
  return row;
}

}  // namespace tprobe
