// The chat (the tasks channel and every DM thread) and one worker's timeline.
"use strict";

App.views.chat = {
  async render(main, args) {
    this.thread = args.length === 2 ? args : null;
    main.innerHTML = `<div class="chat">
      <section class="panel threads"><h2>Channels</h2><a href="#/chat" class="${this.thread ? "" : "on"}"># tasks</a>
        <h3>Direct messages</h3><div id="ch-threads"></div></section>
      <section class="panel"><h2 id="ch-title"></h2><div id="ch-post"></div>
        <div id="ch-list"></div><button id="ch-more" class="more ghost" hidden>Older messages</button></section></div>`;
    document.getElementById("ch-title").textContent = this.thread
      ? `${this.thread[0]} ↔ ${this.thread[1]}` : "# tasks";
    if (!this.thread && App.isOperator()) {
      document.getElementById("ch-post").innerHTML = `<div class="operator panel">
        <textarea id="ch-body" placeholder="Post into #tasks as the operator"></textarea>
        <div class="row"><button id="ch-send" class="primary">Post</button><span id="ch-result" class="small muted"></span></div></div>`;
      document.getElementById("ch-send").onclick = async () => {
        const body = document.getElementById("ch-body").value.trim();
        if (!body) return;
        try {
          await App.post("/v1/operator/channel", { body });
          document.getElementById("ch-body").value = "";
          document.getElementById("ch-result").textContent = "posted";
          await this.load(false);
        } catch (e) { document.getElementById("ch-result").textContent = "refused: " + e.message; }
      };
    }
    document.getElementById("ch-more").onclick = () => this.load(true);
    await Promise.all([this.load(false), this.loadThreads()]);
  },

  async loadThreads() {
    const d = await App.get("/threads", { limit: 200 });
    const on = this.thread ? this.thread.join("|") : "";
    document.getElementById("ch-threads").innerHTML = d.threads.map(t =>
      `<a href="#/chat/${encodeURIComponent(t.a)}/${encodeURIComponent(t.b)}" class="${on === t.a + "|" + t.b ? "on" : ""}">
        <span>${esc(t.a)} ↔ ${esc(t.b)}</span><span class="muted small">${t.count}</span></a>`).join("")
      || '<p class="muted small">None yet.</p>';
  },

  async load(more) {
    const before = more ? this.next : undefined;
    const d = this.thread
      ? await App.get("/thread", { a: this.thread[0], b: this.thread[1], before })
      : await App.get("/channel", { before });
    const html = d.messages.map(m => `<div class="msg ${esc(m.author)}" data-message="${m.id}">
        <span class="who">${worker(m.author)}</span>${m.to ? ` → ${worker(m.to)}` : ""}
        <span class="small muted">${stamp(m.time)}</span><div class="body">${esc(m.body)}</div></div>`).join("");
    const list = document.getElementById("ch-list");
    list.innerHTML = more ? list.innerHTML + html : html || '<div class="empty">No messages yet.</div>';
    this.next = d.next; this.paged = more;
    document.getElementById("ch-more").hidden = !d.next;
  },

  async refresh() { if (!this.paged) await Promise.all([this.load(false), this.loadThreads()]); },
};

App.views.workers = {
  nav: "overview",
  async render(main, args) {
    this.name = args[0];
    main.innerHTML = `<section class="panel"><p><a href="#/">← Overview</a></p><h1 id="wk-title"></h1>
      <div id="wk-meta" class="muted"></div></section><section class="panel timeline"><h2>Timeline</h2>
      <ul id="wk-list" class="feed"></ul><button id="wk-more" class="more ghost" hidden>Earlier</button></section>`;
    document.getElementById("wk-more").onclick = () => this.load(true);
    await this.load(false);
  },

  async load(more) {
    const d = await App.get("/workers/" + encodeURIComponent(this.name), { before: more ? this.next : undefined });
    const w = d.worker;
    document.getElementById("wk-title").innerHTML = `${esc(w.name)} ${badge(w.state)}`;
    document.getElementById("wk-meta").innerHTML = `${esc(w.model || "no model")} · heartbeat ${stamp(w.heartbeat_at, w.now)} ·
      <a href="#/context?author=${encodeURIComponent(w.name)}">entries</a> ·
      <a href="#/claims?owner=${encodeURIComponent(w.name)}">claims</a>`;
    const html = d.items.map(i => timelineItem(i, w.name)).join("");
    const list = document.getElementById("wk-list");
    list.innerHTML = more ? list.innerHTML + html : html || '<li class="empty" style="display:block">Nothing yet.</li>';
    this.next = d.next; this.paged = more;
    document.getElementById("wk-more").hidden = !d.next;
  },

  async refresh() { if (!this.paged) await this.load(false); },
};

function timelineItem(i, who) {
  let what = "";
  if (i.kind === "session") {
    what = `<a href="#/session/${encodeURIComponent(who)}/${i.number}" data-session="${i.number}">Session ${i.number}</a> (${esc(i.harness)}${i.model ? " · " + esc(i.model) : ""}) ${i.ended ? badge(i.ended) : badge("in_session")}
      <div class="small muted">${i.steps} steps · ${num(i.tokens)} tokens · ${money(i.cost)}
      ${i.ended_at ? " · " + duration(i.ended_at - i.time) : ""}</div>`;
  } else if (i.kind === "entry") {
    what = `${typeTag(i.type)} <a href="#/entry/${i.id}">#${i.id}</a> ${scopeList(i.scope)}<div class="body">${esc(i.body)}</div>`;
  } else if (i.kind === "message") {
    const where = i.channel ? "#" + esc(i.channel) : "DM " + worker(i.author) + " → " + worker(i.to);
    what = `${where}<div class="body">${esc(i.body)}</div>`;
  } else {
    what = `PR <a href="#/prs/${i.number}">#${i.number}</a> ${esc(i.title)} · ${worker(i.actor)} ${badge(i.event)}
      <div class="small muted mono clip">${esc(i.detail)}</div>`;
  }
  return `<li><div><div class="kind">${esc(i.kind)}</div><div class="small muted">${stamp(i.time)}</div></div><div>${what}</div></li>`;
}
