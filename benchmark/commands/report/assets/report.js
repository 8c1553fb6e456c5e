// editmeter report: charts, image grid and failure gallery, drawn from the data scripts (no libraries).
// Data come as scripts (data/meta.js, data/failures.js, data/grid/<set>/chunk-<n>.js) because Chromium blocks
// fetch() of file:// URLs. Text from the data is always set with textContent, never parsed as HTML.
(function () {
  "use strict";
  var EM = (window.EM = { meta: null, failures: null, chunks: {}, state: null });
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#2455a4", "#d9822b", "#2a9d5c", "#c23b5a", "#7a4fb0", "#1f9bb0", "#8c6d1f", "#555f6e"];

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function svg(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "–";
    return Number(v).toPrecision(4).replace(/\.?0+$/, "").replace(/\.?0+e/, "e");
  }
  function tick(v) { return String(Number(Number(v).toPrecision(3))); }  // axis labels: 0.498, not 0.4982
  function badge(cls, text) { return el("span", { "class": "badge " + cls }, text); }

  // ---- called by the chunk scripts ------------------------------------------------------------------------
  EM.chunk = function (key, n, rows) { EM.chunks[key + "/" + n] = rows; };

  function loadChunk(key, n) {
    var id = key + "/" + n;
    if (EM.chunks[id]) return Promise.resolve(EM.chunks[id]);
    return new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = "data/grid/" + encodeURIComponent(key) + "/chunk-" + String(n).padStart(5, "0") + ".js";
      s.onload = function () { EM.chunks[id] ? resolve(EM.chunks[id]) : reject(new Error("chunk " + id + " empty")); };
      s.onerror = function () { reject(new Error("cannot load " + s.src)); };
      document.body.appendChild(s);
    });
  }

  // ---- bar charts with error bars -------------------------------------------------------------------------
  // spec: {groups: [name], series: [{label, v: [[mean, se, n, mark] | null per group]}], hib, metric, stale}
  function barChart(spec) {
    var nS = spec.series.length, nG = spec.groups.length;
    var barH = 12, gap = 10, left = 170, right = 80, width = 900, top = 24 + 16 * Math.ceil(nS / 3);
    var bandH = nS * barH + gap, height = top + nG * bandH + 30;
    var lo = 0, hi = 0;
    spec.series.forEach(function (s) {
      s.v.forEach(function (c) {
        if (!c || c[0] === null) return;
        var se = c[1] || 0;
        lo = Math.min(lo, c[0] - se); hi = Math.max(hi, c[0] + se);
      });
    });
    if (hi === lo) hi = lo + 1;
    var x = function (v) { return left + (v - lo) / (hi - lo) * (width - left - right); };
    var root = svg("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height, "class": "barchart" });
    root.appendChild(svg("title", {}, spec.metric + (spec.hib ? " (higher is better)" : " (lower is better)")));
    spec.series.forEach(function (s, i) {  // legend
      var lx = left + (i % 3) * 230, ly = 14 + 16 * Math.floor(i / 3);
      root.appendChild(svg("rect", { x: lx, y: ly - 9, width: 10, height: 10, fill: COLORS[i % COLORS.length] }));
      var partial = s.v.some(function (c) { return c && c[3]; });
      root.appendChild(svg("text", { x: lx + 14, y: ly }, s.label + (partial ? " (has PARTIAL values)" : "")));
    });
    root.appendChild(svg("line", { x1: x(0), x2: x(0), y1: top - 4, y2: height - 24, stroke: "#888" }));
    spec.groups.forEach(function (g, gi) {
      var y0 = top + gi * bandH;
      root.appendChild(svg("text", { x: left - 6, y: y0 + nS * barH / 2 + 4, "text-anchor": "end" }, g));
      spec.series.forEach(function (s, si) {
        var c = s.v[gi], y = y0 + si * barH;
        if (!c || c[0] === null) {  // undefined here (e.g. an edit type the set does not score): say so, no bar
          root.appendChild(svg("text", { x: x(0) + 4, y: y + barH - 2, "class": "na" }, "n/a"));
          return;
        }
        var m = c[0], se = c[1];
        var bar = svg("rect", { x: Math.min(x(0), x(m)), y: y + 1, width: Math.max(1, Math.abs(x(m) - x(0))),
          height: barH - 2, fill: COLORS[si % COLORS.length], "class": "bar" + (c[3] ? " partial" : "") });
        bar.appendChild(svg("title", {}, s.label + " · " + g + ": " + fmt(m) + (se !== null ? " ± " + fmt(se) : "") +
          (c[2] !== null ? " (n=" + c[2] + ")" : "") + (c[3] ? " · " + c[3] : "")));
        root.appendChild(bar);
        if (se !== null && se > 0) {
          var ym = y + barH / 2;
          root.appendChild(svg("line", { x1: x(m - se), x2: x(m + se), y1: ym, y2: ym, "class": "err" }));
          root.appendChild(svg("line", { x1: x(m - se), x2: x(m - se), y1: ym - 3, y2: ym + 3, "class": "err" }));
          root.appendChild(svg("line", { x1: x(m + se), x2: x(m + se), y1: ym - 3, y2: ym + 3, "class": "err" }));
        }
        if (c[3]) root.appendChild(svg("text", { x: Math.max(x(m), x(0)) + 4, y: y + barH - 2, "class": "pmark" }, "PARTIAL"));
      });
    });
    [lo, (lo + hi) / 2, hi].forEach(function (t) {
      root.appendChild(svg("text", { x: x(t), y: height - 8, "text-anchor": "middle", "class": "tick" }, tick(t)));
    });
    return root;
  }

  function chartBox(spec) {
    var box = el("div");
    box.appendChild(el("h3", null, spec.section + " · " + (spec.table === "criteria" ? "" :
      spec.table.replace("_", " ") + " · ") + spec.metric + (spec.hib ? " ↑" : " ↓")));
    if (spec.stale) box.appendChild(badge("stale", "STALE: the leaderboard is older than some score parts"));
    box.appendChild(barChart(spec));
    return box;
  }

  function initCharts() {
    var sel = document.getElementById("chart-select"), box = document.getElementById("chart");
    var charts = EM.meta.charts.filter(function (c) { return c.table !== "criteria"; });
    if (!charts.length) { box.appendChild(el("p", { "class": "note" }, "No per-type or per-class rows.")); sel.disabled = true; }
    charts.forEach(function (c, i) {
      sel.appendChild(el("option", { value: i }, c.section + " · " + c.table.replace("_", " ") + " · " + c.metric));
    });
    var draw = function () { box.textContent = ""; if (charts.length) box.appendChild(chartBox(charts[+sel.value])); };
    sel.addEventListener("change", draw);
    draw();
    var crit = document.getElementById("criteria-chart");
    EM.meta.charts.filter(function (c) { return c.table === "criteria"; }).forEach(function (c) {
      crit.appendChild(chartBox(c));
    });
  }

  // ---- image grid ---------------------------------------------------------------------------------------------
  function grid() { return EM.meta.grids[EM.state.set]; }

  function matchingRanges(g) {
    var t = EM.state.type, c = EM.state.cls;
    return g.ranges.filter(function (r) {
      return (t === "" || r[0] === +t) && (c === "" || r[1] === +c);
    });
  }

  function fillSelect(sel, values, allLabel) {
    sel.textContent = "";
    sel.appendChild(el("option", { value: "" }, allLabel));
    values.forEach(function (v) { sel.appendChild(el("option", { value: v[0] }, v[1])); });
  }

  function fillClasses() {
    var g = grid(), seen = {}, t = EM.state.type;
    g.ranges.forEach(function (r) { if (t === "" || r[0] === +t) seen[r[1]] = (seen[r[1]] || 0) + r[3]; });
    var opts = Object.keys(seen).map(Number).sort(function (a, b) { return a - b; })
      .map(function (i) { return [i, g.classes[i] + " (" + seen[i] + ")"]; });
    fillSelect(document.getElementById("grid-class"), opts, "all classes");
    if (EM.state.cls !== "" && !(EM.state.cls in seen)) EM.state.cls = "";
    document.getElementById("grid-class").value = EM.state.cls;
  }

  function fillTypes() {
    var g = grid(), count = {};
    g.ranges.forEach(function (r) { count[r[0]] = (count[r[0]] || 0) + r[3]; });
    fillSelect(document.getElementById("grid-type"), g.types.map(function (t, i) {
      return [i, t + " (" + (count[i] || 0) + ")"];
    }), "all types");
    document.getElementById("grid-type").value = EM.state.type;
  }

  function imgLink(thumb, full, alt) {
    var a = el("a", { href: full, target: "_blank" });
    a.appendChild(el("img", { src: thumb, alt: alt, loading: "lazy" }));
    return a;
  }

  function imageCell(pair, alt) {
    var td = el("td");
    if (!pair) { td.appendChild(el("span", { "class": "note" }, "—")); return td; }
    if (pair[0]) td.appendChild(imgLink(pair[0], pair[1], alt));
    else td.appendChild(el("div", { "class": "reason" }, pair[2] || "no thumbnail"));
    return td;
  }

  function editCell(g, run, row, cell) {
    var td = el("td", { "class": "cell s-" + cell.s.replace(" ", "") });
    if (cell.t) td.appendChild(imgLink(cell.t, run.edits + encodeURIComponent(row.id) + ".png", run.label + " " + row.id));
    if (cell.tr) td.appendChild(el("div", { "class": "reason" }, cell.tr));
    if (cell.s !== "ok") td.appendChild(badge(cell.s.replace(" ", ""), cell.s.toUpperCase()));
    if (cell.r) td.appendChild(el("div", { "class": "reason" }, cell.r));
    (cell.v || []).forEach(function (vals, k) {
      if (!vals) return;
      // one line per metric set: its headline (the first column with a value); every column on demand (click the
      // line, or hover it), so six metric sets stay six lines under the image
      var sc = run.scorings[k], box = el("details", { "class": "scores" }), head = -1, all = [];
      sc.cols.forEach(function (col, j) {
        if (vals[j] === null) return;
        if (head < 0) head = j;
        all.push(col + " " + fmt(vals[j]));
      });
      var line = el("summary", { title: all.join(", ") });
      line.appendChild(el("b", null, (sc.set || sc.sig) + ": "));
      if (cell.x && cell.x[k]) line.appendChild(badge("stale", "STALE: edit changed since scored"));
      line.appendChild(el("span", null, head < 0 ? "no value" : sc.cols[head] + " " + fmt(vals[head])));
      box.appendChild(line);
      var detail = el("div", { "class": "score-detail" });
      sc.cols.forEach(function (col, j) { if (vals[j] !== null) detail.appendChild(el("span", null, col + " " + fmt(vals[j]))); });
      box.appendChild(detail);
      td.appendChild(box);
    });
    return td;
  }

  // run columns: instruction-based editors first, then description-based ones (never mixed in one block)
  function runOrder(g) {
    return g.runs.map(function (r, i) { return i; }).sort(function (a, b) {
      var ka = g.runs[a].kind || "", kb = g.runs[b].kind || "";
      return ka === kb ? a - b : (ka === "instruction" ? -1 : kb === "instruction" ? 1 : ka < kb ? -1 : 1);
    });
  }
  function families(g, order) {  // [[kind, number of runs]] in column order
    var out = [];
    order.forEach(function (i) {
      var k = g.runs[i].kind || "?";
      if (out.length && out[out.length - 1][0] === k) out[out.length - 1][1] += 1; else out.push([k, 1]);
    });
    return out;
  }

  function renderGrid() {
    var g = grid(), ps = g.chunk, ranges = matchingRanges(g);
    var total = ranges.reduce(function (a, r) { return a + r[3]; }, 0);
    var pages = Math.max(1, Math.ceil(total / ps));
    EM.state.page = Math.min(Math.max(0, EM.state.page), pages - 1);
    var first = EM.state.page * ps, last = Math.min(total, first + ps), positions = [], skip = first;
    ranges.forEach(function (r) {  // positions of this page's queries in the global order
      var take = r[3];
      if (skip >= take) { skip -= take; return; }
      for (var p = r[2] + skip; p < r[2] + take && positions.length < last - first; p++) positions.push(p);
      skip = 0;
    });
    document.getElementById("grid-page").textContent = "page " + (EM.state.page + 1) + " of " + pages +
      " (" + total + " queries)";
    document.getElementById("grid-prev").disabled = EM.state.page === 0;
    document.getElementById("grid-next").disabled = EM.state.page >= pages - 1;
    var need = {};
    positions.forEach(function (p) { need[Math.floor(p / ps)] = 1; });
    var token = (EM.renderToken = (EM.renderToken || 0) + 1);
    return Promise.all(Object.keys(need).map(function (n) { return loadChunk(g.key, +n); })).then(function () {
      if (token !== EM.renderToken) return;  // a newer page was asked for meanwhile
      var table = el("table", { "class": "grid" }), head = el("tr"), fam = el("tr", { "class": "family" });
      var order = runOrder(g);
      ["query", "source"].concat(g.has_gt ? ["ground truth"] : []).forEach(function (h) {
        head.appendChild(el("th", { rowspan: 2 }, h));
      });
      families(g, order).forEach(function (f) {
        head.appendChild(el("th", { colspan: f[1], "class": "family" }, f[0] + "-based editors"));
      });
      order.forEach(function (i) {
        var r = g.runs[i];
        var th = el("th", null, r.label);
        if (r.protocol === "multi_turn") th.appendChild(el("div", { "class": "note" }, "multi_turn: turn t edited from turn t-1's edit"));
        th.appendChild(el("div", { "class": "note" }, Object.keys(r.counts).sort().map(function (k) {
          return k + " " + r.counts[k];
        }).join(" · ")));
        fam.appendChild(th);
      });
      var thead = el("thead"); thead.appendChild(head); thead.appendChild(fam); table.appendChild(thead);
      var body = el("tbody");
      positions.forEach(function (p) {
        var row = EM.chunks[g.key + "/" + Math.floor(p / ps)][p % ps], tr = el("tr", { "data-type": row.ty });
        if (row.se) { tr.setAttribute("data-session", row.se); if (row.tu === 1) tr.setAttribute("class", "session-start"); }
        var q = el("td", { "class": "q" });
        q.appendChild(el("b", null, row.id));
        if (row.se) q.appendChild(el("div", { "class": "turn" }, "session " + row.se + " · turn " + row.tu));
        q.appendChild(el("div", null, row.ty + " · " + row.cl));
        if (row.in) q.appendChild(el("div", null, "“" + row.in + "”"));
        if (row.cap) q.appendChild(el("div", { "class": "note" }, row.cap));
        tr.appendChild(q);
        tr.appendChild(imageCell(row.src, "source " + row.id));
        if (g.has_gt) tr.appendChild(imageCell(row.gt, "ground truth " + row.id));
        order.forEach(function (i) { tr.appendChild(editCell(g, g.runs[i], row, row.c[i])); });
        body.appendChild(tr);
      });
      table.appendChild(body);
      var box = document.getElementById("grid-table");
      box.textContent = "";
      box.appendChild(table);
      box.setAttribute("data-rendered", String(EM.renderToken));
    }).catch(function (err) {
      document.getElementById("grid-note").textContent = "could not load the grid data: " + err.message;
    });
  }

  function initGrid() {
    var grids = EM.meta.grids, setSel = document.getElementById("grid-set");
    if (!grids.length) {
      document.getElementById("grid-table").appendChild(el("p", { "class": "note" }, "No run folders to show."));
      return;
    }
    EM.state = { set: 0, type: "", cls: "", page: 0 };
    grids.forEach(function (g, i) { setSel.appendChild(el("option", { value: i }, g.queryset + " (" + g.hash.slice(0, 10) + ")")); });
    var reset = function () {
      var g = grid();
      document.getElementById("grid-note").textContent = g.note || "";
      document.getElementById("grid-note").className = g.note ? "note warn" : "note";
      fillTypes(); fillClasses(); EM.state.page = 0; renderGrid();
    };
    setSel.addEventListener("change", function () { EM.state.set = +setSel.value; EM.state.type = ""; EM.state.cls = ""; reset(); });
    document.getElementById("grid-type").addEventListener("change", function (e) {
      EM.state.type = e.target.value; EM.state.page = 0; fillClasses(); renderGrid();
    });
    document.getElementById("grid-class").addEventListener("change", function (e) {
      EM.state.cls = e.target.value; EM.state.page = 0; renderGrid();
    });
    document.getElementById("grid-prev").addEventListener("click", function () { EM.state.page -= 1; renderGrid(); });
    document.getElementById("grid-next").addEventListener("click", function () { EM.state.page += 1; renderGrid(); });
    reset();
  }

  // ---- failure gallery ----------------------------------------------------------------------------------------
  function initFailures() {
    var box = document.getElementById("failure-list"), any = false;
    (EM.failures || []).forEach(function (f) {
      if (!f.n) return;
      any = true;
      var sec = el("div", { "class": "fail-run" });
      sec.appendChild(el("h3", null, f.run + ": " + f.n + " failed"));
      var ul = el("ul");
      f.reasons.forEach(function (r) { ul.appendChild(el("li", null, r[1] + " × " + (r[0] || "(no reason recorded)"))); });
      sec.appendChild(ul);
      if (f.shown.length < f.n) sec.appendChild(el("p", { "class": "note" }, "showing the first " + f.shown.length + " of " + f.n));
      if (f.log) { var a = el("a", { href: f.log, target: "_blank" }, "failures.log (every traceback)"); sec.appendChild(a); }
      var cards = el("div");
      f.shown.forEach(function (item) {
        var card = el("div", { "class": "fail-card" });
        if (item.src && item.src[0]) card.appendChild(el("img", { src: item.src[0], alt: "source " + item.id, loading: "lazy" }));
        if (item.t) card.appendChild(el("img", { src: item.t, alt: "edit " + item.id, loading: "lazy" }));
        card.appendChild(el("div", null, item.id));
        if (item.e) card.appendChild(el("div", null, item.e));
        card.appendChild(el("div", { "class": "reason" }, item.r || "(no reason recorded)"));
        if (item.tb) {
          var d = el("details"); d.appendChild(el("summary", null, "traceback")); d.appendChild(el("pre", null, item.tb));
          card.appendChild(d);
        }
        cards.appendChild(card);
      });
      sec.appendChild(cards);
      box.appendChild(sec);
    });
    if (!any) box.appendChild(el("p", { "class": "note" }, "No failed queries."));
  }

  // ---- comparison: one matrix per metric set at a time, chosen with its selector ------------------------------
  function initComparison() {
    [].forEach.call(document.querySelectorAll("select.cmp-select"), function (sel) {
      sel.addEventListener("change", function () {
        var group = document.getElementById(sel.getAttribute("data-group"));
        [].forEach.call(group.querySelectorAll(".cmp-matrix"), function (m) {
          m.hidden = m.getAttribute("data-metric") !== sel.value;
        });
      });
    });
  }

  // the arena section (benchmark/report/arena.py): a heatmap cell shows its pair's example battles
  function initArena() {
    document.querySelectorAll("table.arena-heatmap td.heat[data-battles]").forEach(function (td) {
      td.addEventListener("click", function () {
        var target = document.getElementById(td.getAttribute("data-battles"));
        var arena = td.closest(".arena");
        arena.querySelectorAll(".arena-battles").forEach(function (p) { if (p !== target) p.hidden = true; });
        if (target) {
          target.hidden = !target.hidden;
          target.querySelectorAll("img").forEach(function (i) { i.loading = "eager"; });
        }
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    initComparison();
    initArena();
    if (!EM.meta) {
      document.body.insertBefore(el("p", { "class": "note warn" }, "data/meta.js did not load: rebuild the report"), document.body.firstChild);
      return;
    }
    initCharts();
    initGrid();
    initFailures();
    document.body.setAttribute("data-ready", "1");
  });
})();
