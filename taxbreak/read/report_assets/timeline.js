/* taxbreak report: the interactive launch timeline of one trace (hand-written, no library, nothing fetched).
   Reads the JSON in <script type="application/json" id="tl-data"> and draws it on a canvas:
   wheel = zoom around the pointer, drag = pan, double-click = whole step, the step menu picks a step;
   hovering a box shows its details (ΔFT/ΔCT/ΔKT, t_dispatch, queueing); launch -> kernel flows are drawn when
   few enough kernels are in view, and always for the hovered kernel. Idle gaps are coloured by cause.
   Part of taxbreak (MIT licence). */
(function () {
  "use strict";
  var el = document.getElementById("tl-data");
  var root = document.getElementById("timeline");
  if (!el || !root) { return; }
  var D = JSON.parse(el.textContent);
  // lanes tall enough to see a kernel and point at it (22 px read as thin, issue 29); the canvas says its lane
  // height (data-lane-h) for whoever drives it
  var LANE_H = 34, LABEL_W = 170, AXIS_H = 26, FLOW_MAX = 1500;
  var CAUSE = D.cause_colors;
  var canvas = document.createElement("canvas");
  var tip = document.createElement("div");
  tip.className = "tl-tip";
  tip.style.display = "none";
  var bar = document.createElement("div");
  bar.className = "tl-bar";
  var sel = document.createElement("select");
  D.steps.forEach(function (s, i) {
    var o = document.createElement("option");
    o.value = String(i);
    o.textContent = s.label;
    sel.appendChild(o);
  });
  var info = document.createElement("span");
  info.className = "note";
  bar.appendChild(document.createTextNode("window: "));
  bar.appendChild(sel);
  bar.appendChild(info);
  root.appendChild(bar);
  root.appendChild(canvas);
  root.appendChild(tip);
  var nLanes = D.lanes.length;
  var H = nLanes * LANE_H + AXIS_H;
  var W = 0, v0 = 0, v1 = 1, hover = null, drag = null;
  var ctx = canvas.getContext("2d");

  function fmt(ns) {
    if (ns === null || ns === undefined) { return "n/a"; }
    var a = Math.abs(ns);
    if (a >= 1e9) { return (ns / 1e9).toPrecision(3) + " s"; }
    if (a >= 1e6) { return (ns / 1e6).toPrecision(3) + " ms"; }
    if (a >= 1e3) { return (ns / 1e3).toPrecision(3) + " µs"; }
    return Math.round(ns) + " ns";
  }
  function x(t) { return LABEL_W + (t - v0) / (v1 - v0) * (W - LABEL_W - 8); }
  function tAt(px) { return v0 + (px - LABEL_W) / (W - LABEL_W - 8) * (v1 - v0); }
  function setWindow(i) {
    var s = D.steps[i];
    var pad = (s.end - s.start) * 0.01 + 1;
    v0 = s.start - pad; v1 = s.end + pad;
    draw();
  }
  function resize() {
    W = Math.max(root.clientWidth, 400);
    var r = window.devicePixelRatio || 1;
    canvas.width = W * r; canvas.height = H * r;
    canvas.style.width = W + "px"; canvas.style.height = H + "px";
    canvas.setAttribute("data-lane-h", LANE_H);
    ctx.setTransform(r, 0, 0, r, 0, 0);
    draw();
  }
  function box(lane, s, d, color) {
    var a = x(s), b = x(s + d);
    if (b < LABEL_W || a > W) { return false; }
    a = Math.max(a, LABEL_W);
    ctx.fillStyle = color;
    ctx.fillRect(a, lane * LANE_H + 3, Math.max(b - a, 1), LANE_H - 6);
    return true;
  }
  function draw() {
    ctx.clearRect(0, 0, W, H);
    ctx.font = "12px system-ui, sans-serif";
    for (var l = 0; l < nLanes; l++) {
      ctx.fillStyle = l % 2 ? "#fafafa" : "#fff";
      ctx.fillRect(0, l * LANE_H, W, LANE_H);
      ctx.fillStyle = "#333";
      ctx.textAlign = "right";
      ctx.fillText(D.lanes[l], LABEL_W - 6, l * LANE_H + LANE_H / 2 + 4);
    }
    var i, g, k, shown = 0;
    for (i = 0; i < D.gaps.length; i++) {
      g = D.gaps[i];
      box(g[0], g[1], g[2], CAUSE[g[3]] || "#ccc");
    }
    for (i = 0; i < D.ops.length; i++) { box(0, D.ops[i][0], D.ops[i][1], "#9c755f"); }
    var visible = [];
    for (i = 0; i < D.k.length; i++) {
      k = D.k[i];
      if (k[5] !== null) { box(1, k[5], k[6], "#e15759"); }
      if (box(k[0], k[1], k[2], D.colors[k[4] % D.colors.length])) { shown++; visible.push(k); }
    }
    ctx.strokeStyle = "rgba(80,80,80,0.35)";
    ctx.lineWidth = 1;
    if (visible.length <= FLOW_MAX) {
      for (i = 0; i < visible.length; i++) { flow(visible[i]); }
    }
    if (hover && hover.k) { ctx.strokeStyle = "#d00"; ctx.lineWidth = 2; flow(hover.k); }
    ctx.fillStyle = "#555";
    ctx.textAlign = "center";
    for (var j = 0; j <= 5; j++) {
      var t = v0 + (v1 - v0) * j / 5;
      ctx.textAlign = j === 0 ? "left" : j === 5 ? "right" : "center";
      var rel = t - D.steps[+sel.value].start;
      ctx.fillText((rel < 0 ? "−" : "+") + fmt(Math.abs(rel)), j === 0 ? LABEL_W : x(t), nLanes * LANE_H + 16);
    }
    info.textContent = "  " + shown + " of " + D.k.length + " kernels in view, " + fmt(v1 - v0) +
      " shown; flows " + (visible.length <= FLOW_MAX ? "drawn" : "on hover (zoom in for all)");
    canvas.setAttribute("data-kernels-drawn", String(shown));
  }
  function flow(k) {
    if (k[5] === null) { return; }
    ctx.beginPath();
    ctx.moveTo(x(k[5]), 1 * LANE_H + LANE_H - 3);
    ctx.lineTo(x(k[1]), k[0] * LANE_H + 3);
    ctx.stroke();
  }
  function find(px, py) {
    var lane = Math.floor(py / LANE_H), t = tAt(px), slack = (v1 - v0) / W * 2, i, k, g;
    if (px < LABEL_W || lane >= nLanes) { return null; }
    if (lane === 0) {
      for (i = 0; i < D.ops.length; i++) {
        if (t >= D.ops[i][0] - slack && t <= D.ops[i][0] + D.ops[i][1] + slack) { return {op: D.ops[i]}; }
      }
      return null;
    }
    for (i = 0; i < D.k.length; i++) {
      k = D.k[i];
      if (lane === 1 && k[5] !== null && t >= k[5] - slack && t <= k[5] + k[6] + slack) { return {k: k, launch: true}; }
      if (lane === k[0] && t >= k[1] - slack && t <= k[1] + k[2] + slack) { return {k: k}; }
    }
    for (i = 0; i < D.gaps.length; i++) {
      g = D.gaps[i];
      if (lane === g[0] && t >= g[1] && t <= g[1] + g[2]) { return {gap: g}; }
    }
    return null;
  }
  function describe(h) {
    if (h.op) { return "<b>" + esc(D.names[h.op[2]]) + "</b><br>framework op, " + fmt(h.op[1]); }
    if (h.gap) { return "<b>GPU idle: " + esc(h.gap[3]) + "</b><br>" + fmt(h.gap[2]); }
    var k = h.k;
    return "<b>" + esc(D.names[k[3]]) + "</b>" + (h.launch ? " (its launch call)" : "") +
      "<br>kernel " + fmt(k[2]) + " at +" + fmt(k[1] - D.steps[+sel.value].start) +
      "<br>launch call " + (k[5] === null ? "none (orphan)" : fmt(k[6])) +
      "<br>queueing (launch call start → kernel start, t_launch_obs) " + fmt(k[10]) +
      "<br>t_dispatch " + fmt(k[11]) + "<br>ΔFT " + fmt(k[7]) + " · ΔCT " + fmt(k[8]) + " · ΔKT " + fmt(k[9]) +
      (k[12] ? "<br>op " + esc(D.names[k[12]]) : "");
  }
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  canvas.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = canvas.getBoundingClientRect(), t = tAt(e.clientX - r.left), f = e.deltaY > 0 ? 1.25 : 0.8;
    v0 = t - (t - v0) * f; v1 = t + (v1 - t) * f;
    if (v1 - v0 < 10) { v1 = v0 + 10; }
    draw();
  }, {passive: false});
  canvas.addEventListener("mousedown", function (e) { drag = {x: e.clientX, v0: v0, v1: v1}; });
  window.addEventListener("mouseup", function () { drag = null; });
  canvas.addEventListener("mousemove", function (e) {
    var r = canvas.getBoundingClientRect();
    if (drag) {
      var dt = (e.clientX - drag.x) / (W - LABEL_W - 8) * (drag.v1 - drag.v0);
      v0 = drag.v0 - dt; v1 = drag.v1 - dt;
      draw();
      return;
    }
    hover = find(e.clientX - r.left, e.clientY - r.top);
    if (hover) {
      tip.innerHTML = describe(hover);
      tip.style.display = "block";
      tip.style.left = Math.min(e.clientX - r.left + 14, W - 380) + "px";
      tip.style.top = (e.clientY - r.top + 14) + "px";
    } else {
      tip.style.display = "none";
    }
    draw();
  });
  canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; hover = null; draw(); });
  canvas.addEventListener("dblclick", function () { setWindow(+sel.value); });
  sel.addEventListener("change", function () { setWindow(+sel.value); });
  window.addEventListener("resize", resize);
  sel.value = String(D.initial_step);
  var s0 = D.steps[D.initial_step];
  v0 = s0.start; v1 = s0.end;
  resize();
  setWindow(D.initial_step);
})();
