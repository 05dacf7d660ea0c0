// The dashboard's core: the JSON client, the token, the hash router and the polling loop.
"use strict";

// In sessionStorage: the token lives as long as the tab, never on disk for every later visitor.
const TOKEN_KEY = "swarm.token";
localStorage.removeItem(TOKEN_KEY);  // where earlier versions kept it
const POLL_MS = 3000;

const App = {
  views: {},          // name -> {render(params) -> Promise, refresh() -> Promise}
  current: null,      // {name, params, view}
  role: null,

  token() { return sessionStorage.getItem(TOKEN_KEY) || ""; },

  headers(extra) {
    const h = Object.assign({ "Accept": "application/json" }, extra || {});
    if (this.token()) h["Authorization"] = "Bearer " + this.token();
    return h;
  },

  // GET from the dashboard's read-only JSON; undefined/empty params are dropped.
  async get(path, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (v === undefined || v === null || v === "") continue;
      for (const item of Array.isArray(v) ? v : [v]) q.append(k, item);
    }
    const url = "/dashboard/api" + path + (q.toString() ? "?" + q : "");
    const res = await fetch(url, { headers: this.headers() });
    const data = await res.json().catch(() => ({ error: res.statusText }));
    if (res.status === 401) this.askToken(data.error);
    if (!res.ok) throw new Error(data.error || data.detail || res.statusText);
    return data;
  },

  // POST to the hub's operator API (needs the operator token).
  async post(path, body) {
    const res = await fetch(path, {
      method: "POST",
      headers: this.headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(body || {}),
    });
    const data = await res.json().catch(() => ({ error: res.statusText }));
    if (!res.ok) throw new Error(data.error || res.statusText);
    return data;
  },

  askToken(reason) {
    const dialog = document.getElementById("token-dialog");
    if (dialog.open) return;
    document.getElementById("token-input").value = this.token();
    if (reason) dialog.querySelector("p").dataset.reason = reason;
    dialog.showModal();
  },

  async whoami() {
    try {
      const s = await this.get("/session");
      this.role = s.role;
    } catch (e) {
      this.role = null;
    }
    const label = this.role ? `signed in as ${this.role}` : "no token";
    document.getElementById("role").textContent = label;
    document.getElementById("token-button").textContent =
      this.role === "operator" ? "Operator ✓" : "Operator token";
  },

  isOperator() { return this.role === "operator"; },

  route() {
    const hash = location.hash.replace(/^#\/?/, "");
    const [path, query] = hash.split("?");
    const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    const params = Object.fromEntries(new URLSearchParams(query || ""));
    const name = parts[0] || "overview";
    return { name: this.views[name] ? name : "overview", args: parts.slice(1), params };
  },

  async show() {
    const { name, args, params } = this.route();
    const view = this.views[name];
    this.current = { name, view };
    for (const a of document.querySelectorAll("#nav a")) {
      a.classList.toggle("on", a.dataset.view === (view.nav || name));
    }
    const main = document.getElementById("view");
    main.innerHTML = '<div class="empty">Loading…</div>';
    try {
      await view.render(main, args, params);
      window.scrollTo(0, 0);
    } catch (e) {
      main.innerHTML = `<div class="error">${esc(e.message)}</div>`;
    }
  },

  // A finished run says so in the header instead of "live" (the page still refreshes).
  showEnded(run) {
    const live = document.getElementById("live");
    if (run) {
      live.textContent = "■ ended";
      live.classList.add("ended");
      live.title = "The run ended" + (run.stopped_because ? ": " + run.stopped_because : "");
    } else if (live.classList.contains("ended")) {
      live.textContent = "● live";
      live.classList.remove("ended");
    }
  },

  async tick() {
    const live = document.getElementById("live");
    const cur = this.current;
    if (!cur || document.hidden || !cur.view.refresh) return;
    try {
      await cur.view.refresh();
      live.classList.remove("stale");
      if (!live.classList.contains("ended")) live.title = "Updated " + new Date().toLocaleTimeString();
    } catch (e) {
      live.classList.add("stale");
      live.title = "Update failed: " + e.message;
    }
  },

  start() {
    document.getElementById("token-button").onclick = () => this.askToken();
    const form = document.getElementById("token-form");
    form.addEventListener("submit", ev => {
      const action = ev.submitter ? ev.submitter.value : "save";
      if (action === "save") sessionStorage.setItem(TOKEN_KEY, document.getElementById("token-input").value.trim());
      if (action === "forget") sessionStorage.removeItem(TOKEN_KEY);
      if (action !== "cancel") this.whoami().then(() => this.show());
    });
    window.addEventListener("hashchange", () => this.show());
    this.whoami().then(() => this.show());
    setInterval(() => this.tick(), POLL_MS);
  },
};

// ---- small helpers shared by the views ---------------------------------------------------------

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, c =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function ago(t, now) {
  if (t === null || t === undefined) return "—";
  const s = Math.max(0, (now || Date.now() / 1000) - t);
  if (s < 60) return Math.round(s) + "s ago";
  if (s < 3600) return Math.round(s / 60) + "m ago";
  if (s < 86400) return (s / 3600).toFixed(1) + "h ago";
  return Math.round(s / 86400) + "d ago";
}

function when(t) {
  if (!t) return "";
  return new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function stamp(t, now) {
  return `<span title="${esc(when(t))}">${ago(t, now)}</span>`;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h ? `${h}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

function num(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return String(n ?? 0);
}

function money(x) { return "$" + (x || 0).toFixed(x >= 100 ? 0 : 2); }

function badge(state) { return `<span class="badge ${esc(state)}">${esc(String(state).replace("_", " "))}</span>`; }

function typeTag(type) { return `<span class="type ${esc(type)}">${esc(type)}</span>`; }

function worker(name) {
  if (!name || name === "hub" || name === "operator") return `<b>${esc(name || "—")}</b>`;
  return `<a href="#/workers/${encodeURIComponent(name)}">${esc(name)}</a>`;
}

function scopeList(scope) {
  return (scope || []).length ? `<span class="scope">${scope.map(esc).join(", ")}</span>` : "";
}

function entryItem(e) {
  return `<li data-entry="${e.id}">
    <div><a class="id" href="#/entry/${e.id}">#${e.id}</a></div>
    <div>
      <div class="meta">${typeTag(e.type)} ${worker(e.author)} · ${stamp(e.time)}
        ${e.refs && e.refs.length ? " · refs " + e.refs.map(r => `<a href="#/entry/${r}">#${r}</a>`).join(" ") : ""}
        ${e.scope && e.scope.length ? " · " + scopeList(e.scope) : ""}</div>
      <div class="body">${esc(e.body)}</div>
    </div></li>`;
}

document.addEventListener("DOMContentLoaded", () => App.start());
