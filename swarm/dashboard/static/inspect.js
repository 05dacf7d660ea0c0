// What the code and the agents did: main's files and its diff against the start, and each
// session's transcript step by step.
"use strict";

// "+12 −3 · 2 files" for a PR or a diff; "—" when the branch's commits are gone.
function diffSize(s) {
  if (!s) return '<span class="muted">—</span>';
  return `<span class="add">+${num(s.added)}</span> <span class="del">−${num(s.removed)}</span>
    <span class="muted">· ${s.files} file${s.files === 1 ? "" : "s"}</span>`;
}

App.views.code = {
  async render(main) {
    const d = await App.get("/code");
    if (!d.main) { main.innerHTML = '<section class="panel"><h1>Code</h1><p class="empty">No main yet.</p></section>'; return; }
    const rows = d.files.map(f => `<tr data-file="${esc(f.path)}"><td class="mono">${esc(f.path)}</td>
        <td>${f.status ? badge(f.status) : ""}</td>
        <td class="num small">${f.status ? `<span class="add">+${f.added}</span> <span class="del">−${f.removed}</span>` : ""}</td>
        <td class="num small">${f.status === "deleted" ? "" : num(f.size) + " B"}</td></tr>`).join("");
    main.innerHTML = `<section class="panel"><h1>Code on main</h1>
      <p class="muted">main at <code>${esc(d.main.slice(0, 10))}</code> · since the start <code>${esc(d.start.slice(0, 10))}</code>:
        <span id="code-stats">${diffSize(d.stats)}</span></p>
      <div class="grid cols-2"><div><h3>Files (${d.files.length}${d.more ? ` of ${d.files.length + d.more}` : ""})</h3>
        <div class="scroll"><table id="code-files"><thead><tr><th>Path</th><th>Since the start</th><th class="num">Lines</th>
        <th class="num">Size</th></tr></thead><tbody>${rows}</tbody></table></div></div>
      <div><h3>Diff against the start</h3><pre class="diff" id="code-diff">${d.diff ? diffHtml(d.diff) : '<span class="muted">No change yet.</span>'}</pre></div></div></section>`;
  },
};

App.views.session = {
  nav: "overview",
  async render(main, args) {
    const [who, number] = args;
    const d = await App.get(`/workers/${encodeURIComponent(who)}/sessions/${encodeURIComponent(number)}`);
    const steps = d.steps.map((s, n) => `<li class="step ${esc(s.role)}" data-step="${n}"><div class="kind">${esc(s.role)}</div>
        <pre class="body">${esc(s.text)}</pre></li>`).join("");
    main.innerHTML = `<section class="panel"><p><a href="#/workers/${encodeURIComponent(who)}">← ${esc(who)}</a></p>
      <h1>${esc(who)} · session ${esc(number)}</h1>
      <p class="muted small">${d.files.length ? "from " + d.files.map(esc).join(", ") : "This session left no transcript (yet)."}
        ${d.more ? ` · the first ${d.steps.length} steps of ${d.steps.length + d.more}` : ""}</p>
      <ol id="session-steps" class="feed transcript">${steps}</ol></section>`;
  },
};
