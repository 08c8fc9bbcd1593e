// statekeep web console: fills the server-rendered shells through the REST API and /ui/api.
"use strict";
const PAGE = document.body.dataset.page;
const P = JSON.parse(document.body.dataset.params || "{}");
const $ = (sel, root) => (root || document).querySelector(sel);
const content = $("#content");
const TOKEN_KEY = "statekeep_token";

// ---- small helpers -------------------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
}
function enc(s) { return encodeURIComponent(s); }
function fnPath(t, n, f) { return `${enc(t)}/${enc(n)}/${enc(f)}`; }
function keyPath(k) { return k.split("/").map(enc).join("/"); }
function when(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : ""; }
function bytes(n) { return n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1048576).toFixed(1)} MiB`; }
function say(text, error) {
  const m = $("#message");
  m.textContent = text; m.className = error ? "message error" : "message"; m.hidden = !text;
}
class ApiError extends Error { constructor(status, reason) { super(reason); this.status = status; } }

async function api(method, url, opts) {
  opts = opts || {};
  const headers = Object.assign({}, opts.headers || {});
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  let body = opts.body;
  if (opts.json !== undefined) { headers["Content-Type"] = "application/json"; body = JSON.stringify(opts.json); }
  const r = await fetch(url, { method, headers, body });
  if (r.status === 401) { showLogin("The token was refused."); throw new ApiError(401, "a valid token is required"); }
  if (!r.ok) {
    let reason = r.statusText;
    try { reason = (await r.json()).reason || reason; } catch (e) { /* not JSON */ }
    throw new ApiError(r.status, reason);
  }
  return r.status === 204 ? null : r.json();
}

// FunctionState-style JSON -> {kind, text}: counter, JSON (pretty), text, or hex for binary
function decode(v) {
  if (v.numberValue !== undefined) return { kind: "counter", text: String(v.numberValue) };
  if (v.stringValue !== undefined) {
    const s = v.stringValue;
    if (/^\s*[[{]/.test(s)) { try { return { kind: "json", text: JSON.stringify(JSON.parse(s), null, 2), raw: s }; } catch (e) { /* text */ } }
    return { kind: "text", text: s };
  }
  if (v.byteValue !== undefined) {
    const raw = atob(v.byteValue);
    const hex = Array.from(raw, c => c.charCodeAt(0).toString(16).padStart(2, "0"));
    const lines = [];
    for (let i = 0; i < hex.length; i += 16) lines.push(hex.slice(i, i + 16).join(" "));
    return { kind: "binary", text: lines.join("\n") };
  }
  return { kind: "none", text: "" };
}
function valueCell(v) { const d = decode(v); return [h("div", { class: "kind", text: d.kind }), h("pre", { text: d.text })]; }
// a typed variable's value or changelog record (decoded to JSON by the server): its name and the JSON
function variableCell(r) {
  const part = r.element !== undefined ? `[${r.element}]` : r.mapKey !== undefined ? `[${JSON.stringify(r.mapKey)}]` : "";
  return [h("div", { class: "kind", text: `variable ${r.variable}${part}` }),
    r.value === undefined ? h("span", { class: "muted", text: "deleted" }) : h("pre", { text: JSON.stringify(r.value, null, 2) })];
}
// editor text + kind -> the JSON body the REST API takes
function encodeValue(kind, text) {
  if (kind === "counter") {
    if (!/^-?\d+$/.test(text.trim())) throw new Error("a counter is an integer");
    return { numberValue: Number(text.trim()) };
  }
  if (kind === "json") { JSON.parse(text); return { stringValue: text }; }
  if (kind === "binary") {
    const clean = text.replace(/\s+/g, "");
    if (!/^([0-9a-fA-F]{2})*$/.test(clean)) throw new Error("binary values are edited as hex digits");
    let s = ""; for (let i = 0; i < clean.length; i += 2) s += String.fromCharCode(parseInt(clean.slice(i, i + 2), 16));
    return { byteValue: btoa(s) };
  }
  return { stringValue: text };
}
function kindSelect(kind, kinds) {
  return h("select", { class: "kind-select" }, (kinds || ["text", "json", "counter", "binary"]).map(k => h("option", { value: k, selected: k === kind }, k)));
}

function confirmDialog(text) {
  const d = $("#confirm");
  $("#confirm-text").textContent = text;
  return new Promise(resolve => {
    d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
    d.returnValue = "cancel";
    d.showModal();
  });
}

// A live line plot of numbers on a canvas (no library).
function plot(canvas, points, label) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, ht = canvas.height;
  ctx.clearRect(0, 0, w, ht);
  ctx.fillStyle = "#667085"; ctx.font = "10px sans-serif";
  const values = points.map(p => p || 0);
  if (!values.length) { ctx.fillText("no micro-batch yet", 6, ht / 2 + 3); return; }
  const max = Math.max(...values, 1);
  ctx.fillText(`${label}: last ${values[values.length - 1].toFixed(0)}, max ${max.toFixed(0)}`, 4, 10);
  ctx.strokeStyle = "#2457a6"; ctx.lineWidth = 1.5; ctx.beginPath();
  const n = values.length, top = 14, span = ht - top - 3;
  values.forEach((v, i) => {
    const x = n === 1 ? w / 2 : 3 + (i * (w - 6)) / (n - 1), y = top + span - (v / max) * span;
    if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.stroke();
  if (n === 1) { ctx.fillStyle = "#2457a6"; ctx.fillRect(w / 2 - 2, top + span - (values[0] / max) * span - 2, 4, 4); }
}

// EventSource with the console's cookie (EventSource sends no headers); it reconnects by itself.
function events(url, handlers) {
  const es = new EventSource(url);
  for (const [name, fn] of Object.entries(handlers)) es.addEventListener(name, e => fn(JSON.parse(e.data)));
  window.addEventListener("pagehide", () => es.close());
  return es;
}
// "live" while the stream is up. The server ends each stream every few seconds and EventSource
// reconnects at once, so only a gap that lasts is shown as "reconnecting…". A notice that asks for
// a reload (el.dataset.sticky) stays.
function showLiveness(es, el) {
  let timer = null;
  es.addEventListener("hello", () => { clearTimeout(timer); timer = null; if (!el.dataset.sticky) el.textContent = "live"; });
  es.addEventListener("error", () => { if (timer === null) timer = setTimeout(() => { el.textContent = "reconnecting…"; }, 2000); });
}

// ---- auth ------------------------------------------------------------------------------------------
function setToken(token) {
  if (token) {
    localStorage.setItem(TOKEN_KEY, token);
    document.cookie = `${TOKEN_KEY}=${enc(token)}; path=/ui; SameSite=Strict`;
  } else {
    localStorage.removeItem(TOKEN_KEY);
    document.cookie = `${TOKEN_KEY}=; path=/ui; SameSite=Strict; max-age=0`;
  }
}
function showLogin(error) {
  content.hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = localStorage.getItem(TOKEN_KEY) ? (error || "") : "";
  $("#token").focus();
}
$("#login-form").addEventListener("submit", e => { e.preventDefault(); setToken($("#token").value.trim()); location.reload(); });

async function start() {
  let me;
  try { me = await api("GET", "/ui/api/whoami"); } catch (e) { say(e.message, true); return; }
  if (!me.signedIn) { showLogin("The token was refused: " + me.reason); return; }
  const who = $("#who");
  if (me.auth) {
    who.append(me.superuser ? "superuser token " : "tenant token ",
      h("button", { id: "sign-out", onclick: () => { setToken(null); location.reload(); } }, "Sign out"));
  } else who.textContent = "auth off";
  window.ME = me;
  if (!me.superuser && (PAGE === "metadata" || PAGE === "handles")) {
    say("Only a superuser token may browse the whole store; this token is limited to its tenants.", true);
    return;
  }
  const pages = { functions: functionsPage, state: statePage, changelog: changelogPage, metadata: metadataPage, handles: handlesPage, topics: topicsPage };
  try { await pages[PAGE](); } catch (e) { if (e.status !== 401) say(e.message, true); }
}

// ---- Functions -------------------------------------------------------------------------------------
const SAMPLE = "def process(input, context):\n    context.incr_counter(input, 1)\n    return input\n";

async function functionsPage() {
  const rates = {};  // "t/n/f" -> records/s per micro-batch
  const table = h("table", { id: "functions" },
    h("thead", {}, h("tr", {}, ["Function", "Status", "Worker", "Records processed", "Batches", "Records/s per micro-batch", ""].map(t => h("th", { text: t })))),
    h("tbody"));
  const form = h("form", { id: "create-form", class: "card", hidden: true },
    h("div", { class: "toolbar" },
      h("label", {}, "Tenant ", h("input", { name: "tenant", value: "public", required: true, size: 10 })),
      h("label", {}, "Namespace ", h("input", { name: "namespace", value: "default", required: true, size: 10 })),
      h("label", {}, "Name ", h("input", { name: "name", required: true, size: 14 })),
      h("label", {}, "Inputs ", h("input", { name: "inputs", placeholder: "/data/in/*.jsonl", required: true, size: 24 })),
      h("label", {}, "Output ", h("input", { name: "output", placeholder: "optional", size: 18 }))),
    h("label", {}, "Python file (process(input, context))"),
    h("textarea", { name: "code", rows: 5 }, SAMPLE),
    h("div", { class: "toolbar" }, h("button", { class: "primary", type: "submit" }, "Create"),
      h("button", { type: "button", onclick: () => { form.hidden = true; } }, "Cancel")));
  content.append(h("div", { class: "toolbar" },
    h("button", { id: "new-function", class: "primary", onclick: () => { form.hidden = false; } }, "New function"),
    h("span", { class: "muted", text: "Live: status and the records/s plot update as micro-batches complete." })), form, table);

  form.addEventListener("submit", async e => {
    e.preventDefault();
    const f = new FormData(form);
    const cfg = { tenant: f.get("tenant"), namespace: f.get("namespace"), name: f.get("name"), runtime: "PYTHON",
      inputs: f.get("inputs").split(",").map(s => s.trim()).filter(Boolean), py: f.get("name") + ".py" };
    if (f.get("output")) cfg.output = f.get("output");
    const body = new FormData();
    body.append("functionConfig", new Blob([JSON.stringify(cfg)], { type: "application/json" }));
    body.append("data", new Blob([f.get("code")], { type: "text/x-python" }), cfg.py);
    try {
      await api("POST", `/admin/v3/functions/${fnPath(cfg.tenant, cfg.namespace, cfg.name)}`, { body });
      say(`Created ${cfg.tenant}/${cfg.namespace}/${cfg.name}.`); form.hidden = true; await load();
    } catch (err) { if (err.status !== 401) say(`Create failed: ${err.message}`, true); }
  });

  async function lifecycle(fn, action) {
    const url = `/admin/v3/functions/${fnPath(fn.tenant, fn.namespace, fn.name)}`;
    try {
      if (action === "delete") {
        if (!await confirmDialog(`Delete ${fn.tenant}/${fn.namespace}/${fn.name} and all of its state?`)) return;
        await api("DELETE", url);
        say(`Deleted ${fn.tenant}/${fn.namespace}/${fn.name}.`);
      } else {
        await api("POST", `${url}/${action}`);
        say(`Asked ${fn.tenant}/${fn.namespace}/${fn.name} to ${action}.`);
      }
      await load();
    } catch (err) {
      if (err.status === 404 && action !== "delete") say(`${action} is not available on this server (${err.message}).`, true);
      else if (err.status === 405) say(`${action} is not available on this server.`, true);
      else if (err.status !== 401) say(`${action} failed: ${err.message}`, true);
    }
  }

  async function load() {
    const list = await api("GET", "/ui/api/functions");
    const body = h("tbody");
    for (const fn of list) {
      // Pulsar's FunctionStatus (one instance: the function's streaming query), batches from the raw status
      const id = `${fn.tenant}/${fn.namespace}/${fn.name}`, inst = fn.functionStatus.instances[0].status;
      const st = { running: inst.running, error: inst.error, workerId: inst.workerId, processed: inst.numSuccessfullyProcessed,
        batches: fn.status.batches, skipped: inst.numUserExceptions };
      // a hosted function runs elsewhere (a Pulsar worker keeping its state here): its state only, no lifecycle
      const badge = fn.hosted ? h("span", { class: "badge", title: "runs elsewhere (a Pulsar worker); its state is kept here", text: "hosted" })
        : st.error ? h("span", { class: "badge error", title: st.error, text: "error" })
        : h("span", { class: "badge" + (st.running ? " running" : ""), text: st.running ? "running" : fn.stopped ? "stopped" : "not running" });
      const canvas = h("canvas", { class: "plot", width: 220, height: 44, "data-function": id });
      body.append(h("tr", { "data-function": id },
        h("td", {}, h("a", { href: `/ui/functions/${fnPath(fn.tenant, fn.namespace, fn.name)}`, class: "fn-link" }, id),
          h("div", { class: "muted mono", text: (fn.inputs || []).join(", ") + (fn.output ? " → " + fn.output : "") })),
        h("td", {}, badge, st.error ? h("div", { class: "error mono", text: st.error }) : null),
        h("td", { class: "mono", text: st.workerId || "—" }),
        h("td", { class: "num", text: String(st.processed || 0) }, st.skipped ? h("div", { class: "muted", text: `${st.skipped} skipped` }) : null),
        h("td", { class: "num", text: String(st.batches || 0) }),
        h("td", {}, canvas),
        h("td", {},
          h("a", { href: `/ui/functions/${fnPath(fn.tenant, fn.namespace, fn.name)}/changelog` }, "Changelog"), " ",
          fn.lifecycle ? h("button", { class: "lifecycle", onclick: () => lifecycle(fn, fn.stopped ? "start" : "stop") }, fn.stopped ? "Start" : "Stop") : null, " ",
          fn.hosted ? null : h("button", { class: "danger", onclick: () => lifecycle(fn, "delete") }, "Delete"))));
      if (!rates[id]) {
        rates[id] = [];
        api("GET", `/ui/api/functions/${fnPath(fn.tenant, fn.namespace, fn.name)}/batches`)
          .then(hist => { rates[id] = hist.map(b => b.rate).concat(rates[id]); draw(id); }).catch(() => {});
      }
    }
    const tbody = table.tBodies[0];
    if (!list.length) {
      tbody.replaceChildren(h("tr", {}, h("td", { colspan: 7, class: "muted", text: "No functions yet." })));
      return;
    }
    // update in place: only cells whose content changed are replaced (a click on a button that did
    // not change is never lost to a refresh), the plot's canvas is kept
    const old = new Map([...tbody.rows].filter(r => r.dataset.function).map(r => [r.dataset.function, r]));
    const rows = [...body.rows].map(fresh => {
      const prev = old.get(fresh.dataset.function);
      if (!prev) return fresh;
      [...fresh.cells].forEach((td, i) => { if (i !== 5 && td.outerHTML !== prev.cells[i].outerHTML) prev.cells[i].replaceWith(td); });
      return prev;
    });
    for (const r of [...tbody.rows]) if (!rows.includes(r)) r.remove();
    rows.forEach((r, i) => { if (tbody.rows[i] !== r) tbody.insertBefore(r, tbody.rows[i] || null); });
    Object.keys(rates).forEach(draw);
  }
  function draw(id) {
    const c = table.querySelector(`canvas[data-function="${CSS.escape(id)}"]`);
    if (c) { plot(c, rates[id].slice(-60), "rec/s"); c.dataset.points = Math.min(rates[id].length, 60); }
  }
  let pending = null;
  const reload = () => { clearTimeout(pending); pending = setTimeout(() => load().catch(() => {}), 300); };
  await load();
  let hellos = 0;
  events("/ui/api/events/functions", {
    hello: () => {
      if (hellos++ === 0) return;
      for (const id of Object.keys(rates)) {
        api("GET", `/ui/api/functions/${id.split("/").map(enc).join("/")}/batches`)
          .then(hist => { rates[id] = hist.map(b => b.rate); draw(id); }).catch(() => {});
      }
      reload();
    },
    batch: b => { (rates[b.function] = rates[b.function] || []).push(b.rate); draw(b.function); reload(); },
    changed: reload,
  });
}

// ---- Function state --------------------------------------------------------------------------------
async function statePage() {
  const base = `/admin/v3/functions/${fnPath(P.tenant, P.namespace, P.name)}`;
  const q = new URLSearchParams(location.search);
  const prefix = q.get("prefix") || "", startAfter = q.get("startAfter"), limit = 50;
  $("#title").append(" ", h("a", { href: `/ui/functions/${fnPath(P.tenant, P.namespace, P.name)}/changelog`, class: "muted", style: "font-size:14px" }, "changelog →"));
  const search = h("form", { class: "toolbar", id: "search" },
    h("input", { name: "prefix", id: "prefix", placeholder: "key prefix", value: prefix }),
    h("button", { type: "submit" }, "Search"),
    h("button", { type: "button", id: "new-key", onclick: () => openEditor(null) }, "New key"),
    h("span", { id: "live", class: "muted", text: "connecting…" }));
  const editor = h("div", { id: "editor" });
  const table = h("table", { id: "state" },
    h("thead", {}, h("tr", {}, ["Key", "Value", "Version", ""].map(t => h("th", { text: t })))), h("tbody"));
  const pager = h("div", { class: "toolbar", id: "pager" });
  content.append(search, editor, table, pager);
  search.addEventListener("submit", e => {
    e.preventDefault();
    const p = $("#prefix").value;
    location.href = `?${new URLSearchParams(p ? { prefix: p } : {})}`;
  });

  const rows = new Map();  // key -> {tr, entry}
  let page, position = null;
  try { position = (await api("GET", `/ui/api/functions/${fnPath(P.tenant, P.namespace, P.name)}/changelog?limit=1`)).position; }
  catch (e) { if (e.status === 404) { say(e.message, true); return; } throw e; }
  try { page = await api("GET", `${base}/state?${new URLSearchParams(Object.assign({ prefix, limit }, startAfter ? { startAfter } : {}))}`); }
  catch (e) { if (e.status === 404) { say(e.message, true); return; } throw e; }
  const tbody = table.tBodies[0];
  page.items.forEach(item => tbody.append(row(item)));
  if (!page.items.length) tbody.append(h("tr", { class: "empty" }, h("td", { colspan: 4, class: "muted", text: "No keys" + (prefix ? ` starting with “${prefix}”` : "") + "." })));
  if (startAfter) pager.append(h("a", { href: `?${new URLSearchParams({ prefix })}` }, "« first page"));
  if (page.nextStartAfter) pager.append(h("a", { id: "next-page", href: `?${new URLSearchParams({ prefix, startAfter: page.nextStartAfter })}` }, "next page »"));
  // typed state variables (value, list and map state) of the keys with this prefix, decoded to JSON
  const varsBody = h("tbody", {}, h("tr", { class: "empty" }, h("td", { colspan: 3, class: "muted", text: "Loading variables…" })));
  content.append(h("h3", { id: "variables-title", text: "State variables" }), h("table", { id: "variables" },
    h("thead", {}, h("tr", {}, ["Key", "Variable", "Value"].map(x => h("th", { text: x })))), varsBody));
  let varsPending = null;
  const loadVariables = () => api("GET", `/ui/api/functions/${fnPath(P.tenant, P.namespace, P.name)}/variables?${new URLSearchParams({ prefix, limit: 100 })}`).then(v => {
    const rows = v.items.map(x => h("tr", { "data-key": x.key, "data-variable": x.variable }, h("td", { class: "mono", text: x.key }),
      h("td", { class: "mono", text: x.variable }), h("td", { class: "value" }, h("pre", { text: JSON.stringify(x.value, null, 2) }))));
    if (v.more) rows.push(h("tr", { class: "empty" }, h("td", { colspan: 3, class: "muted", text: "More variables: narrow the key prefix." })));
    varsBody.replaceChildren(...(rows.length ? rows : [h("tr", { class: "empty" }, h("td", { colspan: 3, class: "muted", text: "No state variables." }))]));
  }).catch(e => varsBody.replaceChildren(h("tr", { class: "empty" }, h("td", { colspan: 3, class: "muted", text: `Variables could not be read: ${e.message}` }))));
  loadVariables();
  const timersBody = h("tbody", {}, h("tr", { class: "empty" }, h("td", { colspan: 3, class: "muted", text: "Loading timers…" })));
  const timersTitle = h("h3", { id: "timers-title", text: "Timers" });
  content.append(timersTitle, h("table", { id: "timers" },
    h("thead", {}, h("tr", {}, ["Key", "Fires at (ms)", "Domain"].map(x => h("th", { text: x })))), timersBody));
  const timersNote = text => timersBody.replaceChildren(h("tr", { class: "empty" }, h("td", { colspan: 3, class: "muted", text })));
  api("GET", `${base}/timers`).then(t => {  // timers and watermark: statekeep's time state, shown apart
    timersTitle.textContent = `Timers (watermark: ${t.watermark === null ? "none" : t.watermark})`;
    if (!t.timers.length) { timersNote("No timers."); return; }
    timersBody.replaceChildren(...t.timers.slice(0, 200).map(x => h("tr", {}, h("td", { class: "mono", text: x.key === null ? "—" : x.key }),
      h("td", { class: "num", text: String(x.timestamp) }), h("td", { text: x.domain }))));
  }).catch(e => timersNote(`Timers could not be read: ${e.message}`));

  function row(entry) {
    const tr = h("tr", { "data-key": entry.key },
      h("td", { class: "mono", text: entry.key }), h("td", { class: "value" }, valueCell(entry)),
      h("td", { class: "num version", text: String(entry.version) }),
      h("td", {}, h("button", { class: "edit", onclick: () => openEditor(rows.get(entry.key).entry) }, "Edit"), " ",
        h("button", { class: "danger delete", onclick: () => remove(rows.get(entry.key).entry) }, "Delete")));
    rows.set(entry.key, { tr, entry });
    return tr;
  }
  function update(entry) {
    const old = rows.get(entry.key);
    const tr = row(entry);
    tr.className = "flash";
    if (old) { old.tr.replaceWith(tr); return; }
    if (!entry.key.startsWith(prefix)) return;
    const keys = [...rows.keys()].filter(k => k !== entry.key);
    const last = keys.length ? keys.reduce((a, b) => (a > b ? a : b)) : null;
    if (startAfter && entry.key <= startAfter) { rows.delete(entry.key); return; }
    if (page.nextStartAfter && last !== null && entry.key > last) { rows.delete(entry.key); return; }  // on a later page
    const empty = tbody.querySelector("tr.empty"); if (empty) empty.remove();
    const after = [...tbody.rows].find(r => r.dataset.key > entry.key);
    tbody.insertBefore(tr, after || null);
  }

  async function remove(entry) {
    if (!await confirmDialog(`Delete key “${entry.key}” (version ${entry.version})?`)) return;
    try {
      await api("DELETE", `${base}/state/${keyPath(entry.key)}`, { headers: { "If-Match": `"${entry.version}"` } });
      say(`Deleted ${entry.key}.`);
    } catch (e) {
      if (e.status === 409) say(`Not deleted: “${entry.key}” changed since you loaded it (${e.message}). The table shows its current value.`, true);
      else if (e.status !== 401) say(e.message, true);
    }
  }

  let editing = null;  // {key, version, created}
  function openEditor(entry) {
    const d = entry ? decode(entry) : { kind: "text", text: "" };
    editing = entry ? { key: entry.key, version: entry.version } : { key: null, version: -1 };
    const keyInput = h("input", { id: "edit-key", placeholder: "key", value: entry ? entry.key : "", disabled: !!entry, size: 40 });
    const kind = kindSelect(d.kind === "none" ? "text" : d.kind);
    const text = h("textarea", { id: "edit-value", rows: 6 }, d.raw !== undefined ? d.raw : d.text);
    const note = h("div", { id: "edit-note" });
    const save = h("button", { class: "primary", id: "edit-save" }, "Save");
    editor.replaceChildren(h("div", { class: "card" },
      h("div", { class: "toolbar" }, keyInput, kind, h("span", { class: "muted", id: "edit-version",
        text: entry ? `editing version ${entry.version}` : "new key (fails if it exists)" })),
      text, note, h("div", { class: "toolbar" }, save, h("button", { onclick: () => { editor.replaceChildren(); editing = null; } }, "Close"))));
    save.addEventListener("click", () => submit(keyInput.value, kind.value, text.value, editing.version, note));
  }
  async function submit(key, kind, text, version, note) {
    let body;
    try { body = encodeValue(kind, text); } catch (e) { note.replaceChildren(h("p", { class: "error", text: e.message })); return; }
    if (!key) { note.replaceChildren(h("p", { class: "error", text: "a key is required" })); return; }
    const headers = version === -1 ? { "If-None-Match": "*" } : { "If-Match": `"${version}"` };
    try {
      const stored = await api("POST", `${base}/state/${keyPath(key)}`, { json: body, headers });
      update(stored); editor.replaceChildren(); editing = null; say(`Saved ${key} (version ${stored.version}).`);
    } catch (e) {
      if (e.status !== 409) { if (e.status !== 401) note.replaceChildren(h("p", { class: "error", text: e.message })); return; }
      // a conflict: show what is stored now next to the edit, which stays in the editor
      let current = null;
      try { current = await api("GET", `${base}/state/${keyPath(key)}`); } catch (err) { /* deleted meanwhile */ }
      const box = h("div", { class: "conflict", id: "conflict" },
        h("strong", { text: "Conflict: " }), `“${key}” changed since you loaded it (${e.message}). Your edit is kept above.`,
        current ? h("div", {}, h("p", { text: `Stored now, version ${current.version}:` }), valueCell(current))
          : h("p", { text: "The key does not exist now." }),
        h("div", { class: "toolbar" },
          h("button", { id: "overwrite", onclick: () => submit(key, kind, text, current ? current.version : -1, note) }, "Overwrite with my edit"),
          h("button", { onclick: () => (current ? openEditor(current) : editor.replaceChildren()) }, "Discard my edit")));
      note.replaceChildren(box);
    }
  }

  const live = $("#live");
  const from = position ? `?after=${position.lastOffset}` : "";
  const es = events(`/ui/api/events/functions/${fnPath(P.tenant, P.namespace, P.name)}/state${from}`, {
    record: r => {
      if (r.variable !== undefined) {  // a variable's entry changed: read the variables again, once per burst
        if (r.key.startsWith(prefix) && !varsPending) varsPending = setTimeout(() => { varsPending = null; loadVariables(); }, 300);
        return;
      }
      if (r.tombstone) {
        const old = rows.get(r.key);
        if (old) { old.tr.className = "deleted"; old.tr.querySelector(".version").textContent = "deleted"; }
      } else {
        const entry = Object.assign({ key: r.key, version: r.version },
          r.numberValue !== undefined ? { numberValue: r.numberValue } : r.stringValue !== undefined ? { stringValue: r.stringValue } : { byteValue: r.byteValue });
        update(entry);
      }
      if (editing && editing.key === r.key && $("#edit-note") && !$("#conflict")) {
        $("#edit-note").replaceChildren(h("p", { class: "error", text: `“${r.key}” was ${r.tombstone ? "deleted" : "changed to version " + r.version} elsewhere; saving will report a conflict.` }));
      }
    },
    reset: () => { live.dataset.sticky = "1"; live.textContent = "changelog compacted: reload for the current keys"; },
  });
  showLiveness(es, live);
}

// ---- Changelog -------------------------------------------------------------------------------------
async function changelogPage() {
  const fn = fnPath(P.tenant, P.namespace, P.name), id = `${P.tenant}/${P.namespace}/${P.name}`;
  $("#title").append(" ", h("a", { href: `/ui/functions/${fn}`, class: "muted", style: "font-size:14px" }, "state →"));
  const data = await api("GET", `/ui/api/functions/${fn}/changelog?limit=50`);
  const pos = data.position;
  const position = h("dl", { class: "stat", id: "position" });
  const setPos = p => position.replaceChildren(...(p ? [["Epoch", p.epoch || "—"], ["Last offset", p.lastOffset],
    ["Compacted up to (compaction point)", p.compactedOffset], ["Newest purged tombstone", p.purgedOffset]] : [["Changelog", data.reason]])
    .flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { class: "mono", text: String(v) })]));
  setPos(pos);
  const snaps = h("table", { id: "snapshots" }, h("thead", {}, h("tr", {}, ["#", "Offset", "Epoch", "Size", "Created", "Blob"].map(t => h("th", { text: t })))),
    h("tbody", {}, data.snapshots.length ? data.snapshots.map(s => h("tr", {}, h("td", { text: s.snapshot }), h("td", { class: "num", text: s.offset }),
      h("td", { class: "mono", text: s.epoch || "" }), h("td", { class: "num", text: bytes(s.size) }), h("td", { text: when(s.createdMs) }), h("td", { class: "mono", text: s.blob })))
      : h("tr", {}, h("td", { colspan: 6, class: "muted", text: "No snapshots." }))));
  const followers = h("table", { id: "followers" }, h("thead", {}, h("tr", {}, ["Follower of", "Phase", "Applied offset", "Lag (records)", "Error"].map(t => h("th", { text: t })))), h("tbody"));
  const tail = h("table", { id: "tail" }, h("thead", {}, h("tr", {}, ["Offset", "Key", "Version", "Value"].map(t => h("th", { text: t })))), h("tbody"));
  content.append(h("div", { class: "grid2" }, h("div", { class: "card" }, h("h2", { text: "Position" }), position),
    h("div", {}, h("h2", { text: "Snapshots" }), snaps)),
    h("h2", { text: "Followers served by this server (lag)" }), followers,
    h("h2", {}, "Live tail ", h("span", { id: "live", class: "muted", style: "font-weight:normal" }, "connecting…")), tail);
  const addRecord = (r, flash) => {
    const tr = h("tr", { class: flash ? "flash" : null, "data-offset": r.offset }, h("td", { class: "num", text: r.offset }), h("td", { class: "mono", text: r.key }),
      h("td", { class: "num", text: r.version }), h("td", {}, r.variable !== undefined ? variableCell(r)
        : r.tombstone ? h("span", { class: "muted", text: "deleted" + (r.deletedMs ? " " + when(r.deletedMs) : "") }) : valueCell(r)));
    tail.tBodies[0].prepend(tr);
    while (tail.tBodies[0].rows.length > 200) tail.tBodies[0].lastChild.remove();
  };
  data.records.forEach(r => addRecord(r, false));
  async function loadFollowers() {
    let list = [];
    try { list = await api("GET", "/admin/v3/followers"); } catch (e) { if (e.status !== 403) throw e; }
    const rows = list.map(f => h("tr", { "data-follower": `${f.tenant}/${f.namespace}/${f.name}`, style: `${f.tenant}/${f.namespace}/${f.name}` === id ? "font-weight:600" : null },
      h("td", { text: `${f.tenant}/${f.namespace}/${f.name}` + (f.view ? " (subset)" : "") }), h("td", { text: f.phase || "" }),
      h("td", { class: "num applied", text: f.appliedOffset === undefined || f.appliedOffset === null ? "" : String(f.appliedOffset) }),
      h("td", { class: "num lag", text: f.lag === null || f.lag === undefined ? "unknown" : String(f.lag) }), h("td", { class: "error", text: f.error || "" })));
    followers.tBodies[0].replaceChildren(...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 5, class: "muted", text: "This server runs no followers." }))]));
  }
  await loadFollowers();
  setInterval(() => loadFollowers().catch(() => {}), 5000);
  const last = data.records.length ? data.records[data.records.length - 1].offset : (pos ? pos.lastOffset : -1);
  const live = $("#live");
  const es = events(`/ui/api/events/functions/${fn}/state?after=${last}`, {
    record: r => { addRecord(r, true); if (pos) { pos.lastOffset = Math.max(pos.lastOffset, r.offset); setPos(pos); } },
    reset: () => { live.dataset.sticky = "1"; live.textContent = "compacted past this tail: reload"; },
  });
  showLiveness(es, live);
}

// ---- Metadata tree ---------------------------------------------------------------------------------
const NODE_KINDS = ["text", "json", "binary"];  // a metadata value is bytes: no counter kind
async function metadataPage() {
  const expanded = new Set(["/"]);
  let selected = P.path || "/";
  // expand the ancestors of a bookmarked path
  let acc = ""; for (const part of selected.split("/").filter(Boolean).slice(0, -1)) { acc += "/" + part; expanded.add(acc); }
  const tree = h("div", { class: "tree", id: "tree" }), details = h("div", { id: "details" });
  content.append(h("div", { class: "split" }, tree, details));
  const lists = new Map();  // path -> <ul> of its children

  async function renderChildren(path) {
    const ul = lists.get(path); if (!ul) return;
    const data = await api("GET", `/ui/api/tree?path=${enc(path)}`);
    const names = JSON.stringify(data.children.map(c => c.name));
    if (ul.dataset.names !== names) {  // unchanged children keep their elements (no flicker, no lost clicks)
      ul.dataset.names = names;
      ul.replaceChildren(...data.children.map(c => item(c.path, c.name)));
      if (!data.children.length) ul.append(h("li", { class: "muted", text: "(no children)" }));
    }
    for (const c of data.children) if (expanded.has(c.path)) await renderChildren(c.path);
  }
  function item(path, name) {
    const ul = h("ul");
    const open = expanded.has(path);
    const toggle = h("span", { class: "toggle", text: open ? "▾" : "▸" });
    const label = h("span", { class: "node" + (path === selected ? " selected" : ""), "data-path": path, text: name });
    const li = h("li", {}, toggle, label, open ? ul : null);
    if (open) lists.set(path, ul);
    toggle.addEventListener("click", async () => {
      if (expanded.has(path)) { expanded.delete(path); lists.delete(path); ul.remove(); toggle.textContent = "▸"; return; }
      expanded.add(path); lists.set(path, ul); li.append(ul); toggle.textContent = "▾";
      await renderChildren(path).catch(e => say(e.message, true));
    });
    label.addEventListener("click", () => select(path));
    label.addEventListener("dblclick", () => toggle.click());
    return li;
  }
  async function select(path) {
    selected = path;
    history.replaceState(null, "", `?path=${enc(path)}`);
    tree.querySelectorAll(".node.selected").forEach(n => n.classList.remove("selected"));
    const n = tree.querySelector(`.node[data-path="${CSS.escape(path)}"]`); if (n) n.classList.add("selected");
    await showDetails(path);
  }
  let shown = null, shownPath = null, renders = 0;  // "path@version" on display
  // the user is typing in the details (an edit, a new child)
  const typing = () => [...details.querySelectorAll("input, textarea")].some(el => el.value !== el.defaultValue);
  // mode "ifChanged": only if the node's version changed; "force": even over what the user typed
  async function showDetails(path, note, mode) {
    const mine = ++renders;
    let node = null;
    try { node = await api("GET", `/ui/api/node?path=${enc(path)}`); } catch (e) { say(e.message, true); return; }
    if (mine !== renders) return;  // a later call superseded this one
    if (mode !== "force" && path === shownPath && typing()) return;  // never replace what the user is typing
    if (!node.exists) node = null;
    const key = node ? `${path}@${node.stat.version}` : `${path}@none`;
    if (mode === "ifChanged" && key === shown) return;
    shown = key; shownPath = path;
    const childName = h("input", { id: "child-name", placeholder: "child name" });
    const childKind = kindSelect("text", NODE_KINDS), childValue = h("textarea", { id: "child-value", rows: 3 });
    const create = h("div", { class: "card" }, h("h2", { text: "Create a child" }), h("div", { class: "toolbar" }, childName, childKind),
      childValue, h("button", { id: "child-create", onclick: async () => {
        try {
          const name = childName.value.trim(); if (!name || name.includes("/")) throw new Error("a child name is one path segment");
          const p = (path === "/" ? "" : path) + "/" + name;
          await api("PUT", `/ui/api/node?path=${enc(p)}`, { json: Object.assign(nodeBody(childKind.value, childValue.value), { version: -1 }) });
          say(`Created ${p}.`); expanded.add(path); if (!lists.has(path)) await refresh(); else await renderChildren(path);
          await showDetails(path, undefined, "force");
        } catch (e) { if (e.status !== 401) say(`Not created: ${e.message}`, true); }
      } }, "Create"));
    if (!node) { details.replaceChildren(h("div", { class: "card" }, h("h2", { text: path }), h("p", { class: "muted", text: path === "/" ? "The root." : "No node here (deleted?)." })), path === "/" ? create : ""); return; }
    const d = decode(node), st = node.stat;
    const kind = kindSelect(d.kind, NODE_KINDS), text = h("textarea", { id: "node-value", rows: 8 }, d.raw !== undefined ? d.raw : d.text);
    const msg = h("div", { id: "node-note" }, note ? h("p", { class: "error", text: note }) : null);
    details.replaceChildren(h("div", { class: "card" }, h("h2", { class: "mono", text: path }),
      h("dl", { class: "stat", id: "stat" }, ...[["Version", st.version], ["Created", when(st.createdMs)], ["Modified", when(st.modifiedMs)],
        ["Ephemeral", st.ephemeral ? `yes (owner: ${st.ephemeralOwner})` : "no"], ["Size", bytes(node.size)], ["Children", node.children]]
        .flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { text: String(v) })])),
      h("div", { class: "kind", text: d.kind }), h("pre", { id: "node-decoded", text: d.text })),
      h("div", { class: "card" }, h("h2", { text: `Edit (if still at version ${st.version})` }), h("div", { class: "toolbar" }, kind), text, msg,
        h("div", { class: "toolbar" },
          h("button", { class: "primary", id: "node-save", onclick: async () => {
            try {
              await api("PUT", `/ui/api/node?path=${enc(path)}`, { json: Object.assign(nodeBody(kind.value, text.value), { version: st.version }) });
              say(`Saved ${path}.`); await showDetails(path, undefined, "force");
            } catch (e) { if (e.status === 409) msg.replaceChildren(h("p", { class: "conflict", id: "conflict", text: `Conflict: ${path} changed since version ${st.version} (${e.message}). Your edit is kept; reload the node to see the current value.` })); else if (e.status !== 401) msg.replaceChildren(h("p", { class: "error", text: e.message })); }
          } }, "Save"),
          h("button", { class: "danger", id: "node-delete", onclick: async () => {
            if (!await confirmDialog(`Delete ${path} (version ${st.version})?`)) return;
            try { await api("DELETE", `/ui/api/node?path=${enc(path)}&version=${st.version}`); say(`Deleted ${path}.`); }
            catch (e) { if (e.status !== 401) say(`Not deleted: ${e.message}`, true); }
          } }, "Delete"))), create);
  }
  function nodeBody(kind, text) {
    if (kind === "binary") return encodeValue("binary", text);
    if (kind === "json") JSON.parse(text);
    return { stringValue: text };
  }
  async function refresh() {
    const ul = h("ul"); lists.clear(); lists.set("/", ul);
    tree.replaceChildren(h("ul", {}, h("li", {}, h("span", { class: "toggle", text: "▾" }),
      h("span", { class: "node" + (selected === "/" ? " selected" : ""), "data-path": "/", text: "/", onclick: () => select("/") }), ul)));
    await renderChildren("/");
  }
  await refresh();
  await showDetails(selected);
  const parentOf = p => p.lastIndexOf("/") <= 0 ? "/" : p.slice(0, p.lastIndexOf("/"));
  const dirty = new Set(); let timer = null;
  let hellos = 0;
  events("/ui/api/events/tree", {
    hello: () => {
      if (hellos++ === 0) return;
      for (const p of lists.keys()) dirty.add(p);  // changes made while reconnecting were not sent
      dirty.add("\0refresh");
      clearTimeout(timer);
      timer = setTimeout(flush, 150);
    },
    change: c => {
      // re-list only expanded parents whose children changed (debounced: bursts of writes re-list once)
      const parent = c.type === "ChildrenChanged" ? c.path : parentOf(c.path);
      if (lists.has(parent) && c.type !== "Modified") dirty.add(parent);
      if (c.path === selected && (c.type === "Modified" || c.type === "Deleted")) dirty.add("\0details");
      clearTimeout(timer);
      timer = setTimeout(flush, 150);
    },
  });
  // keep what the user typed, warn
  const warnChanged = () => { if ($("#node-note")) $("#node-note").replaceChildren(h("p", { class: "error", text: `${selected} changed elsewhere; saving will report a conflict.` })); };
  async function flush() {
    const todo = [...dirty]; dirty.clear();
    const editing = typing();  // never re-render under what the user types
    for (const p of todo) {
      if (p === "\0details") {
        if (editing) warnChanged();
        else await showDetails(selected, `${selected} changed elsewhere: showing the current version.`, "force").catch(() => {});
      } else if (p === "\0refresh") {  // reconnected: a change while the stream was away was not sent
        if (!editing) await showDetails(selected, undefined, "ifChanged").catch(() => {});
        else {
          const node = await api("GET", `/ui/api/node?path=${enc(selected)}`).catch(() => null);
          if (node && `${selected}@${node.exists ? node.stat.version : "none"}` !== shown) warnChanged();
        }
      } else await renderChildren(p).catch(() => {});
    }
  }
}

// ---- State handles ---------------------------------------------------------------------------------
async function handlesPage() {
  const roots = await api("GET", "/ui/api/handle-roots");
  const q = new URLSearchParams(location.search);
  const root = P.root || roots[0] || "";
  const form = h("form", { class: "toolbar", id: "handles-form" },
    h("label", {}, "Handle store root ", h("input", { name: "root", value: root, list: "roots", size: 48, required: true })),
    h("datalist", { id: "roots" }, roots.map(r => h("option", { value: r }))),
    h("label", {}, "Blob storage ", h("input", { name: "blobs", value: q.get("blobs") || "", placeholder: "default: the store's blobs dir", size: 30 })),
    h("label", {}, "GC grace (s) ", h("input", { name: "grace", value: q.get("grace") || "3600", size: 6 })),
    h("button", { type: "submit" }, "Show"));
  content.append(form);
  if (!root) { content.append(h("p", { class: "muted", text: "No snapshot handle stores in this store yet; enter the root of a StateHandleStore." })); return; }
  const params = new URLSearchParams({ root, grace: q.get("grace") || "3600" }); if (q.get("blobs")) params.set("blobs", q.get("blobs"));
  const data = await api("GET", `/ui/api/handles?${params}`);
  content.append(h("h2", { text: `Handles under ${data.root}` }),
    h("table", { id: "handles" }, h("thead", {}, h("tr", {}, ["Key", "Version", "Size", "SHA-256", "Created", "Blob", "Locks", "Attributes"].map(t => h("th", { text: t })))),
      h("tbody", {}, data.handles.length ? data.handles.map(x => h("tr", {}, h("td", { class: "mono", text: x.key }), h("td", { class: "num", text: x.version }),
        h("td", { class: "num", text: x.size === undefined ? "" : bytes(x.size) }), h("td", { class: "mono", text: x.sha256 || x.error || "" }),
        h("td", { text: when(x.createdMs) }), h("td", { class: "mono", text: x.blob || "" }), h("td", { text: x.lockedBy.join(", ") || "—" }),
        h("td", {}, h("pre", { text: x.attributes ? JSON.stringify(x.attributes) : "" }))))
        : h("tr", {}, h("td", { colspan: 8, class: "muted", text: "No handles." })))));
  const gc = data.gc;
  content.append(h("h2", { text: "Orphan blobs (garbage collector, dry run)" }),
    gc ? h("div", {}, h("p", { id: "gc-summary", text: `${gc.scanned} blobs scanned, ${gc.referenced} referenced, ${gc.young} too young to judge, ${gc.orphans} orphans (${bytes(gc.orphanBytes)}) in ${data.blobs}.` }),
      h("table", { id: "orphans" }, h("thead", {}, h("tr", {}, ["Blob", "Size", "Written", "Temporary"].map(t => h("th", { text: t })))),
        h("tbody", {}, gc.blobs.map(b => h("tr", {}, h("td", { class: "mono", text: b.url }), h("td", { class: "num", text: bytes(b.size) }), h("td", { text: when(b.writtenMs) }), h("td", { text: b.temporary ? "yes" : "" }))))))
      : h("p", { class: "muted", id: "gc-summary", text: data.gcReason }));
}

// ---- Topics ----------------------------------------------------------------------------------------
async function topicsPage() {
  if (!P.topic) {
    const list = await api("GET", "/ui/api/topics");
    content.append(h("table", { id: "topics" }, h("thead", {}, h("tr", {}, ["Topic", "Files", "Messages"].map(t => h("th", { text: t })))),
      h("tbody", {}, list.length ? list.map(x => h("tr", {}, h("td", {}, h("a", { href: `/ui/topics?topic=${enc(x.name)}`, class: "mono", text: x.name })),
        h("td", { class: "num", text: x.files }), h("td", { class: "num", text: x.messages })))
        : h("tr", {}, h("td", { colspan: 3, class: "muted", text: "No topics yet: a function's output, publish or log topic, or statekeep topics produce, makes one." })))));
    return;
  }
  const data = await api("GET", `/ui/api/topic?name=${enc(P.topic)}&limit=200`);
  content.append(h("p", { id: "topic-summary", text: `${data.name}: ${data.total} messages, the newest ${data.messages.length} below.` }),
    h("table", { id: "messages" }, h("thead", {}, h("tr", {}, ["Value", "Key", "Properties", "Event time", "Published"].map(t => h("th", { text: t })))),
      h("tbody", {}, data.messages.map(m => h("tr", {}, h("td", {}, h("pre", { text: m.value !== undefined ? m.value : `base64: ${m.valueBase64}` })),
        h("td", { class: "mono", text: m.key === undefined ? "" : m.key }), h("td", {}, h("pre", { text: m.properties ? JSON.stringify(m.properties) : "" })),
        h("td", { text: m.eventTime === undefined ? "" : `${m.eventTime} (${when(m.eventTime)})` }), h("td", { text: when(m.publishTime) }))))));
}

start();
