// Pan-and-zoom viewer for a Graphviz SVG laid out on the server (explorer/viewer.py).
//
// Zoom changes the SVG's viewBox, so text is drawn again at every scale and stays sharp.
// Wheel: zoom about the pointer; drag: pan; the buttons: zoom in, out, fit. Hovering a node or
// edge shows its Graphviz tooltip in a box; clicking a node whose id matches data.clickable
// sends that id to Python (the "clicked" trigger). The view box is kept per viewer on
// window.__peViews and restored when the same layout comes back on a rerun; data.focus zooms
// onto one node (a search hit); a minimap in the corner shows where the view is while zoomed in
// (click it to go there); viewers sharing data.sync pan and zoom together. Keyboard: Tab
// reaches the buttons, the drawing and each clickable node; on the drawing the arrows pan,
// + and - zoom, 0 fits; on a node Enter or Space opens it. No network access, no dependency.

const XLINK = "http://www.w3.org/1999/xlink";

function views() {
  if (!window.__peViews) window.__peViews = new Map();
  return window.__peViews;
}

function parseBox(svg) {
  const vb = (svg.getAttribute("viewBox") || "").trim().split(/[\s,]+/).map(Number);
  if (vb.length === 4 && vb.every(Number.isFinite) && vb[2] > 0 && vb[3] > 0) return vb;
  const w = parseFloat(svg.getAttribute("width")) || 100;
  const h = parseFloat(svg.getAttribute("height")) || 100;
  return [0, 0, w, h];
}

// The title (Graphviz's graph label: <text> right under the top group) and the node named
// "legend" (partitioner.draw.dag), copied into a header above the stage and hidden below.
function pinHeader(root, stage, svg) {
  const top = svg.querySelector("g.graph");
  if (!top) return null;
  const title = Array.from(top.children).filter((e) => e.tagName.toLowerCase() === "text");
  const legend = Array.from(top.querySelectorAll("g.node")).find((g) => {
    const t = g.querySelector("title");
    return t && t.textContent.trim() === "legend";
  });
  if (!title.length && !legend) return null;
  const head = document.createElement("div");
  head.className = "pe-head";
  if (title.length) {
    const text = document.createElement("div");
    text.className = "pe-title";
    text.textContent = title.map((t) => t.textContent).join(" ");
    head.appendChild(text);
    title.forEach((t) => t.setAttribute("visibility", "hidden"));
  }
  if (legend) {
    let b = null;
    try {
      b = legend.getBBox();
    } catch (e) {
      b = null;
    }
    if (b && b.width > 0 && b.height > 0) {
      const NS = "http://www.w3.org/2000/svg";
      const box = document.createElementNS(NS, "svg");
      box.setAttribute("viewBox", [b.x - 1, b.y - 1, b.width + 2, b.height + 2].join(" "));
      box.setAttribute("width", String(Math.round(b.width + 2)));
      box.setAttribute("height", String(Math.round(b.height + 2)));
      box.setAttribute("class", "pe-legend");
      box.setAttribute("role", "img");
      box.setAttribute("aria-label", "Devices: " + legend.textContent.replace(/\s+/g, " ").trim().slice(0, 300));
      const copy = legend.cloneNode(true);
      copy.removeAttribute("id");
      copy.querySelectorAll("title").forEach((t) => t.remove());
      box.appendChild(copy);
      head.appendChild(box);
      legend.setAttribute("visibility", "hidden");
    }
  }
  root.insertBefore(head, stage);
  // Where the drawing starts below them (the view box's units): the opening view begins there,
  // not at the blank the hidden title and legend leave.
  let y = Infinity;
  top.querySelectorAll("g.node, g.edge, g.cluster").forEach((g) => {
    if (g === legend) return;
    try {
      y = Math.min(y, g.getBBox().y);
    } catch (e) {
      /* not drawn */
    }
  });
  const m = top.transform && top.transform.baseVal.consolidate();
  return Number.isFinite(y) ? y * (m ? m.matrix.d : 1) + (m ? m.matrix.f : 0) : null;
}

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  if (!data || !data.svg) return;
  const root = document.createElement("div");
  root.className = "pe-viewer";
  root.innerHTML =
    '<div class="pe-toolbar">' +
    '<button type="button" data-act="in" title="Zoom in" aria-label="Zoom in">+</button>' +
    '<button type="button" data-act="out" title="Zoom out" aria-label="Zoom out">&minus;</button>' +
    '<button type="button" data-act="fit" title="Fit the whole graph" aria-label="Fit the whole graph">Fit</button>' +
    '<span class="pe-hint"></span></div>' +
    '<div class="pe-stage" tabindex="0" role="group" ' +
    'aria-label="Graph: arrow keys pan, plus and minus zoom, 0 fits; Tab moves to the nodes you can open">' +
    '</div><div class="pe-mini" title="Overview: click to go there" aria-hidden="true">' +
    '<div class="pe-mini-view"></div></div><div class="pe-tip" role="tooltip"></div>';
  // Replace an earlier render's viewer, keeping the <style> Streamlit put beside it.
  Array.from(parentElement.children).forEach((old) => {
    if (old.classList && old.classList.contains("pe-viewer")) old.remove();
  });
  parentElement.appendChild(root);
  const stage = root.querySelector(".pe-stage");
  const tip = root.querySelector(".pe-tip");
  root.querySelector(".pe-hint").textContent = data.hint;
  stage.innerHTML = data.svg;
  const svg = stage.querySelector("svg");
  if (!svg) return;
  const full = parseBox(svg);
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
  svg.style.width = "100%";
  svg.style.height = "100%";
  svg.style.display = "block";

  // Height: the natural height at this width, between a floor and data.height. data.span (SVG
  // units, [width, height]) is the size viewers side by side share, so all draw at one scale.
  const width = root.clientWidth || 800;
  const span = data.span ? [Math.max(full[2], data.span[0]), Math.max(full[3], data.span[1])] : null;
  const natural = span ? (span[1] * width) / span[0] : (full[3] * width) / full[2];
  const maxHeight = data.height || 560;
  stage.style.height = Math.round(Math.max(160, Math.min(maxHeight, natural))) + "px";

  // The graph's title and device legend, when the whole graph does not open in view (a wide
  // graph opens at its readable scale): drawn in a header above the stage at one unit a pixel
  // and hidden in the drawing, so they show without Fit (issue 56: cut off at 1500 px).
  const widthAtOpen = root.clientWidth || width;
  const wholeFits = Math.min(widthAtOpen / full[2], (parseFloat(stage.style.height) || maxHeight) / full[3]) >= 0.8;
  const drawingTop = !data.span && !wholeFits ? pinHeader(root, stage, svg) : null;

  // Tooltips: Graphviz writes them as xlink:title on an <a>; keep them as data and drop the
  // <title> elements so the browser's own tooltip does not show over ours.
  svg.querySelectorAll("title").forEach((t) => t.remove());
  svg.querySelectorAll("a").forEach((a) => {
    const text = a.getAttributeNS(XLINK, "title") || a.getAttribute("xlink:title");
    const owner = a.closest("g.node, g.edge, g.cluster");
    if (text && owner) owner.setAttribute("data-tip", text);
    a.removeAttributeNS(XLINK, "title");
    a.removeAttribute("xlink:title");
  });

  if (data.clickable) {
    const clickable = new RegExp(data.clickable);
    svg.querySelectorAll("g.node").forEach((g) => {
      if (!clickable.test(g.id)) return;
      g.classList.add("pe-click");
      g.setAttribute("tabindex", "0");  // reachable with Tab, opened with Enter or Space
      g.setAttribute("role", "button");
      const label = (g.getAttribute("data-tip") || g.textContent || g.id).replace(/\s+/g, " ").trim();
      g.setAttribute("aria-label", "Open " + label.slice(0, 200));
    });
  }

  // Minimap: the whole drawing small in a corner, the part in view outlined; shown while zoomed
  // in. A copy without ids or tooltips, so lookups and hovers see the main drawing only.
  const mini = root.querySelector(".pe-mini");
  const miniView = root.querySelector(".pe-mini-view");
  const copy = svg.cloneNode(true);
  copy.querySelectorAll("[id]").forEach((e) => e.removeAttribute("id"));
  copy.querySelectorAll("[data-tip]").forEach((e) => e.removeAttribute("data-tip"));
  copy.setAttribute("viewBox", full.join(" "));
  copy.style.width = "100%";
  copy.style.height = "auto";
  mini.insertBefore(copy, miniView);
  const miniHeight = Math.min(140, (160 * full[3]) / full[2]);
  mini.style.height = miniHeight + "px";
  copy.style.height = miniHeight + "px";
  const showMini = (b) => {
    const zoomed = b[2] < full[2] * 0.98 || b[3] < full[3] * 0.98;
    mini.style.display = zoomed ? "block" : "none";
    if (!zoomed) return;
    const k = Math.min(160 / full[2], miniHeight / full[3]);
    const ox = (160 - full[2] * k) / 2;
    const oy = (miniHeight - full[3] * k) / 2;
    const left = Math.max(0, ox + (b[0] - full[0]) * k);
    const top = Math.max(0, oy + (b[1] - full[1]) * k);
    miniView.style.left = left + "px";
    miniView.style.top = top + "px";
    miniView.style.width = Math.max(4, Math.min(160 - left, b[2] * k)) + "px";
    miniView.style.height = Math.max(4, Math.min(miniHeight - top, b[3] * k)) + "px";
  };

  const id = data.view || "viewer";
  const layout = full.join(" ") + "|" + svg.querySelectorAll("g.node").length;
  const saved = views().get(id);
  // First view: the whole graph when it fits at 0.8 SVG units a pixel or more (10 pt labels at
  // 8 px and up); otherwise the top of it at the width's fit, never below that scale, so a large
  // graph opens readable and Fit shows all of it. With data.span, the shared scale of a pair.
  const stageW = stage.clientWidth || width;
  const stageH = stage.clientHeight || maxHeight;
  const READABLE = 0.8;
  const s = span ? Math.min(stageW / span[0], stageH / span[1]) : Math.max(READABLE, Math.min(1.5, stageW / full[2]));
  const fits = !data.span && Math.min(stageW / full[2], stageH / full[3]) >= READABLE;
  const opening = fits ? full.slice()
    : [
        full[0] + (data.span ? 0 : Math.max(0, (full[2] - stageW / s) / 2)),
        drawingTop === null ? full[1] : Math.max(full[1], drawingTop - 8),
        stageW / s,
        stageH / s,
      ];
  let box = saved && saved.layout === layout ? saved.box.slice() : opening;
  // The focus this view has been centred on: kept with the view box, so a rerun with the same
  // layout and focus keeps the user's pan, and a new layout (the box back at its opening) or a
  // focus that could not be measured yet (the stage not laid out) is centred on again.
  let focused = saved && saved.layout === layout ? saved.focus : null;
  const apply = (echo = true) => {
    svg.setAttribute("viewBox", box.map((x) => x.toFixed(2)).join(" "));
    views().set(id, { layout, box: box.slice(), focus: focused });
    showMini(box);
    // Viewers of one data.sync group (side by side, at one scale) pan and zoom together.
    if (echo && data.sync) {
      window.dispatchEvent(new CustomEvent("pe-sync", { detail: { group: data.sync, from: id, box: box.slice() } }));
    }
  };
  const onSync = (e) => {
    const d = e.detail || {};
    if (!data.sync || d.group !== data.sync || d.from === id || !Array.isArray(d.box)) return;
    box = d.box.slice();
    apply(false);
  };
  window.addEventListener("pe-sync", onSync);
  const zoomAt = (factor, cx, cy) => {
    const w = Math.min(full[2] * 4, Math.max(full[2] / 400, box[2] * factor));
    const f = w / box[2];
    box = [cx - (cx - box[0]) * f, cy - (cy - box[1]) * f, box[2] * f, box[3] * f];
    apply();
  };
  const toSvg = (clientX, clientY) => {
    const m = svg.getScreenCTM();
    if (!m) return { x: box[0] + box[2] / 2, y: box[1] + box[3] / 2 };
    const p = new DOMPoint(clientX, clientY).matrixTransform(m.inverse());
    return { x: p.x, y: p.y };
  };
  const centre = () => ({ x: box[0] + box[2] / 2, y: box[1] + box[3] / 2 });

  // A new search hit (or a step's node): centre it at about one SVG unit a pixel, once per hit
  // (measured on screen, so the view box is set first). Until the stage is laid out it measures
  // nothing; then it tries again on the next frames.
  const centreOnFocus = () => {
    apply(false);
    const target = stage.querySelector(`[id="${CSS.escape(data.focus)}"]`);
    const m = svg.getScreenCTM();
    const r = target ? target.getBoundingClientRect() : null;
    if (!(r && m && r.width > 0 && r.height > 0)) return false;
    const p = new DOMPoint(r.x + r.width / 2, r.y + r.height / 2).matrixTransform(m.inverse());
    const w = Math.min(full[2] * 1.2, Math.max((r.width / m.a) * 4, stageW));
    const h = (w * stageH) / stageW;
    box = [p.x - w / 2, p.y - h / 2, w, h];
    focused = data.focus;
    return true;
  };
  if (data.focus && focused !== data.focus && !centreOnFocus()) {
    let tries = 0;
    const retry = () => {
      if (!root.isConnected || focused === data.focus || ++tries > 30) return;
      if (centreOnFocus()) apply();
      else requestAnimationFrame(retry);
    };
    requestAnimationFrame(retry);
  }
  apply();

  const onWheel = (e) => {
    e.preventDefault();
    const p = toSvg(e.clientX, e.clientY);
    zoomAt(Math.exp(Math.max(-200, Math.min(200, e.deltaY)) * 0.002), p.x, p.y);
  };
  let drag = null;
  const onDown = (e) => {
    if (e.button !== 0) return;
    const node = e.target.closest ? e.target.closest("g.node") : null;  // before capture retargets
    drag = { x: e.clientX, y: e.clientY, box: box.slice(), moved: false, node };
    stage.setPointerCapture && stage.setPointerCapture(e.pointerId);
  };
  const onMove = (e) => {
    if (drag) {
      const dx = e.clientX - drag.x;
      const dy = e.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      if (drag.moved) {
        const r = stage.getBoundingClientRect();
        const scale = Math.min(r.width / drag.box[2], r.height / drag.box[3]) || 1;
        box = [drag.box[0] - dx / scale, drag.box[1] - dy / scale, drag.box[2], drag.box[3]];
        apply();
        tip.style.display = "none";
        return;
      }
    }
    const owner = e.target.closest && e.target.closest("[data-tip]");
    if (!owner) {
      tip.style.display = "none";
      return;
    }
    tip.textContent = owner.getAttribute("data-tip");
    tip.style.display = "block";
    const r = root.getBoundingClientRect();
    let left = e.clientX - r.left + 14;
    if (left + tip.offsetWidth > r.width) left = Math.max(0, e.clientX - r.left - tip.offsetWidth - 14);
    tip.style.left = left + "px";
    tip.style.top = e.clientY - r.top + 14 + "px";
  };
  const onUp = (e) => {
    const was = drag;
    drag = null;
    if (!was || was.moved || !data.clickable) return;
    const node = was.node;
    if (node && node.classList.contains("pe-click")) setTriggerValue("clicked", node.id);
  };
  const onLeave = () => {
    tip.style.display = "none";
  };
  const onButton = (e) => {
    const act = e.target.getAttribute && e.target.getAttribute("data-act");
    const c = centre();
    if (act === "in") zoomAt(1 / 1.4, c.x, c.y);
    else if (act === "out") zoomAt(1.4, c.x, c.y);
    else if (act === "fit") {
      box = full.slice();
      apply();
    }
  };
  const onMini = (e) => {
    const r = mini.getBoundingClientRect();
    const k = Math.min(160 / full[2], miniHeight / full[3]);
    const x = full[0] + (e.clientX - r.left - (160 - full[2] * k) / 2) / k;
    const y = full[1] + (e.clientY - r.top - (miniHeight - full[3] * k) / 2) / k;
    box = [x - box[2] / 2, y - box[3] / 2, box[2], box[3]];
    apply();
  };
  const onKey = (e) => {
    const node = e.target.closest ? e.target.closest("g.pe-click") : null;
    if (node && (e.key === "Enter" || e.key === " ")) {
      e.preventDefault();
      setTriggerValue("clicked", node.id);
      return;
    }
    const step = 0.1;  // of the view, per arrow press
    const moves = { ArrowLeft: [-step, 0], ArrowRight: [step, 0], ArrowUp: [0, -step], ArrowDown: [0, step] };
    const c = centre();
    if (moves[e.key]) {
      box = [box[0] + moves[e.key][0] * box[2], box[1] + moves[e.key][1] * box[3], box[2], box[3]];
      apply();
    } else if (e.key === "+" || e.key === "=") zoomAt(1 / 1.4, c.x, c.y);
    else if (e.key === "-" || e.key === "_") zoomAt(1.4, c.x, c.y);
    else if (e.key === "0") {
      box = full.slice();
      apply();
    } else return;
    e.preventDefault();
  };
  stage.addEventListener("keydown", onKey);
  mini.addEventListener("click", onMini);
  stage.addEventListener("wheel", onWheel, { passive: false });
  stage.addEventListener("pointerdown", onDown);
  stage.addEventListener("pointermove", onMove);
  stage.addEventListener("pointerup", onUp);
  stage.addEventListener("pointerleave", onLeave);
  root.querySelector(".pe-toolbar").addEventListener("click", onButton);
  return () => {
    window.removeEventListener("pe-sync", onSync);
    root.remove();
    stage.removeEventListener("wheel", onWheel);
    stage.removeEventListener("pointerdown", onDown);
    stage.removeEventListener("pointermove", onMove);
    stage.removeEventListener("pointerup", onUp);
    stage.removeEventListener("pointerleave", onLeave);
    stage.removeEventListener("keydown", onKey);
  };
}
