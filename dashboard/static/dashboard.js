// Draws every [data-chart] element with uPlot, on load and after each htmx swap. The
// chart's data comes from the server in the element's data-chart attribute (JSON), so the
// page needs no inline script.
(function () {
  "use strict";
  const palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

  function draw(el) {
    if (el.dataset.drawn === "1") return;
    el.dataset.drawn = "1";
    const spec = JSON.parse(el.dataset.chart);
    const bars = spec.kind === "bars" ? uPlot.paths.bars({ size: [0.8, 60] }) : undefined;
    const series = [{}];
    const data = [spec.x];
    spec.series.forEach(function (s, i) {
      const color = palette[i % palette.length];
      series.push({
        label: s.label + (spec.unit ? " (" + spec.unit + ")" : ""),
        stroke: color,
        fill: bars ? color + "99" : undefined,
        paths: bars,
        points: { show: !bars && spec.x.length < 60 },
        scale: s.label === "it/s" ? "rate" : "y",
      });
      data.push(s.values);
    });
    const axes = [{}, { scale: "y" }];
    if (spec.series.some(function (s) { return s.label === "it/s"; })) {
      axes.push({ scale: "rate", side: 1, grid: { show: false } });
    }
    const width = Math.max(320, Math.min(el.clientWidth || 900, 1100));
    new uPlot({ width: width, height: 260, series: series, axes: axes, scales: { x: { time: spec.time } } }, data, el);
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
