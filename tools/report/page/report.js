'use strict';
(function () {
const D = JSON.parse(document.getElementById('tprobe-data').textContent);
const SVGNS = 'http://www.w3.org/2000/svg';
const PAGE = 100;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  if (attrs) for (const k in attrs) {
    const v = attrs[k];
    if (v == null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}
function sv(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text != null) e.textContent = text;
  return e;
}
function fmt(v) {
  if (v == null) return '';
  if (typeof v !== 'number') return String(v);
  if (Number.isNaN(v)) return 'nan';
  if (!Number.isFinite(v)) return v > 0 ? 'inf' : '-inf';
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a < 1e-4 || a >= 1e15) return v.toExponential(6).replace(/\.?0+e/, 'e');
  return String(+v.toPrecision(8));
}
// A cell as a number for sorting and charts: numbers, and texts such as "12.5%" or "0.3".
const NUMTEXT = /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?%?$/i;
function num(v) {
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && NUMTEXT.test(v)) return parseFloat(v);
  return NaN;
}
const STATUS_NAME = { f: 'failing', e: 'not compared', u: 'unmatched', o: 'passing' };
function plural(n, one, many) { return n + ' ' + (n === 1 ? one : (many || one + 's')); }
// Sections call each other through these: a pre-check API shows its compare rows, a compare row
// shows its pre-check API.
const COMPARE_UI = [], PRECHECK_UI = [];
function reEscape(t) { return t.replace(/[.*+?^${}()|[\]\\\/]/g, '\\$&'); }

function decode(c) {
  const cols = [];
  for (const col of c.columns) {
    const v = col.v, dict = col.dict, n = v.length, out = new Array(n);
    for (let i = 0; i < n; i++) {
      const x = v[i];
      if (typeof x !== 'string') { out[i] = x; continue; }
      if (x === '=') out[i] = cols[0][i];
      else if (x === 'N') out[i] = NaN;
      else if (x === 'I') out[i] = Infinity;
      else if (x === '-I') out[i] = -Infinity;
      else if (x[0] === '~') out[i] = dict[+x.slice(1)].split('\x01').join(cols[0][i]);
      else out[i] = dict[+x];
    }
    cols.push(out);
  }
  return cols;
}

// ---------------------------------------------------------------- compare
function compareVerdict(c) { return c.failing ? 'fail' : c.errors ? 'error' : 'pass'; }
function compareLabel(c) { return c.label; }  // report_compare_label(): folder/step/rank

function renderCompare(c, ci, main) {
  const cols = decode(c);
  const names = c.columns.map(x => x.name);
  const n = c.n;
  const status = c.status, color = c.color || '';
  const sec = el('section', { class: 'cmp', id: 'cmp-' + ci, 'data-index': ci });
  main.append(sec);
  const label = 'Compare ' + compareLabel(c);
  const dumps = c.npu ? ' NPU ' + c.npu + ' against bench ' + c.bench : '';
  sec.append(el('h2', { text: label + (c.mode ? ' — mode ' + c.mode : '') + (c.match ? ', match ' + c.match : '') }));
  const v = compareVerdict(c);
  const vtext = v === 'fail'
    ? 'FAIL: ' + c.failing + ' of ' + plural(n, 'row') + ' fail msprobe\'s accuracy criteria'
    : v === 'error' ? 'NOT COMPARED: ' + plural(c.errors, 'row') + ' could not be compared (tensor files not read)'
    : 'PASS: all ' + plural(n, 'row') + ' meet msprobe\'s accuracy criteria';
  sec.append(el('div', { class: 'verdict-box ' + v, text: vtext + (c.unmatched ? '; ' + c.unmatched + ' unmatched' : '') }));
  sec.append(el('div', { class: 'help', text: 'From ' + c.file + '.' + dumps }));

  // Row severities: the tree's colours and the chart's marks.
  const sev = new Int8Array(n);
  for (let i = 0; i < n; i++) {
    const s = status[i], h = color[i];
    sev[i] = (s === 'f' || h === 'r') ? 4 : h === 'y' ? 3 : s === 'e' ? 2 : s === 'u' ? 1 : 0;
  }

  // Rows of a pre-check API that is not pass (report_link_precheck): row → [precheck, api].
  const pcRow = new Map();
  for (const [i, k, j] of (c.precheck || [])) pcRow.set(i, [k, j]);
  const state = { name: '', result: 'all', entries: null, entryLabel: '', sortCol: -1, sortDir: 1, page: 0, view: null, flash: -1 };
  const first = c.first_failing;
  if (first != null && first < n) {
    const box = el('div', { class: 'first' });
    const what = status[first] === 'e' ? 'First row not compared' : 'First failing row';
    box.append(el('div', null, el('b', { text: what + ': ' }), 'line ' + first + ' ', el('code', { class: 'first-name', text: cols[0][first] }),
      el('button', { class: 'goto-first linkish', text: 'show it in the table', onclick: () => gotoRow(first) })));
    if (c.advice) box.append(el('div', { class: 'help', text: 'Advisor (' + (c.suspect || '') + '):' }), el('pre', { class: 'advice', text: c.advice }));
    sec.append(box);
  } else if (c.advice) {
    sec.append(el('div', { class: 'help', text: 'Advisor: ' + c.advice }));
  }

  // Counts by result, each a filter.
  const counts = el('div', { class: 'counts' });
  const byStatus = { f: 0, e: 0, u: 0, o: 0 }, byColor = { r: 0, y: 0 };
  for (let i = 0; i < n; i++) { byStatus[status[i]]++; if (color[i] in byColor) byColor[color[i]]++; }
  const resultCol = names.indexOf('Accuracy Reached or Not') >= 0 ? names.indexOf('Accuracy Reached or Not') : names.indexOf('Result');
  const byValue = new Map();
  if (resultCol >= 0) for (let i = 0; i < n; i++) { const k = String(cols[resultCol][i] == null ? '' : cols[resultCol][i]); byValue.set(k, (byValue.get(k) || 0) + 1); }
  for (const s of ['f', 'e', 'u', 'o']) if (byStatus[s]) counts.append(el('span', { class: 'badge ' + s, text: STATUS_NAME[s] + ': ' + byStatus[s], onclick: () => setResult('s:' + s) }));
  if (byColor.r) counts.append(el('span', { class: 'badge r', text: 'red: ' + byColor.r, onclick: () => setResult('c:r') }));
  if (byColor.y) counts.append(el('span', { class: 'badge y', text: 'yellow: ' + byColor.y, onclick: () => setResult('c:y') }));
  if (resultCol >= 0) for (const [k, cnt] of byValue) counts.append(el('span', { class: 'badge', text: names[resultCol] + ' = ' + (k === '' ? '(empty)' : k) + ': ' + cnt, onclick: () => setResult('v:' + k) }));
  if (pcRow.size) counts.append(el('span', { class: 'badge f pc-badge', text: 'rows of pre-check APIs not pass: ' + pcRow.size, onclick: () => setResult('p:') }));
  sec.append(counts);
  if (!color) sec.append(el('div', { class: 'help', text: 'No red/yellow marks: run tprobe compare with --highlight for msprobe\'s highlighting.' }));

  // ---- chart
  sec.append(el('h3', { text: 'A metric along execution order' }));
  const METRICS = ['Cosine', 'MaxAbsErr', 'MaxRelativeErr', 'EucDist', 'One Thousandth Err Ratio', 'Five Thousandths Err Ratio',
                   'Max diff', 'Min diff', 'Mean diff', 'L2norm diff', 'MinRelativeErr', 'MeanRelativeErr', 'NormRelativeErr'];
  const metrics = METRICS.filter(m => { const j = names.indexOf(m); if (j < 0) return false; for (let i = 0; i < n; i++) if (Number.isFinite(num(cols[j][i]))) return true; return false; });
  const chartBox = el('div', { class: 'charts' });
  if (metrics.length) {
    const sel = el('select', { class: 'metric' });
    for (const m of metrics) sel.append(el('option', { value: m, text: /diff$/.test(m) ? '|' + m + '|' : m }));
    const log = el('input', { type: 'checkbox', class: 'logscale' });
    sel.value = metrics[0];
    const autoLog = () => { log.checked = !/Cosine|Ratio/.test(sel.value); };
    autoLog();
    sel.addEventListener('change', () => { autoLog(); drawCharts(); });
    log.addEventListener('change', drawCharts);
    sec.append(el('div', { class: 'controls' }, 'metric ', sel, el('label', null, log, ' log scale'),
      el('span', { class: 'help', text: 'Red ticks: failing rows; the red line: the first failing row. Click a point to see its row.' })));
    sec.append(chartBox);
    function drawCharts() {
      chartBox.textContent = '';
      const j = names.indexOf(sel.value), abs = /diff$/.test(sel.value);
      for (const [dirName, dirs] of [['forward', 'f?'], ['backward (and parameter gradients)', 'bg']]) {
        const idx = [];
        for (let i = 0; i < n; i++) if (dirs.indexOf(c.entry_dir[c.row_entry[i]]) >= 0) idx.push(i);
        if (!idx.length) continue;
        chartBox.append(el('div', { class: 'help', text: dirName + ': ' + plural(idx.length, 'row') }));
        chartBox.append(lineChart(idx, i => { const x = num(cols[j][i]); return abs ? Math.abs(x) : x; }, sel.value, log.checked));
      }
    }
    drawCharts();
  } else {
    sec.append(el('div', { class: 'help', text: 'No numeric metric in this compare (mode ' + (c.mode || '?') + '): see the table.' }));
  }

  function lineChart(idx, value, metric, logScale) {
    const W = 1000, H = 200, L = 64, R = 10, T = 10, B = 26, pw = W - L - R, ph = H - T - B, m = idx.length;
    const svg = sv('svg', { class: 'chart', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'data-metric': metric });
    const buckets = Math.min(pw, m);
    const lo = new Float64Array(buckets).fill(Infinity), hi = new Float64Array(buckets).fill(-Infinity), bad = new Int8Array(buckets);
    let ymin = Infinity, ymax = -Infinity, firstX = -1;
    for (let k = 0; k < m; k++) {
      const b = Math.min(buckets - 1, Math.floor(k * buckets / m));
      let y = value(idx[k]);
      if (sev[idx[k]] > bad[b]) bad[b] = sev[idx[k]];
      if (idx[k] === first) firstX = b;
      if (!Number.isFinite(y)) continue;
      if (logScale) { if (y <= 0) continue; y = Math.log10(y); }
      if (y < lo[b]) lo[b] = y; if (y > hi[b]) hi[b] = y;
      if (y < ymin) ymin = y; if (y > ymax) ymax = y;
    }
    if (!Number.isFinite(ymin)) { svg.append(sv('text', { x: L, y: H / 2 }, 'no finite values' + (logScale ? ' above 0 (try without log scale)' : ''))); return svg; }
    if (ymax === ymin) { ymax += 0.5; ymin -= 0.5; }
    const X = b => L + (b + 0.5) * pw / buckets, Y = y => T + ph - (y - ymin) / (ymax - ymin) * ph;
    const short = v => { const a = Math.abs(v); return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(2) : String(+v.toPrecision(4)); };
    const lab = y => short(logScale ? Math.pow(10, y) : y);
    for (const y of [ymin, (ymin + ymax) / 2, ymax]) {
      svg.append(sv('line', { x1: L, x2: W - R, y1: Y(y), y2: Y(y), stroke: '#eee' }));
      svg.append(sv('text', { x: L - 4, y: Y(y) + 4, 'text-anchor': 'end' }, lab(y)));
    }
    const thresholds = { Cosine: 0.99, MaxAbsErr: 0.001 };
    if (metric in thresholds) {
      const t = logScale ? Math.log10(thresholds[metric]) : thresholds[metric];
      if (t >= ymin && t <= ymax) {
        svg.append(sv('line', { x1: L, x2: W - R, y1: Y(t), y2: Y(t), stroke: '#e08', 'stroke-dasharray': '4 3' }));
        svg.append(sv('text', { x: W - R - 2, y: Y(t) - 3, 'text-anchor': 'end' }, 'msprobe threshold ' + thresholds[metric]));
      }
    }
    let band = '', line = '', started = false;
    const worstLow = metric === 'Cosine' || /Ratio/.test(metric);
    for (let b = 0; b < buckets; b++) {
      if (lo[b] > hi[b]) { started = false; continue; }
      band += 'M' + X(b).toFixed(1) + ' ' + Y(lo[b]).toFixed(1) + 'V' + Y(hi[b]).toFixed(1);
      line += (started ? 'L' : 'M') + X(b).toFixed(1) + ' ' + Y(worstLow ? lo[b] : hi[b]).toFixed(1);
      started = true;
    }
    svg.append(sv('path', { d: band, stroke: '#9ecae1', 'stroke-width': Math.max(1, pw / buckets), fill: 'none' }));
    svg.append(sv('path', { d: line, stroke: '#1f77b4', 'stroke-width': 1.2, fill: 'none', class: 'series' }));
    let ticks = '', yticks = '';
    for (let b = 0; b < buckets; b++) {
      if (bad[b] >= 4) ticks += 'M' + X(b).toFixed(1) + ' ' + (T + ph + 2) + 'v7';
      else if (bad[b] === 3) yticks += 'M' + X(b).toFixed(1) + ' ' + (T + ph + 2) + 'v7';
    }
    if (yticks) svg.append(sv('path', { d: yticks, stroke: '#e5c000', 'stroke-width': 2 }));
    if (ticks) svg.append(sv('path', { d: ticks, stroke: '#d62728', 'stroke-width': 2, class: 'fail-ticks' }));
    if (firstX >= 0) {
      svg.append(sv('line', { x1: X(firstX), x2: X(firstX), y1: T, y2: T + ph, stroke: '#d62728', 'stroke-width': 1.5, class: 'first-line' }));
      svg.append(sv('text', { x: X(firstX) + 4, y: T + 12, fill: '#d62728' }, 'first failing'));
    }
    svg.append(sv('text', { x: L, y: H - 4 }, 'row ' + idx[0]));
    svg.append(sv('text', { x: W - R, y: H - 4, 'text-anchor': 'end' }, 'row ' + idx[m - 1] + ' (execution order →)'));
    const tip = sv('title', {}, '');
    svg.append(tip);
    const at = ev => {
      const r = svg.getBoundingClientRect();
      const x = (ev.clientX - r.left) * W / r.width;
      const k = Math.max(0, Math.min(m - 1, Math.floor((x - L) / pw * m)));
      return idx[k];
    };
    svg.addEventListener('mousemove', ev => { const i = at(ev); tip.textContent = 'row ' + i + ': ' + cols[0][i] + ' = ' + fmt(value(i)); });
    svg.addEventListener('click', ev => gotoRow(at(ev)));
    return svg;
  }

  // ---- table
  sec.append(el('h3', { text: 'Rows' }));
  const nameIn = el('input', { type: 'search', class: 'name-filter', placeholder: 'filter by name (substring, or /regex/)' });
  const resultSel = el('select', { class: 'result-filter' });
  resultSel.append(el('option', { value: 'all', text: 'all results' }));
  for (const s of ['f', 'e', 'u', 'o']) if (byStatus[s]) resultSel.append(el('option', { value: 's:' + s, text: STATUS_NAME[s] }));
  if (byColor.r) resultSel.append(el('option', { value: 'c:r', text: 'red (highlight)' }));
  if (byColor.y) resultSel.append(el('option', { value: 'c:y', text: 'yellow (highlight)' }));
  if (resultCol >= 0) for (const k of byValue.keys()) resultSel.append(el('option', { value: 'v:' + k, text: names[resultCol] + ' = ' + (k === '' ? '(empty)' : k) }));
  if (pcRow.size) resultSel.append(el('option', { value: 'p:', text: 'rows of pre-check APIs not pass' }));
  const chip = el('span', { class: 'module-filter' });
  const info = el('span', { class: 'page-info' });
  const prev = el('button', { class: 'prev', text: '‹ prev' }), next = el('button', { class: 'next', text: 'next ›' });
  sec.append(el('div', { class: 'controls' }, nameIn, resultSel, chip, prev, next, info));
  const thead = el('thead'), tbody = el('tbody');
  const table = el('table', { class: 'rows' }, thead, tbody);
  sec.append(el('div', { class: 'table-wrap' }, table));
  const hr = el('tr');
  hr.append(el('th', { 'data-col': -1, text: '#' }));
  names.forEach((name, j) => hr.append(el('th', { 'data-col': j, text: name })));
  thead.append(hr);
  thead.addEventListener('click', ev => {
    const th = ev.target.closest('th'); if (!th) return;
    const j = +th.getAttribute('data-col');
    if (state.sortCol === j) state.sortDir = -state.sortDir; else { state.sortCol = j; state.sortDir = 1; }
    for (const t of hr.children) t.className = '';
    th.className = state.sortDir > 0 ? 'sorted-asc' : 'sorted-desc';
    refilter(false);
  });
  let timer = 0;
  nameIn.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(() => refilter(true), 120); });
  resultSel.addEventListener('change', () => refilter(true));
  prev.addEventListener('click', () => { if (state.page > 0) { state.page--; renderPage(); } });
  next.addEventListener('click', () => { if ((state.page + 1) * PAGE < state.view.length) { state.page++; renderPage(); } });

  function setResult(v) { resultSel.value = v; refilter(true); table.scrollIntoView({ block: 'nearest' }); }
  let lowerNames = null;
  const sortKeys = new Map();
  function keysOf(j) {
    if (sortKeys.has(j)) return sortKeys.get(j);
    const col = j < 0 ? null : cols[j], nk = new Float64Array(n), sk = new Array(n);
    for (let i = 0; i < n; i++) {
      const v = j < 0 ? i : col[i];
      const x = num(v);
      nk[i] = x; sk[i] = Number.isNaN(x) ? (v == null ? null : String(v)) : null;
    }
    const k = { nk, sk }; sortKeys.set(j, k); return k;
  }
  function refilter(resetPage) {
    const q = state.name = nameIn.value.trim();
    state.result = resultSel.value;
    let re = null;
    if (q.length > 2 && q[0] === '/' && q[q.length - 1] === '/') { try { re = new RegExp(q.slice(1, -1), 'i'); } catch (e) { re = null; } }
    const ql = q.toLowerCase();
    if (q && !re && !lowerNames) lowerNames = cols[0].map(s => String(s == null ? '' : s).toLowerCase());
    const r = state.result, kind = r.slice(0, 2), want = r.slice(2);
    const entries = state.entries;
    const out = [];
    for (let i = 0; i < n; i++) {
      if (entries && !entries.has(c.row_entry[i])) continue;
      if (r !== 'all') {
        if (kind === 's:' && status[i] !== want) continue;
        if (kind === 'c:' && color[i] !== want) continue;
        if (kind === 'v:' && String(cols[resultCol][i] == null ? '' : cols[resultCol][i]) !== want) continue;
        if (kind === 'p:' && !pcRow.has(i)) continue;
      }
      if (q) { if (re ? !re.test(String(cols[0][i])) : lowerNames[i].indexOf(ql) < 0) continue; }
      out.push(i);
    }
    let view = Uint32Array.from(out);
    if (state.sortCol !== -1 || state.sortDir !== 1) {
      const { nk, sk } = keysOf(state.sortCol), d = state.sortDir;
      view.sort((a, b) => {
        const x = nk[a], y = nk[b];
        const xn = Number.isNaN(x), yn = Number.isNaN(y);
        if (!xn && !yn) return x === y ? a - b : (x < y ? -d : d);
        if (xn !== yn) return xn ? 1 : -1;          // numbers first, either way
        const s = sk[a], t = sk[b];
        if (s === t) return a - b;
        if (s == null) return 1; if (t == null) return -1;
        return s < t ? -d : d;
      });
    }
    state.view = view;
    if (resetPage) state.page = 0;
    renderPage();
  }
  function renderPage() {
    const view = state.view, pages = Math.max(1, Math.ceil(view.length / PAGE));
    if (state.page >= pages) state.page = pages - 1;
    const start = state.page * PAGE, end = Math.min(view.length, start + PAGE);
    info.textContent = (view.length ? (start + 1) + '–' + end : '0') + ' of ' + view.length + ' rows (' + n + ' in all), page ' + (state.page + 1) + ' of ' + pages;
    const frag = document.createDocumentFragment();
    for (let p = start; p < end; p++) {
      const i = view[p];
      const cls = [];
      if (color[i] === 'r') cls.push('hl-r'); else if (color[i] === 'y') cls.push('hl-y');
      if (i === first) cls.push('first-failing');
      if (i === state.flash) cls.push('flash');
      const tr = el('tr', { 'data-row': i, 'data-status': status[i], class: cls.join(' ') || null });
      const mark = el('td', { class: 'mark' }, el('span', { class: 'st ' + status[i], title: STATUS_NAME[status[i]] }), String(i));
      if (i === first) mark.append(el('span', { class: 'ff-label', text: '◀ first failing' }));
      const pc = pcRow.get(i);
      if (pc) {
        const a = D.prechecks[pc[0]].failing[pc[1]];
        mark.append(el('a', { class: 'pc-link', href: '#pc-' + pc[0] + '-' + pc[1], 'data-precheck': pc[0], 'data-api': pc[1],
          title: 'pre-check ' + a.name + ': ' + a.worst, text: 'pre-check ' + a.worst,
          onclick: ev => { ev.preventDefault(); PRECHECK_UI[pc[0]].show(pc[1]); } }));
      }
      tr.append(mark);
      for (let j = 0; j < cols.length; j++) {
        const v = cols[j][i], t = fmt(v);
        tr.append(el('td', { class: typeof v === 'number' ? 'num' : null, title: t.length > 40 ? t : null, text: t }));
      }
      frag.append(tr);
    }
    tbody.textContent = '';
    tbody.append(frag);
    state.flash = -1;
  }
  function gotoRow(i) {
    let pos = state.view.indexOf(i);
    if (pos < 0) {  // filtered out: show every row again
      nameIn.value = ''; resultSel.value = 'all'; state.entries = null; chip.textContent = '';
      refilter(true);
      pos = state.view.indexOf(i);
    }
    state.page = Math.floor(pos / PAGE);
    state.flash = i;
    renderPage();
    const tr = tbody.querySelector('tr[data-row="' + i + '"]');
    if (tr) tr.scrollIntoView({ block: 'center' });
  }
  function filterEntries(set, label) {
    state.entries = set;
    chip.textContent = '';
    chip.append(el('span', { class: 'chip' }, 'module: ' + label + ' ', el('button', { class: 'linkish clear-module', text: '✕', onclick: () => { state.entries = null; chip.textContent = ''; refilter(true); } })));
    refilter(true);
    table.scrollIntoView({ block: 'nearest' });
  }
  refilter(true);
  // A pre-check API's rows: the name filter as /^API\./, every result.
  COMPARE_UI[ci] = {
    showApi(api) {
      nameIn.value = '/^' + reEscape(api) + '\\./'; resultSel.value = 'all'; state.entries = null; chip.textContent = '';
      refilter(true);
      const tr = tbody.querySelector('tr');  // mid-screen: not under the sticky header
      (tr || table).scrollIntoView({ block: 'center' });
    },
  };

  // ---- module tree
  sec.append(el('h3', { text: 'Module tree (construct.json), each module coloured by its worst row' }));
  const tree = el('div', { class: 'tree' });
  sec.append(tree);
  const nodes = c.nodes, parent = c.node_parent, nn = nodes.length;
  if (!nn) {
    tree.append(el('div', { class: 'help', text: c.construct_file ? 'construct.json is empty: level L1 dumps have no module structure (dump at L0 or mix for a tree).'
      : 'No construct.json beside the NPU dump' + (c.npu ? ' (' + c.npu + ')' : '') + '.' }));
  } else {
    const kids = Array.from({ length: nn }, () => []), roots = [];
    for (let k = 0; k < nn; k++) (parent[k] >= 0 ? kids[parent[k]] : roots).push(k);
    const nsev = new Int8Array(nn).fill(-1), nrows = new Uint32Array(nn), nfail = new Uint32Array(nn);
    for (let i = 0; i < n; i++) {
      const k = c.entry_node[c.row_entry[i]];
      if (k < 0) continue;
      if (sev[i] > nsev[k]) nsev[k] = sev[i];
      nrows[k]++; if (status[i] === 'f') nfail[k]++;
    }
    // Children before parents: a post-order walk, iterative (trees can be deep).
    const order = [], stack = roots.slice(), seen = new Uint8Array(nn);
    while (stack.length) { const k = stack.pop(); if (seen[k]) continue; seen[k] = 1; order.push(k); for (const q of kids[k]) stack.push(q); }
    for (let p = order.length - 1; p >= 0; p--) {
      const k = order[p], up = parent[k];
      if (up >= 0) { if (nsev[k] > nsev[up]) nsev[up] = nsev[k]; nrows[up] += nrows[k]; nfail[up] += nfail[k]; }
    }
    const SEVNAME = ['passing', 'unmatched rows', 'rows not compared', 'yellow rows', 'failing rows'];
    const subtreeEntries = k => {
      const nodesIn = new Set(), st = [k];
      while (st.length) { const q = st.pop(); nodesIn.add(q); for (const r of kids[q]) st.push(r); }
      const set = new Set();
      c.entry_node.forEach((nd, e) => { if (nodesIn.has(nd)) set.add(e); });
      return set;
    };
    const nodeItem = k => {
      const li = el('li');
      const head = [el('span', { class: 'sev sev' + nsev[k], title: nsev[k] < 0 ? 'no rows' : SEVNAME[nsev[k]] }), el('span', { class: 'mono', text: nodes[k] }),
        el('span', { class: 'cnt', text: nrows[k] ? nfail[k] + ' failing of ' + plural(nrows[k], 'row') : 'no rows' })];
      if (nrows[k]) head.push(el('button', { class: 'rows-btn', text: 'rows', onclick: ev => { ev.preventDefault(); filterEntries(subtreeEntries(k), nodes[k]); } }));
      if (!kids[k].length) { li.append(el('div', { class: 'leaf', 'data-node': k }, ...head)); return li; }
      const det = el('details', { class: 'node', 'data-node': k }, el('summary', null, ...head));
      let built = false;
      det.addEventListener('toggle', () => { if (det.open && !built) { built = true; det.append(list(kids[k])); } });
      li.append(det);
      return li;
    };
    const list = ks => {
      const ul = el('ul');
      const more = (from) => {
        for (let p = from; p < Math.min(ks.length, from + 200); p++) ul.append(nodeItem(ks[p]));
        if (from + 200 < ks.length) ul.append(el('li', null, el('button', { class: 'linkish', text: 'show ' + (ks.length - from - 200) + ' more', onclick: ev => { ev.target.parentNode.remove(); more(from + 200); } })));
      };
      more(0);
      return ul;
    };
    tree.append(el('div', { class: 'help', text: plural(nn, 'node') + ', ' + plural(roots.length, 'root') + '. Open a module to see its children; "rows" shows its rows in the table.' }));
    tree.append(list(roots));
  }
}

// ---------------------------------------------------------------- nan-analyze
function renderNan(x, k, main) {
  const sec = el('section', { class: 'nan', id: 'nan-' + k });
  main.append(sec);
  sec.append(el('h2', { text: 'Where the first NaN/Inf came from (nan-analyze)' }));
  sec.append(el('div', { class: 'help', text: 'From ' + x.file + '.' }));
  if (!x.ranks.length) { sec.append(el('div', { class: 'verdict-box pass', text: 'No NaN/Inf producer.' })); return; }
  sec.append(el('div', { class: 'verdict-box fail', text: 'FAIL: ' + x.ranks.map(r => r.rank + ' ' + r.op_name).join('; ') }));
  for (const r of x.ranks) {
    sec.append(el('h3', { text: r.rank + ': ' + r.op_name }));
    const t = el('table', { class: 'kv' });
    t.append(el('tr', null, el('td', { text: 'first producer' }), el('td', null, el('code', { class: 'producer', text: r.op_name }))));
    t.append(el('tr', null, el('td', { text: 'module path' }), el('td', { class: 'mono', text: r.construct_info.length ? r.construct_info.join(' › ') : '(none: construct.json is empty at level L1)' })));
    sec.append(t);
    sec.append(el('div', { class: 'help', text: 'Stack (innermost last):' }), el('pre', { class: 'stack', text: r.stack_info.length ? r.stack_info.join('\n') : '(no stack recorded)' }));
    const d = el('details', null, el('summary', { text: 'its inputs and outputs (statistics)' }), el('pre', { text: JSON.stringify(r.data_info, null, 1) }));
    sec.append(d);
  }
}

// ---------------------------------------------------------------- gradsim
const PALETTE = ['#d62728', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#bcbd22', '#7f7f7f'];
function renderGradsim(g, k, main) {
  const sec = el('section', { class: 'gradsim', id: 'grad-' + k });
  main.append(sec);
  sec.append(el('h2', { text: 'Gradient similarity' + (g.rank ? ' ' + g.rank : '') + ' (gradsim)' }));
  sec.append(el('div', { class: 'help', text: 'From ' + g.file + '. Similarity: share of gradient elements with the same sign in both runs. A step is suspect when a parameter is below 0.97 at the first step or drops by more than 0.03 from the step before (msprobe\'s rule).' }));
  const summary = g.params.find(p => p.name === 'summary');
  const suspects = g.params.filter(p => p.name !== 'summary' && p.suspect.length);
  if (g.first_suspect == null) sec.append(el('div', { class: 'verdict-box pass', text: 'PASS: no suspect step in ' + plural(g.steps.length, 'step') }));
  else {
    const at = g.first_suspect;
    const who = g.params.filter(p => p.suspect.indexOf(at) >= 0).map(p => p.name);
    sec.append(el('div', { class: 'verdict-box fail', text: 'FAIL: first suspect step ' + g.steps[at] + ' (' + who.slice(0, 5).join(', ') + (who.length > 5 ? ', …' : '') + ')' }));
  }
  // The suspect parameters, those that dropped most at their first suspect step first.
  const drop = p => { const s = p.suspect[0]; return s === 0 ? 1 - p.sim[0] : p.sim[s - 1] - p.sim[s]; };
  suspects.sort((a, b) => a.suspect[0] - b.suspect[0] || drop(b) - drop(a));
  const shown = (summary ? [summary] : []).concat(suspects.slice(0, PALETTE.length));
  const pick = el('select', { class: 'param-pick' }, el('option', { value: '', text: 'add a parameter…' }));
  for (const p of g.params) if (shown.indexOf(p) < 0) pick.append(el('option', { value: p.name, text: p.name }));
  const box = el('div');
  pick.addEventListener('change', () => { const p = g.params.find(q => q.name === pick.value); if (p) { shown.push(p); draw(); } pick.value = ''; });
  sec.append(el('div', { class: 'controls' }, pick), box);
  function draw() {
    box.textContent = '';
    const W = 1000, H = 260, L = 50, R = 10, T = 12, B = 28, pw = W - L - R, ph = H - T - B, m = g.steps.length;
    const svg = sv('svg', { class: 'chart grad', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H });
    let ymin = 1;
    for (const p of shown) for (const v of p.sim) if (Number.isFinite(v) && v < ymin) ymin = v;
    ymin = Math.max(0, Math.min(0.9, Math.floor(ymin * 20) / 20));
    const X = s => L + (m === 1 ? pw / 2 : s * pw / (m - 1)), Y = v => T + ph - (v - ymin) / (1 - ymin) * ph;
    for (const v of [ymin, (ymin + 1) / 2, 0.97, 1]) {
      svg.append(sv('line', { x1: L, x2: W - R, y1: Y(v), y2: Y(v), stroke: v === 0.97 ? '#e08' : '#eee', 'stroke-dasharray': v === 0.97 ? '4 3' : '' }));
      svg.append(sv('text', { x: L - 4, y: Y(v) + 4, 'text-anchor': 'end' }, fmt(v)));
    }
    const every = Math.max(1, Math.ceil(m / 20));
    for (let s = 0; s < m; s += every) svg.append(sv('text', { x: X(s), y: H - 8, 'text-anchor': 'middle' }, g.steps[s]));
    if (g.first_suspect != null) {
      svg.append(sv('line', { x1: X(g.first_suspect), x2: X(g.first_suspect), y1: T, y2: T + ph, stroke: '#d62728', 'stroke-dasharray': '5 3' }));
      svg.append(sv('text', { x: X(g.first_suspect) + 4, y: T + 12, fill: '#d62728' }, 'first suspect step ' + g.steps[g.first_suspect]));
    }
    const legend = el('div', { class: 'legend' });
    shown.forEach((p, q) => {
      const colour = p.name === 'summary' ? '#1f77b4' : PALETTE[(q - (summary ? 1 : 0)) % PALETTE.length];
      let d = '';
      p.sim.forEach((v, s) => { if (Number.isFinite(v)) d += (d ? 'L' : 'M') + X(s).toFixed(1) + ' ' + Y(v).toFixed(1); });
      svg.append(sv('path', { d: d, stroke: colour, fill: 'none', 'stroke-width': p.name === 'summary' ? 2.5 : 1.5, class: 'curve', 'data-param': p.name }));
      for (const s of p.suspect) svg.append(sv('circle', { cx: X(s), cy: Y(p.sim[s]), r: 4.5, fill: 'none', stroke: '#d62728', 'stroke-width': 2, class: 'suspect' }));
      legend.append(el('span', null, el('i', { style: 'background:' + colour }), p.name));
    });
    box.append(svg, legend);
  }
  draw();
  if (suspects.length) {
    const t = el('table', { class: 'plain' }, el('tr', null, el('th', { text: 'parameter' }), el('th', { text: 'suspect steps' }), el('th', { text: 'lowest similarity' })));
    for (const p of suspects) t.append(el('tr', null, el('td', { class: 'mono', text: p.name }), el('td', { text: p.suspect.map(s => g.steps[s]).join(', ') }), el('td', { text: fmt(Math.min(...p.sim.filter(Number.isFinite))) })));
    sec.append(el('h3', { text: 'Suspect parameters' }), t);
  }
}

// ---------------------------------------------------------------- accuracy pre-check
const PC_GLOSS = { '余弦相似度': 'cosine similarity', '二进制一致错误率': 'share of elements not bit-identical',
  '双百指标': 'share of elements with relative error < 0.01', '双千指标': 'share of elements with relative error < 0.001',
  '双万指标': 'share of elements with relative error < 0.0001' };
function renderPrecheck(p, k, main) {
  const sec = el('section', { class: 'precheck', id: 'pc-' + k, 'data-index': k });
  main.append(sec);
  sec.append(el('h2', { text: 'Accuracy pre-check ' + p.label + ' (run_ut)' }));
  const f = p.forward, b = p.backward;
  sec.append(el('div', { class: 'verdict-box ' + (p.negative ? 'fail' : 'pass'), text: p.negative
    ? 'FAIL: ' + plural(p.failing.filter(a => a.worst === 'error').length, 'API') + ' in error, ' + p.failing.filter(a => a.worst === 'warning').length + ' in warning, of ' + plural(p.apis, 'API')
    : 'PASS: no API in error or warning, of ' + plural(p.apis, 'API') + (f.SKIP + b.SKIP ? ' (' + (f.SKIP + b.SKIP) + ' SKIP)' : '') }));
  sec.append(el('div', { class: 'help', text: 'From ' + p.file + (p.details_file ? ' and ' + p.details_file + '.' : ' (no details file beside it: no metrics).') +
    ' Statuses are msprobe\'s: each API is run on the device and on the CPU in higher precision; a direction is error when an output is, else warning when an output is.' }));
  const t = el('table', { class: 'plain pc-counts' });
  t.append(el('tr', null, el('th', { text: '' }), ...['pass', 'warning', 'error', 'SKIP', 'no backward'].map(x => el('th', { text: x }))));
  for (const [dir, c] of [['forward', f], ['backward', b]]) {
    const tr = el('tr', { 'data-dir': dir }, el('td', { text: dir }));
    for (const s of ['pass', 'warning', 'error', 'SKIP', 'none']) {
      const v = c[s];
      tr.append(el('td', { class: 'pc-st ' + (v ? s : ''), 'data-status': s, text: v == null ? '' : String(v) }));
    }
    t.append(tr);
  }
  sec.append(t);
  if (!p.failing.length) return;
  sec.append(el('h3', { text: 'APIs not pass (' + p.failing.length + '), errors first, each with its worst details row' }));
  const table = el('table', { class: 'plain pc-apis' });
  table.append(el('tr', null, ...['API', 'forward', 'backward', 'worst row', 'failed metric', 'cosine', 'max abs err', 'dtypes (bench → device), shape', 'msprobe message', 'compare rows'].map(x => el('th', { text: x }))));
  sec.append(el('div', { class: 'table-wrap' }, table));
  const rows = [];
  let shown = 0;
  const more = el('button', { class: 'linkish pc-more' });
  sec.append(more);
  function apiRow(a, j) {
    const tr = el('tr', { id: 'pc-' + k + '-' + j, 'data-api': a.name, 'data-worst': a.worst });
    const metric = a.metric ? el('span', { title: PC_GLOSS[a.metric] || '' }, el('b', { text: a.metric }), ' ' + fmt(a.value) + ' ' + a.rule + ' (' + (PC_GLOSS[a.metric] || '') + ')')
      : el('span', { class: 'help', text: a.row ? (a.row_status === 'SKIP' ? 'SKIP' : 'none of the metrics: see the message') : 'no details row' });
    const links = el('td', { class: 'pc-compare' });
    for (const l of a.compare_rows) links.append(el('button', { class: 'linkish pc-goto', 'data-compare': l.compare,
      text: 'compare ' + compareLabel(D.compares[l.compare]) + ': ' + plural(l.rows, 'row'),
      onclick: () => COMPARE_UI[l.compare].showApi(a.name) }));
    if (!a.compare_rows.length) links.append(el('span', { class: 'help', text: D.compares.length ? 'none named ' + a.name + '.*' : 'no compare in this report' }));
    const msg = [a.row_message, a.message].filter(x => x && x.trim()).map(x => x.trim()).join('\n');
    tr.append(el('td', { class: 'mono', text: a.name }), el('td', { class: 'pc-st ' + a.forward, text: a.forward }),
      el('td', { class: 'pc-st ' + a.backward, text: a.backward || '—' }), el('td', { class: 'mono', text: a.row }),
      el('td', { class: 'pc-metric' }, metric), el('td', { text: fmt(a.cosine) }), el('td', { text: fmt(a.max_abs_err) }),
      el('td', { class: 'mono', text: a.row ? a.bench_dtype + ' → ' + a.device_dtype + ' ' + a.shape : '' }),
      el('td', null, el('pre', { class: 'pc-message', text: msg })), links);
    return tr;
  }
  function showTo(n) {
    for (; shown < Math.min(n, p.failing.length); shown++) { const tr = apiRow(p.failing[shown], shown); rows.push(tr); table.append(tr); }
    more.textContent = 'show ' + Math.min(500, p.failing.length - shown) + ' more of ' + (p.failing.length - shown);
    more.style.display = shown < p.failing.length ? '' : 'none';
  }
  more.addEventListener('click', () => showTo(shown + 500));
  showTo(500);
  PRECHECK_UI[k] = {
    show(j) {
      showTo(j + 1);
      const tr = rows[j];
      tr.classList.remove('flash'); void tr.offsetWidth; tr.classList.add('flash');
      tr.scrollIntoView({ block: 'center' });
    },
  };
}

// ---------------------------------------------------------------- task free_benchmark
// D.free_benchmark: {files: [{file, label, rows}], rows: [[step, rank, api, pert_mode, stage,
// max_rel, dtype, shape, output_index, file], …]}, by step and rank, each file in arrival order.
const FB_COLS = ['step', 'rank', 'API', 'pert_mode', 'stage', 'max_rel', 'dtype', 'shape', 'output'];
function fbKey(row, c) {
  if (c === 5) return row[5] === 'symbol_flipping' ? Infinity : row[5] === '' ? -Infinity : Number(row[5]);
  return row[c] == null ? -Infinity : row[c];
}
function renderFreeBenchmark(fb, main) {
  const sec = el('section', { class: 'free-benchmark', id: 'fb' });
  main.append(sec);
  sec.append(el('h2', { text: 'Free benchmark (无标杆比对, task free_benchmark)' }));
  const n = fb.rows.length;
  sec.append(el('div', { class: 'verdict-box ' + (n ? 'fail' : 'pass'), text: n
    ? 'FAIL: ' + plural(n, 'inconsistent API call') + ' in ' + plural(fb.files.filter(f => f.rows).length, 'file') + ' of ' + plural(fb.files.length, 'file')
    : 'PASS: no inconsistent API call in ' + plural(fb.files.length, 'free_benchmark.csv file') }));
  sec.append(el('div', { class: 'help', text: 'Each row is an API call that was run a second time with a perturbed input (pert_mode), ' +
    'and whose two outputs parted: max_rel is the largest ratio of the two minus 1 (over msprobe\'s threshold: float16 0.002, ' +
    'bfloat16 0.004, float32 and others 0.0002; 0 for no_change), symbol_flipping when an element changed sign, empty for to_cpu ' +
    '(the CPU result failed its tolerances). dtype and shape are the original output\'s; output is the element of a list output.' }));
  const files = el('details', { class: 'fb-files' }, el('summary', { text: plural(fb.files.length, 'file') }));
  const ul = el('ul');
  for (const f of fb.files) ul.append(el('li', { class: 'mono', text: f.file + ': ' + plural(f.rows, 'row') }));
  files.append(ul);
  sec.append(files);
  if (!n) return;
  const filter = el('input', { type: 'search', class: 'fb-filter', placeholder: 'filter by API name (substring)' });
  sec.append(filter);
  const table = el('table', { class: 'plain fb-rows' });
  const head = el('tr');
  table.append(head);
  sec.append(el('div', { class: 'table-wrap' }, table));
  const more = el('button', { class: 'linkish fb-more' });
  sec.append(more);
  let order = fb.rows.map((_, i) => i), shown = 0, sortCol = null, desc = false;
  FB_COLS.forEach((name, c) => head.append(el('th', { 'data-col': c, text: name, title: 'sort', onclick: () => {
    desc = sortCol === c ? !desc : c === 5;  // max_rel: largest first
    sortCol = c;
    redraw();
  } })));
  function visible() {
    const q = filter.value.trim();
    let idx = order.filter(i => !q || fb.rows[i][2].includes(q));
    if (sortCol != null) idx = idx.slice().sort((a, b) => {
      const x = fbKey(fb.rows[a], sortCol), y = fbKey(fb.rows[b], sortCol);
      return (x < y ? -1 : x > y ? 1 : a - b) * (desc ? -1 : 1);
    });
    return idx;
  }
  let idx = [];
  function showTo(k) {
    for (; shown < Math.min(k, idx.length); shown++) {
      const r = fb.rows[idx[shown]];
      const tr = el('tr', { 'data-api': r[2], 'data-step': r[0], 'data-rank': r[1] });
      r.slice(0, 9).forEach((v, c) => tr.append(el('td', { class: c === 2 || c === 7 ? 'mono' : c === 5 ? 'fb-max-rel' : null,
        text: v == null ? '' : c === 5 && v === '' ? '(to_cpu)' : String(v) })));
      table.append(tr);
    }
    more.textContent = 'show ' + Math.min(500, idx.length - shown) + ' more of ' + (idx.length - shown);
    more.style.display = shown < idx.length ? '' : 'none';
  }
  function redraw() {
    for (const tr of [...table.querySelectorAll('tr[data-api]')]) tr.remove();
    idx = visible();
    shown = 0;
    showTo(500);
  }
  more.addEventListener('click', () => showTo(shown + 500));
  filter.addEventListener('input', redraw);
  redraw();
}

// ---------------------------------------------------------------- monitor (TrainerMon)
// D.monitors: [{dir, ranks, csv_files, event_files, types: [{prefix, ops, tags: [{name, series:
// [{rank, steps, v: [values of op 0, of op 1, …]}]}]}], anomalies: [{rank, step, tag, name,
// prefix, op, message}]}]; values are numbers or "nan", "inf", "-inf".
function mnum(x) { return typeof x === 'number' ? x : x === 'inf' ? Infinity : x === '-inf' ? -Infinity : NaN; }
const MON_PAGE = 24;
// Lines in blue, orange, green…: red is the anomalies' ring.
const MON_PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#bcbd22', '#7f7f7f'];
function renderMonitor(x, k, main) {
  const sec = el('section', { class: 'monitor', id: 'mon-' + k });
  main.append(sec);
  sec.append(el('h2', { text: 'Training monitor trends (TrainerMon): ' + x.dir }));
  sec.append(el('div', { class: 'help', text: 'From ' + plural(x.csv_files, 'csv file') + (x.event_files ? ' (and ' + plural(x.event_files, 'TensorBoard event file') + ')' : '') + ' of ' + plural(x.ranks.length, 'rank') + '. One chart per tag: the step along x, a line per rank (or per op); red rings mark the anomalies of anomaly_detected/rank*/anomaly.json (msprobe\'s rules AnomalyTurbulence and AnomalyNan); hover a ring for its message.' }));
  const an = x.anomalies;
  if (!an.length) sec.append(el('div', { class: 'verdict-box pass', text: 'PASS: no anomaly' }));
  else sec.append(el('div', { class: 'verdict-box fail', text: 'FAIL: ' + plural(an.length, 'anomaly', 'anomalies') + '; first step ' + an[0].step + ' rank ' + an[0].rank + ' ' + an[0].tag + (an[0].op ? ' ' + an[0].op : '') }));
  const typeSel = el('select', { class: 'mon-type' }), opSel = el('select', { class: 'mon-op' }), rankSel = el('select', { class: 'mon-rank' });
  const filter = el('input', { type: 'search', class: 'mon-filter', placeholder: 'filter tags (substring)' });
  const onlyBad = el('input', { type: 'checkbox', class: 'mon-only' });
  for (const t of x.types) typeSel.append(el('option', { value: t.prefix, text: t.prefix + ' (' + plural(t.tags.length, 'tag') + ')' }));
  rankSel.append(el('option', { value: '', text: 'all ranks' }));
  for (const r of x.ranks) rankSel.append(el('option', { value: String(r), text: 'rank ' + r }));
  const count = el('span', { class: 'help mon-count' });
  const grid = el('div', { class: 'mon-grid' });
  const more = el('button', { class: 'mon-more', text: 'show more' });
  let shown = MON_PAGE;
  if (x.types.length) sec.append(el('div', { class: 'controls' }, 'type ', typeSel, ' op ', opSel, ' ', rankSel, ' ', filter, el('label', null, onlyBad, ' only tags with anomalies'), count));
  sec.append(grid, more);
  const typeOf = p => x.types.find(t => t.prefix === p);
  function fillOps() {
    const t = typeOf(typeSel.value);
    opSel.textContent = '';
    if (!t) return;
    for (const op of t.ops) opSel.append(el('option', { value: op, text: op }));
    opSel.append(el('option', { value: '*', text: 'all ops' }));
    opSel.value = t.ops.indexOf('norm') >= 0 ? 'norm' : (t.ops[0] || '*');
  }
  // The anomalies of one chart under the current choices.
  function anomaliesOf(t, tag) {
    const op = opSel.value, rank = rankSel.value;
    return an.filter(a => a.prefix === t.prefix && a.name === tag.name && (op === '*' || a.op === op || !a.op) && (rank === '' || String(a.rank) === rank));
  }
  function chart(t, tag) {
    const W = 300, H = 150, L = 46, R = 8, T = 8, B = 20, pw = W - L - R, ph = H - T - B;
    const op = opSel.value, rank = rankSel.value;
    const ops = op === '*' ? t.ops : [op];
    const series = tag.series.filter(s => rank === '' || String(s.rank) === rank);
    const lines = [];
    for (const s of series) for (const o of ops) {
      const j = t.ops.indexOf(o);
      if (j >= 0) lines.push({ rank: s.rank, op: o, steps: s.steps, v: s.v[j].map(mnum) });
    }
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const l of lines) l.steps.forEach((st, i) => {
      x0 = Math.min(x0, st); x1 = Math.max(x1, st);
      if (Number.isFinite(l.v[i])) { y0 = Math.min(y0, l.v[i]); y1 = Math.max(y1, l.v[i]); }
    });
    if (!Number.isFinite(x0)) { x0 = 0; x1 = 1; }
    if (!Number.isFinite(y0)) { y0 = 0; y1 = 1; }
    if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
    const X = st => L + (x1 === x0 ? pw / 2 : (st - x0) * pw / (x1 - x0)), Y = v => T + ph - (v - y0) / (y1 - y0) * ph;
    const svg = sv('svg', { class: 'chart mon', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'data-tag': tag.name });
    for (const v of [y0, (y0 + y1) / 2, y1]) {
      svg.append(sv('line', { x1: L, x2: W - R, y1: Y(v), y2: Y(v), stroke: '#eee' }));
      svg.append(sv('text', { x: L - 3, y: Y(v) + 4, 'text-anchor': 'end' }, fmt(+v.toPrecision(4))));
    }
    svg.append(sv('text', { x: L, y: H - 5, 'text-anchor': 'start' }, 'step ' + x0));
    if (x1 !== x0) svg.append(sv('text', { x: W - R, y: H - 5, 'text-anchor': 'end' }, String(x1)));
    const rankIndex = r => x.ranks.indexOf(r);
    for (const l of lines) {
      const colour = op === '*' ? MON_PALETTE[t.ops.indexOf(l.op) % MON_PALETTE.length] : MON_PALETTE[rankIndex(l.rank) % MON_PALETTE.length];
      let d = '';
      l.steps.forEach((st, i) => { if (Number.isFinite(l.v[i])) d += (d && Number.isFinite(l.v[i - 1]) ? 'L' : 'M') + X(st).toFixed(1) + ' ' + Y(l.v[i]).toFixed(1); else d += ''; });
      const path = sv('path', { d: d, stroke: colour, fill: 'none', 'stroke-width': 1.5, class: 'mon-line', 'data-rank': l.rank, 'data-op': l.op,
                                'stroke-dasharray': op === '*' && rankIndex(l.rank) > 0 ? '4 2' : '' });
      path.append(sv('title', {}, 'rank ' + l.rank + ' ' + l.op));
      svg.append(path);
      if (l.steps.length === 1 && Number.isFinite(l.v[0])) svg.append(sv('circle', { cx: X(l.steps[0]), cy: Y(l.v[0]), r: 2, fill: colour }));
    }
    for (const a of anomaliesOf(t, tag)) {
      const l = lines.find(q => q.rank === a.rank && (q.op === a.op || (!a.op && q.op === ops[0])));
      const i = l ? l.steps.indexOf(a.step) : -1;
      const v = i >= 0 ? l.v[i] : NaN;
      const cy = Number.isFinite(v) ? Y(v) : T + 4;  // NaN: at the top edge
      const ring = sv('circle', { cx: X(a.step), cy: cy, r: 5, fill: 'none', stroke: '#d62728', 'stroke-width': 2, class: 'anomaly', 'data-step': a.step, 'data-rank': a.rank, 'data-op': a.op });
      ring.append(sv('title', {}, a.message || (a.tag + ' ' + a.op + ' at step ' + a.step)));
      svg.append(ring);
    }
    return svg;
  }
  function visibleTags() {
    const t = typeOf(typeSel.value);
    if (!t) return [];
    const q = filter.value.trim();
    const first = new Map();
    for (const a of an) if (a.prefix === t.prefix && !first.has(a.name)) first.set(a.name, a.step);
    let tags = t.tags.filter(tag => (!q || tag.name.indexOf(q) >= 0) && (!onlyBad.checked || first.has(tag.name)));
    // Tags with anomalies first (earliest first), then the others in file order.
    const order = new Map(tags.map((tag, i) => [tag, i]));
    tags.sort((a, b) => (first.has(a.name) ? first.get(a.name) : Infinity) - (first.has(b.name) ? first.get(b.name) : Infinity) || order.get(a) - order.get(b));
    return tags;
  }
  function redraw() {
    grid.textContent = '';
    const t = typeOf(typeSel.value);
    const tags = visibleTags();
    for (const tag of tags.slice(0, shown)) {
      const bad = anomaliesOf(t, tag).length > 0;
      const box = el('div', { class: 'mon-chart' + (bad ? ' has-anomaly' : ''), 'data-tag': tag.name }, el('div', { class: 'mon-title mono', text: tag.name, title: tag.name }));
      box.append(chart(t, tag));
      if (opSel.value === '*' || x.ranks.length > 1) {
        const legend = el('div', { class: 'legend' });
        if (opSel.value === '*') for (const o of t.ops) legend.append(el('span', null, el('i', { style: 'background:' + MON_PALETTE[t.ops.indexOf(o) % MON_PALETTE.length] }), o));
        else for (const s of tag.series) legend.append(el('span', null, el('i', { style: 'background:' + MON_PALETTE[x.ranks.indexOf(s.rank) % MON_PALETTE.length] }), 'rank ' + s.rank));
        box.append(legend);
      }
      grid.append(box);
    }
    count.textContent = ' ' + Math.min(shown, tags.length) + ' of ' + plural(tags.length, 'tag');
    more.style.display = tags.length > shown ? '' : 'none';
  }
  typeSel.addEventListener('change', () => { fillOps(); shown = MON_PAGE; redraw(); });
  for (const c of [opSel, rankSel, onlyBad]) c.addEventListener('change', () => { shown = MON_PAGE; redraw(); });
  filter.addEventListener('input', () => { shown = MON_PAGE; redraw(); });
  more.addEventListener('click', () => { shown += MON_PAGE; redraw(); });
  if (x.types.length) {
    typeSel.value = an.length && typeOf(an[0].prefix) ? an[0].prefix : x.types[0].prefix;
    fillOps();
    if (an.length && an[0].op && typeOf(typeSel.value).ops.indexOf(an[0].op) >= 0) opSel.value = an[0].op;
  }
  redraw();
  if (an.length) {
    const t = el('table', { class: 'plain mon-anomalies' }, el('tr', null, ...['step', 'rank', 'tag', 'op', 'message'].map(h => el('th', { text: h }))));
    for (const a of an.slice(0, 200)) {
      const go = el('a', { href: '#mon-' + k, text: a.tag, class: 'mono', onclick: ev => {
        ev.preventDefault();
        if (!typeOf(a.prefix)) return;
        typeSel.value = a.prefix; fillOps();
        if (a.op && typeOf(a.prefix).ops.indexOf(a.op) >= 0) opSel.value = a.op;
        filter.value = a.name; rankSel.value = ''; shown = MON_PAGE; redraw();
        const box = grid.querySelector('.mon-chart');
        if (box) { box.scrollIntoView({ block: 'center' }); box.classList.add('flash'); }
      } });
      t.append(el('tr', null, el('td', { text: a.step }), el('td', { text: a.rank }), el('td', null, go), el('td', { text: a.op }), el('td', { text: a.message })));
    }
    sec.append(el('h3', { text: 'Anomalies' + (an.length > 200 ? ' (the first 200 of ' + an.length + ')' : '') }), t);
  }
}

// ---------------------------------------------------------------- run info
function renderRun(main) {
  const sec = el('section', { class: 'run', id: 'run' });
  main.append(sec);
  sec.append(el('h2', { text: 'How this was made' }));
  const t = el('table', { class: 'kv' });
  const row = (k, v) => t.append(el('tr', null, el('td', { text: k }), el('td', null, v)));
  row('tprobe version', D.version);
  row('report generated', D.generated);
  for (const c of D.compares) {
    const who = 'compare ' + compareLabel(c);
    const dump = (p, info) => p ? p + (info ? ' (task ' + (info.task || '?') + ', level ' + (info.level || '?') + ', ' + (info.framework || '?') + ')' : '') : '(not recorded)';
    row(who + ': NPU dump', el('span', { class: 'mono', text: dump(c.npu, c.npu_dump) }));
    row(who + ': bench dump', el('span', { class: 'mono', text: dump(c.bench, c.bench_dump) }));
  }
  const s = D.run.stream;
  if (s) {
    const lost = s.upstream_dropped || s.truncated_producers;
    row('records', s.records + ' from ' + plural(s.producers, 'producer'));
    row('drop counters', el('span', { class: lost ? 'warn' : null, text: lost
      ? s.upstream_dropped + ' records dropped upstream; ' + plural(s.truncated_producers, 'producer') + ' ended without end-of-stream (crashed, or its capture detached): their results are incomplete'
      : '0 dropped, every producer ended its stream: nothing was lost' }));
    for (const e of s.events) row('event', e);
    s.sessions.forEach((cfg, k) => row('session ' + (k + 1) + (cfg.label ? ' (run ' + cfg.label + ')' : '') + (cfg.rank != null ? ', rank ' + cfg.rank : ''),
      el('details', null, el('summary', { text: ['task', 'level', 'dump_path'].map(x => x + ' ' + JSON.stringify(cfg[x])).join(', ') }), el('pre', { class: 'config', text: JSON.stringify(cfg, null, 1) }))));
  } else {
    row('drop counters', 'not known: result files do not record them (this report was made from files). The capture is lossless and says on the training\'s stderr if it detached; run tprobe-report as a manifest stage to count drops.');
  }
  const ul = el('ul');
  for (const f of D.run.inputs) ul.append(el('li', { class: 'mono', text: f }));
  row('inputs', ul);
  if (D.run.unread.length) { const w = el('ul'); for (const x of D.run.unread) w.append(el('li', { class: 'warn', text: x })); row('results not read', w); }
  if (D.run.warnings.length) { const w = el('ul'); for (const x of D.run.warnings) w.append(el('li', { class: 'warn', text: x })); row('warnings', w); }
  sec.append(t);
}

// ---------------------------------------------------------------- graph (.vis.db)
// D.graphs: per .vis.db {file, type, task, colors: [[hex, lo, hi, description]…] (msprobe's order,
// error last), unmatched, error, ranks, steps, fields, strings, graphs: [{id, source, step, rank,
// names, parent, kind, band, pi, peer, link, off, items, first}]} (report_graph.cpp). Only the
// rows of opened modules exist in the DOM: a module's children are made when it is first opened,
// and opening it touches nothing else.
function graphChildren(g) {
  if (g._kids) return g._kids;
  const n = g.names.length, count = new Int32Array(n + 1);
  for (let i = 0; i < n; i++) if (g.parent[i] >= 0) count[g.parent[i] + 1]++;
  for (let i = 0; i < n; i++) count[i + 1] += count[i];
  const list = new Int32Array(Math.max(count[n], 1)), fill = count.slice(0, n);
  for (let i = 0; i < n; i++) { const p = g.parent[i]; if (p >= 0) list[fill[p]++] = i; }  // index order = sub_nodes order
  g._kids = { start: count, list };
  return g._kids;
}
function kidsOf(g, i) { const k = graphChildren(g); return k.list.subarray(k.start[i], k.start[i + 1]); }
const GRAPH_KIND = { '0': 'module', '1': 'API', '9': 'APIs' };
const GRAPH_CHUNK = 200;

function renderGraphDb(db, k, main) {
  const sec = el('section', { class: 'graph', id: 'graph-' + k, 'data-index': k });
  main.append(sec);
  const compare = db.type === 'compare';
  const negative = db.graphs.some(g => g.first != null);
  sec.append(el('h2', { text: 'Graph ' + db.file + ' (' + db.type + (db.task ? ', ' + db.task : '') + ')' }));
  const npus = db.graphs.map((g, gi) => gi).filter(gi => db.graphs[gi].source === 'NPU');
  sec.append(el('div', { class: 'verdict-box ' + (negative ? 'fail' : 'pass'), text: compare
    ? (negative ? 'FAIL: a node is in the error band (' + db.colors[db.error][1] + ' ≤ precision_index ≤ ' + db.colors[db.error][2] + ')' : 'PASS: no node in the error band')
    : 'Build graph: ' + plural(db.graphs.length, 'graph') + ', nothing compared' }));
  const ranks = el('ul', { class: 'graph-ranks' });
  sec.append(ranks);
  if (compare) for (const gi of npus) {
    const g = db.graphs[gi];
    const text = (db.steps.length > 1 ? 'step ' + g.step + ' ' : '') + 'rank ' + g.rank + ': ' + (g.first == null ? 'no failing node' : 'first failing node ' + g.names[g.first]);
    ranks.append(el('li', { class: 'graph-rank-line' + (g.first == null ? '' : ' fail'), 'data-graph': gi, 'data-rank': g.rank, 'data-step': g.step,
      'data-first': g.first == null ? '' : g.names[g.first] },
      el('a', { href: '#', text: text, onclick: e => { e.preventDefault(); show(gi); if (g.first != null) reveal(g.first, true); } })));
  }
  const select = el('select', { class: 'graph-select' });
  db.graphs.forEach((g, gi) => select.append(el('option', { value: gi, text: g.source + ' step ' + g.step + ' rank ' + g.rank + ' (' + plural(g.names.length, 'node') + ')' })));
  const search = el('input', { type: 'search', class: 'graph-search', placeholder: 'search a node name (substring); Enter: next' });
  const count = el('span', { class: 'graph-count help' });
  const firstBtn = el('button', { class: 'graph-first', text: 'go to first failing node' });
  const fit = el('button', { class: 'graph-reset', text: 'reset zoom' });
  sec.append(el('div', { class: 'controls' }, el('label', null, 'graph ', select), search, count, compare ? firstBtn : null, fit));
  if (compare) {
    const legend = el('div', { class: 'graph-legend help' }, 'precision_index: ');
    db.colors.forEach(c => legend.append(el('span', { class: 'chip', style: 'background:' + c[0], title: c[3], text: '[' + c[1] + ', ' + c[2] + ']' })));
    if (db.unmatched) legend.append(el('span', { class: 'chip', style: 'background:' + db.unmatched, text: 'unmatched' }));
    sec.append(legend);
  }
  const canvas = el('div', { class: 'graph-canvas' });
  const view = el('div', { class: 'graph-view' }, canvas);
  const panel = el('aside', { class: 'graph-panel' }, el('div', { class: 'help', text: 'Click a node name for its inputs, outputs and match.' }));
  sec.append(el('div', { class: 'graph-body' }, view, panel));
  sec.append(el('div', { class: 'help', text: 'Wheel: zoom; drag: pan; ▸ opens a module. Colours: msprobe\'s node_colors by precision_index (grey: no counterpart). Nodes in execution order (node_order is post-order: children before their module).' }));

  let g = null, gi = -1, rows = null, selected = -1, matches = [], matchAt = -1, matchSet = null;
  let scale = 1, tx = 0, ty = 0;
  const apply = () => { canvas.style.transform = 'translate(' + tx + 'px,' + ty + 'px) scale(' + scale + ')'; };
  function colorOf(i) {
    if (!compare) return '';
    const b = g.band[i];
    if (b !== '.') return db.colors[+b][0];
    if (g.source === 'NPU' || !g.link || g.link[i] < 0) return db.unmatched || '';
    return '';
  }
  function makeNode(i, depth) {
    const kids = kidsOf(g, i).length;
    const tog = el('span', { class: 'gtoggle', text: kids ? '▸' : '·' });
    const name = el('span', { class: 'gname', text: g.names[i] });
    const row = el('div', { class: 'grow', style: 'padding-left:' + (4 + depth * 16) + 'px' }, tog, name,
      el('span', { class: 'gkind', text: GRAPH_KIND[g.kind[i]] || g.kind[i] }),
      kids ? el('span', { class: 'gsub', text: String(kids) }) : null,
      g.pi && g.pi[i] != null ? el('span', { class: 'gpi', text: fmt(g.pi[i]) }) : null);
    const c = colorOf(i);
    if (c) row.style.background = c;
    if (g.band[i] !== '.') row.dataset.band = g.band[i];
    if (matchSet && matchSet.has(i)) row.classList.add('match');
    if (i === selected) row.classList.add('selected');
    const node = el('div', { class: 'gnode', 'data-node': i, 'data-depth': depth }, row);
    rows[i] = node;
    return node;
  }
  // A module's children are made GRAPH_CHUNK at a time (a "more" row makes the next ones), so that
  // opening a module of thousands of APIs stays quick.
  function more(box, upTo) {
    const kids = box._kids, depth = box._depth;
    if (box._more) { box._more.remove(); box._more = null; }
    const frag = document.createDocumentFragment(), end = Math.min(kids.length, Math.max(upTo, box._shown + GRAPH_CHUNK));
    for (let j = box._shown; j < end; j++) frag.append(makeNode(kids[j], depth));
    box._shown = end;
    if (end < kids.length) {
      box._more = el('div', { class: 'gmore', style: 'padding-left:' + (4 + depth * 16) + 'px' },
        el('button', { class: 'graph-more', text: (kids.length - end) + ' more', onclick: () => more(box, 0) }));
      frag.append(box._more);
    }
    box.append(frag);
  }
  function expand(i, open, need) {
    const node = rows[i];
    if (!node || !kidsOf(g, i).length) return;
    let box = node.querySelector(':scope > .gkids');
    if (open === undefined) open = !box || box.hidden;
    if (open && !box) {
      box = el('div', { class: 'gkids' });
      box._kids = kidsOf(g, i); box._depth = +node.dataset.depth + 1; box._shown = 0;
      node.append(box);
      more(box, 0);
    } else if (box) box.hidden = !open;
    if (open && need != null && need >= box._shown) more(box, need + 1);
    node.classList.toggle('open', open);
    node.firstChild.firstChild.textContent = open ? '▾' : '▸';
  }
  function show(which) {
    gi = +which; g = db.graphs[gi]; select.value = String(gi);
    rows = new Array(g.names.length); selected = -1; matches = []; matchAt = -1; matchSet = null; count.textContent = '';
    canvas.textContent = ''; scale = 1; tx = 0; ty = 0; apply();
    const root = g.names.length - 1;  // post-order: the root is last
    canvas.append(makeNode(root, 0));
    expand(root, true);  // the first level shows, each module closed
    if (compare) firstBtn.disabled = g.first == null;
    panel.textContent = '';
    panel.append(el('div', { class: 'help', text: 'Click a node name for its inputs, outputs and match.' }));
  }
  function reveal(i, pick) {
    const path = [];
    for (let p = g.parent[i]; p >= 0; p = g.parent[p]) path.push(p);
    for (let j = path.length - 1; j >= 0; j--) {
      const kids = kidsOf(g, path[j]), want = j ? path[j - 1] : i;
      expand(path[j], true, kids.indexOf(want));
    }
    if (pick) choose(i);
    const r = rows[i].firstChild.getBoundingClientRect(), v = view.getBoundingClientRect();
    tx += v.left + 40 - r.left; ty += v.top + v.height / 3 - r.top; apply();
  }
  function itemsTable(i, side) {
    // node i's items: "{side}{key}\t{field}…\n" (report_graph.cpp), cut out only when shown
    const items = [], used = new Set();
    for (const line of g.items.slice(g.off[i], g.off[i + 1]).split('\n')) {
      if (!line || +line[0] !== side) continue;
      const cells = line.slice(1).split('\t');
      items.push(cells);
      for (let f = 1; f < cells.length; f++) if (cells[f]) used.add(f - 1);
    }
    if (!items.length) return el('div', { class: 'help', text: 'none' });
    const fields = [...used].sort((a, b) => a - b);
    const t = el('table', { class: 'gp-items rows', 'data-side': side ? 'output' : 'input' });
    t.append(el('thead', null, el('tr', null, el('th', { text: 'key' }), ...fields.map(f => el('th', { text: db.fields[f] })))));
    const body = el('tbody');
    for (const cells of items) {
      const s = cells[0], key = s[0] === '.' ? g.names[i] + s : s;
      body.append(el('tr', { 'data-key': key }, el('td', { text: s[0] === '.' ? s.slice(1) : s, title: key }),
        ...fields.map(f => el('td', { 'data-field': db.fields[f], text: cells[f + 1] || '' }))));
    }
    t.append(body);
    return el('div', { class: 'table-wrap' }, t);
  }
  function choose(i) {
    if (selected >= 0 && rows[selected]) rows[selected].firstChild.classList.remove('selected');
    selected = i;
    if (rows[i]) rows[i].firstChild.classList.add('selected');
    panel.textContent = '';
    panel.dataset.node = g.names[i];
    panel.append(el('h3', { class: 'gp-name', text: g.names[i] }));
    const info = el('div', { class: 'help' }, GRAPH_KIND[g.kind[i]] + ', node_order ' + i + ', ' + plural(kidsOf(g, i).length, 'child', 'children'));
    if (g.pi) info.append(', precision_index ' + (g.pi[i] == null ? 'none' : fmt(g.pi[i])));
    panel.append(info);
    if (g.link && g.peer >= 0) {
      const peer = db.graphs[g.peer], t = g.link[i];
      panel.append(el('div', { class: 'gp-match' }, 'matched node: ', t < 0 ? el('span', { class: 'help', text: 'none (unmatched)' })
        : el('a', { href: '#', 'data-graph': g.peer, text: peer.source + ' ' + peer.names[t], onclick: e => { e.preventDefault(); show(g.peer); reveal(t, true); } })));
    }
    if (g.source === 'Bench' && g.link && g.link[i] >= 0 && g.off[i] === g.off[i + 1])
      panel.append(el('div', { class: 'help gp-carried', text: 'statistics: in the matched NPU node\'s inputs and outputs, with the differences' }));
    else
      panel.append(el('h3', { text: 'inputs' }), itemsTable(i, 0), el('h3', { text: 'outputs' }), itemsTable(i, 1));
  }
  function runSearch(next) {
    const q = search.value;
    if (!q) { matches = []; matchSet = null; count.textContent = ''; canvas.querySelectorAll('.grow.match').forEach(r => r.classList.remove('match')); return; }
    if (!next || !matchSet) {
      matches = [];
      for (let i = 0; i < g.names.length; i++) if (g.names[i].includes(q)) matches.push(i);
      matchSet = new Set(matches);
      canvas.querySelectorAll('.grow.match').forEach(r => r.classList.remove('match'));
      for (const i of matches) if (rows[i]) rows[i].firstChild.classList.add('match');
      matchAt = 0;
    } else if (matches.length) matchAt = (matchAt + 1) % matches.length;
    count.textContent = matches.length ? (matchAt + 1) + ' of ' + plural(matches.length, 'match', 'matches') : 'no match';
    if (matches.length) {
      reveal(matches[matchAt], true);
      for (const i of matches) if (rows[i]) rows[i].firstChild.classList.add('match');
    }
  }
  let timer = 0;
  search.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(() => runSearch(false), 150); });
  search.addEventListener('keydown', e => { if (e.key === 'Enter') { clearTimeout(timer); runSearch(matchSet != null); } });
  select.addEventListener('change', () => show(select.value));
  firstBtn.addEventListener('click', () => { if (g.first != null) reveal(g.first, true); });
  fit.addEventListener('click', () => { scale = 1; tx = 0; ty = 0; apply(); });
  canvas.addEventListener('click', e => {
    const node = e.target.closest('.gnode');
    if (!node) return;
    const i = +node.dataset.node;
    if (e.target.classList.contains('gtoggle')) expand(i);
    else if (e.target.classList.contains('gname')) choose(i);
  });
  view.addEventListener('wheel', e => {
    e.preventDefault();
    const v = view.getBoundingClientRect(), x = e.clientX - v.left, y = e.clientY - v.top;
    const s = Math.min(4, Math.max(0.15, scale * Math.exp(-e.deltaY * 0.0015)));
    tx = x - (x - tx) * s / scale; ty = y - (y - ty) * s / scale; scale = s; apply();
  }, { passive: false });
  let drag = null;
  view.addEventListener('mousedown', e => { if (e.button === 0 && !e.target.closest('.gtoggle, .gname')) { drag = [e.clientX - tx, e.clientY - ty]; view.classList.add('dragging'); } });
  window.addEventListener('mousemove', e => { if (drag) { tx = e.clientX - drag[0]; ty = e.clientY - drag[1]; apply(); } });
  window.addEventListener('mouseup', () => { drag = null; view.classList.remove('dragging'); });
  // The first rank whose graph fails is shown first; else the first graph.
  const firstFailing = npus.find(x => db.graphs[x].first != null);
  show(firstFailing != null ? firstFailing : 0);
}

// ---------------------------------------------------------------- page
document.getElementById('title').textContent = D.title;
const verdict = document.getElementById('verdict');
verdict.textContent = D.negative ? 'FAIL' : 'PASS';
verdict.className = 'verdict ' + (D.negative ? 'fail' : 'pass');
const main = document.getElementById('main');
main.textContent = '';
const nav = document.getElementById('nav');
const overview = el('section', { class: 'overview', id: 'overview' }, el('h2', { text: 'Overview' }));
main.append(overview);
const ol = el('ul');
overview.append(ol);
const line = (text, v, href) => ol.append(el('li', null, el('span', { class: 'verdict ' + v, text: v.toUpperCase() }), ' ', el('a', { href: href, text: text })));
D.compares.forEach((c, k) => {
  line('compare ' + compareLabel(c) + ': ' + c.failing + ' failing, ' + c.unmatched + ' unmatched, ' + c.errors + ' not compared of ' + plural(c.n, 'row'), compareVerdict(c), '#cmp-' + k);
  nav.append(el('a', { href: '#cmp-' + k, text: 'compare ' + compareLabel(c) }));
});
D.nans.forEach((x, k) => {
  line('nan-analyze: ' + (x.ranks.length ? 'first producer ' + x.ranks.map(r => r.rank + ' ' + r.op_name).join('; ') : 'no NaN/Inf producer'), x.ranks.length ? 'fail' : 'pass', '#nan-' + k);
  nav.append(el('a', { href: '#nan-' + k, text: 'NaN/Inf' }));
});
D.gradsims.forEach((g, k) => {
  line('gradsim' + (g.rank ? ' ' + g.rank : '') + ': ' + (g.first_suspect == null ? 'no suspect step' : 'first suspect step ' + g.steps[g.first_suspect]), g.first_suspect == null ? 'pass' : 'fail', '#grad-' + k);
  nav.append(el('a', { href: '#grad-' + k, text: 'gradsim' + (g.rank ? ' ' + g.rank : '') }));
});
D.prechecks.forEach((p, k) => {
  const n = s => p.forward[s] + p.backward[s];
  line('pre-check ' + p.label + ': ' + n('error') + ' error, ' + n('warning') + ' warning, ' + n('SKIP') + ' SKIP (forward and backward) of ' + plural(p.apis, 'API'), p.negative ? 'fail' : 'pass', '#pc-' + k);
  nav.append(el('a', { href: '#pc-' + k, text: 'pre-check ' + p.label }));
});
if (D.free_benchmark.files.length) {
  const n = D.free_benchmark.rows.length;
  line('free_benchmark: ' + plural(n, 'inconsistent API call') + ' in ' + plural(D.free_benchmark.files.length, 'free_benchmark.csv file'), n ? 'fail' : 'pass', '#fb');
  nav.append(el('a', { href: '#fb', text: 'free_benchmark' }));
}
D.monitors.forEach((x, k) => {
  line('monitor ' + x.dir + ': ' + (x.anomalies.length ? plural(x.anomalies.length, 'anomaly', 'anomalies') + ', first step ' + x.anomalies[0].step + ' rank ' + x.anomalies[0].rank + ' ' + x.anomalies[0].tag : 'no anomaly') + ' (' + plural(x.types.reduce((n, t) => n + t.tags.length, 0), 'tag') + ', ' + plural(x.ranks.length, 'rank') + ')', x.anomalies.length ? 'fail' : 'pass', '#mon-' + k);
  nav.append(el('a', { href: '#mon-' + k, text: 'monitor' + (D.monitors.length > 1 ? ' ' + (k + 1) : '') }));
});
(D.graphs || []).forEach((db, k) => {
  const failing = db.graphs.filter(g => g.first != null);
  line('graph ' + db.file + ': ' + db.type + ', ' + plural(db.graphs.length, 'graph') + (db.type === 'compare' ? '; ' + (failing.length ? 'first failing node ' + failing.map(g => 'rank ' + g.rank + ' ' + g.names[g.first]).join('; ') : 'no failing node') : ''), failing.length ? 'fail' : 'pass', '#graph-' + k);
  nav.append(el('a', { href: '#graph-' + k, text: 'graph' + (D.graphs.length > 1 ? ' ' + (k + 1) : '') }));
});
D.run.unread.forEach(why => line('not read: ' + why, 'error', '#run'));
if (!D.compares.length && !D.nans.length && !D.gradsims.length && !D.prechecks.length && !D.free_benchmark.files.length && !D.monitors.length && !(D.graphs || []).length) ol.append(el('li', { text: 'No result files were found; the run information is below.' }));
nav.append(el('a', { href: '#run', text: 'run info' }));
overview.append(el('div', { class: 'help', text: 'Verdicts follow msprobe\'s rules: a compare fails when a row misses its accuracy criteria (Accuracy "No", Result "Warning" or "Different"); nan-analyze fails when it found the operator that produced the first NaN/Inf; a pre-check fails when an API is error or warning; free_benchmark fails when a free_benchmark.csv holds a row (msprobe writes only inconsistent API calls); a monitor folder fails when its anomaly.json files hold an anomaly; a compare graph (.vis.db) fails when a node\'s precision_index is in msprobe\'s error colour band.' }));
D.compares.forEach((c, k) => renderCompare(c, k, main));
D.nans.forEach((x, k) => renderNan(x, k, main));
D.gradsims.forEach((g, k) => renderGradsim(g, k, main));
D.prechecks.forEach((p, k) => renderPrecheck(p, k, main));
if (D.free_benchmark.files.length) renderFreeBenchmark(D.free_benchmark, main);
D.monitors.forEach((x, k) => renderMonitor(x, k, main));
(D.graphs || []).forEach((db, k) => renderGraphDb(db, k, main));
renderRun(main);
window.tprobeReadyAt = performance.now();
document.body.setAttribute('data-ready', '1');
})();
