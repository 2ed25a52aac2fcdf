/* Fairshare UI behaviour. No inline scripts anywhere: everything hangs off data-* attributes.
 *
 * - <time datetime="…" data-format="datetime|relative"> shown in the browser's time zone;
 * - <input data-local-tz> receives the browser's IANA zone (datetime-local inputs are read in it);
 * - <form data-confirm="…"> or <button data-confirm="…"> asks before submitting;
 * - <table class="sortable"> sorts by a header <button data-sort-key="text|number">;
 * - <canvas data-chart-src="json-script-id" data-chart-index="n"> draws a Chart.js chart from
 *   {"charts": [{"type", "labels", "datasets": [{"label", "data", "dashed"}], "unit"}]}.
 * - a preview swapped in with <div data-invalid-fields="name name …"> marks those fields of the
 *   form that asked for it (hx-target) invalid: aria-invalid="true" and class "invalid"; the
 *   fields no longer named are cleared, so the highlight follows what the server validated.
 * Everything is re-applied to content htmx swaps in.
 */
(function () {
  "use strict";

  var COLORS = ["#2458d3", "#b54708", "#067647", "#b42318", "#6941c6", "#0e7090"];

  function each(root, selector, fn) {
    Array.prototype.forEach.call(root.querySelectorAll(selector), fn);
  }

  /* ---------------------------------------------------------------- local time */

  var dateTime = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
  });
  var relative = typeof Intl.RelativeTimeFormat === "function"
    ? new Intl.RelativeTimeFormat(undefined, { numeric: "auto" }) : null;
  var UNITS = [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400],
               ["hour", 3600], ["minute", 60], ["second", 1]];

  function relativeText(date) {
    var seconds = (date.getTime() - Date.now()) / 1000;
    for (var i = 0; i < UNITS.length; i++) {
      if (Math.abs(seconds) >= UNITS[i][1] || UNITS[i][0] === "second") {
        return relative.format(Math.round(seconds / UNITS[i][1]), UNITS[i][0]);
      }
    }
    return "";
  }

  function localiseTimes(root) {
    each(root, "time[datetime]", function (el) {
      var date = new Date(el.getAttribute("datetime"));
      if (isNaN(date.getTime())) { return; }
      var absolute = dateTime.format(date);
      if (el.dataset.format === "relative" && relative) {
        el.textContent = relativeText(date);
        el.title = absolute;
      } else {
        el.textContent = absolute;
        el.title = date.toISOString();
      }
    });
    var zone = "";
    try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { zone = ""; }
    each(root, "input[data-local-tz]", function (el) { el.value = zone; });
  }

  /* ---------------------------------------------------------------- confirmations */

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var button = event.submitter;
    var question = (button && button.dataset.confirm) || form.dataset.confirm;
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  /* ---------------------------------------------------------------- table sorting */

  function sortValue(cell, kind) {
    var raw = cell ? (cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent) : "";
    if (kind === "number") {
      var number = parseFloat(String(raw).replace(/,/g, ""));
      return isNaN(number) ? -Infinity : number;
    }
    return String(raw).trim().toLowerCase();
  }

  function sortTable(button) {
    var th = button.closest("th");
    var table = th.closest("table");
    var body = table.tBodies[0];
    if (!body) { return; }
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var kind = button.dataset.sortKey || "text";
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    each(table, "thead th[aria-sort]", function (other) { other.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = sortValue(a.cells[index], kind);
      var y = sortValue(b.cells[index], kind);
      var order = x < y ? -1 : x > y ? 1 : 0;
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("table.sortable th button[data-sort-key]");
    if (button) { sortTable(button); }
  });

  /* ---------------------------------------------------------------- charts */

  var sources = {};

  function chartData(id) {
    if (!(id in sources)) {
      var node = document.getElementById(id);
      try { sources[id] = node ? JSON.parse(node.textContent) : null; } catch (e) { sources[id] = null; }
    }
    return sources[id];
  }

  function drawCharts(root) {
    if (typeof window.Chart !== "function") { return; }
    each(root, "canvas[data-chart-src]", function (canvas) {
      if (canvas.dataset.drawn) { return; }
      var data = chartData(canvas.dataset.chartSrc);
      var spec = data && data.charts && data.charts[parseInt(canvas.dataset.chartIndex || "0", 10)];
      if (!spec) { return; }
      canvas.dataset.drawn = "1";
      var line = spec.type === "line";
      var labels = spec.labels.map(function (label) {
        var date = line ? new Date(label) : null;
        return date && !isNaN(date.getTime()) ? dateTime.format(date) : label;
      });
      new window.Chart(canvas, {
        type: spec.type,
        data: {
          labels: labels,
          datasets: spec.datasets.map(function (set, i) {
            return {
              label: set.label,
              data: set.data,
              borderColor: COLORS[i % COLORS.length],
              backgroundColor: COLORS[i % COLORS.length] + (line ? "33" : "cc"),
              borderDash: set.dashed ? [6, 4] : [],
              pointRadius: 0,
              tension: 0.2,
              fill: false
            };
          })
        },
        options: {
          responsive: true,
          maintainAspectRatio: false,
          animation: false,
          interaction: { mode: "index", intersect: false },
          scales: {
            x: { ticks: { maxTicksLimit: line ? 8 : 30, autoSkip: true } },
            y: { beginAtZero: true, title: { display: !!spec.unit, text: spec.unit || "" } }
          }
        }
      });
    });
  }

  /* ---------------------------------------------------------------- live field errors */

  function markFields(form, names) {
    each(form, "input, select, textarea", function (field) {
      var bad = names.indexOf(field.name) !== -1;
      field.classList.toggle("invalid", bad);
      if (bad) {
        field.setAttribute("aria-invalid", "true");
      } else {
        field.removeAttribute("aria-invalid");
      }
    });
  }

  function formFor(target) {
    return target && target.id
      ? document.querySelector("form[hx-target='#" + target.id + "']") : null;
  }

  function markInvalid(root) {
    /* A swapped-in preview: its report (or none: every field is valid) decides. */
    var swapped = formFor(root);
    if (swapped) {
      var own = root.querySelector("[data-invalid-fields]");
      markFields(swapped, own ? own.getAttribute("data-invalid-fields").split(/\s+/) : []);
      return;
    }
    /* A page rendered with a preview in it (after a validation error). */
    each(root, "[data-invalid-fields]", function (report) {
      var form = formFor(report.parentElement && report.parentElement.closest("[id]"));
      if (form) { markFields(form, report.getAttribute("data-invalid-fields").split(/\s+/)); }
    });
  }

  /* ---------------------------------------------------------------- wiring */

  function enhance(root) {
    localiseTimes(root);
    drawCharts(root);
    markInvalid(root);
  }

  document.addEventListener("DOMContentLoaded", function () { enhance(document); });
  document.addEventListener("htmx:afterSwap", function (event) { enhance(event.target); });
})();
