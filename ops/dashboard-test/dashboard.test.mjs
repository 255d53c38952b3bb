// The dashboard's browser test: a live 3-node cluster (`kvfabric cluster up`), Debian's
// chromium (headless) driven by playwright-core. The page must load without a script error,
// show three healthy nodes, show a put in its event feed within the bound, and show a node
// killed with SIGKILL as down. Screenshots go to --out (a CI artifact under target/);
// --readme-shot PATH also copies the three-node screenshot there (docs/dashboard.png).
//
//   node ops/dashboard-test/dashboard.test.mjs --kvfabric target/debug/kvfabric \
//     --out target/dashboard-test [--readme-shot docs/dashboard.png]
//
// Every wait is bounded (WAIT_MS); a bound that runs out fails the test with what the page
// showed. Nothing is left running: the cluster is stopped and the browser closed on every
// exit path.

import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

const WAIT_MS = 60_000;
const PUT_SHOWN_MS = 30_000;
const MODEL = "deepseek-v2-lite";

function args() {
  const a = { kvfabric: "target/debug/kvfabric", out: "target/dashboard-test", readmeShot: null };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const [k, v] = [argv[i], argv[i + 1]];
    if (v === undefined) throw new Error(`${k}: expected a value`);
    if (k === "--kvfabric") a.kvfabric = v;
    else if (k === "--out") a.out = v;
    else if (k === "--readme-shot") a.readmeShot = v;
    else throw new Error(`unknown option ${k}`);
  }
  return a;
}

function log(msg) {
  process.stderr.write(`dashboard test: ${msg}\n`);
}

function kvfabric(bin, ...rest) {
  const r = spawnSync(resolve(bin), rest, { encoding: "utf8", timeout: 180_000 });
  if (r.status !== 0) {
    throw new Error(`kvfabric ${rest.join(" ")} failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
  }
  return r.stdout;
}

async function waitFor(what, f, limitMs = WAIT_MS) {
  const start = Date.now();
  let last;
  for (;;) {
    last = await f();
    if (last.ok) return Date.now() - start;
    if (Date.now() - start > limitMs) {
      throw new Error(`not within ${limitMs} ms: ${what}; the page showed: ${last.seen}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

// A payload of the model's exact length, finite bf16 values throughout.
function payload(bytes, seed) {
  const buf = Buffer.alloc(bytes);
  for (let i = 0; i + 1 < bytes; i += 2) {
    buf[i] = (i / 2 + seed) & 0x7f;
    buf[i + 1] = 0x3f;
  }
  return buf;
}

async function rows(page) {
  return page.$$eval("#members tbody tr", (trs) =>
    trs.map((tr) => ({
      id: tr.dataset.member,
      healthy: tr.dataset.healthy,
      role: tr.dataset.role,
    })),
  );
}

async function main() {
  const a = args();
  mkdirSync(a.out, { recursive: true });
  const dir = mkdtempSync(join(tmpdir(), "kvfabric-dashboard-"));
  let browser = null;
  let page = null;
  let up = false;
  try {
    log(`cluster up in ${dir}`);
    const out = kvfabric(a.kvfabric, "cluster", "up", "--nodes", "3", "--dir", dir,
      "--cluster-set", "lease_ms=3000", "--timeout-s", "120");
    up = true;
    const apis = {};
    let dashboard = null;
    for (const line of out.split("\n")) {
      const [first, second] = line.trim().split(/\s+/);
      if (/^n\d+$/.test(first) && second && second.startsWith("http://") && line.trim().split(/\s+/).length === 2) {
        apis[first] = second;
      }
      if (first === "dashboard") dashboard = second;
    }
    if (Object.keys(apis).length !== 3 || !dashboard) {
      throw new Error(`cluster up printed no 3 APIs and dashboard URL:\n${out}`);
    }
    const token = readFileSync(join(dir, "operator.token"), "utf8").trim();
    if (!dashboard.includes(`#token=${token}`)) throw new Error(`dashboard URL without the token: ${dashboard}`);

    log("launching chromium");
    browser = await chromium.launch({
      executablePath: "/usr/bin/chromium",
      headless: true,
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
    });
    page = await browser.newPage({ viewport: { width: 1500, height: 1000 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("console", (m) => {
      if (m.type() === "error") errors.push(m.text());
    });
    await page.goto(dashboard, { waitUntil: "load", timeout: WAIT_MS });

    log("the page shows three healthy nodes");
    const healthyMs = await waitFor("three healthy nodes", async () => {
      const r = await rows(page);
      const ok = r.length === 3 && r.every((x) => x.healthy === "true") &&
        r.some((x) => x.role === "leader");
      return { ok, seen: JSON.stringify(r) };
    });
    log(`three healthy nodes shown after ${healthyMs} ms`);
    const served = await page.textContent("#served-by");
    if (served !== "n1") throw new Error(`served-by shows ${served}`);

    log("a put on n1 appears in the event feed");
    const models = await (await fetch(`${apis.n1}/v1/models`)).json();
    const m = models.models.find((x) => x.name === MODEL);
    if (!m) throw new Error(`no ${MODEL} in ${JSON.stringify(models)}`);
    const put = await fetch(`${apis.n1}/v1/blocks`, {
      method: "PUT",
      headers: { "kvfabric-model": MODEL, "kvfabric-tokens": String(m.block_tokens) },
      body: payload(m.block_bytes, 7),
    });
    const putBody = await put.json();
    if (put.status !== 201) throw new Error(`put answered ${put.status}: ${JSON.stringify(putBody)}`);
    const block = putBody.block;
    const shownMs = await waitFor(`block ${block} in the event feed`, async () => {
      const blocks = await page.$$eval('#events li[data-kind="stored"]', (lis) =>
        lis.map((li) => li.dataset.blocks || ""));
      return { ok: blocks.some((b) => b.split(" ").includes(block)), seen: JSON.stringify(blocks) };
    }, PUT_SHOWN_MS);
    log(`the put was shown ${shownMs} ms after it was acknowledged`);
    await waitFor("n1 holding the block in the members table", async () => {
      const held = await page.$eval('#members tr[data-member="n1"] td:nth-child(5)', (td) => td.textContent);
      return { ok: Number(held) >= 1, seen: held };
    });
    // Some traffic for the picture (rates are differences between polls): more puts on n1,
    // reads of each from every node (the node without a copy fetches it).
    const ids = [block];
    for (let seed = 8; seed < 14; seed += 1) {
      const r = await fetch(`${apis.n1}/v1/blocks`, {
        method: "PUT",
        headers: { "kvfabric-model": MODEL, "kvfabric-tokens": String(m.block_tokens) },
        body: payload(m.block_bytes, seed),
      });
      if (r.status !== 201) throw new Error(`put answered ${r.status}`);
      ids.push((await r.json()).block);
    }
    const until = Date.now() + 3000;
    while (Date.now() < until) {
      for (const id of ids) {
        for (const api of Object.values(apis)) {
          const r = await fetch(`${api}/v1/blocks/${id}`);
          if (r.status !== 200) throw new Error(`get ${id} on ${api}: ${r.status}`);
          await r.arrayBuffer();
        }
      }
    }
    const shot = join(a.out, "dashboard-3-nodes.png");
    await page.screenshot({ path: shot, fullPage: true });
    log(`screenshot ${shot}`);
    if (a.readmeShot) {
      copyFileSync(shot, a.readmeShot);
      log(`copied to ${a.readmeShot}`);
    }

    log("SIGKILL of n3 shows it down");
    const pid = Number(readFileSync(join(dir, "node3.pid"), "utf8").trim());
    process.kill(pid, "SIGKILL");
    const downMs = await waitFor("n3 shown down", async () => {
      const r = await rows(page);
      const n3 = r.find((x) => x.id === "n3");
      const others = r.filter((x) => x.id !== "n3");
      const ok = n3 && n3.healthy === "false" && others.every((x) => x.healthy === "true");
      return { ok, seen: JSON.stringify(r) };
    });
    const badge = await page.textContent('#members tr[data-member="n3"] .badge');
    if (badge !== "down") throw new Error(`n3's badge reads ${badge}`);
    log(`n3 shown down ${downMs} ms after the kill (lease_ms 3000)`);
    const shotDown = join(a.out, "dashboard-node-down.png");
    await page.screenshot({ path: shotDown, fullPage: true });
    log(`screenshot ${shotDown}`);
    if (errors.length > 0) throw new Error(`the page logged errors: ${errors.join(" | ")}`);
    log("PASS");
  } catch (e) {
    if (page) {
      const shot = join(a.out, "dashboard-failure.png");
      await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
      const state = await page.textContent("#events-state").catch(() => "?");
      log(`failure screenshot ${shot}; event feed state ${state}`);
    }
    throw e;
  } finally {
    if (browser) await browser.close();
    if (up) {
      const r = spawnSync(resolve(a.kvfabric), ["cluster", "down", "--dir", dir], { encoding: "utf8" });
      if (r.status !== 0) log(`cluster down failed: ${r.stdout}${r.stderr}`);
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  log(`FAIL: ${e.stack || e}`);
  process.exitCode = 1;
});
