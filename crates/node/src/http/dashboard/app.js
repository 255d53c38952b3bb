// kvfabric's operator dashboard: polls GET /v1/operator/overview every POLL_MS and streams
// GET /v1/operator/events (Server-Sent Events read through fetch, so that the operator token
// travels in the Authorization header). No dependencies; everything shown is set through
// textContent, never parsed as HTML.
"use strict";

const POLL_MS = 1000;
const FETCH_TIMEOUT_MS = 5000;
const RETRY_MS = 2000;
const EVENTS_SHOWN_MAX = 200;

let token = null;
let previous = new Map(); // member id -> {at_ms, stats}
let lastEventId = null;

const $ = (id) => document.getElementById(id);

function readToken() {
  const m = /(?:^|[#&])token=([^&]*)/.exec(window.location.hash);
  if (m) {
    token = decodeURIComponent(m[1]);
    sessionStorage.setItem("kvfabric-operator-token", token);
    history.replaceState(null, "", window.location.pathname);
  } else {
    token = sessionStorage.getItem("kvfabric-operator-token");
  }
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[i];
}

function fixed(v, digits) {
  return Number.isFinite(v) ? v.toFixed(digits) : "–";
}

function setStatus(state, text) {
  const s = $("status");
  s.dataset.state = state;
  s.textContent = text;
}

// Per-second rates of the counters between this reading and the previous one; a counter
// that went down (the member restarted) counts from zero.
function rates(id, nowMs, stats) {
  const prev = previous.get(id);
  previous.set(id, { at_ms: nowMs, stats });
  if (!prev || !stats || !prev.stats || nowMs <= prev.at_ms) return null;
  const dt = (nowMs - prev.at_ms) / 1000;
  const d = (cur, old) => (cur >= old ? cur - old : cur) / dt;
  const hits = stats.hits.reduce((a, b) => a + b, 0);
  const oldHits = prev.stats.hits.reduce((a, b) => a + b, 0);
  return {
    hits: d(hits, oldHits),
    notFound: d(stats.not_found, prev.stats.not_found),
    fetches: d(stats.fetches_ok, prev.stats.fetches_ok),
    failed: d(stats.fetches_failed, prev.stats.fetches_failed),
  };
}

function tierCell(tiers) {
  const td = el("td", { class: "tiers" });
  for (const t of tiers) {
    const pct = t.capacity > 0 ? Math.min(100, (100 * t.used) / t.capacity) : 0;
    const bar = el("div", { class: "bar" }, el("span"));
    bar.firstChild.style.width = pct.toFixed(1) + "%";
    td.append(
      el(
        "div",
        { class: "tier", "data-tier": t.tier },
        el("span", {}, t.tier),
        bar,
        el("span", {}, `${bytes(t.used)} / ${bytes(t.capacity)}, ${t.blocks} blocks`),
      ),
    );
  }
  if (tiers.length === 0) td.append(el("span", { class: "muted" }, "no answer"));
  return td;
}

function alarmCell(n) {
  return el("td", { class: n > 0 ? "num alarm" : "num" }, n === null ? "–" : n);
}

function renderMembers(o) {
  const body = $("members").tBodies[0];
  body.replaceChildren();
  let healthy = 0;
  for (const m of o.members) {
    if (m.healthy) healthy += 1;
    const s = m.stats || null;
    const r = rates(m.id, o.now_ms, s);
    // Local hits over every read: served here, fetched from a peer, or found nowhere.
    const reads = r ? r.hits + r.fetches + r.notFound : 0;
    const hitRatio = reads > 0 ? (100 * r.hits) / reads : NaN;
    const row = el(
      "tr",
      { "data-member": m.id, "data-healthy": String(m.healthy), "data-role": m.role },
      el("td", {}, el("strong", {}, m.id), el("br"), el("small", { class: "muted" }, m.api)),
      el("td", { class: "role-" + m.role }, m.role),
      el(
        "td",
        { class: "health" },
        el("span", { class: m.healthy ? "badge healthy" : "badge down" }, m.healthy ? "healthy" : "down"),
      ),
      tierCell(m.tiers),
      el("td", { class: "num" }, s ? s.held_blocks : "–"),
      el("td", { class: "num" }, r ? fixed(r.hits, 1) : "–"),
      el("td", { class: "num" }, r ? fixed(r.notFound, 1) : "–"),
      el("td", { class: "num" }, Number.isFinite(hitRatio) ? fixed(hitRatio, 0) + "%" : "–"),
      el("td", { class: "num" }, r ? fixed(r.fetches, 1) : "–"),
      el("td", { class: r && r.failed > 0 ? "num alarm" : "num" }, r ? fixed(r.failed, 1) : "–"),
      el(
        "td",
        { class: s && s.verify_failures + s.receipt_verify_failures > 0 ? "num alarm" : "num" },
        s ? `${s.verify_failures} / ${s.receipt_verify_failures}` : "–",
      ),
      alarmCell(s ? s.dedup_collisions : null),
    );
    body.append(row);
  }
  $("healthy-count").textContent = `${healthy} of ${o.members.length}`;
}

function renderBandwidth(o) {
  const table = $("bandwidth");
  const ids = o.members.map((m) => m.id);
  const links = new Map(o.bandwidth.map((l) => [l.from + ">" + l.to, l]));
  $("bandwidth-empty").hidden = o.bandwidth.length > 0;
  table.hidden = o.bandwidth.length === 0;
  const head = el("tr", {}, el("th", {}, "from \\ to"), ...ids.map((id) => el("th", {}, id)));
  table.tHead.replaceChildren(head);
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const from of ids) {
    const cells = ids.map((to) => {
      if (from === to) return el("td", { class: "self" }, "·");
      const l = links.get(from + ">" + to);
      return el(
        "td",
        { class: "num", "data-link": from + ">" + to },
        l ? `${fixed(l.gbps, 2)} (${l.samples})` : "–",
      );
    });
    body.append(el("tr", {}, el("th", {}, from), ...cells));
  }
}

function renderIntegrity(o) {
  const sum = (k) => o.members.reduce((a, m) => a + (m.stats ? m.stats[k] : 0), 0);
  const set = (id, v) => {
    const e = $(id);
    e.textContent = v;
    e.className = v > 0 ? "alarm" : "";
  };
  set("verify-tier", sum("verify_failures"));
  set("verify-receipt", sum("receipt_verify_failures"));
  set("collisions", sum("dedup_collisions"));
  set("quarantined", sum("quarantined"));
}

function render(o) {
  $("served-by").textContent = o.node;
  $("events-node").textContent = o.node;
  $("leader").textContent = o.leader || "none";
  $("term").textContent = o.term;
  $("updated").textContent = new Date(o.now_ms).toLocaleTimeString();
  renderMembers(o);
  renderBandwidth(o);
  renderIntegrity(o);
}

async function fetchWithTimeout(url, opts) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
  try {
    return await fetch(url, Object.assign({ signal: ctl.signal }, opts));
  } finally {
    clearTimeout(timer);
  }
}

function askForToken(why) {
  setStatus("error", why);
  $("token-form").hidden = false;
}

async function poll() {
  try {
    const r = await fetchWithTimeout("/v1/operator/overview", { headers: headers() });
    if (r.status === 401 || r.status === 403) {
      const body = await r.json().catch(() => ({}));
      askForToken((body.error && body.error.message) || "the operator token was refused");
    } else if (!r.ok) {
      setStatus("error", `overview answered ${r.status}`);
    } else {
      render(await r.json());
      setStatus("ok", "live");
    }
  } catch (e) {
    setStatus("error", "this node does not answer (" + e.name + ")");
  }
  setTimeout(poll, POLL_MS);
}

function shortId(hex) {
  return hex ? hex.slice(0, 16) : "";
}

function showEvent(kind, data) {
  const list = $("events");
  let text;
  switch (kind) {
    case "stored":
    case "removed":
      text = `${data.node} ${data.tier || ""} ${data.blocks.length} block(s): ${data.blocks.map(shortId).join(" ")}`;
      break;
    case "node_down":
      text = `${data.node} saw ${data.down} down (epoch ${data.down_epoch})`;
      break;
    case "epoch":
      text = `${data.node} started epoch ${data.epoch}`;
      break;
    default:
      text = JSON.stringify(data);
  }
  // `ts` is the batch's time in seconds since the Unix epoch.
  const when = data && data.ts ? new Date(data.ts * 1000).toLocaleTimeString() : "";
  const item = el(
    "li",
    { class: kind, "data-kind": kind, title: JSON.stringify(data) },
    el("span", { class: "kind" }, kind),
    el("span", { class: "muted" }, when + " "),
    text,
  );
  if (data && data.blocks) item.dataset.blocks = data.blocks.join(" ");
  list.prepend(item);
  while (list.children.length > EVENTS_SHOWN_MAX) list.lastChild.remove();
}

function handleMessage(raw) {
  let kind = "message";
  const data = [];
  for (const line of raw.split("\n")) {
    if (line.startsWith(":")) continue;
    const i = line.indexOf(":");
    const field = i < 0 ? line : line.slice(0, i);
    const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
    if (field === "event") kind = value;
    else if (field === "data") data.push(value);
    else if (field === "id") lastEventId = value;
  }
  if (data.length === 0) return;
  let parsed;
  try {
    parsed = JSON.parse(data.join("\n"));
  } catch (e) {
    parsed = { text: data.join("\n") };
  }
  showEvent(kind, parsed);
}

async function streamEvents() {
  const state = $("events-state");
  for (;;) {
    try {
      const h = headers({ Accept: "text/event-stream" });
      if (lastEventId) h["Last-Event-ID"] = lastEventId;
      const r = await fetch("/v1/operator/events", { headers: h });
      if (!r.ok) {
        state.textContent = `(refused: ${r.status})`;
      } else {
        state.textContent = "(live)";
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value.replace(/\r\n?/g, "\n");
          let at;
          while ((at = buf.indexOf("\n\n")) >= 0) {
            handleMessage(buf.slice(0, at));
            buf = buf.slice(at + 2);
          }
        }
        state.textContent = "(reconnecting)";
      }
    } catch (e) {
      state.textContent = "(reconnecting: " + e.name + ")";
    }
    await new Promise((res) => setTimeout(res, RETRY_MS));
  }
}

function start() {
  readToken();
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token-input").value.trim();
    sessionStorage.setItem("kvfabric-operator-token", token);
    $("token-form").hidden = true;
  });
  poll();
  streamEvents();
}

document.addEventListener("DOMContentLoaded", start);
