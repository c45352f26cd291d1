// The data-flow diagram (widgets/data_flow/diagram.py): one decode step's bytes moving through a GPU's
// memory ladder. Python sends `data` (every number and sentence); this module only lays it out,
// animates it, and shows a level's readout on hover, tap or keyboard focus.
//
//   legend (kinds of bytes: hover or focus one to follow it)
//   ┌ GPU chip ───────────────┐
//   │ ▲▼ [registers        ] │      wide (≥ 600 px):  NVLink, PCIe, host memory and the network
//   │ ▲▼ [shared memory/L1 ] │                        card in a column right of HBM
//   │ ▲▼ [L2               ] │      narrow:           the same four boxes below HBM
//   └─────────────────────────┘
//      ▲▼ [HBM              ] ── NVLink / PCIe ── host memory / network card
//   readout (aria-live)
//
// Motion: dots climb the lanes left of the boxes, each lane a kind of byte, slow where the rung is
// slow. With prefers-reduced-motion (or Pause) the dots are not drawn; the arrows, bars and labels
// carry the same information. Text goes in with textContent only: nothing here parses HTML.

const NS = "http://www.w3.org/2000/svg";
const UP = ["hbm", "l2", "smem", "registers"];           // bottom to top
const LANES = { weights: 10, kv_read: 19, activations: 28, kv_write: 37 };
const CHAN = 46;                                         // width of the lanes' channel
const ROW = 84, GAP = 16, SIDE_H = 60, SIDE_GAP = 10;
const DOTS = 30;

function el(tag, attrs, parent) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (parent) parent.appendChild(node);
  return node;
}

function text(parent, x, y, str, cls, maxWidth) {
  const t = el("text", { x, y, class: cls }, parent);
  t.textContent = str;
  if (maxWidth && t.getComputedTextLength && t.getComputedTextLength() > maxWidth) {
    let s = str;
    while (s.length > 4 && t.getComputedTextLength() > maxWidth) {
      s = s.slice(0, -2);
      t.textContent = s + "…";
    }
    el("title", {}, t).textContent = str;
  }
  return t;
}

function html(tag, cls, parent, str) {
  const node = document.createElement(tag);
  node.className = cls;
  if (str !== undefined) node.textContent = str;
  return parent.appendChild(node);
}

export function render({ model, el: host }) {
  const root = html("div", "df", host);
  const legend = html("div", "df-legend", root);
  legend.setAttribute("role", "group");
  legend.setAttribute("aria-label", "Kinds of bytes in the step");
  const svg = el("svg", { class: "df-svg", role: "group" }, root);
  const tools = html("div", "df-tools", root);
  const pause = Object.assign(html("button", "df-pause", tools), { type: "button" });
  const HINT = "Dots are bytes, climbing (KV writes go down), slow where the rung is slow. Hover, tap or Tab to a " +
    "level for its numbers; arrow keys move between levels.";
  const hint = html("span", "df-hint", tools, HINT);
  const readout = html("div", "df-readout", root);
  readout.setAttribute("aria-live", "polite");

  const reduce = window.matchMedia("(prefers-reduced-motion: reduce)");
  let data = model.data || {};
  let width = 0, active = null, kindLit = null, playing = !reduce.matches, onScreen = true;
  let frame = 0, last = 0, dots = [], paths = {}, focusables = [];

  // ---- readout -------------------------------------------------------------------------------
  function show(r) {
    readout.replaceChildren();
    if (!r) return;
    html("p", "df-readout-title", readout, r.title);
    let list = null;
    for (const line of r.lines) {
      if (line.startsWith("  ")) {
        list = list || html("ul", "df-readout-list", readout);
        html("li", "", list, line.trim());
      } else {
        list = null;
        html("p", "", readout, line);
      }
    }
  }
  function lookup(key) {
    for (const group of [data.levels || [], data.side || [], data.kinds || []]) {
      const hit = group.find((d) => d.key === key);
      if (hit) return hit;
    }
    return null;
  }
  function select(key) {
    const item = lookup(key);
    if (!item) return;
    active = key;
    svg.querySelectorAll(".df-node").forEach((n) => n.classList.toggle("df-active", n.dataset.key === key));
    show(item.readout);
  }
  function lightKind(kind) {
    kindLit = kind;
    if (kind) svg.setAttribute("data-kind", kind); else svg.removeAttribute("data-kind");
  }

  // ---- layout --------------------------------------------------------------------------------
  function draw() {
    data = model.data || {};
    width = Math.max(280, Math.round(root.clientWidth || 700));
    const wide = width >= 600;
    const boxX = CHAN, boxW = wide ? Math.round(width * 0.58) - CHAN : width - CHAN - 2;
    svg.replaceChildren();
    svg.setAttribute("aria-label", data.caption || "data flow");
    const levels = data.levels || [], side = data.side || [];
    const byKey = Object.fromEntries(levels.map((l) => [l.key, l]));
    const chipTop = 22, y = {};
    // registers, shared memory and L2 inside the chip outline; HBM below it, beside the chip
    ["registers", "smem", "l2"].forEach((k, i) => { y[k] = chipTop + 10 + i * (ROW + GAP); });
    const chipBottom = y.l2 + ROW + 10;
    y.hbm = chipBottom + GAP + 8;
    el("rect", { x: 2, y: chipTop - 18, width: boxX + boxW + 4, height: chipBottom - chipTop + 18,
                 rx: 10, class: "df-chip" }, svg);
    text(svg, 10, chipTop - 4, "GPU chip: 132 SMs and their L2", "df-chip-label");
    text(svg, boxX + 4, y.hbm - 5, "beside the chip", "df-chip-label");

    // lanes: one arrow per kind; dots run along them when animated
    const lanes = el("g", { class: "df-lanes", "aria-hidden": "true" }, svg);
    const mid = (k) => y[k] + ROW / 2;
    paths = {};
    for (const kind of data.kinds || []) {
      if (!levels.length) break;
      const atHbm = (byKey.hbm && byKey.hbm.bytes[kind.key] > 0);
      let stops = kind.key === "activations" && !atHbm ? ["l2", "smem", "registers"] : UP.slice();
      if (kind.key === "kv_write") stops = stops.reverse();
      const x = LANES[kind.key];
      const ys = stops.map(mid);
      el("line", { x1: x, y1: ys[0], x2: x, y2: ys[ys.length - 1], stroke: kind.color, class: "df-lane",
                   "data-kind": kind.key }, lanes);
      const tipY = ys[ys.length - 1], dir = ys[ys.length - 1] < ys[0] ? -1 : 1;
      el("path", { d: `M${x - 5},${tipY - dir * 8} L${x},${tipY} L${x + 5},${tipY - dir * 8} Z`,
                   fill: kind.color, class: "df-arrow", "data-kind": kind.key }, lanes);
      // time spent climbing out of each rung follows that rung's share of the step's time
      const segs = stops.slice(0, -1).map((k, i) => ({
        y0: ys[i], y1: ys[i + 1],
        dur: 0.3 + 2.6 * (kind.key === "kv_write" ? byKey[stops[i + 1]].share : byKey[k].share),
      }));
      paths[kind.key] = { x, segs, total: segs.reduce((a, s) => a + s.dur, 0), color: kind.color };
    }

    focusables = [];
    for (const key of ["registers", "smem", "l2", "hbm"]) {
      const lv = byKey[key];
      if (lv) focusables.push(levelBox(lv, boxX, y[key], boxW));
    }
    // beside HBM: NVLink, PCIe, host memory, network card
    const sideW = wide ? width - (boxX + boxW + 40) - 2 : boxW;
    const sideX = wide ? boxX + boxW + 40 : boxX;
    const sideTop = wide ? Math.max(chipTop, y.hbm + ROW - side.length * (SIDE_H + SIDE_GAP) + SIDE_GAP)
                         : y.hbm + ROW + 28;
    const wires = el("g", { class: "df-wires", "aria-hidden": "true" }, svg);
    side.forEach((sd, i) => {
      const sy = sideTop + i * (SIDE_H + SIDE_GAP);
      if (wide) {
        const fromY = y.hbm + ROW / 2, toY = sy + SIDE_H / 2, bend = boxX + boxW + 20;
        const from = sd.key === "host" ? null : `M${boxX + boxW},${fromY} H${bend} V${toY} H${sideX}`;
        if (from) el("path", { d: from, class: "df-wire" }, wires);
        else el("path", { d: `M${sideX + 24},${sy - SIDE_GAP - 1} V${sy}`, class: "df-wire" }, wires);
      } else {
        const busX = boxX + 20;
        if (sd.key === "host") el("path", { d: `M${sideX + 40},${sy - SIDE_GAP - 1} V${sy}`, class: "df-wire" }, wires);
        else el("path", { d: `M${busX},${y.hbm + ROW} V${sy + SIDE_H / 2} H${sideX}`, class: "df-wire" }, wires);
      }
      focusables.push(sideBox(sd, sideX + (sd.key === "host" ? 16 : 0), sy, sideW - (sd.key === "host" ? 16 : 0)));
    });
    const height = Math.max(y.hbm + ROW, sideTop + side.length * (SIDE_H + SIDE_GAP)) + 6;
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    el("g", { class: "df-dots", "aria-hidden": "true" }, svg);
    drawLegend();
    makeDots();
    if (kindLit) lightKind(kindLit);
    select(active && lookup(active) ? active : data.bottleneck);
    updatePause();
  }

  function node(key, label, x, y, w, h) {
    const g = el("g", { class: "df-node", tabindex: 0, role: "button", "data-key": key, "aria-label": label }, svg);
    el("rect", { x, y, width: w, height: h, rx: 7, class: "df-box" }, g);
    g.addEventListener("mouseenter", () => select(key));
    g.addEventListener("focus", () => select(key));
    g.addEventListener("click", () => select(key));
    g.addEventListener("keydown", onKey);
    return g;
  }

  function levelBox(lv, x, y, w) {
    const g = node(lv.key, `${lv.name}, ${lv.where}: ${lv.short}. This step ${lv.label}, modelled.`, x, y, w, ROW);
    text(g, x + 10, y + 19, w > 320 ? `${lv.name} · ${lv.where}` : lv.name, "df-name", w - 20);
    text(g, x + 10, y + 37, lv.short, "df-sub", w - 20);
    const barX = x + 10, barW = w - 20, barY = y + 46;
    el("rect", { x: barX, y: barY, width: barW, height: 12, rx: 3, class: "df-track" }, g);
    let at = barX;
    for (const kind of data.kinds || []) {
      const t = lv.times[kind.key];
      if (!(t > 0) || !(lv.time_s > 0)) continue;
      const segW = barW * lv.share * (t / lv.time_s);
      const r = el("rect", { x: at, y: barY, width: Math.max(segW, 0.5), height: 12, fill: kind.color,
                             class: "df-seg", "data-kind": kind.key }, g);
      el("title", {}, r).textContent = `${lv.name}, ${kind.name}: ${lv.kind_text[kind.key]} (modelled)`;
      at += segW;
    }
    text(g, x + 10, y + 75, `${lv.label}${lv.key === data.pace ? " · sets the pace" : ""}`, "df-val", w - 20);
    return g;
  }

  function sideBox(sd, x, y, w) {
    const g = node(sd.key, `${sd.name}: ${sd.short}. This ${sd.step_text}, modelled.`, x, y, w, SIDE_H);
    g.classList.add("df-side");
    text(g, x + 10, y + 18, sd.name, "df-name", w - 20);
    text(g, x + 10, y + 35, sd.short, "df-sub", w - 20);
    text(g, x + 10, y + 52, sd.step_text, "df-val", w - 20);
    return g;
  }

  function drawLegend() {
    legend.replaceChildren();
    for (const kind of data.kinds || []) {
      const b = Object.assign(html("button", "df-kind", legend), { type: "button" });
      b.dataset.key = kind.key;
      const sw = html("span", "df-swatch", b);
      sw.style.background = kind.color;
      html("span", "", b, `${kind.name} ${kind.bytes_text}`);
      const on = () => { lightKind(kind.key); show(kind.readout); };
      b.addEventListener("mouseenter", on);
      b.addEventListener("focus", on);
      b.addEventListener("click", on);
      b.addEventListener("mouseleave", () => lightKind(null));
      b.addEventListener("blur", () => lightKind(null));
    }
  }

  function onKey(e) {
    const i = focusables.indexOf(e.currentTarget);
    let j = null;
    if (e.key === "ArrowDown" || e.key === "ArrowRight") j = Math.min(i + 1, focusables.length - 1);
    if (e.key === "ArrowUp" || e.key === "ArrowLeft") j = Math.max(i - 1, 0);
    if (e.key === "Home") j = 0;
    if (e.key === "End") j = focusables.length - 1;
    if (e.key === "Enter" || e.key === " ") { select(e.currentTarget.dataset.key); e.preventDefault(); }
    if (j !== null) { focusables[j].focus(); e.preventDefault(); }
  }

  // ---- motion --------------------------------------------------------------------------------
  function animating() { return playing && !reduce.matches && onScreen && !document.hidden; }

  function makeDots() {
    const layer = svg.querySelector(".df-dots");
    dots = [];
    const kinds = data.kinds || [];
    const top = (data.levels || []).find((l) => l.key === "registers");
    const byKind = top ? top.bytes : {};
    const total = Object.values(byKind).reduce((a, b) => a + b, 0);
    if (!layer || reduce.matches || !total) return;
    for (const kind of kinds) {
      const p = paths[kind.key];
      if (!p || !(byKind[kind.key] > 0)) continue;
      const n = Math.max(1, Math.round(DOTS * byKind[kind.key] / total));
      for (let i = 0; i < n; i++) {
        const c = el("circle", { r: 3.4, cx: p.x, cy: p.segs[0].y0, fill: p.color, class: "df-dot",
                                 "data-kind": kind.key }, layer);
        dots.push({ c, p, t: (i / n) * p.total });
      }
    }
    place(0);
  }

  function place(dt) {
    for (const d of dots) {
      d.t = (d.t + dt) % d.p.total;
      let t = d.t;
      for (const s of d.p.segs) {
        if (t <= s.dur) { d.c.setAttribute("cy", (s.y0 + (s.y1 - s.y0) * (t / s.dur)).toFixed(1)); break; }
        t -= s.dur;
      }
    }
  }

  function loop(ts) {
    frame = 0;
    if (!animating()) return;
    const dt = last ? Math.min((ts - last) / 1000, 0.1) : 0;
    last = ts;
    place(dt);
    frame = requestAnimationFrame(loop);
  }

  function updatePause() {
    const layer = svg.querySelector(".df-dots");
    if (layer) layer.style.display = reduce.matches ? "none" : "";
    if (reduce.matches) {
      pause.hidden = true;
      hint.textContent = "Reduced motion: the arrows, bars and numbers show the flow without animation. " +
        "Hover, tap or Tab to a level for its numbers.";
    } else {
      hint.textContent = HINT;
      pause.hidden = false;
      pause.textContent = playing ? "Pause animation" : "Play animation";
      pause.setAttribute("aria-pressed", String(!playing));
    }
    if (animating() && !frame) { last = 0; frame = requestAnimationFrame(loop); }
  }

  pause.addEventListener("click", () => { playing = !playing; updatePause(); });
  reduce.addEventListener("change", draw);
  document.addEventListener("visibilitychange", updatePause);
  const seen = new IntersectionObserver((entries) => {
    onScreen = entries.some((e) => e.isIntersecting);
    updatePause();
  });
  seen.observe(root);
  const resize = new ResizeObserver(() => {
    if (Math.abs((root.clientWidth || 0) - width) > 2) draw();
  });
  resize.observe(root);
  model.on("data", draw);
  model.on("remove", () => {
    if (frame) cancelAnimationFrame(frame);
    seen.disconnect();
    resize.disconnect();
    reduce.removeEventListener("change", draw);
    document.removeEventListener("visibilitychange", updatePause);
  });
  draw();
}
