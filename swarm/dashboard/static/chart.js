// Small hand-written SVG charts (no library: the dashboard must work offline).
"use strict";

const Chart = (() => {
  const W = 960, H = 260, L = 46, R = 20, T = 14, B = 38;
  // Tick spacings a person reads at a glance: seconds, minutes, hours, days.
  const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

  function niceTime(seconds) {
    if (seconds < 60) return Math.round(seconds) + "s";
    if (seconds < 3600) return +(seconds / 60).toFixed(1) + "m";
    return +(seconds / 3600).toFixed(1) + "h";
  }

  function escapeText(s) {
    return String(s).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  }

  // points: [{t: unix seconds, y: 0..1, label: tooltip, bad: bool, status}], drawn as a step
  // line (main's pass rate holds until the next checkpoint), with time since `start` on the x
  // axis. Only "scored" points are pass rates: a tampered, incomplete or failed scoring is a
  // mark on the time axis (a dashed line and a cross), never a point of the line.
  function passRate(points, start) {
    if (!points.length) {
      return `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="no checkpoints yet">
        <text x="${W / 2}" y="${H / 2}" text-anchor="middle">No evaluator checkpoints yet</text></svg>`;
    }
    const t0 = start ?? points[0].t;
    const tMax = Math.max(points[points.length - 1].t - t0, 1);
    const x = t => L + ((t - t0) / tMax) * (W - L - R);
    const y = v => T + (1 - v) * (H - T - B);
    let grid = "";
    for (let i = 0; i <= 4; i++) {
      const v = i / 4;
      grid += `<line class="gridline" x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}"/>`;
      grid += `<text x="${L - 6}" y="${y(v) + 4}" text-anchor="end">${v * 100}%</text>`;
    }
    const step = STEPS.find(s => tMax / s <= 6) || tMax / 6;
    for (let s = 0; s <= tMax + 1e-9; s += step) {
      grid += `<line class="gridline" x1="${x(t0 + s)}" x2="${x(t0 + s)}" y1="${T}" y2="${y(0)}"/>`;
      grid += `<text x="${x(t0 + s)}" y="${H - B + 16}" text-anchor="middle">${niceTime(s)}</text>`;
    }
    const rates = points.filter(p => (p.status || "scored") === "scored");
    const others = points.filter(p => (p.status || "scored") !== "scored");
    let series = "";
    if (rates.length) {
      let path = `M${x(rates[0].t)},${y(rates[0].y)}`;
      for (let i = 1; i < rates.length; i++) path += ` H${x(rates[i].t)} V${y(rates[i].y)}`;
      const area = `${path} V${y(0)} H${x(rates[0].t)} Z`;
      series = `<path class="area" d="${area}"/><path class="series" d="${path}"/>` + rates.map(p =>
        `<circle class="dot${p.bad ? " bad" : ""}" cx="${x(p.t)}" cy="${y(p.y)}" r="3.5">` +
        `<title>${escapeText(p.label)}</title></circle>`).join("");
    }
    const marks = others.map(p => {
      const cx = x(p.t), cy = y(0) - 7;
      return `<g class="mark ${escapeText(p.status)}" data-status="${escapeText(p.status)}">
        <line class="rule" x1="${cx}" x2="${cx}" y1="${T}" y2="${y(0)}"/>
        <path class="cross" d="M${cx - 5},${cy - 5} L${cx + 5},${cy + 5} M${cx - 5},${cy + 5} L${cx + 5},${cy - 5}"/>
        <title>${escapeText(p.label)}</title></g>`;
    }).join("");
    const last = points[points.length - 1];
    return `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="pass rate over time">
      ${grid}
      <line class="axis" x1="${L}" x2="${W - R}" y1="${y(0)}" y2="${y(0)}"/>
      ${series}
      ${marks}
      <text x="${W - R}" y="${H - 4}" text-anchor="end">time since start · last ${escapeText(last.label)}</text>
    </svg>`;
  }

  return { passRate, niceTime };
})();
