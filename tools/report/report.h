// report.h: the report stage (tprobe-report): the results of compare, nan-analyze and gradsim
// turned into one self-contained HTML page and a few summary lines for a terminal or a CI log.
//
//   tprobe report RESULT_DIR|FILE… -o report.html [--title TEXT]
//
// What it reads (report_scan), in each folder given (and its rank*/ sub-folders), or a file given
// by name:
//   compare_result*.json        tprobe compare / compare-live's table for programs
//                               (compare_output.h); a compare_result*.csv without its .json (an
//                               older or hand-made result) is read as text, with advisor*.txt of
//                               the same suffix and timestamp
//   anomaly_analyze_*.json      tprobe nan-analyze / nan-live (docs/msprobe-compat.md §5.2)
//   similarities.csv            gradsim, msprobe's §6.2 format: "step,0,1,…", a row per
//                               parameter, a last row "summary"; the rank from a rank{N}/ folder
//   accuracy_checking_result_*.csv   the accuracy pre-check (tprobe precheck, msprobe's run_ut;
//                               docs/msprobe-compat.md §7.9), read with accuracy_checking_details_* of the
//                               same timestamp beside it, through core/precheck (read_csv_table)
//   step*/rank*/free_benchmark.csv   task free_benchmark's inconsistent API calls (tprobe-free-
//                               benchmark, msprobe 8.3.3's 无标杆比对; docs/msprobe-compat.md §8.7): a dump
//                               folder given is searched in its step*/rank*/ folders for this file
//                               only (a step folder given: its rank*/; a rank folder: itself)
//   *.vis.db                    tprobe graph's / msprobe's graph file (build_{ts}.vis.db,
//                               compare_{ts}.vis.db), read through core/graph (report_read_graph)
//   a monitor output folder     tprobe-monitor's or msprobe TrainerMon's $MONITOR_OUTPUT_DIR: a folder
//                               given that holds {time}-rank{R}-{uuid8}/ folders ({prefix}_{a}-{b}.csv)
//                               or anomaly_detected/rank*/anomaly.json (report_read_monitor)
// and, for a compare, construct.json beside the NPU dump.json the result names (the module tree).
// Anything else is ignored; finding nothing at all is a usage error.
//
// The page (report_render_html) holds everything inline (CSS, JS, SVG drawn by its own script, the
// data as one JSON block): no network, readable offline in any browser. Per compare: the verdict,
// the first failing row with the advisor's advice, counts by result, the rows as a sortable,
// filterable, paged table with msprobe's red/yellow marks (when the compare ran with
// --highlight), a chart of a chosen metric along execution order (forward and backward apart) and
// the module tree coloured by each module's worst row. Per NaN/Inf analysis: the first producer
// per rank with its module path and stack. Per gradsim rank: the summary similarity and the suspect
// parameters' curves with the suspect steps marked (msprobe's rule, below). Per pre-check: counts
// by status (forward and backward) and the APIs that are not pass, errors first, each with its
// worst details row and the metric that failed it (below), linked both ways with the rows of a
// compare on the same page whose names start with the API's name. Free benchmark: every row of
// the free_benchmark.csv files found (step, rank, API, pert_mode, stage, max_rel, dtype, shape,
// output index), by step and rank, in a filterable table. Monitor (trends): per csv type one small
// chart per tag (the step along x, a line per rank, or per rank and op), the anomalies of
// anomaly.json ringed on their points, tags with anomalies first; type, op, rank and tag filters;
// the anomalies as a table whose rows open their chart. Run info: the tprobe
// version, the inputs, dump paths and their dump.json task/level, and, when the report ran as a
// manifest stage, the sessions' configs and the stream's record and drop counters.
//
// Scale: the table travels column by column, strings interned per column (texts that repeat the
// row's name as one template), numbers with 6 significant digits (the compare's own files keep
// them in full); the page shows 100 rows at a time, so 200,000 rows load and filter without
// freezing the browser (docs/performance.md).
//
// As a manifest stage (the last one): tprobe-report reads the streams of the stages it lists as
// inputs until they end, then renders. It counts sessions (their configs), records, upstream drops
// and producers gone without end-of-stream, and adds the folders of the result files that stages
// announce downstream (compare-live's "compare_live_summary", nan-live's "first_producer") to its
// --results. A stage's stream ends after it wrote its files, so reading the stages whose results
// it shows is what orders the report after them. Example stage of a manifest:
//   {"name": "report", "stage": "report", "inputs": ["capture", "compare"],
//    "options": {"output": "output/report.html"}}
//
// Suspect steps (gradsim, docs/msprobe-compat.md §6.2 rule 7): a parameter's similarity below 0.97 at
// the first step, or lower by more than 0.03 than at the step before.
//
// Pre-check verdict: FAIL when an API's forward or backward is error or warning (as a compare's
// "Warning" row fails); SKIP does not fail. The metric that failed a details row follows msprobe's
// legacy verdict (§7.7.2) in its order: cosine ≤ 0.99, binary error rate > 0, 双百 ≤ 0.99,
// 双千 ≤ 0.999, 双万 ≤ 0.9999 (a ratio fails when it is not above 1 − its threshold); a row failed
// by none of them (shape or dtype mismatch, a NaN cosine) is explained by its Message alone.
//
// Free benchmark verdict: FAIL when a free_benchmark.csv holds a row (msprobe writes a row only for
// an API call whose perturbed output parted from the original: each is an inconsistency); a file
// with its header alone is a pass. The file is read strictly (its header exactly msprobe's nine
// columns, nine cells a row, rank and step integers, stage forward or backward, max_rel a number,
// "symbol_flipping" or empty, output_index empty or an integer): anything else is a file not read,
// named in one line, which fails the verdict too.
//
// Graph verdict: FAIL when a compare graph has a node whose precision_index lies in node_colors'
// last range (msprobe lists them from pass to error: summary [0.8, 1], md5 [0, 0]); a build graph
// passes (nothing is compared in it). The view: the module tree, opened level by level, coloured
// by precision_index, with search, node details and the first failing node per rank.
//
// Monitor verdict: FAIL when an anomaly.json holds an anomaly (an alarm msprobe's rules raised); a
// folder without one passes. A malformed csv or anomaly.json is a result not read.
//
// Exit (main): 0 when no result is negative; 1 when one is (a failing or unreadable compare row, a
// NaN/Inf producer, a suspect gradsim step, a pre-check API in error or warning, a free_benchmark
// row, a monitor anomaly, a result file that could not be read); 100 for bad
// options or nothing to report; 111 for files that cannot be read or written.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stage_io.h"
#include "stage_main.h"

namespace tprobe {

struct report_options {
  std::vector<std::string> results;  // folders or files
  std::string output = "report.html";
  std::string title = "tprobe report";
};

// One compare result, as read from its file.
struct report_compare {
  std::string file;                  // compare_result*.json or .csv
  std::string rank;                  // "rank0", or "" (the JSON's rank, else from the file name)
  std::string mode;                  // all | summary | md5 ("" if unknown: a csv)
  std::string match;                 // auto | name ("" if unknown)
  std::string npu, bench;            // dump.json paths ("" if unknown)
  std::vector<std::string> columns;
  std::vector<std::vector<nlohmann::ordered_json>> rows;  // cells: number, string, bool, null
  std::vector<char> status;          // per row: 'o' ok, 'f' failing, 'e' error, 'u' unmatched
  std::vector<char> color;           // per row: 'r' red, 'y' yellow, '.' none; empty: no highlight
  size_t failing = 0, unmatched = 0, errors = 0;
  std::optional<size_t> first_failing;  // row index (the advisor's line)
  std::string suspect, advice, advisor_line;  // the advisor's three lines ("" when there was none)
  nlohmann::ordered_json construct;  // construct.json of the NPU dump, or null
  std::string construct_file;
  nlohmann::ordered_json npu_dump_info, bench_dump_info;  // {task, level, framework} or null
};

struct report_nan_rank {
  std::string rank;  // "rank_0" as in the file
  std::string op_name;
  std::vector<std::string> construct_info, stack_info;
  nlohmann::ordered_json data_info;
};

struct report_nan {
  std::string file;
  std::vector<report_nan_rank> ranks;
};

struct report_gradsim_param {
  std::string name;
  std::vector<double> similarity;  // per step, in file order
  std::vector<size_t> suspect;     // indices into steps
};

struct report_gradsim {
  std::string file;
  std::string rank;  // "rank0", or ""
  std::vector<std::string> steps;
  std::vector<report_gradsim_param> params;  // the summary row last, name "summary"
  std::optional<size_t> first_suspect_step;  // index into steps, over every parameter
};

// One pre-check API that is not pass, with its worst details row.
struct report_precheck_api {
  std::string name;            // "Functional.linear.0" (the result file's API name)
  char forward = 'p';          // p pass, w warning, e error, s SKIP
  char backward = '-';         // the same, or '-' for no backward (msprobe's " ")
  std::string message;         // the result file's Message (written for SKIP)
  // The details row with the worst status (error > warning > SKIP > pass; the first in file order
  // among equals); worst_row "" when the API has none (dropout writes no details row).
  std::string worst_row;       // "Functional.linear.0.forward.output.0"
  char worst_status = 'p';
  std::string metric;          // "余弦相似度" (cosine), "二进制一致错误率", "双百指标", "双千指标",
                               // "双万指标", or "" (the Message says why)
  std::optional<double> value; // the metric's value
  std::string rule;            // "≤ 0.99", "> 0", …: why the value fails
  std::optional<double> cosine, max_abs_err;
  std::string bench_dtype, device_dtype, shape, row_message;
  // Compare rows whose NPU Name starts with name + ".": {compare index, rows, first row}.
  struct compare_link {
    size_t compare = 0, rows = 0, first = 0;
  };
  std::vector<compare_link> compare_rows;
  [[nodiscard]] char worst() const;  // the worse of forward and backward
};

// One accuracy_checking_result_*.csv with its details file.
struct report_precheck {
  std::string file, details_file;  // details_file "" when there is none beside it
  size_t apis = 0;
  // Counts by status, in the order pass, warning, error, SKIP; backward_none: no backward.
  size_t forward[4] = {0, 0, 0, 0}, backward[4] = {0, 0, 0, 0}, backward_none = 0;
  std::vector<report_precheck_api> failing;  // not pass: errors, then warnings, then SKIP
  [[nodiscard]] size_t errors() const { return forward[2] + backward[2]; }
  [[nodiscard]] bool negative() const;      // an API in error or warning
};

// One row of a free_benchmark.csv (msprobe's UnequalRow, core/free_benchmark.h), cells as written.
struct report_free_benchmark_row {
  int64_t rank = 0, step = 0;
  std::string pert_mode, stage, api_name;
  std::string max_rel;                // a number, "symbol_flipping", or "" (to_cpu)
  std::optional<double> max_rel_value;  // the number, when it is one
  std::string dtype, shape;           // "torch.float16", "torch.Size([4096, 4, 192])"
  std::optional<int64_t> output_index;
};

// One {dump_path}/step{N}/rank{R}/free_benchmark.csv.
struct report_free_benchmark {
  std::string file;
  std::vector<report_free_benchmark_row> rows;  // file order (arrival order)
  [[nodiscard]] bool negative() const { return !rows.empty(); }
};

// A monitor output folder (tprobe-monitor's, or msprobe's TrainerMon's; docs/stages/monitor.md):
// each csv type's tags (the csv name "vpp:name[:micro_step]") with, per rank, the steps and each
// numeric op's value (shape and dtype left out; NaN where a file has no such op), and the
// anomalies of anomaly_detected/rank*/anomaly.json.
struct report_monitor_series {
  int64_t rank = 0;
  std::vector<int64_t> steps;                // ascending
  std::vector<std::vector<double>> values;   // [op][i], ops of the type
};
struct report_monitor_tag {
  std::string name;                          // "0:fc.input:0"
  std::vector<report_monitor_series> ranks;  // in the order first seen (rank folders by rank)
};
struct report_monitor_type {
  std::string prefix;                        // actv, grad_reduced, exp_avg, …
  std::vector<std::string> ops;              // numeric ops, in the files' column order
  std::vector<report_monitor_tag> tags;      // first-seen order
};
struct report_monitor_anomaly {
  int64_t rank = 0, step = 0;
  std::string tag_name, name, prefix, op, message;  // name: tag_name before '/'; prefix: its csv type
};
struct report_monitor {
  std::string dir;
  std::vector<std::string> rank_dirs, csv_files, event_files, anomaly_files;
  std::vector<int64_t> ranks;
  std::vector<report_monitor_type> types;
  std::vector<report_monitor_anomaly> anomalies;  // by step, then rank
  [[nodiscard]] bool negative() const { return !anomalies.empty(); }
};

// A graph file of msprobe's graph visualization (`tprobe graph`, msprobe 8.3.3's `graph`):
// build_{ts}.vis.db / compare_{ts}.vis.db, read through core/graph's reader (vis_db.h). Per graph
// (graph_id NPU_{step}_{rank}, and Bench_… in a compare) its nodes in node_order (msprobe's
// post-order: children before their parent, the root DefaultModel last), so that a node's index
// is its node_order and its children, in sub_nodes order, are the nodes whose parent it is, in index
// order.
struct report_graph_view {
  std::string id, source;            // "NPU_0_1", "NPU"
  int64_t step = 0, rank = 0;
  std::vector<std::string> names;
  std::vector<int> parent;           // -1 for the root
  std::string kind;                  // per node '0' module, '1' API, '9' collection of APIs
  std::vector<std::optional<double>> precision;  // precision_index (compare, NPU side, matched)
  std::string band;                  // per node the index of its colour in node_colors ('0'…), '.' none
  int peer = -1;                     // the graph matched with it (NPU_s_r <-> Bench_s_r), or -1
  std::vector<int> link;             // per node its matched node in `peer` (matched_node_link's last name), or -1
  std::vector<std::string> input_data, output_data;  // the columns' JSON texts
  std::optional<size_t> first_failing;  // the first node in node_order whose colour is the error band
};
struct report_graph {
  std::string file;
  std::string graph_type, task;      // "build" | "compare"; "summary" | "md5" | "all" | ""
  // tb_config.node_colors as [hex, lo, hi] in msprobe's order (pass first, error last); the grey of
  // unmatched nodes (an empty range) apart. Empty for a build graph (node_colors null).
  struct color { std::string hex, description; double lo = 0, hi = 0; };
  std::vector<color> colors;
  std::string unmatched_color;       // "#C7C7C7" (the entry with an empty range), "" when none
  std::optional<size_t> error_color; // the last range in msprobe's order: its error band
  std::vector<int64_t> rank_list, step_list;
  std::vector<report_graph_view> graphs;  // in order of first appearance in tb_nodes (NPU first)
  [[nodiscard]] bool negative() const;    // a compare graph with a node in the error band
  [[nodiscard]] size_t nodes() const;
};

// What a manifest stage learnt from its input stream.
struct report_stream_info {
  nlohmann::ordered_json sessions = nlohmann::ordered_json::array();  // the session records' meta
  uint64_t records = 0, producers = 0, truncated_producers = 0, upstream_dropped = 0;
  std::vector<std::string> events;  // one line per result event seen (first divergence, producer)
};

struct report_model {
  std::string title;
  std::vector<report_compare> compares;
  std::vector<report_nan> nans;
  std::vector<report_gradsim> gradsims;
  std::vector<report_precheck> prechecks;
  std::vector<report_free_benchmark> free_benchmarks;  // by step, then rank (the folder names)
  std::vector<report_monitor> monitors;  // monitor output folders, in the order given
  std::vector<report_graph> graphs;      // *.vis.db files, in the order found
  // Per compare (same index): {row, precheck index, index in its `failing`} for each row whose
  // NPU Name starts with a listed pre-check API's name + "." (the links back), by row.
  std::vector<std::vector<std::array<size_t, 3>>> compare_precheck;
  std::vector<std::string> inputs;    // what was read
  std::vector<std::string> warnings;  // what the page leaves out and why (a module tree)
  // Result files (by name: compare_result*, anomaly_analyze_*, similarities.csv) that could not be
  // read (malformed), each "FILE: why": never a pass about what was not read, so negative().
  std::vector<std::string> unread;
  std::optional<report_stream_info> stream;
  [[nodiscard]] bool negative() const;
};

struct report_result {
  report_model model;
  std::vector<std::string> summary;  // the terminal lines (report_summary_lines)
  std::string file;                  // the page written
  uint64_t bytes = 0;
};

const stage_description &report_stage_description();

// Reads every result under options.results. Throws usage_error when a path does not exist or no
// result was found, system_error when a file cannot be read. A malformed result file is named in
// `unread` (the others are still shown), which makes the verdict FAIL: never a pass over it.
[[nodiscard]] report_model report_scan(const report_options &options);

// Readers of one file each (throw usage_error for a malformed file, system_error for I/O).
[[nodiscard]] report_compare report_read_compare_json(const std::string &path);
[[nodiscard]] report_compare report_read_compare_csv(const std::string &path);
[[nodiscard]] report_nan report_read_nan(const std::string &path);
[[nodiscard]] report_gradsim report_read_similarities(const std::string &path);
// accuracy_checking_result_{ts}.csv, with accuracy_checking_details_{ts}.csv beside it when there
// is one (read through core/precheck's read_csv_table: msprobe's BOM, CRLF and quoting).
[[nodiscard]] report_precheck report_read_precheck(const std::string &result_csv);

// A free_benchmark.csv, strictly (above): usage_error "FILE: row N: …" for a malformed one.
[[nodiscard]] report_free_benchmark report_read_free_benchmark(const std::string &path);
// "dump/step2/rank0": the file's dump folder, step and rank folders.
[[nodiscard]] std::string report_free_benchmark_label(const report_free_benchmark &f);

// A monitor output folder `dir` (its {time}-rank{R}-{uuid8}/ folders' {prefix}_{a}-{b}.csv files and
// anomaly_detected/rank*/anomaly.json): usage_error for a malformed csv or anomaly.json (naming
// it) or a folder with neither; system_error for I/O.
[[nodiscard]] report_monitor report_read_monitor(const std::string &dir);
// A .vis.db (above): usage_error "FILE: why" for a file that is not msprobe's graph database (not
// SQLite, no tb_nodes or tb_config, a node whose parent is not in its graph, …), system_error for
// a file that cannot be opened.
[[nodiscard]] report_graph report_read_graph(const std::string &path);
// The graph's part of the page's data (report_graph.cpp states its compact form: names, parent
// indices, kinds, colour bands, precision_index, links as parallel arrays; the items' texts
// interned in one string table), and its terminal line.
void report_append_graph_json(std::string &out, const report_graph &g);
[[nodiscard]] std::string report_graph_summary_line(const report_graph &g);

// Whether a folder name is a monitor rank folder's: "{%b%d_%H-%M-%S}-rank{R}-{uuid8}".
[[nodiscard]] bool report_is_monitor_rank_dir(const std::string &name);

// The pre-check metric that failed one details row (header: the details file's), by msprobe's
// legacy order (above): {metric, value, rule}, metric "" when none did.
struct report_precheck_failure {
  std::string metric;
  std::optional<double> value;
  std::string rule;
};
[[nodiscard]] report_precheck_failure report_precheck_failed_metric(const std::vector<std::string> &header,
                                                                    const std::vector<std::string> &row);

// Fills each pre-check API's compare_rows and m.compare_precheck (report_scan does, after sorting).
void report_link_precheck(report_model &m);

// "compare_live/step1/rank0": the result's folder, then the step and rank of its file name (else
// the JSON's rank), so that several compares read apart on the page and in the summary.
[[nodiscard]] std::string report_compare_label(const report_compare &c);

// "precheck_out/20250101120000": the result's folder and its timestamp.
[[nodiscard]] std::string report_precheck_label(const report_precheck &p);

// msprobe's suspect-step rule over one parameter's similarities (indices of the suspect steps).
[[nodiscard]] std::vector<size_t> report_suspect_steps(const std::vector<double> &similarity);

// The self-contained page.
[[nodiscard]] std::string report_render_html(const report_model &m);

// The terminal summary: one line per result, then the overall verdict, each starting
// "tprobe-report: ". `file` is the page's path ("" to leave it out).
[[nodiscard]] std::vector<std::string> report_summary_lines(const report_model &m, const std::string &file);

// Offline: scan, render, write options.output (0640, atomically).
[[nodiscard]] report_result report_run(const report_options &options);

// As a manifest stage: reads `io` to the end of its stream (sessions, counters, result events whose
// folders join options.results), then as report_run.
[[nodiscard]] report_result report_run_stream(stage_io &io, const report_options &options);

}  // namespace tprobe
