/* gpufleet HTML report: fills the host x check grid (sort, filter) and draws each host's plots
   with uPlot when its card comes on screen. Host data is only ever set as text, never as HTML. */
(function () {
  "use strict";
  performance.mark("gf-start");
  var D = JSON.parse(document.getElementById("gf-data").textContent);
  var RANK = { ok: 0, info: 1, warning: 2, error: 3 };
  var FAMS = D.families.map(function (f) { return f[0]; });
  var COLOR = { error: "#d93025", warning: "#e69500", info: "#3b82c4", ok: "#1f77b4" };

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) {
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }
  function fmtBytes(n) {
    var units = [["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]];
    for (var i = 0; i < units.length; i++) {
      if (n >= units[i][1] && n % units[i][1] === 0) { return n / units[i][1] + " " + units[i][0]; }
    }
    return n + " B";
  }
  function fixed(v, digits) { return v === null || v === undefined ? "-" : v.toFixed(digits); }
  function maxBusbw(h) { return h.busbw.length ? h.busbw[h.busbw.length - 1][1] : null; }
  function minTflops(h) { return h.tflops.length ? Math.min.apply(null, h.tflops) : null; }
  function checked(h) { return h.status === "ok" || h.status === "busy"; }

  // ------------------------------------------------------------------ grid
  var grid = document.getElementById("grid");
  var tbody = grid.tBodies[0];
  // Rows are built when first listed: most of a large fleet's rows are never looked at.
  var rows = [];
  function rowOf(i) { return rows[i] || (rows[i] = buildRow(D.hosts[i], i)); }
  function buildRow(h, i) {
    var cells = [
      el("td", { "class": "host sev-" + h.worst }, [h.name]),
      el("td", { "class": h.status === "ok" ? "" : "sev-error" }, [h.status]),
      el("td", { "class": "sev-" + h.worst }, [h.worst])
    ];
    FAMS.forEach(function (fam) {
      var sev = h.fam[fam];
      var cls = sev ? "sev-" + sev : (checked(h) ? "sev-ok" : "sev-none");
      cells.push(el("td", { "class": "fam " + cls, title: fam + ": " + (sev || (checked(h) ? "ok" : "not checked")) },
        [sev ? sev.charAt(0).toUpperCase() : ""]));
    });
    [h.gpus || "-", h.driver || "-", h.torch || "-", fixed(maxBusbw(h), 1), fixed(minTflops(h), 1)]
      .forEach(function (t) { cells.push(el("td", {}, [t])); });
    var tr = el("tr", { "data-host": h.name }, cells);
    tr.addEventListener("click", function () { openCard(i, true); });
    return tr;
  }
  var searchText = D.hosts.map(function (h) {
    var parts = [h.name, h.status];
    Object.keys(h.versions).forEach(function (k) { parts.push(h.versions[k]); });
    return parts.join(" ").toLowerCase();
  });
  var sortKey = "worst", sortDir = -1;
  // A table lays out every row it holds: list a page of rows at a time (sorted, filtered over
  // all hosts), so a 1,000-host page stays quick; the button lists more.
  var PAGE = 200, limit = PAGE;
  var more = document.getElementById("more");
  more.addEventListener("click", function () { limit += PAGE; apply(); });
  function keyOf(h, key) {
    if (key === "worst") { return RANK[h.worst]; }
    if (key.indexOf("fam:") === 0) { var s = h.fam[key.slice(4)]; return s ? RANK[s] : (checked(h) ? 0 : -1); }
    if (key === "busbw") { var b = maxBusbw(h); return b === null ? -1 : b; }
    if (key === "tflops") { var t = minTflops(h); return t === null ? -1 : t; }
    return (h[key] || "").toString();
  }
  var filterInput = document.getElementById("filter");
  var worstSelect = document.getElementById("worst");
  function apply() {
    var q = filterInput.value.trim().toLowerCase();
    var w = worstSelect.value;
    var order = D.hosts.map(function (_h, i) { return i; }).filter(function (i) {
      var h = D.hosts[i];
      if (q && searchText[i].indexOf(q) < 0) { return false; }
      if (w === "bad") { return h.worst === "error" || h.worst === "warning"; }
      return !w || h.worst === w;
    });
    order.sort(function (a, b) {
      var ka = keyOf(D.hosts[a], sortKey), kb = keyOf(D.hosts[b], sortKey);
      if (ka < kb) { return -sortDir; }
      if (ka > kb) { return sortDir; }
      return D.hosts[a].name < D.hosts[b].name ? -1 : 1;
    });
    var frag = document.createDocumentFragment();
    order.slice(0, limit).forEach(function (i) { frag.appendChild(rowOf(i)); });
    tbody.textContent = "";
    tbody.appendChild(frag);
    var shown = Math.min(order.length, limit);
    document.getElementById("shown").textContent = order.length + " of " + D.hosts.length + " hosts"
      + (shown < order.length ? ", first " + shown + " listed" : "");
    more.hidden = shown >= order.length;
    more.textContent = "list " + Math.min(PAGE, order.length - shown) + " more";
    Array.prototype.forEach.call(grid.tHead.rows[0].cells, function (th) {
      th.classList.toggle("sorted-asc", th.dataset.key === sortKey && sortDir > 0);
      th.classList.toggle("sorted-desc", th.dataset.key === sortKey && sortDir < 0);
    });
  }
  Array.prototype.forEach.call(grid.tHead.rows[0].cells, function (th) {
    th.addEventListener("click", function () {
      if (sortKey === th.dataset.key) { sortDir = -sortDir; } else {
        sortKey = th.dataset.key;
        sortDir = sortKey === "name" || sortKey === "driver" || sortKey === "torch" ? 1 : -1;
      }
      apply();
    });
  });
  filterInput.addEventListener("input", function () { limit = PAGE; apply(); });
  worstSelect.addEventListener("change", function () { limit = PAGE; apply(); });
  apply();
  performance.mark("gf-grid");

  // ------------------------------------------------------------------ plots
  function plotBox(title) {
    return el("div", { "class": "plot", "data-title": title }, []);
  }
  function empty(box, text) { box.appendChild(el("div", { "class": "plot-empty" }, [text])); }

  function busbwPlot(h, box) {
    var cohort = h.cohort ? D.cohorts[h.cohort] : null;
    var med = cohort && cohort.hosts > 1 ? cohort.busbw_median : [];
    var exp = h.expected.curve || [];
    var sizes = {};
    [h.busbw, med, exp].forEach(function (c) { c.forEach(function (p) { sizes[p[0]] = true; }); });
    var xs = Object.keys(sizes).map(Number).sort(function (a, b) { return a - b; });
    if (!h.busbw.length) { empty(box, "no busbw measured"); return; }
    function align(curve) {
      var m = {}; curve.forEach(function (p) { m[p[0]] = p[1]; });
      return xs.map(function (x) { return x in m ? m[x] : null; });
    }
    var data = [xs, align(h.busbw)];
    var series = [{ label: "message size", value: function (u, v) { return v === null ? "-" : fmtBytes(v); } },
      { label: h.name, stroke: COLOR[h.worst] || COLOR.ok, width: 2, points: { show: true } }];
    if (med.length) {
      data.push(align(med));
      series.push({ label: "cohort median (" + cohort.hosts + " hosts)", stroke: "#555", width: 1.5, dash: [6, 4], spanGaps: true });
    }
    if (exp.length) {
      data.push(align(exp));
      series.push({ label: "expected", stroke: "#17803d", width: 1.5, dash: [2, 3], spanGaps: true });
    }
    [["value", "expected"], ["floor", "floor"]].forEach(function (kv) {
      var v = h.expected[kv[0]];
      if (v !== null && v !== undefined && !(kv[0] === "value" && exp.length)) {
        data.push(xs.map(function () { return v; }));
        series.push({ label: kv[1] + " " + v + " GB/s", stroke: kv[0] === "floor" ? "#b3261e" : "#17803d", width: 1, dash: [3, 3] });
      }
    });
    new uPlot({
      title: "all-reduce busbw (GB/s) by message size", width: 560, legend: { live: false }, height: 240,
      scales: { x: { time: false, distr: 3, log: 2 }, y: { range: function (u, lo, hi) { return [0, hi * 1.1]; } } },
      axes: [{ values: function (u, vals) { return vals.map(function (v) { return v >= 1048576 ? fmtBytes(v) : ""; }); } },
        { label: "GB/s" }],
      series: series
    }, data, box);
  }

  function tflopsPlot(h, box) {
    if (!h.tflops.length) { empty(box, "no matmul TFLOP/s measured"); return; }
    var xs = h.tflops.map(function (_t, i) { return i; });
    var cohort = h.cohort ? D.cohorts[h.cohort] : null;
    var data = [xs, h.tflops];
    var series = [{ label: "GPU" }, {
      label: h.name, fill: (COLOR[h.worst] || COLOR.ok) + "99", stroke: COLOR[h.worst] || COLOR.ok,
      paths: uPlot.paths.bars({ size: [0.6, 80] }), points: { show: false }
    }];
    if (cohort && cohort.tflops_median !== null) {
      data.push(xs.map(function () { return cohort.tflops_median; }));
      series.push({ label: "cohort median", stroke: "#555", dash: [6, 4], width: 1.5 });
    }
    // The SKU catalog's bf16 expectation and floor per GPU (hosts.<name>.expectations).
    if (h.tflops_expected.length) {
      [[0, "expected", "#17803d", [2, 3]], [1, "floor", "#b3261e", [3, 3]]].forEach(function (s) {
        data.push(h.tflops_expected.map(function (e) { return e[s[0]]; }));
        series.push({ label: s[1], stroke: s[2], dash: s[3], width: 1.5, spanGaps: true, points: { show: true } });
      });
    }
    new uPlot({
      title: "matmul TFLOP/s per GPU", width: 300, legend: { live: false }, height: 240,
      scales: { x: { time: false, range: [-0.5, xs.length - 0.5] }, y: { range: function (u, lo, hi) { return [0, hi * 1.15]; } } },
      axes: [{ splits: function () { return xs; }, values: function (u, vals) { return vals.map(function (v) { return "GPU " + v; }); } }, {}],
      series: series
    }, data, box);
  }

  function trendPlot(h, box) {
    var points = (h.history && h.history.trend || []).filter(function (p) { return p.busbw !== null; });
    if (points.length < 2) { empty(box, "busbw trend: fewer than 2 saved runs"); return; }
    var xs = points.map(function (p) { return Date.parse(p.generated_at) / 1000; });
    var series = [{}, { label: "busbw GB/s", stroke: COLOR[h.worst] || COLOR.ok, width: 2, points: { show: true } }];
    var data = [xs, points.map(function (p) { return p.busbw; })];
    var base = h.history.baseline;
    if (base && base.busbw !== null) {
      data.push(xs.map(function () { return base.busbw; }));
      series.push({ label: "own baseline", stroke: "#17803d", dash: [4, 4], width: 1.5 });
    }
    new uPlot({
      title: "busbw over saved runs (UTC)", width: 560, legend: { live: false },
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); }, height: 200,
      scales: { y: { range: function (u, lo, hi) { return [0, hi * 1.1]; } } },
      series: series
    }, data, box);
  }

  function drawPlots(card) {
    var h = D.hosts[Number(card.dataset.i)];
    var boxes = card.querySelectorAll(".plot");
    if (!boxes.length) { return; }
    performance.mark("gf-plot");
    busbwPlot(h, boxes[0]);
    tflopsPlot(h, boxes[1]);
    if (boxes[2]) { trendPlot(h, boxes[2]); }
    if (!performance.getEntriesByName("gf-plotted").length) { performance.mark("gf-plotted"); }
  }
  var observer = new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (e.isIntersecting) { observer.unobserve(e.target); drawPlots(e.target); }
    });
  });

  // ------------------------------------------------------------------ host cards
  var details = document.getElementById("details");
  var cards = {};
  function kvTable(obj) {
    return el("table", { "class": "kv" }, Object.keys(obj).map(function (k) {
      return el("tr", {}, [el("td", {}, [k]), el("td", {}, [String(obj[k])])]);
    }));
  }
  function findingItem(f) {
    var ev = el("details", {}, [el("summary", {}, ["evidence"]), el("pre", {}, [JSON.stringify(f.evidence, null, 2)])]);
    return el("li", { "class": "finding " + f.severity }, [
      el("b", { "class": "sev-text-" + f.severity }, [f.rule + " " + f.severity]), " " + f.row,
      el("div", { "class": "title" }, [f.title]),
      el("div", { "class": "fix" }, ["fix: ", el("code", {}, [f.remediation])]), ev]);
  }
  function historyBlock(h) {
    var hist = h.history;
    if (!hist) { return el("p", { "class": "hint" }, ["no saved runs (save with --save DIR to keep history)"]); }
    var good = hist.last_good;
    var head = good ? "last known-good run: " + good.generated_at + " (" + good.run + ")"
      : "no known-good run in the store";
    var list = el("ul", { "class": "changes" }, (hist.changes || []).map(function (c) { return el("li", {}, [c]); }));
    var parts = [el("h4", {}, ["History"]), el("p", {}, [head])];
    if (good) {
      parts.push(el("p", {}, [hist.changes && hist.changes.length ? "changed since:" : "nothing changed since"]));
      parts.push(list);
    }
    return el("div", { "class": "history" }, parts);
  }
  function fmtNum(v) { return v === null || v === undefined ? "-" : String(v); }
  // Measured against expected, one row per hosts.<name>.expectations line (a line with nothing
  // measured yet, e.g. at --level facts, shows its expectation only).
  function expectationsBlock(h) {
    if (!h.expectations.length) { return el("p", { "class": "hint" }, ["no expectations: the SKU catalog has no reference for this host's GPUs"]); }
    var head = el("tr", {}, ["measured", "value", "expected", "floor", "verdict", "basis"].map(function (t) { return el("th", {}, [t]); }));
    var body = h.expectations.map(function (r) {
      var got = r[5], exp = r[6], floor = r[7];
      var verdict = got === null ? "not measured" : (floor !== null && got < floor
        ? "below floor (" + Math.round(100 * got / exp) + "%)" : "ok");
      var cls = got === null ? "" : (verdict === "ok" ? "sev-ok" : "sev-error");
      return el("tr", { "class": "exp-row", "data-metric": r[1] }, [el("td", {}, [r[0]]),
        el("td", {}, [got === null ? "-" : fmtNum(got) + " " + r[8]]), el("td", {}, [fmtNum(exp)]),
        el("td", {}, [fmtNum(floor)]), el("td", { "class": cls }, [verdict]),
        el("td", { title: r[9] }, [r[10]])]);
    });
    return el("table", { "class": "kv expectations" }, [el("thead", {}, [head]), el("tbody", {}, body)]);
  }
  function checksBlock(h) {
    if (!h.checks.length) { return el("p", { "class": "hint" }, ["no smoke checks ran"]); }
    return el("ul", { "class": "checks" }, h.checks.map(function (c) {
      return el("li", { "class": c[1] ? "check pass" : "check fail", "data-check": c[0] },
        [el("b", { "class": c[1] ? "sev-text-ok" : "sev-text-error" }, [(c[1] ? "PASS " : "FAIL ") + c[0]]), " " + c[2]]);
    }));
  }
  function openCard(i, scroll) {
    var h = D.hosts[i];
    if (!cards[h.name]) {
      var close = el("button", { "class": "close", title: "close" }, ["\u00d7"]);
      var measured = h.busbw.length || h.tflops.length;
      var plots = measured ? [plotBox("busbw"), plotBox("tflops")]
        : [el("p", { "class": "plot-empty" }, ["no smoke test results: nothing to plot"])];
      if (measured && h.history) { plots.push(plotBox("trend")); }
      var parts = [
        el("h3", {}, [el("span", {}, [h.name + " ", el("span", { "class": "badge sev-" + h.worst }, [h.worst])]), close]),
        el("p", {}, [h.status + (h.error ? ": " + h.error : "") + (h.cohort ? " \u2014 cohort: " + h.cohort : "")]),
        el("div", { "class": "plots" }, plots),
        el("h4", {}, ["Measured against expected"]), expectationsBlock(h),
        el("h4", {}, ["Smoke checks (" + h.checks.length + ")"]), checksBlock(h),
        el("h4", {}, ["Findings (" + h.findings.length + ")"]),
        el("ul", { "class": "findings" }, h.findings.map(function (k) { return findingItem(D.findings[k]); })),
        historyBlock(h),
        el("h4", {}, ["Versions"]), kvTable(h.versions)
      ];
      var card = el("article", { "class": "host-card " + h.worst, id: "host-" + i, "data-i": String(i), "data-host": h.name }, parts);
      close.addEventListener("click", function (ev) { ev.stopPropagation(); card.remove(); delete cards[h.name]; });
      cards[h.name] = card;
      if (scroll) { details.insertBefore(card, details.firstChild); } else { details.appendChild(card); }
      observer.observe(card);
    }
    if (scroll) { cards[h.name].scrollIntoView({ block: "start" }); }
  }
  // Open the worst hosts first: up to six cards, errors before warnings, so the page shows
  // what needs attention without a click.
  D.hosts.map(function (h, i) { return i; })
    .filter(function (i) { return RANK[D.hosts[i].worst] >= RANK.warning; })
    .sort(function (a, b) { return RANK[D.hosts[b].worst] - RANK[D.hosts[a].worst] || a - b; })
    .slice(0, 6).forEach(function (i) { openCard(i, false); });
  if (!details.firstChild && D.hosts.length) { openCard(0, false); }
  performance.mark("gf-cards");
  document.body.dataset.ready = "1";
}());
