// Draws every [data-chart] element with uPlot, on load and after each htmx swap. The
// chart's data comes from the server in the element's data-chart attribute (JSON), so the
// page needs no inline script. 'line' charts run over time (x in Unix seconds); 'bars'
// run over categories (x is 0, 1, ... and spec.labels names each).
(function () {
  "use strict";
  const palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

  // Bars over categories, grouped: category d's bar of series i stands at x = d*(g+1)+i
  // (g series, one empty slot between categories); every other series is null there.
  function grouped(spec) {
    const g = spec.series.length;
    const n = spec.labels.length;
    const xs = [];
    const ys = spec.series.map(function () { return []; });
    for (let d = 0; d < n; d++) {
      for (let i = 0; i < g; i++) {
        xs.push(d * (g + 1) + i);
        ys.forEach(function (col, j) { col.push(j === i ? spec.series[j].values[d] : null); });
      }
    }
    return {
      data: [xs].concat(ys),
      range: [-1, Math.max(n, 1) * (g + 1) - 1],
      splits: spec.labels.map(function (_, d) { return d * (g + 1) + (g - 1) / 2; }),
    };
  }

  function draw(el) {
    if (el.dataset.drawn === "1") return;
    el.dataset.drawn = "1";
    const spec = JSON.parse(el.dataset.chart);
    const isBars = spec.kind === "bars";
    const series = [{ label: isBars ? "" : "time" }];
    spec.series.forEach(function (s, i) {
      const color = palette[i % palette.length];
      series.push({
        label: s.label + (spec.unit ? " (" + spec.unit + ")" : ""),
        stroke: color,
        fill: isBars ? color + "aa" : undefined,
        paths: isBars ? uPlot.paths.bars({ size: [0.9, 80] }) : undefined,
        points: { show: !isBars && spec.x.length < 60 },
        scale: s.label === "it/s" ? "rate" : "y",
      });
    });
    let data = [spec.x].concat(spec.series.map(function (s) { return s.values; }));
    const axes = [{}, { scale: "y" }];
    const scales = {
      x: { time: !isBars },
      y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; } },
    };
    if (isBars) {
      const layout = grouped(spec);
      data = layout.data;
      scales.x.range = function () { return layout.range; };
      axes[0] = {
        splits: function () { return layout.splits; },
        values: function () { return spec.labels; },
      };
    }
    if (spec.series.some(function (s) { return s.label === "it/s"; })) {
      axes.push({ scale: "rate", side: 1, grid: { show: false } });
    }
    const width = Math.max(320, Math.min(el.clientWidth || 900, 1100));
    new uPlot({ width: width, height: 260, series: series, axes: axes, scales: scales }, data, el);
  }

  function drawAll(root) {
    (root || document).querySelectorAll("[data-chart]").forEach(draw);
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawAll(document);
    if (window.htmx) {
      htmx.onLoad(function (el) { drawAll(el.parentNode || el); });
    }
  });
})();
