// swarmlab view: renders the sections from /api/<section> (live) or from the inlined data (an
// export). Plain JavaScript, charts as hand-written SVG markup; no library, no network but the
// page's own server. Every text from the run (messages, commit messages, diffs) is an agent's,
// so it is escaped before it enters any markup.
"use strict";

const SECTIONS = ["run", "race", "judge", "board", "submissions", "lineage", "paths", "seats", "cost"];
const POLL_MS = 2000;
// Rows drawn at most (the DOM, not the data, is what slows a page): refine a filter for more.
const BOARD_SHOWN = 500;
const SUB_SHOWN = 1000;
const D = {};            // section name -> data
let shownSeq = null;     // the server's read the page holds (sections, then the rows since)
let sectionsSeq = null;  // the read the sections it holds were built from
let inline = null;       // an export's data (null when live)
let clockOffset = 0;     // server clock - this browser's clock, seconds
let selectedRun = null;  // a sweep: the run the per-run sections show
const subSort = { key: "t_s", dir: 1 };
let openJob = null;      // "run_id/job_id" of the opened evaluation

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
const FORMATS = {};  // one Intl.NumberFormat per digits: making one per number is slow
function num(value, digits = 1) {
  if (value === null || value === undefined || Number.isNaN(value)) return "-";
  const f = FORMATS[digits] || (FORMATS[digits] = new Intl.NumberFormat("en", {
    minimumFractionDigits: digits, maximumFractionDigits: digits }));
  return f.format(Number(value));
}
function pct(value) { return value === null || value === undefined ? "-" : `${Math.round(100 * value)}%`; }
function mmss(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  const two = (n) => String(n).padStart(2, "0");
  return h ? `${h}:${two(m)}:${two(r)}` : `${m}:${two(r)}`;
}
function short(sha) { return sha ? String(sha).slice(0, 8) : "-"; }
function md(line) { return esc(line.replace(/^#+ /, "** ").replace(/^\*\* (.*)$/, "**$1**")).replace(/\*\*(.+?)\*\*/g, "<b>$1</b>").replace(/`(.+?)`/g, "<code>$1</code>"); }
function body(name) { return document.querySelector(`#${name} .body`); }
function armColour(arm) { return (D.run && D.run.arm_colours[arm]) || "#555"; }
function verdictColour(v) { return (D.run && D.run.verdict_colours[v]) || "#999"; }
function seatColour(arm, agent) { return (D.run && D.run.seat_colours[`${arm}/${agent}`]) || "#888"; }
function tag(text, colour) { return `<span class="tag" style="background:${esc(colour)}">${esc(text)}</span>`; }
function ofRun(rows) { return selectedRun ? rows.filter((r) => r.run_id === selectedRun) : rows; }
function ready(name) { document.getElementById(name).dataset.ready = "1"; }

function scale(d0, d1, r0, r1) {
  const span = d1 - d0 || 1;
  return (v) => r0 + ((v - d0) / span) * (r1 - r0);
}
function ticks(lo, hi, count) {
  const raw = (hi - lo) / count, mag = 10 ** Math.floor(Math.log10(raw || 1));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(+v.toFixed(10));
  return out;
}
function axes(x, y, xTicks, yTicks, w, h, m, xLabel, yLabel, xFmt = (v) => v, yFmt = (v) => v) {
  let s = `<line x1="${m.l}" y1="${h - m.b}" x2="${w - m.r}" y2="${h - m.b}" stroke="#888"/>`;
  s += `<line x1="${m.l}" y1="${m.t}" x2="${m.l}" y2="${h - m.b}" stroke="#888"/>`;
  for (const t of xTicks) {
    s += `<line x1="${x(t)}" y1="${h - m.b}" x2="${x(t)}" y2="${h - m.b + 4}" stroke="#888"/>`;
    s += `<text x="${x(t)}" y="${h - m.b + 15}" text-anchor="middle">${esc(xFmt(t))}</text>`;
  }
  for (const t of yTicks) {
    s += `<line x1="${m.l}" y1="${y(t)}" x2="${w - m.r}" y2="${y(t)}" stroke="#eee"/>`;
    s += `<text x="${m.l - 5}" y="${y(t) + 4}" text-anchor="end">${esc(yFmt(t))}</text>`;
  }
  s += `<text x="${(m.l + w - m.r) / 2}" y="${h - 4}" text-anchor="middle">${esc(xLabel)}</text>`;
  s += `<text transform="translate(12 ${(m.t + h - m.b) / 2}) rotate(-90)" text-anchor="middle">${esc(yLabel)}</text>`;
  return s;
}
function legend(items) {
  return `<div class="legend">${items.map(([label, colour]) =>
    `<span class="item"><span class="swatch" style="background:${esc(colour)}"></span>${esc(label)}</span>`).join("")}</div>`;
}
function table(headers, rows, numeric = []) {
  const head = headers.map((h, i) => `<th class="${numeric.includes(i) ? "num" : ""}">${esc(h)}</th>`).join("");
  const lines = rows.map((r) => `<tr>${r.map((c, i) =>
    `<td class="${numeric.includes(i) ? "num" : ""}">${c}</td>`).join("")}</tr>`).join("");
  return `<table><thead><tr>${head}</tr></thead><tbody>${lines}</tbody></table>`;
}

// ---- header -----------------------------------------------------------------------------
function renderRun() {
  const r = D.run;
  const first = r.runs[0];
  document.getElementById("title").textContent =
    r.kind === "sweep" ? `sweep of ${r.runs.length} runs` : first.run_id;
  const facts = [
    `${first.experiment} · ${first.task}`, `metric ${r.metric.label} (${r.metric.unit})`,
    `${first.agent_kind}`, `arms ${r.arms.join(", ")}`,
  ];
  if (r.kind !== "sweep") facts.unshift(first.status);
  document.getElementById("facts").textContent = facts.join(" · ");
  const pick = document.getElementById("runpick"), sel = document.getElementById("runsel");
  if (r.runs.length > 1) {
    pick.hidden = false;
    const ids = r.runs.map((x) => x.run_id);
    if (!ids.includes(selectedRun)) selectedRun = ids[0];
    sel.innerHTML = r.runs.map((x) =>
      `<option value="${esc(x.run_id)}">seed ${esc(x.seed)} · ${esc(x.run_id)} · ${esc(x.status)}</option>`).join("");
    sel.value = selectedRun;
  } else {
    selectedRun = null;
  }
  for (const id of ["boardarm", "subarm"]) {
    const el = document.getElementById(id), keep = el.value;
    el.innerHTML = `<option value="">every arm</option>` +
      r.arms.map((a) => `<option>${esc(a)}</option>`).join("");
    el.value = keep;
  }
}
function elapsedS(runId) {
  // A running run's charts reach to now, so they grow while the run goes on.
  const run = D.run && (D.run.runs.find((x) => x.run_id === runId) || D.run.runs[0]);
  if (!run || run.status === "finished" || inline) return 0;
  return Math.max(0, Date.now() / 1000 + clockOffset - run.started_at);
}
function timeLeftText() {
  const run = D.run && (D.run.runs.find((x) => x.run_id === selectedRun) || D.run.runs[0]);
  if (!run) return "";
  if (run.status === "finished") return "finished";
  if (!run.deadline) return "no deadline";
  const left = run.deadline - (Date.now() / 1000 + clockOffset);
  return left > 0 ? `time left ${mmss(left)}` : "past the deadline (draining / re-judging)";
}

// ---- the race ---------------------------------------------------------------------------
function renderRace() {
  const r = D.race, el = body("race");
  const w = 900, h = 340, m = { l: 52, r: 120, t: 12, b: 36 };
  const curves = r.curves;
  let tMax = 1, yMax = Math.max(1.2, r.target_x || 0);
  for (const c of curves) {
    c.end_s = Math.max(c.end_s || 0, elapsedS(c.run_id));
    tMax = Math.max(tMax, c.end_s);
    for (const p of c.points) { tMax = Math.max(tMax, p.t_s); yMax = Math.max(yMax, p.x_baseline || 0); }
  }
  for (const a of r.arms) yMax = Math.max(yMax, a.rejudged_x_baseline || 0);
  yMax *= 1.08;
  const x = scale(0, tMax / 60, m.l, w - m.r), y = scale(0, yMax, h - m.b, m.t);
  let svg = axes(x, y, ticks(0, tMax / 60, 8), ticks(0, yMax, 6), w, h, m,
    "minutes since the run started (verdict time)", "× baseline (best so far)");
  const line = (v, dash, label) => {
    svg += `<line x1="${m.l}" x2="${w - m.r}" y1="${y(v)}" y2="${y(v)}" stroke="#000" stroke-dasharray="${dash}"/>`;
    svg += `<text x="${w - m.r + 4}" y="${y(v) + 4}">${esc(label)}</text>`;
  };
  line(r.baseline_x, "5 4", "baseline 1.0×");
  if (r.target_x) line(r.target_x, "2 3", `target ${r.target_x}×`);
  const many = D.run.runs.length > 1;
  for (const c of curves) {
    if (!c.points.length) continue;
    const faded = many && selectedRun && c.run_id !== selectedRun;
    let d = "";
    c.points.forEach((p, i) => {
      d += i ? `H${x(p.t_s / 60)}V${y(p.x_baseline)}` : `M${x(p.t_s / 60)} ${y(p.x_baseline)}`;
    });
    d += `H${x(Math.max(c.end_s, c.points[c.points.length - 1].t_s) / 60)}`;
    svg += `<path d="${d}" fill="none" stroke="${armColour(c.arm)}" stroke-width="${many ? (faded ? 1 : 2.5) : 2}" opacity="${faded ? 0.35 : 1}"/>`;
    for (const p of c.points) {
      svg += `<circle cx="${x(p.t_s / 60)}" cy="${y(p.x_baseline)}" r="3.5" fill="${armColour(c.arm)}" opacity="${faded ? 0.35 : 1}"><title>${esc(
        `${c.arm} ${p.agent} job ${p.job_id}: ${num(p.score)} ${D.run.metric.unit} = ${num(p.x_baseline, 3)}× at ${mmss(p.t_s)}`)}</title></circle>`;
    }
  }
  const ends = Object.fromEntries(curves.map((c) => [`${c.run_id}/${c.arm}`, c.end_s]));
  for (const a of r.arms) {
    if (a.rejudged_x_baseline === null) continue;
    const cx = x((ends[`${a.run_id}/${a.arm}`] || tMax) / 60), cy = y(a.rejudged_x_baseline);
    svg += `<path d="M${cx} ${cy - 7}L${cx + 7} ${cy}L${cx} ${cy + 7}L${cx - 7} ${cy}Z" fill="${armColour(a.arm)}" stroke="#000"><title>${esc(
      `${a.arm}: best re-judged ${num(a.rejudged_x_baseline, 3)}× (${a.rejudged_verdicts})`)}</title></path>`;
  }
  const arms = D.run.arms.map((a) => [a, armColour(a)]);
  let html = legend([...arms, ["◆ best re-judged after the deadline", "#000"]]);
  html += `<svg id="race-chart" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">${svg}</svg>`;
  html += `<p id="race-left">${esc(timeLeftText())}</p>`;
  html += table(
    ["seed", "arm", "best ×", `best ${D.run.metric.unit}`, "by", "time to best", "re-judged ×", "re-judged verdicts"],
    ofRun(r.arms).map((a) => [esc(a.seed ?? a.run_id), tag(a.arm, armColour(a.arm)),
      num(a.best_x_baseline, 3), num(a.best_score), esc(a.best_agent ?? "-"), mmss(a.time_to_best_s),
      num(a.rejudged_x_baseline, 3), esc(a.rejudged_verdicts ?? "-")]), [2, 3, 5, 6]);
  const med = Object.entries(r.medians_x || {});
  if (med.length) html += `<p>Median best over seeds: ${med.map(([a, v]) => `${esc(a)} ${num(v, 3)}×`).join(", ")}</p>`;
  el.innerHTML = html;
  ready("race");
}

// ---- the judge --------------------------------------------------------------------------
function renderJudge() {
  const j = D.judge, el = body("judge");
  const evs = ofRun(j.evaluations);
  const lanes = [...D.run.arms, "runner (re-judging)"];
  const laneOf = (e) => (e.pseudo_agent ? lanes.length - 1 : Math.max(0, D.run.arms.indexOf(e.arm)));
  const w = 900, laneH = 26, m = { l: 130, r: 20, t: 8, b: 36 }, h = m.t + m.b + laneH * lanes.length;
  let tMax = 1;
  for (const e of evs) tMax = Math.max(tMax, e.t_end_s || 0);
  for (const tl of ofRun(j.timeline || [])) tMax = Math.max(tMax, tl.t_max);
  tMax = Math.max(tMax, elapsedS(selectedRun));
  const x = scale(0, tMax / 60, m.l, w - m.r);
  let svg = axes(x, () => 0, ticks(0, tMax / 60, 8), [], w, h, m, "minutes since the run started", "");
  lanes.forEach((lane, i) => {
    svg += `<text x="${m.l - 6}" y="${m.t + i * laneH + laneH / 2 + 4}" text-anchor="end">${esc(lane)}</text>`;
  });
  // A large run: per lane and column of time, the judge's busy share and the most common verdict.
  for (const tl of ofRun(j.timeline || [])) {
    const step = tl.t_max / tl.columns / 60;
    tl.lanes.forEach((ln, i) => {
      const top = m.t + i * laneH + 3;
      for (let c = 0; c < tl.columns; c++) {
        const share = ln.busy[c];
        if (!share) continue;
        let best = null, most = 0;
        for (const [v, counts] of Object.entries(ln.verdicts)) if (counts[c] > most) { best = v; most = counts[c]; }
        const x0 = x(c * step), x1 = x((c + 1) * step);
        svg += `<rect class="col" x="${x0}" y="${top + 5}" width="${Math.max(0.5, x1 - x0)}" height="${laneH - 11}" fill="${ln.arm ? armColour(ln.arm) : "#bbb"}" opacity="${Math.max(0.15, share)}"/>`;
        if (best) svg += `<rect x="${x0}" y="${top}" width="${Math.max(0.5, x1 - x0)}" height="4" fill="${verdictColour(best)}"/>`;
      }
    });
  }
  for (const e of evs) {
    const x0 = x(e.t_start_s / 60), x1 = Math.max(x0 + 1.5, x(e.t_end_s / 60));
    const top = m.t + laneOf(e) * laneH + 3;
    const tip = `job ${e.job_id} ${e.arm}/${e.agent}: ${e.verdict}${e.reason ? " " + e.reason : ""}` +
      `, ${num(e.duration_s)} s, waited ${num(e.queue_wait_s)} s` + (e.x_baseline ? `, ${num(e.x_baseline, 3)}×` : "");
    svg += `<g class="bar" data-job="${esc(e.job_id)}"><rect x="${x0}" y="${top + 5}" width="${x1 - x0}" height="${laneH - 11}" fill="${e.pseudo_agent ? "#bbb" : armColour(e.arm)}"/>` +
      `<rect x="${x0}" y="${top}" width="${x1 - x0}" height="4" fill="${verdictColour(e.verdict)}"/><title>${esc(tip)}</title></g>`;
  }
  let html = legend([...D.run.arms.map((a) => [a, armColour(a)]),
    ...Object.entries(D.run.verdict_colours).filter(([v]) => v !== "not evaluated").map(([v, c]) => [`${v} (top strip)`, c])]);
  html += `<svg id="judge-chart" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">${svg}</svg>`;
  if ((j.timeline || []).length) html += `<p class="note">${j.evaluation_count.toLocaleString("en")} evaluations: each column shows the judge's busy share on the lane (opacity) and its most common verdict (top strip).</p>`;
  for (const s of ofRun(j.shared)) {
    html += `<p id="judge-busy">The one shared judge: ${s.evaluations} evaluations, busy ${num(s.busy_s)} s of ${num(s.run_seconds)} s = <b>${pct(s.busy_share)}</b> of the agents' phase; idle while work waited ${num(s.idle_with_work_s)} s = <b>${pct(s.idle_with_work_share)}</b>; capacity ${num(s.capacity)} evaluations at ${num(s.seconds_per_evaluation, 2)} s each.</p>`;
  }
  const queue = ofRun(j.queue);
  html += `<h3>The queue now${j.queue_count > queue.length ? ` (the last ${queue.length} of ${j.queue_count})` : ""}</h3>`;
  html += queue.length ? table(["arm", "seat", "submission", "commit", "state", "sent at", "waiting"],
    queue.map((q) => [tag(q.arm, armColour(q.arm)), esc(q.agent), esc(q.submission_id), `<code>${short(q.commit)}</code>`,
      esc(q.state), mmss(q.t_s), q.waiting_s === null ? "-" : mmss(q.waiting_s)]), [6]) : `<p class="note">Nobody waits.</p>`;
  html += `<h3>Capacity (formula one, filled in)</h3>`;
  html += table(["arm", "run s", "evaluations", "s / evaluation", "full evaluation s", "capacity", "utilisation", "mean wait s"],
    ofRun(j.capacity).map((c) => [tag(c.arm, armColour(c.arm)), num(c.run_seconds), esc(c.judge_evaluations),
      num(c.seconds_per_evaluation, 2), num(c.full_evaluation_s), num(c.judge_capacity), pct(c.judge_utilisation),
      num(c.mean_queue_wait_s)]), [1, 2, 3, 4, 5, 6, 7]);
  for (const f of ofRun(j.formula)) html += `<div class="formula">${f.lines.map(md).join("\n")}</div>`;
  el.innerHTML = html;
  ready("judge");
}

// ---- the board --------------------------------------------------------------------------
let boardFound = null;  // a large run's server-side search: {key, data}
let boardTimer = null;
function boardKey() {
  return [document.getElementById("boardq").value, document.getElementById("boardarm").value, selectedRun || ""].join("\u0000");
}
function boardInput() {
  // The page holds only the latest messages of a large run: search them all on the server.
  if (inline || !D.board || D.board.total <= D.board.messages.length) { renderBoard(); return; }
  clearTimeout(boardTimer);
  boardTimer = setTimeout(async () => {
    const key = boardKey(), [q, arm, run] = key.split("\u0000");
    if (!q && !arm) { boardFound = null; renderBoard(); return; }
    const res = await fetch(`/api/board/search?q=${encodeURIComponent(q)}&arm=${encodeURIComponent(arm)}&run=${encodeURIComponent(run)}`);
    if (res.ok) boardFound = { key, data: (await res.json()).data };
    renderBoard();
  }, 250);
}
function renderBoard() {
  const q = document.getElementById("boardq").value.toLowerCase();
  const arm = document.getElementById("boardarm").value;
  const server = boardFound && boardFound.key === boardKey() ? boardFound.data : null;
  let rows = server ? server.messages : ofRun(D.board.messages);
  if (arm) rows = rows.filter((r) => r.arm === arm);
  if (q) rows = rows.filter((r) => `${r.author} ${r.role} ${r.kind} ${r.text} ${r.ref_commit ?? ""}`.toLowerCase().includes(q));
  const shown = rows.slice(-BOARD_SHOWN);
  const html = shown.map((r) => {
    let ref = "";
    if (r.ref_commit) {
      ref = ` · commit <code>${short(r.ref_commit)}</code>`;
      if (r.ref_job !== null) {
        ref += ` → <a href="#submissions" class="jobref" data-run="${esc(r.run_id)}" data-job="${esc(r.ref_job)}">` +
          `job ${esc(r.ref_job)}</a> ${tag(r.ref_verdict, verdictColour(r.ref_verdict))}`;
      }
    }
    for (const mnt of r.mentions || []) {
      ref += ` · names <code>${short(mnt.commit)}</code> → <a href="#submissions" class="jobref" data-run="${esc(r.run_id)}" data-job="${esc(mnt.job)}">` +
        `job ${esc(mnt.job)}</a> ${tag(mnt.verdict, verdictColour(mnt.verdict))}`;
    }
    return `<div class="msg" data-id="${esc(r.message_id)}"><span class="meta">${mmss(r.t_s)}</span> ` +
      `${tag(r.arm, armColour(r.arm))} <span class="who" style="color:${seatColour(r.arm, r.author)}">${seatRef(r.run_id, r.arm, r.author, r.t_s)}</span>` +
      ` <span class="meta">(${esc(r.role)}) ${esc(r.kind)}${ref}</span><div class="text">${esc(r.text)}</div></div>`;
  }).join("");
  const held = ofRun(D.board.messages).length, total = D.board.total ?? held;
  const scope = server
    ? ` (searched all ${total.toLocaleString("en")} on the server: ${server.matches.toLocaleString("en")} match, the latest ${server.messages.length} here)`
    : total > D.board.messages.length ? ` (the latest ${D.board.messages.length} of ${total.toLocaleString("en")} are here)` : "";
  body("board").innerHTML = `<p class="note">${rows.length} of ${server ? server.matches : held} messages${scope}` +
    `${rows.length > shown.length ? `; the last ${BOARD_SHOWN} matches shown` : ""}</p><div class="msgs">${html}</div>`;
  ready("board");
}

// ---- submissions and verdicts -----------------------------------------------------------
const SUB_COLUMNS = [
  ["t_s", "sent", (r) => mmss(r.t_s), true], ["arm", "arm", (r) => tag(r.arm, armColour(r.arm))],
  ["agent", "seat", (r) => seatRef(r.run_id, r.arm, r.agent, r.t_s)], ["submission_id", "#", (r) => esc(r.submission_id), true],
  ["commit", "commit", (r) => `<code>${short(r.commit)}</code>`], ["message", "message", (r) => esc(r.message)],
  ["verdict", "verdict", (r) => tag(r.verdict, verdictColour(r.verdict))], ["reason", "reason", (r) => esc(r.reason)],
  ["x_baseline", "×", (r) => num(r.x_baseline, 3), true], ["score", "score", (r) => num(r.score), true],
  ["queue_wait_s", "wait s", (r) => num(r.queue_wait_s), true], ["duration_s", "judge s", (r) => num(r.duration_s), true],
];
function renderSubmissions() {
  const arm = document.getElementById("subarm").value;
  const seat = document.getElementById("subseat").value.toLowerCase();
  const verdict = document.getElementById("subverdict").value;
  const reason = document.getElementById("subreason").value.toLowerCase();
  const all = ofRun(D.submissions.rows);
  const vsel = document.getElementById("subverdict"), keep = vsel.value;
  vsel.innerHTML = `<option value="">every verdict</option>` +
    [...new Set(all.map((r) => r.verdict))].sort().map((v) => `<option>${esc(v)}</option>`).join("");
  vsel.value = keep;
  let rows = all.filter((r) => (!arm || r.arm === arm) && (!seat || r.agent.toLowerCase().includes(seat)) &&
    (!verdict || r.verdict === verdict) && (!reason || (r.reason || "").toLowerCase().includes(reason)));
  const { key, dir } = subSort;
  rows = rows.slice().sort((a, b) => {
    const va = a[key], vb = b[key];
    if (va === vb) return (a.submission_id - b.submission_id) * dir;
    if (va === null || va === undefined) return 1;
    if (vb === null || vb === undefined) return -1;
    return (typeof va === "number" ? va - vb : String(va).localeCompare(String(vb))) * dir;
  });
  const head = SUB_COLUMNS.map(([k, label, , n]) =>
    `<th class="sortable ${n ? "num" : ""}" data-key="${k}">${esc(k === "score" ? D.run.metric.unit : label)}${k === key ? (dir > 0 ? " ▲" : " ▼") : ""}</th>`).join("");
  const lines = rows.slice(0, SUB_SHOWN).map((r) => {
    const id = `${r.run_id}/${r.job_id}`;
    return `<tr class="${r.job_id !== null ? "clickable" : ""} ${id === openJob ? "open" : ""}" data-run="${esc(r.run_id)}" data-job="${esc(r.job_id ?? "")}">` +
      SUB_COLUMNS.map(([, , f, n]) => `<td class="${n ? "num" : ""}">${f(r)}</td>`).join("") + "</tr>";
  }).join("");
  const total = D.submissions.total ?? all.length;
  const cut = total > D.submissions.rows.length ? ` (the latest ${D.submissions.rows.length} of ${total.toLocaleString("en")} are here)` : "";
  const drawn = rows.length > SUB_SHOWN ? `, the first ${SUB_SHOWN} in this order drawn` : "";
  body("submissions").innerHTML = `<p class="note">${rows.length} of ${all.length} submissions${cut}${drawn}; click a row for its stages, detail and diff</p>` +
    `<div class="scroll"><table id="subtable"><thead><tr>${head}</tr></thead><tbody>${lines}</tbody></table></div>`;
  ready("submissions");
}
async function openDetail(runId, job) {
  openJob = `${runId}/${job}`;
  const el = document.getElementById("detail");
  let d = null;
  if (inline) {
    d = (inline.details || {})[openJob] || null;
  } else {
    const res = await fetch(`/api/evaluation?run=${encodeURIComponent(runId)}&job=${encodeURIComponent(job)}`);
    if (res.ok) d = (await res.json()).data;
  }
  document.querySelectorAll("#subtable tr.open").forEach((tr) => tr.classList.remove("open"));
  const tr = document.querySelector(`#subtable tr[data-job="${CSS.escape(String(job))}"][data-run="${CSS.escape(runId)}"]`);
  if (tr) tr.classList.add("open");
  if (!d) { el.innerHTML = `<p class="note">No detail for job ${esc(job)} here.</p>`; return; }
  const total = d.stages.find((s) => s.stage === "total");
  const parts = d.stages.filter((s) => s.stage !== "total" && !s.stage.includes(":"));
  const longest = Math.max(1e-9, ...parts.map((s) => s.seconds || 0));
  let html = `<h3 id="detail-title">Job ${esc(d.job_id)}: ${esc(d.arm)}/${esc(d.agent)} <code>${short(d.commit)}</code> ${tag(d.verdict, verdictColour(d.verdict))} ${esc(d.reason)}</h3>`;
  html += `<div class="cols"><div>`;
  if (!parts.length) html += `<p class="note">No stage times recorded for this evaluation.</p>`;
  else html += table(["stage", "seconds", ""], parts.map((s) => [esc(s.stage), num(s.seconds, 2),
    `<span class="swatch" style="width:${Math.round(200 * (s.seconds || 0) / longest)}px;background:#69c"></span>`]), [1]);
  if (total) html += `<p>total ${num(total.seconds, 2)} s</p>`;
  html += `</div><div>`;
  if (d.detail) html += `<p><b>judge's detail</b></p><pre>${esc(d.detail)}</pre>`;
  html += `<details><summary>metrics (${Object.keys(d.metrics).length})</summary>` +
    table(["metric", "value"], Object.entries(d.metrics).map(([k, v]) => [esc(k), esc(v)])) + `</details>`;
  html += `</div></div>`;
  html += `<details open><summary>diff against its parent${d.diff_truncated ? " (cut)" : ""}</summary><pre>${esc(d.diff || "(no diff: repository not found)")}</pre></details>`;
  el.innerHTML = html;
}

// ---- the lineage ------------------------------------------------------------------------
function renderLineage() {
  const graphs = ofRun(D.lineage.graphs);
  let html = legend([["node: a submitted commit, coloured by seat; filled = PASS", "#888"],
    ["grey line: built on (nearest submitted ancestor)", "#bbb"], ["thick: relay onto another seat's PASS", "#333"],
    ["gold: the champion's path", "#e6b800"], ["red ring: a dead end (a direction nothing kept built on)", "#d62728"]]);
  for (const g of graphs) {
    const seats = [...new Set(g.nodes.map((n) => n.agent))].sort();
    const w = 900, laneH = 34, m = { l: 70, r: 20, t: 14, b: 34 }, h = m.t + m.b + laneH * Math.max(1, seats.length);
    let tMax = 1;
    for (const n of g.nodes) tMax = Math.max(tMax, n.t_s || 0);
    const x = scale(0, tMax / 60, m.l, w - m.r - 10);
    const pos = {};
    g.nodes.forEach((n) => { pos[n.commit] = [x((n.t_s || 0) / 60), m.t + seats.indexOf(n.agent) * laneH + laneH / 2]; });
    let svg = axes(x, () => 0, ticks(0, tMax / 60, 8), [], w, h, m, "minutes (submitted)", "");
    seats.forEach((s, i) => { svg += `<text x="${m.l - 8}" y="${m.t + i * laneH + laneH / 2 + 4}" text-anchor="end" fill="${seatColour(g.arm, s)}">${esc(s)}</text>`; });
    const onPath = new Set(g.champion_path);
    const dead = new Set((g.dead_ends || []).flatMap((d) => d.commits));
    const link = (a, b, stroke, width, extra = "") => {
      const [x0, y0] = pos[a], [x1, y1] = pos[b];
      const mx = (x0 + x1) / 2;
      // Within one seat's lane an edge arcs above the lane, so it never runs through the
      // commits it skips.
      const d = y0 === y1
        ? `M${x0} ${y0}Q${mx} ${y0 - Math.min(laneH * 0.45, 6 + (x1 - x0) / 8)} ${x1} ${y1}`
        : `M${x0} ${y0}C${mx} ${y0} ${mx} ${y1} ${x1} ${y1}`;
      return `<path d="${d}" fill="none" stroke="${stroke}" stroke-width="${width}" ${extra}/>`;
    };
    for (const e of g.edges) {
      if (!pos[e.from] || !pos[e.to]) continue;
      if (onPath.has(e.from) && onPath.has(e.to)) svg += link(e.from, e.to, "#e6b800", 7, 'opacity="0.7"');
      svg += link(e.from, e.to, "#bbb", 1.2);
    }
    for (const r of g.relays) {
      if (!pos[r.from_commit] || !pos[r.to_commit]) continue;
      svg += link(r.from_commit, r.to_commit, "#333", 2.6, `class="relay"`);
    }
    for (const n of g.nodes) {
      const [cx, cy] = pos[n.commit], colour = seatColour(g.arm, n.agent), pass = n.verdict === "PASS";
      svg += `<g class="node" data-commit="${esc(n.commit)}">` +
        (onPath.has(n.commit) ? `<circle cx="${cx}" cy="${cy}" r="10" fill="none" stroke="#e6b800" stroke-width="3"/>` : "") +
        (dead.has(n.commit) ? `<circle class="dead" cx="${cx}" cy="${cy}" r="9.5" fill="none" stroke="#d62728" stroke-width="1.5" stroke-dasharray="3 2"/>` : "") +
        `<circle cx="${cx}" cy="${cy}" r="6" fill="${pass ? colour : "#fff"}" stroke="${colour}" stroke-width="2"/>` +
        `<title>${esc(`${n.agent} ${short(n.commit)} ${n.verdict}${n.score !== null ? " " + num(n.score) + " " + D.run.metric.unit : ""} (jobs ${n.jobs.join(", ") || "-"})` +
          (n.commit === g.champion ? " · the arm's best" : ""))}</title></g>`;
    }
    const cut = g.total_nodes > g.nodes.length ? ` (of ${g.total_nodes}: the champion's path, the relays and the latest)` : "";
    html += `<h3>${tag(g.arm, armColour(g.arm))} ${g.nodes.length} commits${cut}, ${g.relays.length} relay edge(s), ${(g.dead_ends || []).length} dead end(s)` +
      `${g.champion ? `, best <code>${short(g.champion)}</code>` : ""}</h3>`;
    html += `<svg class="lineage-chart" data-arm="${esc(g.arm)}" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">${svg}</svg>`;
  }
  body("lineage").innerHTML = html;
  ready("lineage");
}

// ---- the arms' paths side by side (analysis.paths) -----------------------------------------
function renderPaths() {
  const runs = ofRun((D.paths && D.paths.runs) || []);
  let html = `<p class="note">${esc(D.paths ? D.paths.label : "")}</p>`;
  for (const r of runs) {
    if (!r.steps.length) { html += "<p>No improvements yet: no PASS raised an arm's best.</p>"; continue; }
    const cell = (m) => m
      ? `<span class="path-step clickable" data-run="${esc(r.run_id)}" data-job="${m.job_id}" title="${esc(m.message || "")} (${esc(m.why)})">` +
        `min ${num(m.t_s / 60)}, ${num(m.x, 2)}x (+${num(m.gain_x, 2)}x), ${esc(m.agent)} <code>${short(m.commit)}</code></span>`
      : "-";
    const rows = r.steps.map((s, i) => [String(i + 1), esc(s.changed), esc(s.found_by),
      ...r.arms.map((a) => [cell(s.members[a]), ...(s.again || []).filter((m) => m.arm === a).map((m) => "again " + cell({ ...m, why: "again", message: "" }))].join("; "))]);
    html += table(["step", "changed (file (functions))", "found by", ...r.arms], rows);
  }
  const el = body("paths");
  el.innerHTML = html;
  // A step opens the evaluation that made it, as a submission's row does.
  for (const span of el.querySelectorAll(".path-step")) span.addEventListener("click", () => openDetail(span.dataset.run, Number(span.dataset.job)));
  ready("paths");
}

// ---- the seats: how each spent its time, and one seat's page (analysis/view/seats.py) ----
const SEAT_PAGE = 200;
let seatOpen = null;  // {run, arm, seat, offset, q, step, data}
function seatRef(runId, arm, seat, tS) {
  return `<a class="seatref" data-run="${esc(runId)}" data-arm="${esc(arm)}" data-seat="${esc(seat)}" data-t="${esc(tS ?? "")}">${esc(seat)}</a>`;
}
function renderSeats() {
  const rows = ofRun((D.seats && D.seats.seats) || []);
  const colours = { working: "#2ca02c", waiting: "#ff7f0e", idle: "#c7c7c7" };
  const lines = rows.map((r) => {
    const total = Math.max(r.alive_s, 1e-9);
    const bar = ["working", "waiting", "idle"].map((k) =>
      `<span style="width:${(100 * r[`${k}_s`] / total).toFixed(2)}%;background:${colours[k]}" title="${k} ${mmss(r[`${k}_s`])}"></span>`).join("");
    return [tag(r.arm, armColour(r.arm)), seatRef(r.run_id, r.arm, r.seat, null), esc(r.role), `<span class="split">${bar}</span>`,
      mmss(r.working_s), mmss(r.waiting_s), mmss(r.idle_s), esc(r.steps), r.trajectory ? "trajectory.json" : (r.steps ? "steps table" : "events only")];
  });
  body("seats").innerHTML = legend([["working (within " + mmss(D.seats ? D.seats.idle_gap_s : 600) + " of any step, model call, submission or post)", colours.working],
    ["waiting for a verdict", colours.waiting], ["idle", colours.idle]]) +
    table(["arm", "seat", "role", "time", "working", "waiting", "idle", "steps", "transcript from"], lines, [4, 5, 6, 7]) +
    `<p class="note">Click a seat for its timeline and transcript.</p>`;
  if (seatOpen && !inline) { seatOpen.keep = true; loadSeat(); }  // a live page keeps the open seat current
  ready("seats");
}
function wireSeats() {
  document.addEventListener("click", (e) => {
    const a = e.target.closest(".seatref");
    if (a) { e.preventDefault(); openSeat(a.dataset.run, a.dataset.arm, a.dataset.seat, a.dataset.t === "" ? null : Number(a.dataset.t)); return; }
    const mark = e.target.closest("#seatpage [data-goto-step]");
    if (mark) { showStep(Number(mark.dataset.gotoStep)); return; }
    const back = e.target.closest("#seatpage [data-board], #seatpage [data-lineage]");
    if (back) { e.preventDefault(); seatBackLink(back); return; }
    const job = e.target.closest("#seatpage [data-job]");
    if (job && job.dataset.job !== "null") { openDetail(job.dataset.run, job.dataset.job); document.getElementById("submissions").scrollIntoView(); return; }
    const node = e.target.closest("#lineage g.node");
    if (node) {
      const graph = node.closest("svg").dataset.arm;
      const g = ofRun(D.lineage.graphs).find((x) => x.arm === graph);
      const n = g && g.nodes.find((x) => x.commit === node.dataset.commit);
      if (n) openSeat(g.run_id, g.arm, n.agent, n.t_s);
    }
  });
}
// Opens a seat's page; with tS, at the step that made the thing sent at that second.
async function openSeat(runId, arm, seat, tS) {
  seatOpen = { run: runId, arm, seat, offset: 0, q: "", step: null, t: tS, data: null };
  await loadSeat();
  document.getElementById("seatpage").scrollIntoView();
}
function stepAt(steps, tS) {
  let best = null;
  for (const st of steps) if (st.t_s !== null && st.t_s <= tS + 1) best = st.step;
  return best;
}
async function loadSeat() {
  const o = seatOpen;
  if (inline) {
    const whole = inline.seat_pages[`${o.run}/${o.arm}/${o.seat}`];
    if (!whole) return;
    const q = o.q.toLowerCase();
    const found = q ? whole.transcript.steps.filter((st) => `${st.text} ${st.tool} ${st.calls.map((c) => c.args).join(" ")} ${st.results.join(" ")}`.toLowerCase().includes(q)) : whole.transcript.steps;
    if (o.t !== null && o.step === null) o.step = stepAt(whole.transcript.steps, o.t);
    if (o.step !== null) { const i = found.findIndex((st) => st.step === o.step); if (i >= 0) o.offset = i - i % SEAT_PAGE; }
    o.data = { ...whole, transcript: { ...whole.transcript, total: found.length, offset: o.offset, steps: found.slice(o.offset, o.offset + SEAT_PAGE) } };
  } else {
    const params = new URLSearchParams({ run: o.run, arm: o.arm, seat: o.seat, offset: o.offset, q: o.q });
    if (o.step !== null) params.set("step", o.step);
    let res = await fetch(`/api/seat?${params}`);
    let got = await res.json();
    if (o.t !== null && o.step === null && res.ok) {  // the step that made it, then its page
      const sub = got.data.timeline.submissions.find((s) => Math.abs(s.t_s - o.t) < 1e-6) || got.data.timeline.posts.find((p) => Math.abs(p.t_s - o.t) < 1e-6);
      if (sub && sub.step !== null) { o.step = sub.step; params.set("step", o.step); res = await fetch(`/api/seat?${params}`); got = await res.json(); }
    }
    if (!res.ok) { document.getElementById("seatpage").textContent = got.error || res.statusText; return; }
    o.data = got.data;
    o.offset = got.data.transcript.offset;
  }
  renderSeatPage();
}
function seatTimeline(p) {
  const t = p.timeline, w = 900, m = { l: 90, r: 20, t: 10, b: 30 };
  const lanes = ["model calls", "tool calls", "submissions", "board posts", "lifecycle"];
  const laneH = 22, h = m.t + m.b + laneH * lanes.length;
  const x = scale(t.begin_s / 60, Math.max(t.end_s, t.begin_s + 1) / 60, m.l, w - m.r);
  const y = (i) => m.t + i * laneH + laneH / 2;
  let svg = axes(x, () => 0, ticks(t.begin_s / 60, Math.max(t.end_s, t.begin_s + 1) / 60, 8), [], w, h, m, "minutes", "");
  const band = (spans, colour, cls, label) => spans.map(([a, b]) =>
    `<rect class="${cls}" x="${x(a / 60)}" y="${m.t}" width="${Math.max(1, x(b / 60) - x(a / 60))}" height="${laneH * lanes.length}" fill="${colour}" opacity="0.25"><title>${label} ${mmss(a)}–${mmss(b)}</title></rect>`).join("");
  svg += band(t.waits, "#ff7f0e", "wait", "waiting for the judge") + band(t.idle, "#999", "idle", "idle");
  lanes.forEach((l, i) => { svg += `<text x="${m.l - 6}" y="${y(i) + 4}" text-anchor="end">${esc(l)}</text>`; });
  // Thousands of calls: one thin tick each, no per-tick title (the transcript holds the rest).
  svg += `<path d="${t.model_calls.map(([s]) => `M${x(s / 60).toFixed(1)} ${y(0) - 6}v12`).join("")}" stroke="#1f77b4" stroke-width="1"/>`;
  svg += `<path d="${t.tools.map(([s]) => `M${x(s / 60).toFixed(1)} ${y(1) - 6}v12`).join("")}" stroke="#9467bd" stroke-width="1"/>`;
  for (const s of t.submissions) {
    svg += `<circle class="sub" cx="${x(s.t_s / 60)}" cy="${y(2)}" r="5" fill="${verdictColour(s.verdict)}" data-run="${esc(p.run_id)}" data-job="${esc(s.job_id)}" style="cursor:pointer">` +
      `<title>${esc(`#${s.submission_id} ${short(s.commit)} ${s.verdict}${s.x !== null ? " " + num(s.x, 3) + "x" : ""} (step ${s.step ?? "-"}); click: the evaluation`)}</title></circle>`;
  }
  for (const q of t.posts) {
    svg += `<rect class="post" x="${x(q.t_s / 60) - 4}" y="${y(3) - 4}" width="8" height="8" fill="#17becf" ${q.step !== null ? `data-goto-step="${esc(q.step)}"` : ""}><title>${esc(`${q.kind}: ${q.text}`)}</title></rect>`;
  }
  for (const l of t.lifecycle) {
    svg += `<path class="life" d="M${x(l.t_s / 60)} ${y(4) - 8}v16" stroke="${l.event === "started" ? "#2ca02c" : "#d62728"}" stroke-width="2"><title>${esc(l.event)} ${mmss(l.t_s)}</title></path>`;
  }
  return `<svg class="seat-timeline" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">${svg}</svg>`;
}
function renderSeatPage() {
  const o = seatOpen, p = o.data, tr = p.transcript;
  const subs = p.timeline.submissions.map((s) =>
    `<li><a href="#submissions" data-run="${esc(p.run_id)}" data-job="${esc(s.job_id)}">#${esc(s.submission_id)} <code>${short(s.commit)}</code></a> ${tag(s.verdict, verdictColour(s.verdict))}` +
    ` at ${mmss(s.t_s)}${s.step !== null ? ` · <a href="#seatpage" data-goto-step="${esc(s.step)}">step ${esc(s.step)}</a>` : ""}` +
    ` · <a href="#lineage" data-lineage="${esc(s.commit)}">lineage</a></li>`).join("");
  const posts = p.timeline.posts.map((q) =>
    `<li>${mmss(q.t_s)} ${esc(q.kind)}: ${esc(q.text.slice(0, 60))} · <a href="#board" data-board="${esc(q.message_id)}">board</a>` +
    `${q.step !== null ? ` · <a href="#seatpage" data-goto-step="${esc(q.step)}">step ${esc(q.step)}</a>` : ""}</li>`).join("");
  const steps = tr.steps.map((st) => {
    const calls = st.calls.map((c) => `<pre class="call">→ ${esc(c.name)} ${esc(c.args)}</pre>`).join("");
    const results = st.results.map((r) => `<pre class="result">${esc(r)}</pre>`).join("");
    const head = `${mmss(st.t_s)} · step ${esc(st.step)} · ${esc(st.kind)}${st.tool ? ` · ${esc(st.tool)}` : ""}${st.tokens ? ` · ${esc(st.tokens)} tok` : ""} · ${esc(st.text.slice(0, 120))}`;
    return `<details id="step-${esc(st.step)}" class="${st.step === o.step ? "target" : ""}" ${st.step === o.step ? "open" : ""}><summary>${head}</summary><pre>${esc(st.text)}</pre>${calls}${results}</details>`;
  }).join("");
  const more = `${tr.offset > 0 ? `<button id="seatprev">newer ◀</button>` : ""}` +
    ` steps ${tr.total ? tr.offset + 1 : 0}–${tr.offset + tr.steps.length} of ${tr.total}${o.q ? ` matching (of ${tr.all})` : ""} ` +
    `${tr.offset + tr.steps.length < tr.total ? `<button id="seatnext">▶ older</button>` : ""}`;
  const el = document.getElementById("seatpage");
  // A live redraw keeps the steps the reader opened (and the transcript's scroll).
  const same = !!o.keep && el.dataset.key === `${p.run_id}/${p.arm}/${p.seat}`;
  o.keep = false;
  const opened = same ? new Set([...el.querySelectorAll("details[open]")].map((d) => d.id)) : new Set();
  const box = el.querySelector(".transcript"), scrolled = same && box ? box.scrollTop : 0;
  el.dataset.key = `${p.run_id}/${p.arm}/${p.seat}`;
  el.innerHTML = `<h3 id="seat-title">${tag(p.arm, armColour(p.arm))} ${esc(p.seat)}: timeline and transcript (from ${esc(tr.source)})</h3>` +
    seatTimeline(p) + `<div class="cols"><div><b>Submissions</b><ul class="seat-subs">${subs || "<li>none</li>"}</ul><b>Board posts</b><ul class="seat-posts">${posts || "<li>none</li>"}</ul></div>` +
    `<div class="transcript"><input id="seatq" type="search" placeholder="search this transcript" value="${esc(o.q)}"> ${more}` +
    (tr.all ? steps : `<p class="note">No transcript for this seat: no trajectory.json and no steps table rows (the timeline shows what events.sqlite holds).</p>`) + `</div></div>`;
  const q = document.getElementById("seatq");
  q.addEventListener("change", () => { o.q = q.value; o.offset = 0; o.step = null; o.t = null; loadSeat(); });
  const prev = document.getElementById("seatprev"), next = document.getElementById("seatnext");
  if (prev) prev.addEventListener("click", () => { o.offset = Math.max(0, o.offset - SEAT_PAGE); o.step = null; o.t = null; loadSeat(); });
  if (next) next.addEventListener("click", () => { o.offset += SEAT_PAGE; o.step = null; o.t = null; loadSeat(); });
  for (const id of opened) { const d = document.getElementById(id); if (d) d.open = true; }
  if (scrolled) el.querySelector(".transcript").scrollTop = scrolled;
  const target = o.step !== null && !scrolled && document.getElementById(`step-${o.step}`);
  if (target) target.scrollIntoView({ block: "nearest" });
  el.dataset.ready = "1";
}
// From a seat's page back to the board's post or the lineage's commit, marked there.
function seatBackLink(a) {
  const el = a.dataset.board !== undefined
    ? document.querySelector(`#board .msg[data-id="${CSS.escape(a.dataset.board)}"]`)
    : document.querySelector(`#lineage g.node[data-commit="${CSS.escape(a.dataset.lineage)}"]`);
  for (const old of document.querySelectorAll(".seat-hit")) old.classList.remove("seat-hit");
  if (!el) { a.textContent += " (not shown there)"; return; }
  el.classList.add("seat-hit");
  el.scrollIntoView({ block: "center" });
}
function showStep(step) { seatOpen.step = step; seatOpen.t = null; loadSeat(); }

// ---- cost -------------------------------------------------------------------------------
function renderCost() {
  const c = D.cost;
  let html = table(["arm", "token records", "output tokens", `tokens per ${D.run.metric.unit} gained`, "wire output tokens",
    "model calls", "failed", "seat-s lost"],
  ofRun(c.arms).map((a) => [tag(a.arm, armColour(a.arm)), esc(a.token_records), num(a.output_tokens, 0),
    num(a.token_cost_per_gain, 0), num(a.wire_output_tokens, 0), num(a.model_calls, 0), num(a.model_call_failures, 0),
    num(a.model_lost_s)]), [1, 2, 3, 4, 5, 6, 7]);
  const seats = ofRun(c.per_seat);
  if (seats.length) {
    html += `<h3>Tokens per seat</h3>` + table(["arm", "seat", "input", "cache read", "cache write", "output", "reasoning"],
      seats.map((s) => [tag(s.arm, armColour(s.arm)), esc(s.agent), num(s.input, 0), num(s.cache_read, 0),
        num(s.cache_write, 0), num(s.output, 0), num(s.reasoning, 0)]), [2, 3, 4, 5, 6]);
    const series = ofRun(c.over_time);
    const w = 900, h = 240, m = { l: 70, r: 20, t: 10, b: 36 };
    let tMax = 1, yMax = 1;
    for (const s of series) for (const [t, v] of s.points) { tMax = Math.max(tMax, t); yMax = Math.max(yMax, v); }
    const x = scale(0, tMax / 60, m.l, w - m.r), y = scale(0, yMax * 1.08, h - m.b, m.t);
    let svg = axes(x, y, ticks(0, tMax / 60, 8), ticks(0, yMax * 1.08, 5), w, h, m, "minutes (time of each seat's latest reading)", "output tokens",
      (v) => v, (v) => Number(v).toLocaleString("en"));
    for (const s of series) {
      const d = s.points.map(([t, v], i) => `${i ? "L" : "M"}${x(t / 60)} ${y(v)}`).join("");
      svg += `<path d="${d}" fill="none" stroke="${armColour(s.arm)}" stroke-width="2"/>`;
    }
    html += `<svg id="cost-chart" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">${svg}</svg>`;
    html += `<p class="note">The runner replaces a seat's token rows at each reading (every minute), so the record holds each seat's latest totals: the curve sums them by the time they were read, and grows on the next poll while the run goes on.</p>`;
  } else {
    html += `<p class="note">No token records (scripted agents and seats without session records have none).</p>`;
  }
  const outages = ofRun(c.outages || []);
  if (outages.length) {
    html += `<h3>Model endpoint, per seat (through the run's proxy)</h3>` +
      table(["arm", "seat", "calls", "failed", "failures", "outages", "seat-s lost", "open at end"],
        outages.map((o) => [tag(o.arm, armColour(o.arm)), esc(o.agent), esc(o.calls), esc(o.failed),
          esc(Object.entries(o.statuses).map(([k, v]) => `${k} ×${v}`).join(", ") || "-"), esc(o.outages),
          num(o.lost_s), o.open_at_end ? "yes" : "no"]), [2, 3, 5, 6]);
  }
  for (const f of ofRun(c.formula)) html += `<div class="formula">${f.lines.map(md).join("\n")}</div>`;
  body("cost").innerHTML = html;
  ready("cost");
}

// ---- planner (a simulation: analysis.plan, computed once per state of the logs) ---------
function renderPlan() {
  const p = D.plan;
  if (!p) return;
  if (p.reason) {
    body("plan").innerHTML = `<p class="note" id="plan-none">${esc(p.reason)}</p>`;
    ready("plan");
    return;
  }
  let html = `<p class="note">Every number here is a <b>simulation</b> of the judge queue (analysis.plan, simpy) from what the run(s) recorded, not a measurement: ${esc(p.runs.join(", "))}; ${num(p.horizon_s / 3600, 2)} h per simulated run.` +
    (p.past_knee === null ? "" : ` Per judge, teams more than ${esc(p.past_knee)} size(s) past its knee are not simulated.`) + `</p>`;
  html += `<h3>Team size x judge (simulation; the knee, the smallest team that saturates each judge, highlighted)</h3>`;
  const heads = ["seats/arm", "speed", "devices", "evaluations", "utilisation", "mean wait s", "p95 wait s", "evaluations, overlap", "saturated"];
  const rows = p.team.map((r) => `<tr class="${r.knee ? "knee" : ""}">` + [esc(r.seats_per_arm), `${esc(r.speed)}x`, esc(r.devices),
    num(r.evaluations, 0), pct(r.utilisation), num(r.mean_wait_s), num(r.p95_wait_s), num(r.evaluations_overlap, 0),
    r.saturated ? "yes" : "no"].map((c, i) => `<td class="${i === 1 || i === 8 ? "" : "num"}">${c}</td>`).join("") + `</tr>`).join("");
  html += `<table id="plan-team"><thead><tr>${heads.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${rows}</tbody></table>`;
  html += table(["speed", "devices", "knee (seats per arm)", "evaluations at the knee"], p.knees.map((k) => [
    `${esc(k.speed)}x`, esc(k.devices), k.knee_seats_per_arm === null ? "not in the table" : esc(k.knee_seats_per_arm),
    num(k.evaluations_at_knee, 0)]), [1, 2, 3]);
  for (const rp of ofRun(p.replays)) {  // a sweep: the seed picked
    html += `<h3>Counterfactual replay of ${esc(rp.run_id)} (simulation)</h3>` + table(
      ["scenario", "arm", "evaluations", "utilisation", "mean wait s", "p95 wait s", "best known at s", "sooner s"],
      rp.rows.map((r) => [esc(r.scenario), r.arm ? tag(r.arm, armColour(r.arm)) : "-", esc(r.evaluations), pct(r.utilisation),
        num(r.mean_wait_s), num(r.p95_wait_s), num(r.best_known_s), num(r.sooner_s)]), [2, 3, 4, 5, 6, 7]);
  }
  for (const note of p.notes || []) html += `<p class="note">${esc(note)}</p>`;
  html += `<figure><img id="plan-figure" alt="Team size x judge (simulation)" src="${esc(p.figure)}" style="max-width:100%">` +
    `<figcaption class="note">Team size x judge (simulation): utilisation and mean queue wait against seats per arm.</figcaption></figure>`;
  body("plan").innerHTML = html;
  ready("plan");
}
let planAt = -Infinity;  // when the page last asked for the planner's section (ms)
async function loadPlan() {
  // Seconds of simulation on the server when the logs moved: asked for once a minute at most.
  if (Date.now() - planAt < 60000) return;
  planAt = Date.now();
  try {
    const res = await fetch("/api/plan");
    const payload = await res.json();
    if (!res.ok) throw new Error(payload.error || res.statusText);
    D.plan = payload.data;
  } catch (err) {
    D.plan = { reason: `no plan yet (${err.message})` };
  }
  renderPlan();
}

// ---- data and polling -------------------------------------------------------------------
function renderAll() {
  renderRun();
  renderRace();
  renderJudge();
  renderBoard();
  renderSubmissions();
  renderLineage();
  renderPaths();
  renderSeats();
  renderCost();
  renderPlan();
}
function setLive(text, stale) {
  const el = document.getElementById("live");
  el.textContent = text;
  el.classList.toggle("stale", !!stale);
}
async function loadAll() {
  const got = await Promise.all(SECTIONS.map(async (name) => {
    const res = await fetch(`/api/${name}`);
    const payload = await res.json();
    if (!res.ok) throw new Error(payload.error || res.statusText);
    return [name, payload];
  }));
  // Sections of different builds (a rebuild finished between the fetches) are one poll apart;
  // the oldest is the read the page holds, and the rows since come on the next poll.
  const seqs = got.map(([, payload]) => payload.seq);
  for (const [name, payload] of got) D[name] = payload.data;
  shownSeq = sectionsSeq = Math.min(...seqs);
  if (Math.max(...seqs) !== sectionsSeq) sectionsSeq = -1;  // mixed: load again next poll
  clockOffset = D.run.now - Date.now() / 1000;
  renderAll();
  loadPlan();
}
function addRows(held, rows, key) {
  // Rows by key: a row held is replaced (a submission its verdict completed), a new one added.
  const at = new Map(held.map((r, i) => [key(r), i]));
  let added = 0;
  for (const r of rows) {
    const i = at.get(key(r));
    if (i === undefined) { at.set(key(r), held.length); held.push(r); added++; } else held[i] = r;
  }
  return added;
}
function applyChanges(c) {
  // What the reads since the held one added, drawn without reloading every section (the
  // aggregates follow with the next build of the sections).
  if (c.messages.length) {
    D.board.total += addRows(D.board.messages, c.messages, (r) => `${r.run_id}/${r.message_id}`);
    renderBoard();
  }
  if (c.submissions.length) {
    D.submissions.total += addRows(D.submissions.rows, c.submissions, (r) => `${r.run_id}/${r.submission_id}`);
    renderSubmissions();
  }
  if (c.evaluations.length) {
    const many = (D.judge.timeline || []).length > 0;
    const held = many ? [] : D.judge.evaluations;
    D.judge.evaluation_count += addRows(held, c.evaluations, (r) => `${r.run_id}/${r.job_id}`);
    renderJudge();
  }
}
async function poll() {
  try {
    const res = await fetch(`/api/changes?since=${shownSeq ?? 0}`);
    const v = await res.json();
    if (!res.ok) throw new Error(v.error || res.statusText);
    // New sections: load them. Else the rows since the held read (none to add after a full
    // read: the page waits for the sections built from it).
    if (shownSeq === null || v.sections_seq !== sectionsSeq) await loadAll();
    else if (!v.reset && v.seq !== shownSeq) { applyChanges(v.rows); shownSeq = v.seq; }
    const when = new Date().toLocaleTimeString();
    setLive(v.error ? `showing the last good read (${v.error})` : `live · checked ${when}` +
      ` · last build ${num(v.build_s, 2)} s` + (v.seq !== v.sections_seq ? " · totals rebuilding" : ""),
    !!v.error);
  } catch (err) {
    setLive(`waiting for the run: ${err.message}`, true);
  }
  const left = document.getElementById("race-left");
  if (left) left.textContent = timeLeftText();
  setTimeout(poll, POLL_MS);
}
function wire() {
  document.getElementById("boardq").addEventListener("input", boardInput);
  document.getElementById("boardarm").addEventListener("change", boardInput);
  for (const id of ["subarm", "subverdict"]) document.getElementById(id).addEventListener("change", renderSubmissions);
  for (const id of ["subseat", "subreason"]) document.getElementById(id).addEventListener("input", renderSubmissions);
  document.getElementById("runsel").addEventListener("change", (e) => { selectedRun = e.target.value; renderAll(); });
  document.getElementById("submissions").addEventListener("click", (e) => {
    const th = e.target.closest("th.sortable");
    if (th) {
      subSort.dir = subSort.key === th.dataset.key ? -subSort.dir : 1;
      subSort.key = th.dataset.key;
      renderSubmissions();
      return;
    }
    if (e.target.closest(".seatref")) return;  // the seat's page, not the evaluation
    const tr = e.target.closest("tr.clickable");
    if (tr) openDetail(tr.dataset.run, tr.dataset.job);
  });
  document.getElementById("board").addEventListener("click", (e) => {
    const a = e.target.closest("a.jobref");
    if (a) openDetail(a.dataset.run, a.dataset.job);
  });
}
function start() {
  wire();
  wireSeats();
  inline = JSON.parse(document.getElementById("inline-data").textContent);
  if (inline) {
    Object.assign(D, inline.sections);
    clockOffset = D.run.now - Date.now() / 1000;
    setLive(`exported · read at ${new Date(D.run.now * 1000).toISOString()}`);
    renderAll();
  } else {
    poll();
  }
}
start();
