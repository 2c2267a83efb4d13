// ksim's report page: builds the figures, charts (uPlot, inline beside this script), tables and
// explanations from the view the page carries (#ksim-view, made by ksim-report's html.rs).
"use strict";
(function () {
  const failed = (message) => {
    document.body.dataset.error = String(message);
  };
  window.addEventListener("error", (event) => failed(event.message));
  // What a script logs as an error counts as one too (a test reads the attribute).
  const logError = console.error.bind(console);
  console.error = (...args) => {
    failed(args.join(" "));
    logError(...args);
  };

  const view = JSON.parse(document.getElementById("ksim-view").textContent);
  const element = (tag, attributes, ...children) => {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
    for (const child of children) node.append(child);
    return node;
  };
  // A figure the report could not give (a cost without prices) is null: shown as such.
  const number = (value) =>
    value === null ? "n/a"
      : typeof value === "number" && !Number.isInteger(value) ? value.toFixed(4) : String(value);

  // The headline figures, each readable by its data-figure name.
  const figures = document.getElementById("figures");
  for (const [name, label, value] of view.figures) {
    figures.append(
      element("div", { class: "figure" },
        element("span", { class: "value", "data-figure": name }, number(value)),
        element("span", { class: "label" }, label)),
    );
  }

  // A chart per series set: time (recorded seconds) against each series; hover for values.
  const charts = document.getElementById("charts");
  const colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];
  const clock = (seconds) => {
    const s = Math.round(seconds);
    return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  };
  for (const chart of view.charts) {
    const holder = element("section", { class: "chart", "data-chart": chart.name },
      element("h2", {}, chart.title));
    charts.append(holder);
    const options = {
      width: Math.min(1100, document.body.clientWidth - 40),
      height: 280,
      scales: { x: { time: false } },
      axes: [{ label: "recorded time", values: (_, ticks) => ticks.map(clock) }, {}],
      series: [{ label: "time", value: (_, v) => (v == null ? "-" : clock(v)) }].concat(
        chart.series.map((series, i) => ({
          label: series.label,
          stroke: colours[i % colours.length],
          width: 2,
          dash: series.dashed ? [6, 4] : undefined,
          // Runs compared side by side have buckets at different times: a gap is no drop.
          spanGaps: true,
        })),
      ),
    };
    new uPlot(options, [chart.x].concat(chart.series.map((series) => series.values)), holder);
  }

  // Tables, sorted by a click on a column's header (numbers as numbers).
  const tables = document.getElementById("tables");
  for (const table of view.tables) {
    const body = element("tbody");
    const rows = table.rows.slice();
    const fill = () => {
      body.replaceChildren(...rows.map((row) =>
        element("tr", {}, ...row.map((cell) => element("td", {}, number(cell))))));
    };
    const head = element("tr");
    table.columns.forEach((column, i) => {
      const cell = element("th", { title: "sort" }, column);
      let ascending = false;
      cell.addEventListener("click", () => {
        ascending = !ascending;
        rows.sort((a, b) => {
          const order = typeof a[i] === "number" ? a[i] - b[i] : String(a[i]).localeCompare(b[i]);
          return ascending ? order : -order;
        });
        fill();
      });
      head.append(cell);
    });
    fill();
    tables.append(element("section", { class: "table", "data-table": table.name },
      element("h2", {}, `${table.title} (${table.rows.length})`),
      element("table", {}, element("thead", {}, head), body)));
  }

  // Explained pods, found by name or workload as one types.
  const explained = document.getElementById("explained");
  if (view.explanations.length > 0) {
    const search = element("input",
      { type: "search", placeholder: "pod or workload", id: "pod-search" });
    const list = element("div");
    const items = view.explanations.map((pod) => {
      const item = element("details", { "data-pod": pod.pod },
        element("summary", {}, `${pod.pod} ${pod.owner ? `(${pod.owner})` : ""} ${pod.outcome}`),
        element("pre", {}, pod.text));
      list.append(item);
      return [`${pod.pod} ${pod.owner}`.toLowerCase(), item];
    });
    search.addEventListener("input", () => {
      const wanted = search.value.toLowerCase();
      for (const [key, item] of items) item.hidden = !key.includes(wanted);
    });
    explained.append(element("h2", {}, `Why pods went where they did (${items.length} explained)`),
      search, list);
  }
  document.body.dataset.rendered = "true";
})();
