// cairn ui end to end in a real browser (Debian's Chromium, headless, driven by
// playwright-core): run by scripts/ui-test.sh, which makes the repository, its two archives
// and the profile, starts `cairn ui`, and checks afterwards what the CLI sees.
//
//   node tests/ui/ui.cjs URL WORK
//
// WORK holds src/ (what was backed up) and is where the restore goes.

'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { chromium } = require('playwright-core');

const [url, work] = process.argv.slice(2);
const base = new URL(url);
const token = base.searchParams.get('token');
const port = Number(base.port);

// A request to the ui from outside the browser, with the headers given (no token unless given).
function raw(method, reqPath, headers = {}, body) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: reqPath, headers }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

async function refusals() {
  const host = `127.0.0.1:${port}`;
  const cases = [
    ['no token', 'GET', '/api/repos', { Host: host }],
    ['a wrong token', 'GET', '/api/repos', { Host: host, 'X-Cairn-Token': 'x'.repeat(token.length) }],
    ['a foreign Origin', 'GET', '/api/repos', { Host: host, 'X-Cairn-Token': token, Origin: 'http://evil.example' }],
    ['a foreign Host (DNS rebinding)', 'GET', `/?token=${token}`, { Host: `evil.example:${port}` }],
    ['a cross-site fetch', 'GET', '/api/repos', { Host: host, 'X-Cairn-Token': token, 'Sec-Fetch-Site': 'cross-site' }],
    ['a write with the token in the address only', 'POST', `/api/repos/0/backup?token=${token}`, { Host: host, 'Content-Type': 'application/json' }, '{}'],
  ];
  for (const [what, method, p, headers, body] of cases) {
    const r = await raw(method, p, headers, body);
    assert.equal(r.status, 403, `${what}: ${r.status} ${r.text}`);
  }
  const ok = await raw('GET', '/api/repos', { Host: host, 'X-Cairn-Token': token });
  assert.equal(ok.status, 200, ok.text);
  return cases.length;
}

// A page of another origin (another port of this machine) that knows the token tries to read
// and to start a backup through the browser: both are refused.
async function crossOrigin(browser) {
  const evil = http.createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html' });
    res.end('<!doctype html><title>evil</title>');
  });
  await new Promise((r) => evil.listen(0, '127.0.0.1', r));
  const jobsBefore = JSON.parse((await raw('GET', '/api/jobs', { Host: `127.0.0.1:${port}`, 'X-Cairn-Token': token })).text).jobs.length;
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${evil.address().port}/`);
  const said = await page.evaluate(async ({ port, token }) => {
    const out = {};
    try {
      const r = await fetch(`http://127.0.0.1:${port}/api/repos?token=${token}`, { mode: 'no-cors' });
      out.read = r.type;
    } catch (e) { out.read = 'blocked'; }
    try {
      await fetch(`http://127.0.0.1:${port}/api/repos/0/backup`, { method: 'POST', headers: { 'X-Cairn-Token': token, 'Content-Type': 'application/json' }, body: '{}' });
      out.write = 'sent';
    } catch (e) { out.write = 'blocked'; }
    try {
      await fetch(`http://127.0.0.1:${port}/api/repos/0/backup?token=${token}`, { method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body: '{}' });
      out.simple = 'sent';
    } catch (e) { out.simple = 'blocked'; }
    return out;
  }, { port, token });
  await page.close();
  evil.close();
  // The read is opaque to the page, the write never reaches the ui (no preflight is granted),
  // and the simple request is refused.
  assert.equal(said.read, 'opaque');
  assert.equal(said.write, 'blocked');
  const jobsAfter = JSON.parse((await raw('GET', '/api/jobs', { Host: `127.0.0.1:${port}`, 'X-Cairn-Token': token })).text).jobs.length;
  assert.equal(jobsAfter, jobsBefore, 'a page of another origin started a job');
}

// Waits for the job whose title starts with `title` to end; it must have ended well.
async function waitJob(page, what, title) {
  await page.waitForFunction((t) => {
    const box = document.getElementById('job');
    const shown = box.querySelector('strong');
    return shown && shown.textContent.startsWith(t) && box.dataset.state && box.dataset.state !== 'running';
  }, title, { timeout: 60000 });
  const state = await page.getAttribute('#job', 'data-state');
  const text = await page.textContent('#job');
  assert.equal(state, 'ok', `${what}: ${text}`);
}

(async () => {
  const refused = await refusals();
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));

    // The archive list shows the archives create made.
    await page.goto(url);
    await page.waitForSelector('#archives tbody tr');
    assert.ok(!page.url().includes('token'), `the token stayed in the address bar: ${page.url()}`);
    const names = await page.$$eval('#archives a.archive', (as) => as.map((a) => a.textContent));
    assert.deepEqual(names.sort(), ['one', 'two']);
    assert.equal(await page.locator('#timeline .point').count(), 2);

    // Find, and diff of the two.
    await page.fill('#find', '*.txt');
    await page.click('#find-form button');
    await page.waitForSelector('#found tr');
    assert.ok((await page.locator('#found tr').count()) >= 2);
    const boxes = page.locator('#archives tbody input[type=checkbox]');
    await boxes.nth(0).check();
    await boxes.nth(1).check();
    await page.click('#diff');
    await page.waitForSelector('#diff-list tr');
    const changed = await page.textContent('#diff-list');
    assert.match(changed, /notes\.txt/);

    // Browse archive "two" down to the file.
    await page.click('#archives a.archive:text-is("two")');
    const stored = path.join(work, 'src').split('/').filter(Boolean);
    for (const dir of stored) {
      await page.click(`#entries a.dir:text-is("${dir}/")`);
      await page.waitForSelector(`#crumbs a:text-is("${dir}")`);
    }
    await page.waitForSelector('#entries td span:text-is("notes.txt")');

    // Restore it through the page: the same bytes.
    const row = page.locator('#entries tr', { has: page.locator('span:text-is("notes.txt")') });
    await row.locator('input[type=checkbox]').check();
    await page.click('#restore');
    const target = path.join(work, 'restored');
    await page.fill('#target', target);
    await page.click('#confirm-ok');
    await waitJob(page, 'restore', 'restore to');
    const original = fs.readFileSync(path.join(work, 'src', 'notes.txt'));
    const restored = fs.readFileSync(path.join(target, ...stored, 'notes.txt'));
    assert.ok(original.equals(restored), 'the restored file differs');

    // Back up now adds an archive (the script checks that the CLI lists it).
    await page.click('#back');
    await page.waitForSelector('#archives tbody tr');
    await page.click('#backup');
    await page.click('#confirm-ok');
    await waitJob(page, 'back up now', 'back up home');
    await page.waitForFunction(() => document.querySelectorAll('#archives tbody tr').length === 3);

    await crossOrigin(browser);
    assert.deepEqual(errors, [], 'the page threw');
    console.log(`ui-test: archive list, find, diff, browse, restore (same bytes), back up now; ${refused} refusals and a cross-origin page refused`);
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error(`ui-test: FAILED: ${e.stack || e}`);
  process.exit(1);
});
