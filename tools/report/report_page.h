// report_page.h: the HTML page of the report stage, with its CSS and script inline: written as
// tools/report/page/report.html, report.css and report.js (plain ES2017 and SVG, no library: the
// page must open offline in any current browser, and a reader can audit what it runs), and made
// one string at configure time (cmake/embed_page.cmake).
//
// The template holds two markers that report_render_html() replaces: @@TITLE@@ (HTML-escaped text)
// and @@DATA@@ (the JSON document of report.cpp, with "</" written "<\/"). The script reads that
// document and builds the page in the browser: verdicts, the paged table, SVG charts and the module
// tree. Nothing is fetched: the page works from a file:// URL with no network.
//
// Hooks the browser test and the benchmark use (tests/python/test_report_browser.py,
// bench/bench_report.py): body[data-ready="1"] and window.tprobeReadyAt (performance.now() when the
// first render finished), #verdict, section.cmp with .verdict-box, .goto-first, .name-filter,
// .result-filter, table.rows th[data-col], tr[data-row] (tr.first-failing), .page-info,
// .tree details.node[data-node] and svg.chart; section.precheck with .verdict-box,
// table.pc-counts tr[data-dir] td[data-status], table.pc-apis tr[data-api][data-worst] (id pc-K-J),
// button.pc-goto[data-compare] (its compare rows), a.pc-link (a compare row's way back), .pc-badge;
// section.free-benchmark (#fb) with .verdict-box, input.fb-filter, table.fb-rows th[data-col]
// (sorts) and tr[data-api][data-step][data-rank], button.fb-more; section.graph (#graph-K, one per
// .vis.db) with .verdict-box, li.graph-rank-line[data-graph][data-rank][data-step][data-first] (a
// link), select.graph-select, input.graph-search (Enter: next match), .graph-count,
// button.graph-first, button.graph-reset, .graph-view > .graph-canvas (zoom/pan by CSS transform)
// holding div.gnode[data-node][data-depth] > .grow (.match, .selected, data-band) with .gtoggle and
// .gname, then .gkids (made on first open, 200 children at a time, button.graph-more), and
// aside.graph-panel[data-node] with h3.gp-name, .gp-match a, table.gp-items[data-side] tr[data-key]
// td[data-field].
#pragma once

#include <string_view>

namespace tprobe {

std::string_view report_page_template();

}  // namespace tprobe
