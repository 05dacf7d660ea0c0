// The dashboard's pages. Each view renders into <main> and may refresh itself on the poll.
"use strict";

// ---- overview ----------------------------------------------------------------------------------
App.views.overview = {
  filter: "",
  async render(main) {
    main.innerHTML = `
      <div id="ov-cards" class="cards"></div>
      <section class="panel"><h2>Pass rate of main (hidden tests)</h2><div id="ov-chart" class="chart"></div>
        <div id="ov-checkpoints"></div><div id="ov-tests"></div></section>
      <div id="ov-counts" class="grid cols-4"></div>
      <section id="ov-operator"></section>
      <section class="panel">
        <div class="filters"><h2 style="margin:0">Workers</h2><span class="spacer"></span>
          <input id="ov-filter" placeholder="filter: name, state, scope…" size="28"></div>
        <div class="scroll"><table id="ov-workers"></table></div>
      </section>`;
    const box = document.getElementById("ov-filter");
    box.value = this.filter;
    box.oninput = () => { this.filter = box.value; this.drawWorkers(); };
    renderOperator(document.getElementById("ov-operator"));
    await this.refresh();
  },

  async refresh() {
    this.data = await App.get("/overview");
    const d = this.data;
    document.getElementById("run-name").textContent = d.run.name + (d.run.task ? " · " + d.run.task : "");
    // The card shows the newest pass rate: a tampered or incomplete scoring is not one.
    const scored = d.checkpoints.filter(c => (c.status || "scored") === "scored");
    const last = scored[scored.length - 1];
    const newest = d.checkpoints[d.checkpoints.length - 1];
    const rate = last && last.total ? (100 * last.passed / last.total).toFixed(1) + "%" : "—";
    const unscored = newest && newest !== last ? ` · newest: ${newest.status}` : "";
    const alive = d.workers.filter(w => w.state === "in_session" || w.state === "idle").length;
    const ended = d.run.ended_at !== null && d.run.ended_at !== undefined;
    App.showEnded(ended ? d.run : null);
    const cards = [
      ["Pass rate", rate, (last ? `${ended ? "final · " : ""}${last.passed}/${last.total} · ${ago(last.time, d.now)}`
        : newest ? "no pass rate yet" : "no checkpoint yet") + unscored],
      ["Workers", d.workers.length, ended ? "the run has ended" : `${alive} alive · ${d.totals.running} in session`],
      ended
        ? ["Ended", when(d.run.ended_at), `${d.run.stopped_because || "reason not recorded"}` +
            (d.run.started_at ? ` · ran ${duration(d.run.ended_at - d.run.started_at)}` : "")]
        : ["Time left", d.run.time_left === null ? "—" : duration(d.run.time_left),
            d.run.started_at ? "started " + ago(d.run.started_at, d.now) : "no budget in run.toml"],
      ["Cost", money(d.totals.cost), d.run.cost_left === null ? "no cost budget" : money(d.run.cost_left) + " left"],
      ["Tokens", num(d.totals.tokens), `${d.totals.sessions} sessions`],
      ["Merged PRs", d.prs.merged, `${d.prs.open} open · ${d.prs.conflicted} conflicted`],
      ["Mechanisms", (d.run.without || []).length ? "without " + d.run.without.join(", ") : "all on",
        (d.run.without || []).length ? "an ablation run (swarm run --without)" : "context, claims, DMs, channel, grep, reviews"],
    ];
    document.getElementById("ov-cards").innerHTML = cards.map(([l, v, s]) =>
      `<div class="card"><div class="label">${l}</div><div class="value">${esc(v)}</div><div class="sub">${esc(s)}</div></div>`).join("");
    const start = d.run.started_at ?? (d.checkpoints[0] || {}).time;
    const points = d.checkpoints.map(c => ({
      t: c.time, y: c.total ? c.passed / c.total : 0, bad: !c.total, status: c.status || "scored",
      label: (c.status && c.status !== "scored" ? `${c.status}, not a pass rate` : `${c.passed}/${c.total}`) +
        ` at ${when(c.time)} (${c.commit.slice(0, 8)})${c.reason ? " · " + c.reason : ""}`,
    }));
    document.getElementById("ov-chart").innerHTML = Chart.passRate(points, start);
    drawCheckpoints(document.getElementById("ov-checkpoints"), d.checkpoints, d.now);
    drawFailing(document.getElementById("ov-tests"), await App.get("/tests"), d.now);
    document.getElementById("ov-counts").innerHTML =
      counts("Entries", d.entries, ["OBSERVED", "FACT", "FAIL", "CLAIM", "PATCH_SUMMARY"], "#/context?type=") +
      counts("Claims", d.claims, ["active", "overlapping", "completed", "failed", "released", "lapsed"], k => k === "overlapping" ? "#/claims" : "#/claims?state=" + k) +
      counts("Pull requests", d.prs, ["open", "conflicted", "merged", "closed"], "#/prs?state=") +
      counts("Messages", d.messages, ["channel", "direct"], () => "#/chat");
    this.drawWorkers();
  },

  drawWorkers() {
    const d = this.data;
    if (!d) return;
    const f = this.filter.toLowerCase();
    const rows = d.workers.filter(w => !f || [w.name, w.state, w.model, w.claim && w.claim.scope.join(" "),
      w.claim && w.claim.body].join(" ").toLowerCase().includes(f));
    document.getElementById("ov-workers").innerHTML = `
      <thead><tr><th>Worker</th><th>State</th><th>Current claim</th><th class="num">Sessions</th>
        <th class="num">Steps</th><th class="num">Tokens</th><th class="num">Cost</th>
        <th class="num">Entries</th><th>Heartbeat</th></tr></thead>
      <tbody>${rows.map(w => `<tr data-worker="${esc(w.name)}">
        <td>${worker(w.name)}<div class="small muted">${esc(w.model || "")}</div></td>
        <td>${badge(w.state)}</td>
        <td>${w.claim ? `<a href="#/entry/${w.claim.id}">#${w.claim.id}</a> ${scopeList(w.claim.scope)}
              <div class="small muted clip">${esc(w.claim.body)}</div>` : '<span class="muted">—</span>'}</td>
        <td class="num">${w.sessions}</td><td class="num">${num(w.steps)}</td>
        <td class="num">${num(w.tokens)}</td><td class="num">${money(w.cost)}</td>
        <td class="num">${num(w.entries)}</td><td>${stamp(w.heartbeat_at, d.now)}</td></tr>`).join("")}
      </tbody>`;
    if (!rows.length) document.getElementById("ov-workers").innerHTML += `<tr><td colspan="9" class="empty">No workers${f ? " match" : " yet"}.</td></tr>`;
  },
};

// Every scoring, newest first: its status says whether it is a pass rate, its reason why not.
function drawCheckpoints(el, checkpoints, now) {
  if (!el) return;
  if (!checkpoints.length) { el.innerHTML = ""; return; }
  const rows = checkpoints.slice(-50).reverse().map(c => {
    const status = c.status || "scored";
    return `<tr data-checkpoint-status="${esc(status)}"><td title="${esc(when(c.time))}">${ago(c.time, now)}</td>
      <td class="mono small">${esc(c.commit.slice(0, 10))}</td>
      <td class="num">${status === "scored" ? `${c.passed}/${c.total}` : '<span class="muted">—</span>'}</td>
      <td>${badge(status)}</td><td class="small">${esc(c.reason || "")}</td></tr>`;
  }).join("");
  const bad = checkpoints.filter(c => c.status === "tampered" || c.status === "incomplete").length;
  const shown = el.querySelector("details");
  const open = shown ? shown.open : bad > 0;
  el.innerHTML = `<details${open ? " open" : ""}><summary id="ov-checkpoints-summary">
      ${checkpoints.length} checkpoints${bad ? ` · ${bad} not pass rates (tampered or incomplete)` : ""}</summary>
    <div class="scroll"><table><thead><tr><th>When</th><th>Commit</th><th class="num">Passed</th>
      <th>Status</th><th>Reason</th></tr></thead><tbody>${rows}</tbody></table></div></details>`;
}

// Which hidden tests main still fails, and since when (from the evaluator's per-test results).
function drawFailing(el, t, now) {
  if (!el) return;
  if (!t.tests) { el.innerHTML = '<p class="small muted">No per-test results yet.</p>'; return; }
  const rows = t.failing.map(f => `<tr data-test="${esc(f.test)}"><td class="mono small">${esc(f.test)}</td>
    <td>${badge(f.outcome)}</td><td title="${esc(when(f.since))}">${ago(f.since, now)}</td>
    <td class="mono small">${esc(f.since_commit.slice(0, 8))}</td><td>${f.ever_passed ? "broke again" : ""}</td></tr>`).join("");
  const shown = el.querySelector("details");  // a reader's open or closed choice survives the poll
  const open = shown ? shown.open : t.failing.length > 0 && t.failing.length <= 20;
  el.innerHTML = `<details${open ? " open" : ""}><summary id="ov-tests-summary">
      ${t.failing.length} of ${t.tests} hidden tests still failing · ${t.passing} passing</summary>
    ${rows ? `<div class="scroll"><table><thead><tr><th>Test</th><th>Outcome</th><th>Failing since</th>
      <th>At commit</th><th></th></tr></thead><tbody>${rows}</tbody></table></div>` : ""}</details>`;
}

function counts(title, values, keys, link) {
  const max = Math.max(1, ...keys.map(k => values[k] || 0));
  return `<section class="panel"><h2>${title}</h2><div class="counts">${keys.map(k => `<div class="count">
      <span>${link ? `<a href="${typeof link === "function" ? link(k) : link + k}">${esc(k.replace("_", " ").toLowerCase())}</a>` : esc(k)}</span>
      <span class="bar"><i style="width:${100 * (values[k] || 0) / max}%"></i></span>
      <b data-count="${esc(title)}.${esc(k)}">${num(values[k] || 0)}</b></div>`).join("")}</div></section>`;
}

// The operator's controls: post into #tasks and stop the run (hidden without the operator token).
function renderOperator(el) {
  if (!App.isOperator()) { el.innerHTML = ""; return; }
  el.innerHTML = `<div class="panel operator"><h2>Steer the swarm</h2>
    <textarea id="op-body" placeholder="Post into #tasks: every worker reads it at its next iteration"></textarea>
    <div class="row"><button id="op-send" class="primary">Post to #tasks</button>
      <span id="op-result" class="small muted"></span><span class="spacer" style="flex:1"></span>
      <button id="op-stop" class="danger">Stop the run</button></div></div>`;
  const result = document.getElementById("op-result");
  document.getElementById("op-send").onclick = async () => {
    const body = document.getElementById("op-body").value.trim();
    if (!body) return;
    try {
      const r = await App.post("/v1/operator/channel", { body });
      result.textContent = `posted message #${r.result.message.id}`;
      document.getElementById("op-body").value = "";
      if (App.current.view.refresh) App.current.view.refresh();
    } catch (e) { result.textContent = "refused: " + e.message; }
  };
  document.getElementById("op-stop").onclick = async () => {
    if (!confirm("Ask every worker to stop after its current step?")) return;
    try { await App.post("/v1/operator/stop"); result.textContent = "stop requested"; }
    catch (e) { result.textContent = "refused: " + e.message; }
  };
}

// ---- shared context ----------------------------------------------------------------------------
const TYPES = ["OBSERVED", "FACT", "FAIL", "CLAIM", "PATCH_SUMMARY"];

App.views.context = {
  async render(main, _args, params) {
    this.types = params.type ? params.type.split(",") : [];
    main.innerHTML = `<section class="panel"><h1>Shared context</h1>
      <form id="cx-form" class="filters">
        ${TYPES.map(t => `<span class="chip${this.types.includes(t) ? " on" : ""}" data-type="${t}">${t}</span>`).join("")}
        <label>author <input name="author" size="6" placeholder="w3" value="${esc(params.author || "")}"></label>
        <label>since <input name="since" type="datetime-local"></label>
        <label>until <input name="until" type="datetime-local"></label>
        <label>grep <input name="pattern" size="22" placeholder="regular expression" value="${esc(params.grep || "")}"></label>
        <button class="primary">Search</button>
      </form>
      <div id="cx-note"></div><ul id="cx-list" class="feed"></ul>
      <button id="cx-more" class="more ghost" hidden>Older entries</button></section>`;
    for (const chip of main.querySelectorAll(".chip")) {
      chip.onclick = () => { chip.classList.toggle("on"); this.search(); };
    }
    document.getElementById("cx-form").onsubmit = ev => { ev.preventDefault(); this.search(); };
    document.getElementById("cx-more").onclick = () => this.load(true);
    await this.search();
  },

  query() {
    const form = document.getElementById("cx-form");
    const stamp = v => v ? new Date(v + "Z").getTime() / 1000 : undefined;
    return {
      type: [...form.querySelectorAll(".chip.on")].map(c => c.dataset.type),
      author: form.author.value.trim(), pattern: form.pattern.value.trim(),
      since: stamp(form.since.value), until: stamp(form.until.value),
    };
  },

  async search() { this.next = null; this.pages = 0; await this.load(false); },

  async load(more) {
    const q = this.query();
    const path = q.pattern ? "/grep" : "/entries";
    const page = await App.get(path, { ...q, before: more ? this.next : undefined });
    const list = document.getElementById("cx-list");
    const html = page.entries.map(entryItem).join("");
    list.innerHTML = more ? list.innerHTML + html : html;
    if (!list.innerHTML) list.innerHTML = '<li class="empty" style="display:block">No entries match.</li>';
    this.next = page.next;
    this.pages = more ? this.pages + 1 : 1;
    document.getElementById("cx-more").hidden = !page.next;
    document.getElementById("cx-note").innerHTML = q.pattern
      ? `<div class="notice">grep <code>${esc(q.pattern)}</code> (case-insensitive, RE2${page.indexed ? ", indexed" : ""})</div>` : "";
  },

  // Only the first page follows the log live; a reader paging back keeps their place.
  async refresh() { if (this.pages === 1 && !this.query().pattern) await this.load(false); },
};

App.views.entry = {
  nav: "context",
  async render(main, args) {
    const d = await App.get("/entries/" + encodeURIComponent(args[0]));
    const e = d.entry;
    const list = (title, items) => items.length
      ? `<h3>${title}</h3><ul class="feed">${items.map(entryItem).join("")}</ul>` : "";
    main.innerHTML = `<section class="panel"><h1>${typeTag(e.type)} Entry #${e.id}</h1>
      <p class="muted">${worker(e.author)} · ${esc(when(e.time))} ${scopeList(e.scope)}</p>
      ${d.claim ? `<p>Claim ${badge(d.claim.state)} lease until ${esc(when(d.claim.lease_until))}
        ${d.claim.ended_by ? ` · ended by <a href="#/entry/${d.claim.ended_by}">#${d.claim.ended_by}</a>` : ""}</p>` : ""}
      <div class="body panel">${esc(e.body)}</div>
      ${list("Refers to", d.refs)}${list("Referred to by", d.referrers)}</section>`;
  },
};

// ---- claims ------------------------------------------------------------------------------------
App.views.claims = {
  async render(main, _args, params) {
    this.state = params.state || "";
    this.owner = params.owner || "";
    main.innerHTML = `<section class="panel"><h1>Claims board</h1>
      <p class="muted small">Active claims; those whose scopes overlap another worker's are marked.</p>
      <div id="cl-board" class="board"></div></section>
      <section class="panel"><div class="filters"><h2 style="margin:0">All claims</h2>
        <select id="cl-state">${["", "active", "completed", "failed", "released", "lapsed"].map(s =>
          `<option value="${s}"${s === this.state ? " selected" : ""}>${s || "any state"}</option>`).join("")}</select>
        <input id="cl-owner" size="6" placeholder="owner" value="${esc(this.owner)}"></div>
        <table id="cl-table"></table><button id="cl-more" class="more ghost" hidden>Older claims</button></section>`;
    document.getElementById("cl-state").onchange = ev => { this.state = ev.target.value; this.load(false); };
    document.getElementById("cl-owner").onchange = ev => { this.owner = ev.target.value.trim(); this.load(false); };
    document.getElementById("cl-more").onclick = () => this.load(true);
    await this.load(false);
  },

  async load(more) {
    const d = await App.get("/claims", { state: this.state, owner: this.owner, before: more ? this.next : undefined });
    const now = Date.now() / 1000;
    const board = document.getElementById("cl-board");
    board.innerHTML = d.active.map(c => `<div class="claim${c.overlaps.length ? " overlap" : ""}">
        <div class="head"><span><a href="#/entry/${c.id}">#${c.id}</a> ${worker(c.owner)}</span>
          <span class="muted">lease ${duration(c.lease_until - now)} left</span></div>
        <div>${scopeList(c.scope)}</div><div class="small body">${esc(c.body)}</div>
        ${c.overlaps.length ? `<div class="small" style="color:var(--warn)">overlaps ${c.overlaps.map(o => `<a href="#/entry/${o}">#${o}</a>`).join(" ")}</div>` : ""}
      </div>`).join("") || '<div class="empty">No active claims.</div>';
    const rows = d.claims.map(c => `<tr><td><a href="#/entry/${c.id}">#${c.id}</a></td><td>${worker(c.owner)}</td>
        <td>${badge(c.state)}</td><td>${scopeList(c.scope)}<div class="small muted clip">${esc(c.body)}</div></td>
        <td>${stamp(c.created)}</td><td>${c.ended_by ? `<a href="#/entry/${c.ended_by}">#${c.ended_by}</a>` : ""}</td></tr>`).join("");
    const table = document.getElementById("cl-table");
    const head = "<thead><tr><th>Claim</th><th>Owner</th><th>State</th><th>Scope</th><th>Made</th><th>Ended by</th></tr></thead>";
    table.innerHTML = more ? table.innerHTML + rows : head + rows;
    this.next = d.next;
    this.paged = more;
    document.getElementById("cl-more").hidden = !d.next;
  },

  async refresh() { if (!this.paged) await this.load(false); },
};

// ---- pull requests -----------------------------------------------------------------------------
App.views.prs = {
  async render(main, args, params) {
    if (args.length) return App.views.pr.render(main, args);
    this.state = params.state || "";
    main.innerHTML = `<section class="panel"><div class="filters"><h1 style="margin:0">Pull requests</h1>
      <select id="pr-state">${["", "open", "merged", "closed"].map(s =>
        `<option value="${s}"${s === this.state ? " selected" : ""}>${s || "any state"}</option>`).join("")}</select></div>
      <table id="pr-table"></table><button id="pr-more" class="more ghost" hidden>Older PRs</button></section>`;
    document.getElementById("pr-state").onchange = ev => { this.state = ev.target.value; this.load(false); };
    document.getElementById("pr-more").onclick = () => this.load(true);
    await this.load(false);
  },

  async load(more) {
    const state = this.state === "conflicted" ? "open" : this.state;
    const d = await App.get("/prs", { state, before: more ? this.next : undefined });
    const rows = d.prs.map(p => `<tr data-pr="${p.number}"><td><a href="#/prs/${p.number}">#${p.number}</a></td>
      <td><a href="#/prs/${p.number}">${esc(p.title)}</a><div class="small muted mono">${esc(p.branch)}</div></td>
      <td>${worker(p.author)}</td><td>${badge(p.state)}${p.conflicts ? " " + badge("conflict") + `<span class="small muted"> ×${p.conflicts}</span>` : ""}</td>
      <td class="num">${p.reviews}</td><td class="num small" data-size="${p.number}">${diffSize(p.size)}</td><td>${stamp(p.created_at)}</td>
      <td>${p.merged_at ? stamp(p.merged_at) + " by " + worker(p.merged_by) : ""}</td></tr>`).join("");
    const table = document.getElementById("pr-table");
    const head = `<thead><tr><th>#</th><th>Title</th><th>Author</th><th>State</th><th class="num">Reviews</th>
      <th class="num">Size</th><th>Opened</th><th>Merged</th></tr></thead>`;
    table.innerHTML = more ? table.innerHTML + rows : head + (rows || '<tr><td colspan="8" class="empty">No pull requests.</td></tr>');
    this.next = d.next; this.paged = more;
    document.getElementById("pr-more").hidden = !d.next;
  },

  async refresh() { if (!this.paged && document.getElementById("pr-table")) await this.load(false); },
};

App.views.pr = {
  nav: "prs",
  async render(main, args) {
    const d = await App.get("/prs/" + encodeURIComponent(args[0]));
    const p = d.pr;
    const merge = p.state === "open"
      ? (d.mergeable === false ? `${badge("conflict")} with main in ${d.conflicts.map(esc).join(", ")}` : d.mergeable ? "merges cleanly" : "")
      : "";
    main.innerHTML = `<section class="panel"><p><a href="#/prs">← Pull requests</a></p>
      <h1>#${p.number} ${esc(p.title)} ${badge(p.state)}</h1>
      <p class="muted">${worker(p.author)} wants to merge <code>${esc(p.branch)}</code> · opened ${esc(when(p.created_at))}
        ${p.merged_at ? ` · merged by ${worker(p.merged_by)} ${esc(when(p.merged_at))} as <code>${esc((p.merge_commit || "").slice(0, 10))}</code>` : ""}
        · ${p.approvals} approval(s) ${merge ? " · " + merge : ""}</p>
      ${p.body ? `<div class="body panel">${esc(p.body)}</div>` : ""}
      <div class="grid cols-2"><div><h3>Diff · ${d.files.length} file(s)</h3><pre class="diff" id="pr-diff">${diffHtml(d.diff)}</pre></div>
      <div><h3>Reviews</h3>${d.reviews.map(r => `<div class="msg"><span class="who">${worker(r.author)}</span> ${badge(r.verdict)}
          <span class="small muted">${esc(when(r.created_at))}</span><div class="body">${esc(r.body)}</div></div>`).join("") || '<p class="muted">No reviews.</p>'}
        <h3>History</h3><table>${d.events.map(e => `<tr><td class="small" title="${esc(when(e.time))}" style="white-space:nowrap">${esc(when(e.time).slice(11, 19))}</td><td>${worker(e.actor)}</td>
          <td>${badge(e.kind)}</td><td class="small mono clip" title="${esc(e.detail)}">${esc(e.detail)}</td></tr>`).join("")}</table></div></div></section>`;
  },
};

function diffHtml(diff) {
  return esc(diff).split("\n").map(line => {
    if (line.startsWith("diff --git")) return `<span class="file">${line}</span>`;
    if (line.startsWith("@@")) return `<span class="hunk">${line}</span>`;
    if (line.startsWith("+") && !line.startsWith("+++")) return `<span class="add">${line}</span>`;
    if (line.startsWith("-") && !line.startsWith("---")) return `<span class="del">${line}</span>`;
    return line + "\n";
  }).join("");
}
