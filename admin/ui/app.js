// gatekeeper status page: polls /admin/state and /metrics every second and
// draws the last minutes as small canvas charts. Plain JS, no dependencies;
// served by statuspage.go under a Content-Security-Policy that forbids
// inline scripts and every remote load. Nothing here writes to the console:
// the Chromium test treats any console line as a failure, so errors go into
// the hidden #errors list instead.
'use strict';

const POLL_MS = 1000;
const HISTORY_MS = 5 * 60 * 1000;
const LEVEL_COLORS = { normal: '#2ea043', degraded: '#d29922', critical: '#f85149' };
const REASON_COLORS = ['#f85149', '#d29922', '#58a6ff', '#a371f7', '#3fb950', '#db61a2', '#8b949e'];

// samples holds one entry per poll: {t, state, rates}; trimmed to HISTORY_MS.
const samples = [];
let lastCounters = null; // {t, values: {reason: count}} from the previous /metrics
const lastLevel = {}; // upstream → level seen on the previous poll
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

  const q = state.queue || {};
  document.getElementById('queue-length').textContent = fmt(q.length);
  document.getElementById('queue-tokens').textContent = fmt(q.tokens);
  document.getElementById('queue-order').textContent = q.order || '–';
  drawChart(document.getElementById('queue-chart'), [
    { color: '#58a6ff', points: samples.map((s) => [s.t, s.state.queue ? s.state.queue.length : 0]) },
  ], { min: 0 });

  renderRefusals(totals);
  for (const u of state.upstreams || []) renderUpstream(u);
  for (const name of Object.keys(cards)) {
    if (!(state.upstreams || []).some((u) => u.name === name)) {
      cards[name].root.remove();
      delete cards[name];
    }
  }
  renderSources(state.sources || []);
}

function renderRefusals(totals) {
  const reasons = new Set();
  for (const s of samples) for (const r of Object.keys(s.rates)) reasons.add(r);
  const list = [...reasons].sort();
  const series = list.map((r, i) => ({
    label: r, color: REASON_COLORS[i % REASON_COLORS.length],
    points: samples.map((s) => [s.t, s.rates[r] || 0]),
  }));
  drawChart(document.getElementById('refusal-chart'), series, { min: 0 });
  const legend = document.getElementById('refusal-legend');
  legend.replaceChildren(...series.map((s) => {
    const i = el('i');
    i.style.background = s.color;
    return el('span', {}, i, s.label);
  }));
  document.getElementById('refusal-totals').textContent = totals && Object.keys(totals).length
    ? Object.entries(totals).map(([r, v]) => r + ' ' + fmt(v)).join(' · ') + ' (total)'
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

function legendItem(color, text) {
  const i = el('i');
  i.style.background = color;
  return el('span', {}, i, text);
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
  const why = lc && lc.signal ? ` by ${lc.signal} ${fmt(lc.value)}${lc.stale ? ' (stale)' : ''}` : '';
  c.cause.textContent = lc ? `last change ${clock(Date.parse(lc.at))}: ${lc.from} → ${lc.to}${why}` : 'no level change yet';
  if (lastLevel[u.name] !== undefined && lastLevel[u.name] !== level) {
    const ev = document.getElementById('events');
    const known = lc && lc.to === level; // the server's record of this change
    const when = known ? Date.parse(lc.at) : Date.now();
    ev.prepend(el('li', { 'data-upstream': u.name }, `${clock(when)} ${u.name}: ${lastLevel[u.name]} → ${level}${known ? why : ''}`));
  }
  lastLevel[u.name] = level;

  const mine = samples.map((s) => [s.t, (s.state.upstreams || []).find((x) => x.name === u.name)]).filter(([, x]) => x);
  drawChart(c.windowChart, [
    { color: '#58a6ff', points: mine.map(([t, x]) => [t, x.window_limit]) },
    { color: '#f0883e', points: mine.map(([t, x]) => [t, x.inflight]) },
  ], { min: 0, lines: [{ v: u.max_inflight, color: '#8b949e' }, { v: u.min_inflight, color: '#8b949e' }] });
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
  n.value.textContent = v ? fmt(v.value) + (v.stale ? ' (stale)' : '') : 'absent';
  const th = [];
  if (rule.degrade !== undefined) th.push('degrade ≥ ' + fmt(rule.degrade));
  if (rule.shed !== undefined) th.push('shed ≥ ' + fmt(rule.shed));
  if (v) th.push(v.source + (v.gpu ? ' gpu ' + v.gpu : '') + ', ' + fmt(v.age_seconds) + ' s old');
  n.meta.textContent = th.join(' · ');
  const lines = [];
  if (rule.degrade !== undefined) lines.push({ v: rule.degrade, color: LEVEL_COLORS.degraded });
  if (rule.shed !== undefined) lines.push({ v: rule.shed, color: LEVEL_COLORS.critical });
  const pts = mine.filter(([, x]) => x.signals && x.signals[sig]).map(([t, x]) => [t, x.signals[sig].value]);
  drawChart(n.chart, [{ color: '#3fb950', points: pts }], { lines });
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

function tickStep(span) {
  if (span <= 60000) return 10000;
  if (span <= 180000) return 30000;
  return 60000;
}

function tickLabel(ms) {
  if (ms === 0) return 'now';
  return ms % 60000 === 0 ? '-' + ms / 60000 + 'm' : '-' + ms / 1000 + 's';
}

// drawChart draws line series over the last timeSpan with a y axis
// and optional horizontal dashed lines (thresholds, bounds).
function drawChart(canvas, series, opts) {
  const { ctx, w, h } = sizeCanvas(canvas);
  ctx.clearRect(0, 0, w, h);
  const now = Date.now();
  const span = timeSpan(now);
  const t0 = now - span;
  const values = [];
  for (const s of series) for (const [, v] of s.points) if (Number.isFinite(v)) values.push(v);
  for (const l of opts.lines || []) if (Number.isFinite(l.v)) values.push(l.v);
  let lo = opts.min !== undefined ? opts.min : Math.min(...values, Infinity);
  let hi = Math.max(...values, -Infinity);
  if (!Number.isFinite(lo)) lo = 0;
  if (!Number.isFinite(hi) || hi <= lo) hi = lo + 1;
  const pad = (hi - lo) * 0.08;
  hi += pad;
  if (opts.min === undefined) lo -= pad;
  const left = 44, right = 6, top = 6, bottom = 16;
  const x = (t) => left + ((t - t0) / span) * (w - left - right);
  const y = (v) => top + (1 - (v - lo) / (hi - lo)) * (h - top - bottom);

  ctx.font = '10px system-ui, sans-serif';
  ctx.fillStyle = '#8b949e';
  ctx.strokeStyle = '#30363d';
  ctx.lineWidth = 1;
  ctx.setLineDash([]);
  for (const v of [lo, (lo + hi) / 2, hi]) {
    ctx.beginPath();
    ctx.moveTo(left, y(v));
    ctx.lineTo(w - right, y(v));
    ctx.stroke();
    ctx.fillText(fmt(v), 2, y(v) + 3);
  }
  const step = tickStep(span);
  for (let ms = 0; ms <= span; ms += step) {
    ctx.fillText(tickLabel(ms), Math.min(x(now - ms) - 8, w - 24), h - 3);
  }
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
  const left = 44, right = 6;
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
