// Drawing helpers for the attention viewer: a viridis-like colour scale, labelled SVG heatmaps with a
// legend, and bertviz-style alignment lines. No dependencies; every string from the API goes through
// textContent, never innerHTML.
"use strict";

(function () {
  const NS = "http://www.w3.org/2000/svg";
  // viridis sampled at 9 evenly spaced points (matplotlib's table), interpolated linearly in RGB
  const VIRIDIS = [
    [68, 1, 84], [71, 45, 123], [59, 82, 139], [44, 114, 142], [33, 145, 140],
    [40, 174, 128], [94, 201, 98], [173, 220, 48], [253, 231, 37],
  ];
  const CHAR_PX = 7.2; // width of one label character at 12px, for layout before the text is measured

  function color(t) {
    const x = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
    const f = x - i;
    const rgb = VIRIDIS[i].map((c, k) => Math.round(c + f * (VIRIDIS[i + 1][k] - c)));
    return `rgb(${rgb[0]}, ${rgb[1]}, ${rgb[2]})`;
  }

  function el(tag, attrs, parent) {
    const node = document.createElementNS(NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (parent) parent.appendChild(node);
    return node;
  }

  function clear(svg) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
  }

  function title(node, text) {
    el("title", {}, node).textContent = text;
  }

  // A subword as SVG text: the "▁" word-start marker is kept, drawn lighter; <s> and </s> in italics.
  function tokenText(parent, piece, attrs) {
    const text = el("text", { ...attrs, "data-token": piece }, parent);
    if (/^<\/?[a-z]+>$/.test(piece)) text.setAttribute("class", `${attrs.class || ""} special`.trim());
    if (piece.startsWith("\u2581")) {
      el("tspan", { class: "ws" }, text).textContent = "\u2581";
      el("tspan", {}, text).textContent = piece.slice(1);
    } else {
      text.textContent = piece;
    }
    return text;
  }

  function domainOf(matrix) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const row of matrix) for (const v of row) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    return Number.isFinite(lo) ? [lo, hi] : [0, 1];
  }

  function scaler(domain) {
    const [lo, hi] = domain;
    return (v) => (hi > lo ? (v - lo) / (hi - lo) : 1);
  }

  function longest(labels) {
    return labels.reduce((m, s) => Math.max(m, Array.from(s).length), 1);
  }

  // matrix: rows x cols numbers; rowTokens / colTokens: labels. opts.domain: [lo, hi] of the colour scale;
  // opts.describe(i, j, v): the tooltip; opts.onHover(text): called with that text on hover / focus.
  function drawHeatmap(svg, matrix, rowTokens, colTokens, opts) {
    clear(svg);
    const o = opts || {};
    const rows = matrix.length;
    const cols = rows ? matrix[0].length : 0;
    const cell = Math.max(14, Math.min(36, Math.floor(640 / Math.max(rows, cols, 1))));
    const left = Math.ceil(longest(rowTokens) * CHAR_PX) + 12;
    const top = Math.ceil(longest(colTokens) * CHAR_PX * 0.87) + 16;
    const width = left + cols * cell + 8;
    const height = top + rows * cell + 8;
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.dataset.rows = rows;
    svg.dataset.cols = cols;
    const domain = o.domain || domainOf(matrix);
    const scale = scaler(domain);
    const describe = o.describe || ((i, j, v) => `${rowTokens[i]} → ${colTokens[j]}: ${v.toFixed(3)}`);
    rowTokens.forEach((tok, i) => {
      tokenText(svg, tok, { class: "row-label", x: left - 6, y: top + i * cell + cell / 2 + 4, "text-anchor": "end" });
    });
    colTokens.forEach((tok, j) => {
      const x = left + j * cell + cell / 2 + 4;
      const y = top - 6;
      tokenText(svg, tok, { class: "col-label", x, y, "text-anchor": "start", transform: `rotate(-60 ${x} ${y})` });
    });
    const cells = el("g", { class: "cells" }, svg);
    matrix.forEach((row, i) => {
      row.forEach((v, j) => {
        const rect = el("rect", {
          class: "cell",
          x: left + j * cell,
          y: top + i * cell,
          width: cell,
          height: cell,
          fill: color(scale(v)),
          "data-row": i,
          "data-col": j,
          "data-value": v.toPrecision(6),
        }, cells);
        title(rect, describe(i, j, v));
      });
    });
    if (o.onHover) {
      cells.addEventListener("mouseover", (event) => {
        const rect = event.target.closest("rect.cell");
        if (rect) o.onHover(rect.querySelector("title").textContent);
      });
      keyboardCursor(svg, cells, rows, cols, o.onHover);
    }
    return domain;
  }

  // The heatmap takes focus (Tab); arrow keys move a cursor cell whose value goes to onHover.
  function keyboardCursor(svg, cells, rows, cols, onHover) {
    svg.setAttribute("tabindex", "0");
    let at = [0, 0];
    const show = () => {
      for (const old of cells.querySelectorAll(".cursor")) old.classList.remove("cursor");
      const rect = cells.children[at[0] * cols + at[1]];
      if (!rect) return;
      rect.classList.add("cursor");
      onHover(rect.querySelector("title").textContent);
    };
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    svg.onfocus = show;
    svg.onblur = () => {
      for (const old of cells.querySelectorAll(".cursor")) old.classList.remove("cursor");
    };
    svg.onkeydown = (event) => {
      const move = moves[event.key];
      if (!move) return;
      event.preventDefault();
      at = [Math.min(rows - 1, Math.max(0, at[0] + move[0])), Math.min(cols - 1, Math.max(0, at[1] + move[1]))];
      show();
    };
  }

  // A horizontal colour bar with ticks at the ends and the middle of the domain.
  function drawLegend(svg, domain, label) {
    clear(svg);
    const width = 260;
    const bar = 14;
    svg.setAttribute("width", width + 40);
    svg.setAttribute("height", 48);
    const id = `${svg.id}-gradient`;
    const gradient = el("linearGradient", { id, x1: 0, x2: 1, y1: 0, y2: 0 }, el("defs", {}, svg));
    for (let k = 0; k <= 16; k += 1) el("stop", { offset: k / 16, "stop-color": color(k / 16) }, gradient);
    el("text", { x: 20, y: 11 }, svg).textContent = label;
    el("rect", { x: 20, y: 16, width, height: bar, fill: `url(#${id})`, stroke: "#888" }, svg);
    const [lo, hi] = domain;
    [0, 0.5, 1].forEach((f) => {
      const x = 20 + f * width;
      el("line", { x1: x, x2: x, y1: 16 + bar, y2: 20 + bar, stroke: "#555" }, svg);
      const tick = el("text", { x, y: 32 + bar, "text-anchor": "middle", class: "tick" }, svg);
      tick.textContent = (lo + f * (hi - lo)).toFixed(2);
    });
  }

  // bertviz head-view style: query tokens on the left, key tokens on the right, one line per pair with
  // opacity = weight. Hovering a token keeps only its lines.
  function drawLines(svg, matrix, leftTokens, rightTokens, describe) {
    clear(svg);
    const rowH = 20;
    const leftW = Math.ceil(longest(leftTokens) * CHAR_PX) + 12;
    const rightW = Math.ceil(longest(rightTokens) * CHAR_PX) + 12;
    const gap = 180;
    const height = Math.max(leftTokens.length, rightTokens.length) * rowH + 16;
    const width = leftW + gap + rightW;
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    const links = el("g", { class: "links" }, svg);
    const y = (i) => 12 + i * rowH + rowH / 2;
    matrix.forEach((row, i) => {
      row.forEach((v, j) => {
        if (v < 0.01) return; // invisible anyway; keeps the SVG small
        const line = el("line", {
          class: "link",
          x1: leftW,
          y1: y(i),
          x2: leftW + gap,
          y2: y(j),
          "stroke-width": 2,
          "stroke-opacity": Math.min(1, v).toFixed(3),
          "data-row": i,
          "data-col": j,
          "data-value": v.toPrecision(6),
        }, links);
        title(line, describe(i, j, v));
      });
    });
    const focus = (side, index) => {
      for (const line of links.children) {
        const mine = line.dataset[side === "left" ? "row" : "col"] === String(index);
        line.classList.toggle("faded", index !== null && !mine);
      }
      for (const text of svg.querySelectorAll("text")) {
        text.classList.toggle("hot", index !== null && text.dataset.side === side && text.dataset.index === String(index));
      }
    };
    leftTokens.forEach((tok, i) => {
      const t = tokenText(svg, tok, { x: leftW - 8, y: y(i) + 4, "text-anchor": "end", "data-side": "left", "data-index": i });
      t.addEventListener("mouseenter", () => focus("left", i));
      t.addEventListener("mouseleave", () => focus("left", null));
    });
    rightTokens.forEach((tok, j) => {
      const t = tokenText(svg, tok, { x: leftW + gap + 8, y: y(j) + 4, "data-side": "right", "data-index": j });
      t.addEventListener("mouseenter", () => focus("right", j));
      t.addEventListener("mouseleave", () => focus("right", null));
    });
  }

  window.Heatmap = { color, drawHeatmap, drawLegend, drawLines, domainOf };
})();
