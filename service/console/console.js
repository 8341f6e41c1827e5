// The sluice support console's script: the only script of the page (its Content-Security-
// Policy allows no other, and no inline code). It talks to /console/api/ on this origin
// only; every POST carries the session's CSRF token. No library: the DOM and fetch.
'use strict';

const state = {csrf: '', actor: '', rules: [], account: null, overrides: false};

const $ = (id) => document.getElementById(id);

function say(text, bad) {
  $('message').textContent = text;
  $('message').className = bad ? 'bad' : 'ok';
}

async function api(method, path, body) {
  const init = {method, credentials: 'same-origin', headers: {}};
  if (method === 'POST') {
    init.headers['Content-Type'] = 'application/json';
    init.headers['X-CSRF-Token'] = state.csrf;
    init.body = JSON.stringify(body || {});
  }
  const r = await fetch('/console/api' + path, init);
  let json = {};
  try {
    json = await r.json();
  } catch (e) {
    json = {};
  }
  if (r.status === 401 && path !== '/signin') showSignIn('Your session ended: sign in again.');
  return {status: r.status, json};
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(tbody, cells) {
  const tr = el('tr');
  for (const c of cells) tr.appendChild(el('td', c));
  tbody.appendChild(tr);
  return tr;
}

function seconds(ms) {
  if (ms < 0) return '-';
  if (ms < 1000) return ms + ' ms';
  if (ms < 120000) return (ms / 1000).toFixed(1) + ' s';
  return Math.round(ms / 60000) + ' min';
}

function showSignIn(text) {
  state.csrf = '';
  $('app').hidden = true;
  $('who').hidden = true;
  $('signin').hidden = false;
  if (text) say(text, true);
}

async function showApp(session) {
  state.csrf = session.csrf;
  state.actor = session.actor;
  $('actor').textContent = session.actor;
  $('signin').hidden = true;
  $('who').hidden = false;
  $('app').hidden = false;
  const config = await api('GET', '/admin/config');
  state.rules = config.status === 200 ? config.json.rules : [];
  const overrides = await api('GET', '/admin/overrides');
  state.overrides = overrides.status === 200;
  await Promise.all([loadTop(), searchAudit()]);
}

// ---- find an account

function parseEntries(text) {
  const entries = [];
  for (const line of text.split(/[\n,]/)) {
    const t = line.trim();
    if (!t) continue;
    const eq = t.indexOf('=');
    entries.push(eq < 0 ? {key: t, value: ''} : {key: t.slice(0, eq), value: t.slice(eq + 1)});
  }
  return entries;
}

function pick(limiter, id) {
  const rule = state.rules.find((r) => r.limiter === limiter);
  if (!rule) return say('no rule of this configuration is named ' + limiter, true);
  $('find-domain').value = rule.domain;
  $('find-entries').value = id.split(',').join('\n');
  find();
}

function topItem(list, text, limiter, id) {
  const li = el('li');
  const b = el('button', text, 'link');
  b.type = 'button';
  b.addEventListener('click', () => pick(limiter, id));
  li.appendChild(b);
  list.appendChild(li);
}

async function loadTop() {
  const r = await api('GET', '/top');
  if (r.status !== 200) return;
  $('top-leases').replaceChildren();
  $('top-refused').replaceChildren();
  for (const t of r.json.leases)
    topItem($('top-leases'), `${t.id} on ${t.limiter}: ${t.live} live`, t.limiter, t.id);
  for (const t of r.json.refused)
    topItem($('top-refused'), `${t.id} on ${t.limiter}: ${t.refused} refused`, t.limiter, t.id);
  if (!r.json.leases.length) $('top-leases').appendChild(el('li', 'none'));
  if (!r.json.refused.length) $('top-refused').appendChild(el('li', 'none'));
}

async function find() {
  const domain = $('find-domain').value.trim();
  const entries = parseEntries($('find-entries').value);
  const inspect = await api('POST', '/admin/inspect', {domain, entries});
  if (inspect.status !== 200) return say(inspect.json.error || 'not found', true);
  const rule = state.rules.find((r) => r.limiter === inspect.json.limiter) || {};
  state.account = {domain, entries, limiter: inspect.json.limiter, id: inspect.json.id, rule};
  $('account-title').textContent = `${inspect.json.id} on ${inspect.json.limiter}`;
  $('account').hidden = false;
  say('');
  await Promise.all([showAccount(inspect.json), loadTop()]);
}

async function showAccount(inspected) {
  const a = state.account;
  const concurrency = a.rule.algorithm === 'concurrency';
  $('do-release').hidden = !concurrency;
  $('do-reset').hidden = concurrency;
  $('override-part').hidden = concurrency || !state.overrides;
  $('leases-part').hidden = !concurrency;
  const tbody = $('limit-table').tBodies[0];
  tbody.replaceChildren();
  row(tbody, ['algorithm', a.rule.algorithm]);
  if (concurrency) {
    await showLeases(inspected, tbody);
  } else {
    await showCounter(tbody);
    await showOverrides();
  }
}

async function showCounter(tbody) {
  const a = state.account;
  const r = await api('POST', '/peek', {domain: a.domain, descriptors: [{entries: a.entries}]});
  const d = r.status === 200 ? r.json.descriptors[0] : null;
  if (!d) return row(tbody, ['state', r.json.error || 'unreadable']);
  const lim = d.limit || {};
  if (lim.unlimited) return row(tbody, ['limit', 'unlimited']);
  const used = d.remaining !== undefined ? lim.requests_per_unit - d.remaining : '-';
  a.used = used;
  a.limit = lim.requests_per_unit;
  const override = d.override ? ` (${d.override} override)` : '';
  row(tbody, ['limit', `${lim.requests_per_unit} per ${lim.unit}${override}`]);
  row(tbody, ['used', used]);
  row(tbody, ['remaining', d.remaining]);
  row(tbody, ['resets in', seconds(d.reset_after_ms)]);
  const refused = d.code === 'OVER_LIMIT' || d.remaining <= 0;
  row(tbody, ['refused now', refused ? 'yes' : 'no']).className = refused ? 'refused' : 'admitted';
}

async function showLeases(inspected, tbody) {
  const a = state.account;
  const list = await api('POST', '/admin/leases/list', {domain: a.domain, entries: a.entries});
  const leases = list.status === 200 ? list.json.leases : [];
  const now = inspected.now_ms;
  a.live = leases.length;
  row(tbody, ['limit', `${a.rule.requests_per_unit} live leases`]);
  row(tbody, ['live', leases.length]);
  const refused = leases.length >= a.rule.requests_per_unit;
  row(tbody, ['refused now', refused ? 'yes' : 'no']).className = refused ? 'refused' : 'admitted';
  const lt = $('lease-table').tBodies[0];
  lt.replaceChildren();
  for (const l of leases) {
    // A lease is heartbeating when its expiry has moved past the one it was granted.
    const beating = l.expires_at_ms - l.acquired_at_ms > a.rule.lease_ttl_ms + 50;
    row(lt, [l.id.slice(0, 24) + '…', seconds(now - l.acquired_at_ms),
      seconds(l.expires_at_ms - now), beating ? 'yes' : 'not yet']);
  }
  if (!leases.length) row(lt, ['no live lease', '', '', '']);
  const history = inspected.keys.find((k) => k.key.endsWith(':ch'));
  drawChart(history ? history.fields : {}, now);
}

// The per-minute maximum of live leases over the last hour: one bar per minute, from the
// history the lease scripts keep (fields max_live_at_<minute start ms>).
function drawChart(fields, nowMs) {
  const svg = $('chart');
  const ns = 'http://www.w3.org/2000/svg';
  svg.replaceChildren();
  const thisMinute = Math.floor(nowMs / 60000);
  const values = [];
  for (let m = thisMinute - 59; m <= thisMinute; m++) {
    const v = fields['max_live_at_' + (m * 60000)];
    values.push(v === undefined ? null : v);
  }
  const seen = values.filter((v) => v !== null);
  const top = Math.max(1, ...seen, state.account.rule.requests_per_unit || 1);
  const W = 640, H = 200, left = 30, bottom = 20, plotH = H - bottom - 10;
  const barW = (W - left) / 60;
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.appendChild(e);
    return e;
  };
  add('line', {x1: left, y1: H - bottom, x2: W, y2: H - bottom, class: 'axis'});
  add('text', {x: 2, y: 14, class: 'label'}, String(top));
  add('text', {x: 2, y: H - bottom, class: 'label'}, '0');
  add('text', {x: left, y: H - 4, class: 'label'}, '-60 min');
  add('text', {x: W - 30, y: H - 4, class: 'label'}, 'now');
  values.forEach((v, i) => {
    if (v === null) return;
    const h = Math.max(1, (v / top) * plotH);
    add('rect', {x: left + i * barW + 1, y: H - bottom - h, width: barW - 2, height: h,
      class: 'bar', 'data-minute': String(thisMinute - 59 + i), 'data-max': String(v)});
  });
  svg.setAttribute('data-latest', seen.length ? String(seen[seen.length - 1]) : '');
}

// ---- overrides

async function showOverrides() {
  const list = $('override-list');
  list.replaceChildren();
  if (!state.overrides) return;
  const a = state.account;
  const r = await api('GET', '/admin/overrides');
  if (r.status !== 200) return;
  for (const o of r.json.overrides) {
    if (o.limiter !== a.limiter || o.id !== a.id) continue;
    const left = o.expires_at_ms ? seconds(o.expires_at_ms - Date.now()) : '-';
    list.appendChild(el('li', `limit ${o.limit}` + (o.window_ms ? ` per ${o.window_ms} ms` : '') +
      `, ends in ${left}, set by ${o.actor}: ${o.reason}`));
  }
}

// ---- actions

function confirmAction(text) {
  return new Promise((resolve) => {
    const d = $('confirm');
    $('confirm-text').textContent = text;
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), {once: true});
    d.showModal();
  });
}

async function act(path, extra, text) {
  const a = state.account;
  const reason = $('action-reason').value.trim();
  if (!reason) return say('Give a reason: it goes to the audit log with your name.', true);
  if (!(await confirmAction(text))) return say('Nothing was done.');
  const body = Object.assign({domain: a.domain, entries: a.entries, reason}, extra);
  const r = await api('POST', path, body);
  if (r.status !== 200) return say(r.json.error || 'refused (' + r.status + ')', true);
  const rec = r.json.record;
  say('Done: ' + (rec ? rec.action + ', ' + rec.outcome : 'recorded'));
  $('action-reason').value = '';
  await find();
  await searchAudit();
}

function release() {
  const a = state.account;
  return act('/admin/leases/release', {},
    `${a.live} live lease${a.live === 1 ? '' : 's'} of account ${a.id} on ${a.limiter} ` +
    'will be released.');
}

function reset() {
  const a = state.account;
  return act('/admin/reset', {},
    `The ${a.rule.algorithm} counter of account ${a.id} on ${a.limiter} (${a.used} used of ` +
    `${a.limit}) will be reset: its whole limit will be available again.`);
}

function setOverride() {
  const a = state.account;
  const limit = Number($('override-limit').value);
  if (!Number.isInteger(limit) || limit < 0)
    return say('The override limit is a whole number.', true);
  const extra = {limit};
  if ($('override-window').value) extra.window_ms = Number($('override-window').value);
  if ($('override-ttl').value) extra.ttl_s = Number($('override-ttl').value);
  return act('/admin/overrides', extra,
    `Account ${a.id} on ${a.limiter} will be limited to ${limit} instead of ${a.limit}` +
    (extra.ttl_s ? ` for ${extra.ttl_s} s.` : ' for the default lifetime.'));
}

function clearOverride() {
  const a = state.account;
  return act('/admin/overrides/clear', {},
    `The runtime override of account ${a.id} on ${a.limiter} will be cleared.`);
}

// ---- audit

async function searchAudit() {
  const q = new URLSearchParams(
    {id: $('audit-id').value, actor: $('audit-actor').value, limit: '50'});
  const r = await api('GET', '/audit?' + q.toString());
  if (r.status !== 200) return;
  const tbody = $('audit-table').tBodies[0];
  tbody.replaceChildren();
  for (const rec of r.json.records)
    row(tbody, [rec.ts, rec.actor, rec.action, rec.limiter, rec.id, rec.reason, rec.outcome]);
  if (!r.json.records.length) row(tbody, ['no record', '', '', '', '', '', '']);
}

// ---- wiring

function on(id, event, f) {
  $(id).addEventListener(event, (e) => {
    if (event === 'submit') e.preventDefault();
    f().catch((err) => say(String(err), true));
  });
}

on('signin-form', 'submit', async () => {
  const r = await api('POST', '/signin',
    {token: $('signin-token').value, actor: $('signin-actor').value});
  $('signin-token').value = '';
  if (r.status !== 200) return say(r.json.error || 'refused (' + r.status + ')', true);
  say('');
  await showApp(r.json);
});
on('signout', 'click', async () => {
  await api('POST', '/signout');
  showSignIn('Signed out.');
});
on('find-form', 'submit', find);
on('audit-form', 'submit', searchAudit);
on('do-release', 'click', release);
on('do-reset', 'click', reset);
on('do-override', 'click', setOverride);
on('do-clear', 'click', clearOverride);

(async () => {
  const r = await api('GET', '/session');
  if (r.status === 200) await showApp(r.json);
  else showSignIn('');
})();
