// cairn ui: the page. Plain DOM, no framework: every name from the repository goes into the
// page as text (textContent), never as HTML.
'use strict';

const TOKEN = document.querySelector('meta[name="cairn-token"]').content;
// The token leaves the address bar (and the history): the page keeps it.
window.history.replaceState(null, '', '/');
const $ = (id) => document.getElementById(id);
const st = { repos: [], repo: null, archives: [], chosen: new Set(), archive: null, path: '', offset: 0, picked: new Map() };

async function api(path, options = {}) {
  const headers = { 'X-Cairn-Token': TOKEN };
  if (options.body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method: options.method || 'GET', headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  const v = await res.json().catch(() => ({ error: res.statusText }));
  if (!res.ok) throw new Error(v.error || res.statusText);
  return v;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function size(n) {
  if (n === null || n === undefined) return '';
  const units = ['B', 'kB', 'MB', 'GB', 'TB', 'PB'];
  let i = 0;
  let v = n;
  while (v >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return (i === 0 ? v : v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)) + ' ' + units[i];
}

function when(secs) {
  const d = new Date(secs * 1000);
  const pad = (x) => String(x).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function ago(secs) {
  if (secs === null || secs === undefined) return 'never';
  if (secs < 120) return `${secs} s`;
  if (secs < 7200) return `${Math.round(secs / 60)} min`;
  if (secs < 172800) return `${Math.round(secs / 3600)} h`;
  return `${Math.round(secs / 86400)} days`;
}

function mode(type, perm) {
  const t = { dir: 'd', symlink: 'l', fifo: 'p', chardev: 'c', blockdev: 'b' }[type] || '-';
  let s = t;
  for (const shift of [6, 3, 0]) {
    const p = (perm >> shift) & 7;
    s += (p & 4 ? 'r' : '-') + (p & 2 ? 'w' : '-') + (p & 1 ? 'x' : '-');
  }
  return s;
}

function problem(e) {
  const p = el('p', { class: 'error', role: 'alert' }, e.message || String(e));
  return p;
}

// A dialog that asks before anything is written; resolves to true on OK.
function confirmWith(title, body, ok) {
  const d = $('confirm');
  $('confirm-title').textContent = title;
  $('confirm-body').replaceChildren(...body);
  $('confirm-ok').textContent = ok;
  return new Promise((resolve) => {
    const done = (yes) => { d.close(); resolve(yes); };
    $('confirm-ok').onclick = (e) => { e.preventDefault(); done(true); };
    d.querySelector('button[value="cancel"]').onclick = (e) => { e.preventDefault(); done(false); };
    d.showModal();
  });
}

async function loadRepos() {
  const v = await api('/api/repos');
  st.repos = v.repos;
  const nav = $('repos');
  nav.replaceChildren(...st.repos.map((r) => el('button', {
    type: 'button', class: 'repo', 'data-number': r.number, title: r.error ? r.error : r.location,
    onclick: () => showRepo(r.number),
  }, r.label, r.error ? ' ⚠' : '')));
  if (st.repos.length) await showRepo(st.repo === null ? 0 : st.repo);
}

async function showRepo(n) {
  st.repo = n;
  st.chosen.clear();
  for (const b of document.querySelectorAll('#repos button')) b.classList.toggle('current', Number(b.dataset.number) === n);
  $('browse').hidden = true;
  $('overview').hidden = false;
  $('results').replaceChildren();
  const r = st.repos[n];
  $('backup').hidden = !r.can_back_up;
  const summary = $('summary');
  if (r.error) {
    summary.replaceChildren(problem(new Error(r.error)));
    $('archives').tBodies[0].replaceChildren();
    $('timeline').replaceChildren();
    return;
  }
  summary.replaceChildren(el('p', {}, 'Loading…'));
  let v;
  try {
    v = await api(`/api/repos/${n}/archives`);
  } catch (e) {
    summary.replaceChildren(problem(e));
    return;
  }
  st.archives = v.archives;
  showSummary(r, v);
  drawTimeline(v.archives);
  showArchives(v.archives);
  updateDiff();
}

function showSummary(r, v) {
  const last = v.archives[v.archives.length - 1];
  const cov = v.verification;
  const items = [
    ['Repository', r.location],
    ['Size', `${size(v.size)} in ${v.packs} packs`],
    ['Archives', String(v.archives.length)],
    ['Last backup', last ? `${last.name}, ${when(last.start)} (${ago(Math.max(0, Math.round(Date.now() / 1000) - last.end))} ago)${last.stats.warnings ? `, ${last.stats.warnings} warnings` : ', no warnings'}` : 'none yet'],
    ['Verified', cov.packs === 0 ? 'nothing to verify' : cov.never_packs > 0 ? `${cov.never_packs} of ${cov.packs} packs never verified by this machine` : `every pack, the oldest ${ago(cov.oldest_age_secs)} ago`],
  ];
  const job = r.last_backup_job;
  if (job) items.push(['Back up now', `${job.title}: ${outcome(job)}`]);
  const dl = el('dl');
  for (const [k, val] of items) dl.append(el('dt', {}, k), el('dd', {}, val));
  const parts = [dl];
  for (const d of v.damaged) parts.push(problem(new Error(d)));
  $('summary').replaceChildren(...parts);
}

function outcome(job) {
  if (job.running) return 'running';
  const s = job.summary || {};
  if (job.exit_status === 0) return 'finished';
  if (job.exit_status === 1) return `finished with ${s.warnings_said || 'some'} warnings`;
  return `failed${s.error ? ': ' + s.error : ''} (exit status ${job.exit_status})`;
}

// The archives over time: a dot per archive at its original size, a bar for what it added.
function drawTimeline(archives) {
  const svg = $('timeline');
  const W = 900;
  const H = 180;
  const pad = { l: 60, r: 10, t: 24, b: 24 };
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  const NS = 'http://www.w3.org/2000/svg';
  const mk = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const parts = [];
  if (!archives.length) {
    parts.push(mk('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'axis' }, 'No archives yet'));
    svg.replaceChildren(...parts);
    return;
  }
  const t0 = archives[0].start;
  const t1 = Math.max(archives[archives.length - 1].start, t0 + 1);
  const top = Math.max(1, ...archives.map((a) => a.stats.original_size));
  const x = (t) => pad.l + ((t - t0) / (t1 - t0)) * (W - pad.l - pad.r);
  const y = (s) => H - pad.b - (s / top) * (H - pad.t - pad.b);
  parts.push(mk('line', { x1: pad.l, y1: H - pad.b, x2: W - pad.r, y2: H - pad.b, class: 'axis-line' }));
  parts.push(mk('text', { x: pad.l - 4, y: pad.t + 8, 'text-anchor': 'end', class: 'axis' }, size(top)));
  parts.push(mk('text', { x: pad.l - 4, y: H - pad.b, 'text-anchor': 'end', class: 'axis' }, '0'));
  parts.push(mk('text', { x: pad.l, y: H - 6, class: 'axis' }, when(t0)));
  parts.push(mk('text', { x: W - pad.r, y: H - 6, 'text-anchor': 'end', class: 'axis' }, when(t1)));
  parts.push(mk('circle', { cx: W - 190, cy: 9, r: 4, class: 'size' }));
  parts.push(mk('text', { x: W - 182, y: 13, class: 'axis' }, 'size'));
  parts.push(mk('rect', { x: W - 130, y: 4, width: 4, height: 10, class: 'added' }));
  parts.push(mk('text', { x: W - 122, y: 13, class: 'axis' }, 'added to the repository'));
  for (const a of archives) {
    const cx = x(a.start);
    const g = mk('g', { class: 'point', tabindex: 0 });
    g.append(mk('title', {}, `${a.name}\n${when(a.start)}\n${size(a.stats.original_size)}, added ${size(a.stats.deduplicated_size)}`));
    g.append(mk('rect', { x: cx - 2, y: y(a.stats.deduplicated_size), width: 4, height: Math.max(1, H - pad.b - y(a.stats.deduplicated_size)), class: 'added' }));
    g.append(mk('circle', { cx, cy: y(a.stats.original_size), r: 4, class: 'size' }));
    g.addEventListener('click', () => browse(a, ''));
    parts.push(g);
  }
  svg.replaceChildren(...parts);
}

function showArchives(archives) {
  const rows = [...archives].reverse().map((a) => el('tr', {},
    el('td', {}, el('input', { type: 'checkbox', 'aria-label': `choose ${a.name} to compare`, onchange: (e) => { if (e.target.checked) st.chosen.add(a.id); else st.chosen.delete(a.id); updateDiff(); } })),
    el('td', {}, el('a', { href: '#', class: 'archive', onclick: (e) => { e.preventDefault(); browse(a, ''); } }, a.name)),
    el('td', {}, when(a.start)),
    el('td', { class: 'num' }, String(a.stats.files)),
    el('td', { class: 'num' }, size(a.stats.original_size)),
    el('td', { class: 'num' }, size(a.stats.deduplicated_size)),
    el('td', { class: 'num' }, String(a.stats.warnings)),
  ));
  $('archives').tBodies[0].replaceChildren(...rows);
}

function updateDiff() {
  $('diff').disabled = st.chosen.size !== 2;
}

async function diff() {
  const [a, b] = st.archives.filter((x) => st.chosen.has(x.id));
  const out = $('results');
  out.replaceChildren(el('p', {}, 'Comparing…'));
  try {
    const v = await api(`/api/repos/${st.repo}/diff?a=${a.id}&b=${b.id}`);
    const rows = v.changes.map((c) => el('tr', {}, el('td', { class: 'mark' }, c.change), el('td', {}, c.path)));
    out.replaceChildren(el('h3', {}, `From ${v.from} to ${v.to}: ${v.total} paths differ${v.total > v.changes.length ? ` (the first ${v.changes.length} shown)` : ''}`),
      el('table', { class: 'list', id: 'diff-list' }, el('tbody', {}, ...rows)));
  } catch (e) {
    out.replaceChildren(problem(e));
  }
}

async function find(e) {
  e.preventDefault();
  const pattern = $('find').value.trim();
  if (!pattern) return;
  const out = $('results');
  out.replaceChildren(el('p', {}, 'Searching…'));
  try {
    const v = await api(`/api/repos/${st.repo}/find?pattern=${encodeURIComponent(pattern)}`);
    const rows = v.found.map((f) => {
      const a = st.archives.find((x) => x.id === f.archive_id);
      const parent = parentKey(f.key);
      return el('tr', {},
        el('td', {}, el('a', { href: '#', onclick: (ev) => { ev.preventDefault(); if (a) browse(a, parent); } }, f.path)),
        el('td', {}, f.archive), el('td', { class: 'num' }, size(f.size)), el('td', {}, f.mtime.slice(0, 16).replace('T', ' ')));
    });
    out.replaceChildren(el('h3', {}, `${v.found.length}${v.more ? '+' : ''} found for ${pattern}`),
      el('table', { class: 'list', id: 'found' }, el('tbody', {}, ...rows)));
  } catch (err) {
    out.replaceChildren(problem(err));
  }
}

// The key (hex of the path's bytes) of the directory that holds `key`.
function parentKey(key) {
  for (let i = key.length - 2; i >= 0; i -= 2) if (key.slice(i, i + 2) === '2f') return key.slice(0, i);
  return '';
}

async function browse(a, key) {
  st.archive = a;
  st.path = key;
  st.offset = 0;
  st.picked.clear();
  $('overview').hidden = true;
  $('browse').hidden = false;
  $('entries').tBodies[0].replaceChildren();
  updatePicked();
  await page();
}

async function page() {
  const a = st.archive;
  const body = $('entries').tBodies[0];
  let v;
  try {
    v = await api(`/api/repos/${st.repo}/archives/${a.id}/tree?path=${st.path}&offset=${st.offset}&limit=1000`);
  } catch (e) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 7 }, problem(e))));
    return;
  }
  crumbs(a, v);
  for (const entry of v.entries) {
    const name = entry.type === 'dir'
      ? el('a', { href: '#', class: 'dir', onclick: (e) => { e.preventDefault(); browse(a, entry.key); } }, entry.name + '/')
      : el('span', {}, entry.name + (entry.target !== undefined ? ' → ' + entry.target : ''));
    body.append(el('tr', {},
      el('td', {}, el('input', { type: 'checkbox', 'aria-label': `choose ${entry.name}`, onchange: (e) => { if (e.target.checked) st.picked.set(entry.key, entry.name); else st.picked.delete(entry.key); updatePicked(); } })),
      el('td', {}, name),
      el('td', { class: 'num' }, entry.type === 'dir' ? (entry.entries === 1 ? '1 entry' : `${entry.entries} entries`) : size(entry.size)),
      el('td', { class: 'mono' }, mode(entry.type, entry.perm)),
      el('td', {}, entry.user),
      el('td', {}, when(entry.mtime)),
      el('td', {}, el('a', { href: `/api/repos/${st.repo}/archives/${a.id}/tar?path=${entry.key}&token=${TOKEN}`, class: 'download', download: '' }, 'tar')),
    ));
  }
  st.offset = v.offset + v.entries.length;
  const more = $('more');
  more.hidden = st.offset >= v.total;
  more.textContent = `Show more (${v.total - st.offset} left)`;
}

function crumbs(a, v) {
  const parts = [el('a', { href: '#', onclick: (e) => { e.preventDefault(); browse(a, ''); } }, a.name)];
  const key = v.key;
  let at = 0;
  const names = v.path ? v.path.split('/') : [];
  for (const n of names) {
    let next = key.indexOf('2f', at);
    while (next !== -1 && next % 2 === 1) next = key.indexOf('2f', next + 1);
    const end = next === -1 ? key.length : next;
    const k = key.slice(0, end);
    parts.push(' / ', el('a', { href: '#', onclick: (e) => { e.preventDefault(); browse(a, k); } }, n));
    at = end + 2;
  }
  $('crumbs').replaceChildren(...parts);
}

function updatePicked() {
  const n = st.picked.size;
  $('restore').disabled = false;
  $('restore').textContent = n ? `Restore ${n} chosen…` : (st.path ? 'Restore this directory…' : 'Restore the whole archive…');
  $('chosen').textContent = n ? [...st.picked.values()].join(', ') : '';
}

async function restore() {
  const a = st.archive;
  const keys = st.picked.size ? [...st.picked.keys()] : (st.path ? [st.path] : []);
  const folder = a.name === '.' || a.name === '..' || a.name.includes('/') ? 'archive' : a.name;
  const target = el('input', { id: 'target', type: 'text', value: `~/cairn-restore/${folder}`, size: 50, 'aria-label': 'Directory to restore into' });
  const overwrite = el('select', { id: 'overwrite', 'aria-label': 'Files already there' },
    el('option', { value: 'never' }, 'keep files already there'),
    el('option', { value: 'if-changed' }, 'replace files that differ'),
    el('option', { value: 'always' }, 'replace every file'));
  const what = keys.length ? `${keys.length} path(s) of ${a.name}` : `all of ${a.name}`;
  const ok = await confirmWith('Restore', [
    el('p', {}, `Restore ${what} into:`), target,
    el('p', {}, 'Files already there: ', overwrite),
  ], 'Restore');
  if (!ok) return;
  try {
    const job = await api(`/api/repos/${st.repo}/restore`, { method: 'POST', body: { archive: a.id, paths: keys, target: target.value, overwrite: overwrite.value } });
    follow(job);
  } catch (e) {
    showJobError(e);
  }
}

async function backupNow() {
  const r = st.repos[st.repo];
  const ok = await confirmWith('Back up now', [el('p', {}, `Run the backup of profile ${r.profile} now (cairn --profile ${r.profile} create)?`)], 'Back up');
  if (!ok) return;
  try {
    follow(await api(`/api/repos/${st.repo}/backup`, { method: 'POST', body: {} }));
  } catch (e) {
    showJobError(e);
  }
}

async function check() {
  const data = el('input', { type: 'checkbox', id: 'verify-data' });
  const ok = await confirmWith('Check', [el('p', {}, `Check ${st.repos[st.repo].label}?`), el('label', {}, data, ' read and verify every chunk (--verify-data)')], 'Check');
  if (!ok) return;
  try {
    follow(await api(`/api/repos/${st.repo}/check`, { method: 'POST', body: { verify_data: data.checked } }));
  } catch (e) {
    showJobError(e);
  }
}

function showJobError(e) {
  const box = $('job');
  box.hidden = false;
  box.replaceChildren(problem(e));
}

// Follows a job: its progress line, its warnings, and how it ended.
async function follow(job) {
  const box = $('job');
  box.hidden = false;
  box.dataset.state = 'running';
  const title = el('strong', {}, job.title);
  const line = el('span', { class: 'progress' }, 'starting…');
  const bar = el('progress', { max: 100 });
  const said = el('ul', { class: 'said' });
  box.replaceChildren(title, ' ', bar, ' ', line, said);
  let from = 0;
  for (;;) {
    let v;
    try {
      v = await api(`/api/jobs/${job.id}?from=${from}&wait=10`);
    } catch (e) {
      line.textContent = e.message;
      return;
    }
    from = v.next;
    for (const r of v.records) {
      if (r.type === 'progress') {
        line.textContent = r.message || '';
        if (r.percent !== undefined) bar.value = r.percent; else bar.removeAttribute('value');
      } else if (r.type === 'warning' || r.type === 'error' || r.type === 'note') {
        said.append(el('li', { class: r.type }, `${r.type}: ${r.message}`));
      }
    }
    if (!v.running) {
      box.dataset.state = v.exit_status === 0 ? 'ok' : v.exit_status === 1 ? 'warning' : 'failed';
      bar.value = 100;
      line.textContent = outcome(v);
      const n = st.repo;
      const fresh = await api('/api/repos');
      st.repos = fresh.repos;
      if (v.kind === 'backup' && v.repo === n && !$('overview').hidden) await showRepo(n);
      return;
    }
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('find-form').addEventListener('submit', find);
  $('diff').addEventListener('click', diff);
  $('back').addEventListener('click', () => showRepo(st.repo));
  $('more').addEventListener('click', page);
  $('restore').addEventListener('click', restore);
  $('backup').addEventListener('click', backupNow);
  $('check').addEventListener('click', check);
  loadRepos().catch((e) => $('summary').replaceChildren(problem(e)));
});
