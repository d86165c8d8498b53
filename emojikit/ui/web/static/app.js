// emojikit serve: the page. Every text from the server or the person is shown with
// textContent (never parsed as HTML), so a message holding <script> stays text.
"use strict";

const $ = (id) => document.getElementById(id);
let CONFIG = null;
const POLL_MS = 400;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
  return node;
}

async function api(path, body) {
  const options = body === undefined ? {} : {method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(body)};
  let response;
  try {
    response = await fetch(path, options);
  } catch (e) {
    throw new Error("The server cannot be reached.");
  }
  const data = await response.json().catch(() => ({error: `HTTP ${response.status}`}));
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

function fill(select, items) {
  select.replaceChildren(...items.map(([value, label]) => el("option", {value}, label)));
}

// --- tabs ---------------------------------------------------------------------------------

function showMode(mode) {
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.mode === mode);
  for (const section of document.querySelectorAll(".mode")) section.hidden = section.id !== `mode-${mode}`;
  if (mode === "runs") loadRuns();
  if (mode === "send") loadPicker("");
}

// --- one game view, shared by the three game modes -------------------------------------------

function similarityBar(value) {
  const bar = el("span", {class: "bar"});
  const fill = el("span", {class: "bar-fill"});
  fill.style.width = `${Math.round(Math.max(0, Math.min(1, value)) * 100)}%`;
  if (value >= CONFIG.success_threshold) fill.classList.add("hit");
  bar.append(fill);
  return bar;
}

function renderTurns(list, game, who) {
  const rows = game.turns.map((turn, i) => {
    const emoji = el("div", {class: "turn-emoji"}, el("span", {class: "who"}, who.sender), el("span", {class: "emoji"}, turn.emoji),
      turn.valid ? null : el("span", {class: "warn"}, " (not valid emoji)"));
    const parts = [el("span", {class: "turn-number"}, `turn ${i + 1}`), emoji];
    if (turn.guess !== null) {
      parts.push(el("div", {class: "turn-guess"}, el("span", {class: "who"}, who.guesser), el("q", {class: "guess-text"}, turn.guess),
        " similarity ", el("strong", {class: "similarity"}, turn.similarity.toFixed(3)), similarityBar(turn.similarity)));
    } else if (game.pending_guess && i === game.turns.length - 1) {
      parts.push(el("div", {class: "turn-guess pending"}, el("span", {class: "who"}, who.guesser), el("q", {class: "guess-text"}, game.pending_guess)));
    }
    return el("li", {class: "turn"}, ...parts);
  });
  list.replaceChildren(...rows);
}

function renderStatus(node, game, yourTurnText) {
  node.replaceChildren();
  node.classList.toggle("thinking", game.status === "thinking");
  if (game.status === "thinking") {
    const ahead = game.queue_ahead > 0 ? ` (${game.queue_ahead} ${game.queue_ahead === 1 ? "request" : "requests"} ahead in the queue)` : "";
    node.append(el("span", {class: "spinner"}), ` The model is thinking…${ahead}`);
  } else if (game.status === "your_turn") {
    node.append(`Turn ${game.turns.length + (game.mode === "send" ? 1 : 0)} of ${game.max_turns}: ${yourTurnText}`);
  } else if (game.status === "error") {
    node.append(el("span", {class: "error"}, game.error));
  }
}

function renderResult(node, game) {
  node.replaceChildren();
  if (game.status !== "finished") return;
  const verdict = game.success ? `Success on turn ${game.turns.length}!` : `No success in ${game.turns.length} turns.`;
  node.append(el("div", {class: game.success ? "verdict hit" : "verdict miss"}, verdict, ` Best similarity ${game.best_similarity.toFixed(3)}.`));
  if (game.target !== null) node.append(el("div", {class: "reveal"}, "The message was: ", el("strong", {id: `${game.mode}-answer`}, game.target)));
}

const VIEWS = {
  guess: {who: {sender: "model", guesser: "you"}, yourTurn: "type your guess."},
  send: {who: {sender: "you", guesser: "judge"}, yourTurn: "send emoji for the message."},
  watch: {who: {sender: "model", guesser: "judge"}, yourTurn: ""},
};

const current = {guess: null, send: null, watch: null};

function render(game) {
  const mode = game.mode;
  current[mode] = game;
  $(`${mode}-game`).hidden = false;
  renderTurns($(`${mode}-turns`), game, VIEWS[mode].who);
  renderStatus($(`${mode}-status`), game, mode === "send" ? `send ${CONFIG.min_emoji}-${CONFIG.max_emoji} emoji for the message.` : VIEWS[mode].yourTurn);
  renderResult($(`${mode}-result`), game);
  if (mode !== "guess" && game.target !== null) $(`${mode}-target`).textContent = game.target;
  const meta = $(`${mode}-meta`);
  if (meta) meta.textContent = mode === "guess" ? `checkpoint ${game.checkpoint} · up to ${game.max_turns} turns · success at similarity ${CONFIG.success_threshold.toFixed(2)}`
                                               : `judge ${game.judge} · up to ${game.max_turns} turns · success at similarity ${CONFIG.success_threshold.toFixed(2)}`;
  const form = $(`${mode}-form`);
  if (form) {
    const open = game.status === "your_turn";
    form.hidden = game.status === "finished" || game.status === "error";
    for (const field of form.querySelectorAll("input, button")) field.disabled = !open;
    if (open) form.querySelector("input").focus();
  }
  if (mode === "send") $("picker").hidden = game.status === "finished" || game.status === "error";
  if (game.status === "thinking") setTimeout(() => poll(mode, game.id), POLL_MS);
}

async function poll(mode, id) {
  if (!current[mode] || current[mode].id !== id) return;  // a newer game replaced this one
  try {
    render(await api(`/api/games/${encodeURIComponent(id)}`));
  } catch (e) {
    $(`${mode}-status`).replaceChildren(el("span", {class: "error"}, e.message));
  }
}

async function newGame(mode) {
  const body = {mode};
  const checkpoint = $(`${mode}-checkpoint`), judge = $(`${mode}-judge`), message = $(`${mode}-message`);
  if (checkpoint) body.checkpoint = checkpoint.value;
  if (judge) body.judge = judge.value;
  if (message && message.value.trim()) body.message = message.value;
  const error = $(`${mode}-error`);
  if (error) error.textContent = "";
  try {
    const game = await api("/api/games", body);
    if (message) message.value = "";
    if (mode === "send") $("send-input").value = "";
    render(game);
  } catch (e) {
    (error || $(`${mode}-status`)).textContent = e.message;
    $(`${mode}-game`).hidden = false;
  }
}

async function submitTurn(mode, event) {
  event.preventDefault();
  const game = current[mode];
  const input = $(`${mode}-input`), error = $(`${mode}-error`);
  error.textContent = "";
  const path = `/api/games/${encodeURIComponent(game.id)}/${mode === "guess" ? "guess" : "emoji"}`;
  const body = mode === "guess" ? {guess: input.value} : {emoji: input.value};
  try {
    const next = await api(path, body);
    input.value = "";
    render(next);
  } catch (e) {
    error.textContent = e.message;  // bad input is shown next to the field; the game goes on
    input.focus();
  }
}

// --- the emoji picker ----------------------------------------------------------------------

let pickerQuery = null;

async function loadPicker(query) {
  if (query === pickerQuery) return;
  pickerQuery = query;
  try {
    const data = await api(`/api/emoji?q=${encodeURIComponent(query)}`);
    if (query !== pickerQuery) return;
    $("picker-grid").replaceChildren(...data.emoji.map((item) =>
      el("button", {type: "button", class: "picker-emoji", title: item.name, "aria-label": item.name}, item.emoji)));
  } catch (e) {
    $("picker-grid").replaceChildren(el("span", {class: "error"}, e.message));
  }
}

// --- runs ------------------------------------------------------------------------------------

async function loadRuns() {
  const select = $("runs-select");
  try {
    const data = await api("/api/runs");
    const chosen = select.value;
    fill(select, data.runs.map((r) => [r.id, r.kind ? `${r.id} (${r.kind})` : r.id]));
    if (!data.runs.length) { $("runs-error").textContent = "No runs in the runs directory yet."; return; }
    if (chosen && data.runs.some((r) => r.id === chosen)) select.value = chosen;
    showRun();
  } catch (e) {
    $("runs-error").textContent = e.message;
  }
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  return node;
}

function chart(curve) {
  const width = 320, height = 180, pad = 32;
  const points = curve.training.concat(curve.heldout);
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const sx = (x) => pad + (x - x0) / (x1 - x0) * (width - 2 * pad);
  const sy = (y) => height - pad + (y0 - y) / (y1 - y0) * (height - 2 * pad);
  const root = svg("svg", {viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img"});
  root.append(svg("line", {x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, class: "axis"}));
  root.append(svg("line", {x1: pad, y1: pad, x2: pad, y2: height - pad, class: "axis"}));
  for (const [value, y] of [[y1, pad], [y0, height - pad]]) {
    const label = svg("text", {x: 2, y: y + 4, class: "tick"});
    label.textContent = value.toFixed(2);
    root.append(label);
  }
  for (const [series, cls] of [[curve.training, "line-training"], [curve.heldout, "line-heldout"]]) {
    if (!series.length) continue;
    root.append(svg("polyline", {points: series.map((p) => `${sx(p[0])},${sy(p[1])}`).join(" "), class: cls}));
    for (const p of series) root.append(svg("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2.5, class: cls}));
  }
  const title = el("div", {class: "chart-title"}, curve.title, curve.heldout.length ? " (dashed: held out)" : "");
  return el("figure", {class: "chart-box"}, title, root);
}

async function showRun() {
  const id = $("runs-select").value;
  if (!id) return;
  $("runs-error").textContent = "";
  try {
    const data = await api(`/api/runs/${encodeURIComponent(id)}/metrics`);
    $("runs-error").textContent = data.error;
    $("runs-curves").replaceChildren(...data.curves.map(chart));
    const head = el("tr", {}, ...["step", "targets", "success rate", "mean similarity", "mean turns", "format violations"].map((h) => el("th", {}, h)));
    const fmt = (v, d) => (typeof v === "number" ? v.toFixed(d) : "-");
    const rows = data.evals.map((r) => el("tr", {}, el("td", {}, String(r.step ?? "-")), el("td", {}, String(r.targets ?? "-")),
      el("td", {}, fmt(r.success_rate, 3)), el("td", {}, fmt(r.similarity, 3)), el("td", {}, fmt(r.mean_turns, 2)), el("td", {}, fmt(r.format_violations, 3))));
    $("runs-evals").replaceChildren(...(rows.length ? [head, ...rows] : []));
    await showEpisodes();
  } catch (e) {
    $("runs-error").textContent = e.message;
  }
}

async function showEpisodes() {
  const id = $("runs-select").value;
  const params = new URLSearchParams({step: $("runs-step").value.trim(), target: $("runs-target").value, order: $("runs-order").value});
  try {
    const data = await api(`/api/runs/${encodeURIComponent(id)}/episodes?${params}`);
    $("runs-count").textContent = data.error || `${data.episodes.length} of ${data.total} episodes`;
    $("runs-episodes").replaceChildren(...data.episodes.map((ep) => {
      const head = el("div", {class: "episode-head"}, ep.step !== null ? `step ${ep.step} · ` : "", `reward ${ep.reward.toFixed(3)} · `,
        ep.success ? `success on turn ${ep.turns.length}` : `no success in ${ep.turns.length} turns`);
      const list = el("ol", {class: "turns"});
      renderTurns(list, {turns: ep.turns}, {sender: "sender", guesser: "judge"});
      return el("article", {class: "episode"}, head, el("div", {class: "target"}, "target ", el("strong", {}, ep.target)), list);
    }));
  } catch (e) {
    $("runs-count").textContent = e.message;
  }
}

// --- start -----------------------------------------------------------------------------------

async function start() {
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showMode(tab.dataset.mode));
  for (const mode of ["guess", "send", "watch"]) $(`${mode}-new`).addEventListener("click", () => newGame(mode));
  $("guess-form").addEventListener("submit", (e) => submitTurn("guess", e));
  $("send-form").addEventListener("submit", (e) => submitTurn("send", e));
  $("send-clear").addEventListener("click", () => { $("send-input").value = ""; $("send-error").textContent = ""; });
  $("picker-grid").addEventListener("click", (e) => {
    const button = e.target.closest(".picker-emoji");
    if (button && !$("send-input").disabled) { $("send-input").value += button.textContent; $("send-input").focus(); }
  });
  let timer = null;
  $("picker-search").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => loadPicker($("picker-search").value.trim()), 200); });
  $("runs-select").addEventListener("change", showRun);
  $("runs-show").addEventListener("click", showEpisodes);
  try {
    CONFIG = await api("/api/config");
  } catch (e) {
    $("server-status").textContent = e.message;
    return;
  }
  const checkpoints = CONFIG.checkpoints.map((c) => [c.id, c.id === c.label ? c.id : `${c.id} (${c.label})`]);
  fill($("guess-checkpoint"), checkpoints);
  fill($("watch-checkpoint"), checkpoints);
  fill($("send-judge"), CONFIG.judges.map((j) => [j, j]));
  fill($("watch-judge"), CONFIG.judges.map((j) => [j, j]));
  $("tab-runs").hidden = !CONFIG.runs;
  $("server-status").textContent = `${CONFIG.min_emoji}-${CONFIG.max_emoji} emoji per turn · up to ${CONFIG.max_turns} turns`;
  document.body.dataset.ready = "1";
}

document.addEventListener("DOMContentLoaded", start);
