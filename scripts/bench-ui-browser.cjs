// For scripts/bench-ui.sh: how long the page takes in headless Chromium, measured inside the
// page: from the start of navigation to the archive list drawn (table and timeline), and
// from the click on an archive to its root directory drawn (the next frame after its rows
// are in the page). Prints two numbers, in milliseconds.
//
//   node scripts/bench-ui-browser.cjs URL ARCHIVE_NAME
'use strict';
const { chromium } = require('playwright-core');
const [url, name] = process.argv.slice(2);
(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  await page.goto(url);
  await page.waitForFunction(() => document.querySelectorAll('#archives tbody tr').length > 0 && document.querySelectorAll('#timeline .point').length > 0, null, { polling: 'raf' });
  const list = await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r(Math.round(performance.now())))));
  // Settled, as a person would be before clicking.
  await page.waitForTimeout(1000);
  const tree = await page.evaluate((want) => new Promise((resolve) => {
    const a = [...document.querySelectorAll('#archives a.archive')].find((x) => x.textContent === want);
    const body = document.querySelector('#entries tbody');
    const t0 = performance.now();
    const seen = new MutationObserver(() => {
      if (body.children.length) {
        seen.disconnect();
        requestAnimationFrame(() => resolve(Math.round(performance.now() - t0)));
      }
    });
    seen.observe(body, { childList: true });
    a.click();
  }), name);
  console.log(`${list} ${tree}`);
  await browser.close();
})().catch((e) => { console.error(e); process.exit(1); });
