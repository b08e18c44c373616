// chat_page.cjs — drives kvrun serve's chat page (GET /) in headless Chromium through
// puppeteer-core: a conversation streams into the page, Stop ends a long reply (and the text
// stops growing), Regenerate replaces the reply, the conversation survives a reload (browser
// storage), the stats line comes from /props. Saves a screenshot.
//   node chat_page.cjs URL SCREENSHOT.png CHROMIUM_PATH
// Exits 0 when every check holds; prints what failed otherwise.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const puppeteer = require("puppeteer-core");

const [url, shot, chromium] = process.argv.slice(2);

function check(ok, what) {
  if (!ok) throw new Error("check failed: " + what);
  console.log("ok: " + what);
}

(async () => {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "kvrun-chromium-"));
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--user-data-dir=" + profile],
  });
  let failed = false;
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.setViewport({ width: 1100, height: 760 });
    await page.goto(url, { waitUntil: "load" });
    await page.waitForFunction(() => document.querySelector("#stats").textContent.includes("n_ctx"),
                               { timeout: 10000 });
    check(true, "the stats line shows /props");

    // A short reply streams in.
    await page.$eval("#max_tokens", (e) => { e.value = "24"; });
    await page.type("#input", "Once upon a time");
    await page.click("#send");
    await page.waitForFunction(() => document.querySelectorAll(".msg.assistant").length === 1 &&
                                     !document.querySelector("#send").disabled,
                               { timeout: 30000 });
    const first = await page.$eval(".msg.assistant .content", (e) => e.textContent);
    check(first.length > 0, "a reply streamed into the page (" + first.length + " chars)");
    check((await page.$$(".msg.user")).length === 1, "the user message is shown");

    // Stop: a long reply, read through a slow link (2 kB/s) so that it is still streaming when
    // Stop is clicked once text arrives; the text then stops growing.
    await page.emulateNetworkConditions({ offline: false, download: 2000, upload: 1e6, latency: 0 });
    await page.$eval("#max_tokens", (e) => { e.value = "20000"; });
    await page.type("#input", "Tell me more");
    await page.click("#send");
    await page.waitForFunction(() => {
      const m = document.querySelectorAll(".msg.assistant");
      return m.length === 2 && m[1].querySelector(".content").textContent.length > 20;
    }, { timeout: 30000 });
    check(!(await page.$eval("#stop", (e) => e.hidden)), "Stop shows while streaming");
    await page.click("#stop");
    await page.waitForFunction(() => document.querySelector("#stop").hidden, { timeout: 10000 });
    const len = () => page.$eval(".msg.assistant:last-child .content", (e) => e.textContent.length);
    const a = await len();
    await new Promise((r) => setTimeout(r, 700));
    check((await len()) === a, "after Stop the reply stops growing (" + a + " chars)");

    await page.emulateNetworkConditions(null);

    // Regenerate replaces the last reply (still two assistant messages).
    await page.$eval("#max_tokens", (e) => { e.value = "16"; });
    await page.click("#regen");
    await page.waitForFunction(() => !document.querySelector("#send").disabled &&
                                     document.querySelector("#stop").hidden,
                               { timeout: 30000 });
    check((await page.$$(".msg.assistant")).length === 2, "Regenerate keeps one reply per turn");

    // The conversation is in the browser's storage: a reload shows it again, listed once.
    await page.reload({ waitUntil: "load" });
    check((await page.$$(".msg")).length === 4, "a reload restores the conversation");
    check((await page.$$("#convs li")).length === 1, "the conversation list has it");

    // Markdown rendering escapes markup in model output; code fences become <pre>.
    const html = await page.evaluate(() => markdown("<img src=x onerror=alert(1)> **b**\n```js\nx<y\n```"));
    check(!html.includes("<img") && html.includes("&lt;img") && html.includes("<strong>b</strong>") &&
          html.includes("<pre><code>x&lt;y</code></pre>"), "markdown escapes and renders: " + html);
    check(errors.length === 0, "no page errors " + JSON.stringify(errors));
    await page.screenshot({ path: shot });
    check(fs.statSync(shot).size > 1000, "screenshot saved to " + shot);
  } catch (e) {
    console.log(String(e.stack || e));
    failed = true;
  } finally {
    await browser.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  process.exit(failed ? 1 : 0);
})();
