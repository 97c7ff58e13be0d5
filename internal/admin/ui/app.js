// gatekeeper status page: polls /admin/state and /metrics every second and
// draws the last minutes as small canvas charts. Plain JS, no dependencies;
// served by statuspage.go under a Content-Security-Policy that forbids
// inline scripts and every remote load. Nothing here writes to the console:
// the Chromium test fails on the page's own console messages, so errors go
// into the hidden #errors list instead. Each chart's canvas carries its axis
// labels in data-x-ticks and data-y-ticks (separated by "|"), for readers
// of the DOM and for that test.
'use strict';

const POLL_MS = 1000;
const HISTORY_MS = 5 * 60 * 1000;
const LEVEL_COLORS = { normal: '#2ea043', degraded: '#d29922', critical: '#f85149' };
// REASON_COLORS gives every refusal reason gatekeeper counts (package
// decide's Reasons) a colour of its own, whichever reasons a chart shows;
// the load refusals take the strongest. A reason not listed here (a newer
// gatekeeper's) takes the first of EXTRA_COLORS no shown reason uses.
const REASON_COLORS = {
  rate_limited: '#e15759', overloaded: '#f28e2b', shed_priority: '#b07aa1', queue_full: '#4e79a7',
  queue_timeout: '#76b7b2', deadline: '#edc948', no_memory: '#59a14f', no_upstream: '#ff9da7',
  draining: '#bab0ac', upstream_overloaded: '#9c755f', quota_exceeded: '#a0cbe8',
  bad_request: '#ffbe7d', not_found: '#8cd17d', model_not_found: '#b6992d', too_large: '#499894',
  upstream_error: '#d37295', upstream_timeout: '#fabfd2',
};
const EXTRA_COLORS = ['#86bcb6', '#d4a6c8', '#f1ce63', '#ff9d9a', '#79706e', '#e6edf3'];

// samples holds one entry per poll: {t, state, rates}; trimmed to HISTORY_MS.
const samples = [];
let lastCounters = null; // {t, values: {reason: count}} from the previous /metrics
let units = {}; // signal → unit, from the state's signal_units
const cards = {}; // upstream → DOM nodes of its card

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function reportError(msg) {
  const list = document.getElementById('errors');
  list.append(el('li', {}, String(msg)));
}
window.addEventListener('error', (e) => reportError('error: ' + e.message));
window.addEventListener('unhandledrejection', (e) => reportError('rejection: ' + e.reason));
document.addEventListener('securitypolicyviolation', (e) => reportError('csp: ' + e.violatedDirective + ' ' + e.blockedURI));

function fmt(v) {
  if (v === undefined || v === null || Number.isNaN(v)) return '–';
  if (Math.abs(v) >= 100 || Number.isInteger(v)) return String(Math.round(v * 100) / 100);
  return v.toFixed(3);
}

const BINARY = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
const DECIMAL = ['', 'k', 'M', 'G', 'T'];

// scaleFor returns how to print numbers up to max in a unit: the divisor
// and suffix of the largest binary (bytes) or decimal (others, from 10 000)
// prefix that max reaches.
function scaleFor(max, unit) {
  const a = Math.abs(max);
  if (unit === 'bytes') {
    let i = 0;
    while (i < BINARY.length - 1 && a >= 1024 ** (i + 1)) i++;
    return { div: 1024 ** i, suffix: ' ' + BINARY[i] };
  }
  let i = 0;
  if (a >= 1e4) while (i < DECIMAL.length - 1 && a >= 1000 ** (i + 1)) i++;
  return { div: 1000 ** i, suffix: DECIMAL[i] };
}

// fmtValue prints a signal's value in its unit: bytes as KiB … TiB with
// three significant digits, requests whole, the rest as fmt does.
function fmtValue(v, unit) {
  if (v === undefined || v === null || Number.isNaN(v)) return '–';
  if (unit === 'bytes') {
    const { div, suffix } = scaleFor(v, unit);
    return Number((v / div).toPrecision(3)) + suffix;
  }
  if (unit === 'requests') return String(Math.round(v));
  return fmt(v);
}

// niceStep returns the round step (1, 2 or 5 × 10^k, at least min) that
// splits span into at most parts intervals.
function niceStep(span, parts, min) {
  const raw = Math.max(span / parts, min || 0, Number.MIN_VALUE);
  const mag = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5]) if (m * mag >= raw * (1 - 1e-9)) return m * mag;
  return 10 * mag;
}

// yAxis chooses the value axis of values: round ticks, at most parts + 1
// of them, each a multiple of one round step (so no two labels repeat),
// never below zero unless a value is, whole numbers for counts; bytes in
// binary units. A flat line gets the band from zero to a quarter above it.
// It returns {lo, hi, ticks: [{v, label}]}.
function yAxis(values, opts, parts) {
  let lo = Math.min(...values, Infinity);
  let hi = Math.max(...values, -Infinity);
  if (opts.min !== undefined) lo = Math.min(lo, opts.min);
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) {
    lo = opts.min !== undefined ? opts.min : 0;
    hi = lo;
  }
  const floor = lo >= 0 ? 0 : -Infinity; // no negative tick for values that never are
  if (hi === lo) { // a flat line (or thresholds alone): from zero
    if (lo === 0) hi = 1;
    else if (lo > 0) [lo, hi] = [0, lo * 1.25];
    else [lo, hi] = [lo * 1.25, 0];
  }
  const scale = scaleFor(Math.max(Math.abs(lo), Math.abs(hi)), opts.unit);
  const whole = opts.unit === 'requests' || opts.integer;
  let step = niceStep((hi - lo) / scale.div, parts, whole ? 1 / scale.div : 0) * scale.div;
  const [vlo, vhi] = [lo, hi];
  for (;;) { // rounding the ends out may add an interval: then a larger step
    lo = Math.max(floor, Math.floor(vlo / step + 1e-9) * step);
    hi = Math.max(Math.ceil(vhi / step - 1e-9) * step, lo + step);
    if ((hi - lo) / step <= parts + 1e-9) break;
    step = niceStep(step * 1.5 / scale.div, 1) * scale.div;
  }
  const decimals = Math.max(0, -Math.floor(Math.log10(step / scale.div) + 1e-9));
  const ticks = [];
  for (let i = 0, v = lo; v <= hi + step / 2; i++, v = lo + i * step) {
    if (Math.abs(v) < step / 1e6) v = 0; // no "-0.00" from rounding
    ticks.push({ v, label: v === 0 ? '0' : (v / scale.div).toFixed(decimals) + scale.suffix });
  }
  return { lo, hi, ticks };
}

// PLOT is the charts' margins in CSS pixels: the value labels' room on the
// left; the level strip under the window chart uses the same.
const PLOT = { left: 48, right: 8 };

// X_STEPS are the time axis' tick intervals, the smallest that leaves room
// between labels is used.
const X_STEPS = [10000, 15000, 30000, 60000, 120000, 300000];

// agoLabel prints a time ms before now: "now", "30s ago", "1m ago",
// "1m30s ago".
function agoLabel(ms) {
  if (ms <= 0) return 'now';
  const s = Math.round(ms / 1000);
  const m = Math.floor(s / 60);
  if (!m) return s + 's ago';
  return m + 'm' + (s % 60 ? (s % 60) + 's' : '') + ' ago';
}

function clock(t) {
  return new Date(t).toISOString().slice(11, 19);
}

// parseRejections reads gatekeeper_rejections_total{reason="…"} from the
// Prometheus text format.
function parseRejections(text) {
  const out = {};
  const re = /^gatekeeper_rejections_total\{[^}]*reason="([^"]*)"[^}]*\}\s+([0-9.eE+-]+)/;
  for (const line of text.split('\n')) {
    const m = re.exec(line);
    if (m) out[m[1]] = (out[m[1]] || 0) + Number(m[2]);
  }
  return out;
}

async function poll() {
  const t = Date.now();
  try {
    const res = await fetch('state', { cache: 'no-store' });
    if (!res.ok) throw new Error('state: HTTP ' + res.status);
    const state = await res.json();
    let rates = {};
    let totals = null;
    try {
      const mres = await fetch('../metrics', { cache: 'no-store' });
      if (mres.ok) {
        totals = parseRejections(await mres.text());
        if (lastCounters) {
          const dt = Math.max((t - lastCounters.t) / 1000, 0.001);
          for (const [r, v] of Object.entries(totals)) rates[r] = Math.max(0, v - (lastCounters.values[r] || 0)) / dt;
        }
        lastCounters = { t, values: totals };
      }
    } catch (e) {
      rates = {}; // metrics are optional; the state still renders
    }
    samples.push({ t, state, rates });
    while (samples.length && samples[0].t < t - HISTORY_MS) samples.shift();
    render(state, totals);
    setConn(true, 'live');
  } catch (e) {
    setConn(false, 'no data: ' + e.message);
  }
  setTimeout(poll, POLL_MS);
}

function setConn(ok, text) {
  const c = document.getElementById('conn');
  c.dataset.ok = String(ok);
  c.textContent = text;
}

function render(state, totals) {
  document.getElementById('version').textContent = 'version ' + state.version;
  const mode = document.getElementById('mode');
  mode.textContent = state.mode;
  mode.dataset.ok = String(state.mode === 'enforce');
  const ready = document.getElementById('ready');
  ready.textContent = state.draining ? 'draining' : state.ready ? 'ready' : 'not ready';
  ready.dataset.ok = String(state.ready && !state.draining);
  document.getElementById('updated').textContent = 'updated ' + clock(Date.parse(state.time) || Date.now());
  document.getElementById('limits').textContent = Object.entries(state.limits || {})
    .map(([k, v]) => k + ' ' + fmt(v)).join(' · ');
  units = state.signal_units || {};

  const q = state.queue || {};
  document.getElementById('queue-length').textContent = fmt(q.length);
  document.getElementById('queue-tokens').textContent = fmt(q.tokens);
  document.getElementById('queue-order').textContent = q.order || '–';
  drawChart(document.getElementById('queue-chart'), [
    { color: '#58a6ff', points: samples.map((s) => [s.t, s.state.queue ? s.state.queue.length : 0]) },
  ], { min: 0, integer: true });

  renderRefusals(totals);
  for (const u of state.upstreams || []) renderUpstream(u);
  for (const name of Object.keys(cards)) {
    if (!(state.upstreams || []).some((u) => u.name === name)) {
      cards[name].root.remove();
      delete cards[name];
    }
  }
  renderSources(state.sources || []);
  renderChanges(state.level_changes || []);
}

// renderChanges lists the level changes gatekeeper remembers (the state's
// level_changes, newest first), so a page loaded after a change shows it.
function renderChanges(changes) {
  const list = document.getElementById('events');
  const key = changes.length + ' ' + (changes.length ? changes[0].upstream + ' ' + changes[0].at : '');
  if (list.dataset.key === key) return;
  list.dataset.key = key;
  list.replaceChildren(...changes.map((c) => el('li', { 'data-upstream': c.upstream },
    `${clock(Date.parse(c.at))} ${c.upstream}: ${c.from} → ${c.to}${cause(c)}`)));
  if (!changes.length) list.append(el('li', { class: 'muted none' }, 'none since gatekeeper started'));
}

// cause says what moved a level: " by fragmentation 1.300 (stale)".
function cause(c) {
  return c && c.signal ? ` by ${c.signal} ${fmtValue(c.value, units[c.signal])}${c.stale ? ' (stale)' : ''}` : '';
}

// renderRefusals charts the reasons refused at some moment of the history
// (gatekeeper exports every reason from the start, most at 0), each in its
// own colour.
function renderRefusals(totals) {
  const reasons = new Set();
  for (const s of samples) for (const [r, v] of Object.entries(s.rates)) if (v > 0) reasons.add(r);
  const list = [...reasons].sort();
  const used = new Set(list.map((r) => REASON_COLORS[r]).filter(Boolean));
  const extra = EXTRA_COLORS.filter((c) => !used.has(c));
  let next = 0;
  const series = list.map((r) => ({
    label: r, color: REASON_COLORS[r] || extra[next++ % extra.length],
    points: samples.map((s) => [s.t, s.rates[r] || 0]),
  }));
  drawChart(document.getElementById('refusal-chart'), series, { min: 0 });
  const legend = document.getElementById('refusal-legend');
  legend.replaceChildren(...series.map((s) => legendItem(s.color, s.label, { 'data-reason': s.label })));
  const refused = Object.entries(totals || {}).filter(([, v]) => v > 0).sort(([a], [b]) => a.localeCompare(b));
  document.getElementById('refusal-totals').textContent = refused.length
    ? refused.map(([r, v]) => r + ' ' + fmt(v)).join(' · ') + ' (total)'
    : 'none yet';
}

function card(name) {
  if (cards[name]) return cards[name];
  const level = el('span', { class: 'level', 'data-testid': 'level' });
  const info = el('span', { class: 'muted' });
  const stat = el('p', { class: 'stat' });
  const cause = el('p', { class: 'stat muted', 'data-testid': 'cause' });
  const windowChart = el('canvas', { class: 'chart', role: 'img', 'aria-label': name + ' window and in-flight over time' });
  const strip = el('canvas', { class: 'strip', role: 'img', 'aria-label': name + ' level over time' });
  const signals = el('div', { class: 'signals' });
  const root = el('div', { class: 'panel upstream', 'data-upstream': name },
    el('div', { class: 'head' }, el('h3', {}, name), level, info),
    stat, cause, el('h2', {}, 'Window and in-flight'), windowChart, strip,
    el('p', { class: 'legend' }, legendItem('#58a6ff', 'window'), legendItem('#f0883e', 'in flight'),
      legendItem('#8b949e', 'max / min'), legendItem('#d29922', 'level')),
    signals);
  document.getElementById('upstreams').append(root);
  cards[name] = { root, level, info, stat, cause, windowChart, strip, signals, signalNodes: {} };
  return cards[name];
}

function legendItem(color, text, attrs) {
  const i = el('i');
  i.style.background = color;
  return el('span', attrs, i, text);
}

function renderUpstream(u) {
  const c = card(u.name);
  const level = u.level || 'normal';
  c.root.dataset.level = level;
  c.level.dataset.level = level;
  c.level.textContent = level;
  c.info.textContent = [u.phase && 'phase ' + u.phase, 'breaker ' + u.breaker,
    u.healthy ? 'healthy' : 'unhealthy', u.available ? 'available' : 'not available', u.url].filter(Boolean).join(' · ');
  c.stat.textContent = `window ${u.window_limit} (min ${u.min_inflight}, max ${u.max_inflight}) · in flight ${u.inflight}`;
  const lc = u.last_change;
  c.cause.textContent = lc ? `last change ${clock(Date.parse(lc.at))}: ${lc.from} → ${lc.to}${cause(lc)}` : 'no level change yet';

  const mine = samples.map((s) => [s.t, (s.state.upstreams || []).find((x) => x.name === u.name)]).filter(([, x]) => x);
  drawChart(c.windowChart, [
    { color: '#58a6ff', points: mine.map(([t, x]) => [t, x.window_limit]) },
    { color: '#f0883e', points: mine.map(([t, x]) => [t, x.inflight]) },
  ], { min: 0, integer: true, lines: [{ v: u.max_inflight, color: '#8b949e' }, { v: u.min_inflight, color: '#8b949e' }] });
  drawStrip(c.strip, mine.map(([t, x]) => [t, x.level || 'normal']));

  const names = new Set([...Object.keys(u.rules || {}), ...Object.keys(u.signals || {})]);
  for (const sig of [...names].sort()) renderSignal(c, u, sig, mine);
}

function renderSignal(c, u, sig, mine) {
  let n = c.signalNodes[sig];
  if (!n) {
    const value = el('span', { class: 'value' });
    const meta = el('span', { class: 'muted' });
    const chart = el('canvas', { class: 'chart', role: 'img', 'aria-label': sig + ' over time with its thresholds' });
    const root = el('div', { class: 'signal', 'data-signal': sig }, el('strong', {}, sig + ' '), value, ' ', meta, chart);
    c.signals.append(root);
    n = c.signalNodes[sig] = { root, value, meta, chart };
  }
  const rule = (u.rules || {})[sig] || {};
  const v = (u.signals || {})[sig];
  n.root.dataset.absent = String(!v);
  const unit = units[sig];
  n.value.textContent = v ? fmtValue(v.value, unit) + (v.stale ? ' (stale)' : '') : 'absent';
  const th = [];
  if (rule.degrade !== undefined) th.push('degrade ≥ ' + fmtValue(rule.degrade, unit));
  if (rule.shed !== undefined) th.push('shed ≥ ' + fmtValue(rule.shed, unit));
  if (v) th.push(v.source + (v.gpu ? ' gpu ' + v.gpu : '') + ', ' + fmt(v.age_seconds) + ' s old');
  n.meta.textContent = th.join(' · ');
  const lines = [];
  if (rule.degrade !== undefined) lines.push({ v: rule.degrade, color: LEVEL_COLORS.degraded });
  if (rule.shed !== undefined) lines.push({ v: rule.shed, color: LEVEL_COLORS.critical });
  const pts = mine.filter(([, x]) => x.signals && x.signals[sig]).map(([t, x]) => [t, x.signals[sig].value]);
  drawChart(n.chart, [{ color: '#3fb950', points: pts }], { lines, unit });
}

function renderSources(sources) {
  const body = document.querySelector('#sources tbody');
  body.replaceChildren(...sources.map((s) => el('tr', { 'data-up': String(s.up) },
    el('td', {}, s.name), el('td', {}, s.kind), el('td', {}, s.upstream || 'node'),
    el('td', {}, s.stale ? 'stale' : s.up ? 'up' : 'down'),
    el('td', {}, s.last_success && !s.last_success.startsWith('0001') ? clock(Date.parse(s.last_success)) : 'never'),
    el('td', {}, s.last_error || ''))));
  if (!sources.length) body.append(el('tr', {}, el('td', { colspan: '6', class: 'muted' }, 'no pressure sources configured')));
}

// sizeCanvas matches the canvas to its CSS size and the device pixel ratio.
function sizeCanvas(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(canvas.clientWidth * dpr));
  const h = Math.max(1, Math.round(canvas.clientHeight * dpr));
  if (canvas.width !== w || canvas.height !== h) {
    canvas.width = w;
    canvas.height = h;
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return { ctx, w: canvas.clientWidth, h: canvas.clientHeight };
}

// timeSpan is the charts' time range: one minute at first, growing with the
// history up to HISTORY_MS, so a fresh page shows detail and not a dot.
function timeSpan(now) {
  const first = samples.length ? samples[0].t : now;
  return Math.min(HISTORY_MS, Math.max(60000, now - first));
}

// drawChart draws line series over the last timeSpan with labelled axes
// (yAxis; the time axis in "… ago") and optional horizontal dashed lines
// (thresholds, bounds). opts: min (a value the axis includes), integer
// (whole-number ticks), unit (a signal's), lines.
function drawChart(canvas, series, opts) {
  const { ctx, w, h } = sizeCanvas(canvas);
  ctx.clearRect(0, 0, w, h);
  const now = Date.now();
  const span = timeSpan(now);
  const t0 = now - span;
  const values = [];
  for (const s of series) for (const [t, v] of s.points) if (t >= t0 && Number.isFinite(v)) values.push(v);
  for (const l of opts.lines || []) if (Number.isFinite(l.v)) values.push(l.v);
  const { left, right } = PLOT;
  const top = 6, bottom = 16;
  const axis = yAxis(values, opts, Math.max(1, Math.min(4, Math.floor((h - top - bottom) / 16))));
  const { lo, hi } = axis;
  const x = (t) => left + ((t - t0) / span) * (w - left - right);
  const y = (v) => top + (1 - (v - lo) / (hi - lo)) * (h - top - bottom);

  ctx.font = '10px system-ui, sans-serif';
  ctx.fillStyle = '#8b949e';
  ctx.strokeStyle = '#30363d';
  ctx.lineWidth = 1;
  ctx.setLineDash([]);
  ctx.textAlign = 'right';
  for (const { v, label } of axis.ticks) {
    ctx.beginPath();
    ctx.moveTo(left, y(v));
    ctx.lineTo(w - right, y(v));
    ctx.stroke();
    ctx.fillText(label, left - 5, Math.min(Math.max(y(v) + 3, 9), h - bottom));
  }
  canvas.dataset.yTicks = axis.ticks.map((tk) => tk.label).join('|');
  // Time ticks at the smallest step that leaves each label its width.
  ctx.textAlign = 'center';
  const room = ctx.measureText('1m30s ago').width + 12;
  const step = X_STEPS.find((s) => (s / span) * (w - left - right) >= room) || X_STEPS[X_STEPS.length - 1];
  const xLabels = [];
  for (let ms = 0; ms <= span; ms += step) {
    const label = agoLabel(ms);
    const half = ctx.measureText(label).width / 2;
    ctx.fillText(label, Math.min(Math.max(x(now - ms), left + half), w - right - half), h - 3);
    xLabels.unshift(label);
  }
  canvas.dataset.xTicks = xLabels.join('|');
  ctx.textAlign = 'left';
  ctx.setLineDash([4, 3]);
  for (const l of opts.lines || []) {
    if (!Number.isFinite(l.v)) continue;
    ctx.strokeStyle = l.color;
    ctx.beginPath();
    ctx.moveTo(left, y(l.v));
    ctx.lineTo(w - right, y(l.v));
    ctx.stroke();
  }
  ctx.setLineDash([]);
  ctx.lineWidth = 2;
  for (const s of series) {
    const pts = s.points.filter(([t, v]) => t >= t0 && Number.isFinite(v));
    if (!pts.length) continue;
    ctx.strokeStyle = s.color;
    ctx.fillStyle = s.color;
    ctx.beginPath();
    pts.forEach(([t, v], i) => (i ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
    ctx.stroke();
    const [lt, lv] = pts[pts.length - 1];
    ctx.beginPath();
    ctx.arc(x(lt), y(lv), 2.5, 0, 2 * Math.PI);
    ctx.fill();
  }
}

// drawStrip colours the time axis by level.
function drawStrip(canvas, points) {
  const { ctx, w, h } = sizeCanvas(canvas);
  ctx.clearRect(0, 0, w, h);
  const now = Date.now();
  const { left, right } = PLOT;
  const span = timeSpan(now);
  const x = (t) => left + ((t - (now - span)) / span) * (w - left - right);
  for (let i = 0; i < points.length; i++) {
    const [t, level] = points[i];
    const next = i + 1 < points.length ? points[i + 1][0] : now;
    ctx.fillStyle = LEVEL_COLORS[level] || '#8b949e';
    const x0 = Math.floor(x(t));
    ctx.fillRect(x0, 0, Math.max(1, Math.ceil(x(next)) - x0), h);
  }
}

poll();
