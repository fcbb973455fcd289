// The report's interactive figures (section "Try it" of report/index.html), drawn with
// plotly.js (assets/plotly-cartesian.min.js, vendored from npm: third_party/). Everything
// is computed here in the browser from a fixed pseudo-random seed, so the page needs no
// server and no network, and every reader sees the same numbers.
//
// 1. The softmax and its Jacobian: logits x (seed 001's (1, 1, 2, 4), or the scores q·k of
//    one query against 8 random keys of size d_k, divided by √d_k or not) times a scale a.
//    Sliders for a and d_k redraw the softmax bars, the Jacobian heatmap, ‖J‖_F and a curve
//    of ‖J‖_F against a with the current a marked.
// 2. The score histogram: 2000 scores q·k for q, k ~ N(0, I) of size d_k, scaled by 1/√d_k
//    or not, on a fixed axis so that the two spreads can be compared.
(function () {
  'use strict';

  // ---- numbers ---------------------------------------------------------------------

  // mulberry32: a small seeded generator (the same draws on every page load).
  function generator(seed) {
    var t = seed >>> 0;
    return function () {
      t = (t + 0x6D2B79F5) >>> 0;
      var r = Math.imul(t ^ (t >>> 15), 1 | t);
      r = (r + Math.imul(r ^ (r >>> 7), 61 | r)) ^ r;
      return ((r ^ (r >>> 14)) >>> 0) / 4294967296;
    };
  }
  // Standard normal draws (Box–Muller).
  function normals(seed, count) {
    var u = generator(seed), out = new Float64Array(count);
    for (var i = 0; i < count; i += 2) {
      var r = Math.sqrt(-2 * Math.log(1 - u())), t = 2 * Math.PI * u();
      out[i] = r * Math.cos(t);
      if (i + 1 < count) out[i + 1] = r * Math.sin(t);
    }
    return out;
  }
  function softmax(x) {
    var m = Math.max.apply(null, x), e = x.map(function (v) { return Math.exp(v - m); });
    var s = e.reduce(function (a, b) { return a + b; }, 0);
    return e.map(function (v) { return v / s; });
  }
  // J = diag(s) − s sᵀ, the softmax's Jacobian (claim C4).
  function jacobian(s) {
    return s.map(function (si, i) { return s.map(function (sj, j) { return (i === j ? si : 0) - si * sj; }); });
  }
  function frobenius(J) {
    var t = 0;
    J.forEach(function (row) { row.forEach(function (v) { t += v * v; }); });
    return Math.sqrt(t);
  }
  function entropy(s) {
    return s.reduce(function (h, p) { return p > 0 ? h - p * Math.log(p) : h; }, 0);
  }
  function fmt(v, digits) { return Number(v).toPrecision(digits || 3); }

  // The scores of one query against `keys` keys, q and k of size d ~ N(0, I): q·k_j.
  var MAX_DIM = 4096, KEYS = 8;
  var queryKeyDraws = normals(20240427, (KEYS + 1) * MAX_DIM);
  function queryScores(d) {
    var out = [];
    for (var j = 0; j < KEYS; ++j) {
      var s = 0;
      for (var c = 0; c < d; ++c) s += queryKeyDraws[c] * queryKeyDraws[(j + 1) * MAX_DIM + c];
      out.push(s);
    }
    return out;
  }

  // ---- widget 1: softmax(a·x), its Jacobian and ‖J‖_F --------------------------------

  var SEED_X = [1, 1, 2, 4];
  function el(id) { return document.getElementById(id); }
  var PLOT_CONFIG = {displayModeBar: false, responsive: true, staticPlot: false};
  var FONT = {family: 'DejaVu Sans, Helvetica, Arial, sans-serif', size: 13};

  function logScaleFromSlider(v) { return Math.pow(10, Number(v)); }  // slider holds log10(a)
  function dimFromSlider(v) { return Math.pow(2, Number(v)); }        // slider holds log2(d_k)

  function baseLogits() {
    if (el('logits-seed').checked) return {x: SEED_X.slice(), label: 'x = (1, 1, 2, 4)'};
    var d = dimFromSlider(el('dk-slider').value), scaled = el('dk-scaled').checked;
    var x = queryScores(d).map(function (v) { return scaled ? v / Math.sqrt(d) : v; });
    return {x: x, label: 'q·k' + (scaled ? '/√' + d : '') + ', d_k = ' + d};
  }

  function drawSoftmax() {
    var a = logScaleFromSlider(el('a-slider').value);
    var base = baseLogits();
    var x = base.x.map(function (v) { return a * v; });
    var s = softmax(x), J = jacobian(s), n = s.length;
    var labels = s.map(function (_, i) { return String(i + 1); });
    el('a-value').textContent = fmt(a, 3);
    el('dk-value').textContent = String(dimFromSlider(el('dk-slider').value));
    el('dk-controls').disabled = el('logits-seed').checked;
    el('softmax-numbers').textContent = 'logits ' + base.label + ', times a = ' + fmt(a, 3) + ': largest weight ' +
        fmt(Math.max.apply(null, s), 3) + ', entropy ' + fmt(entropy(s), 3) + ' nats (uniform: ' +
        fmt(Math.log(n), 3) + '), ‖J‖_F = ' + fmt(frobenius(J), 3);

    Plotly.react('softmax-bars', [{
      type: 'bar', x: labels, y: s, marker: {color: '#0072B2'}, hovertemplate: 's_%{x} = %{y:.4f}<extra></extra>'
    }, {
      type: 'scatter', mode: 'lines', x: [labels[0], labels[n - 1]], y: [1 / n, 1 / n],
      line: {dash: 'dash', color: '#D55E00', width: 2}, name: 'uniform 1/n', hoverinfo: 'skip'
    }], {
      title: {text: 'softmax(a·x): the weights', font: FONT}, font: FONT, showlegend: false,
      margin: {l: 50, r: 10, t: 40, b: 40}, yaxis: {range: [0, 1.02], title: {text: 'weight s_i'}},
      xaxis: {title: {text: 'position i'}, type: 'category'}
    }, PLOT_CONFIG);

    // One colour range for every a, so that the heatmap fades as J shrinks. The colours are the static
    // figures' (src/lab/palette.hpp, passed in the element's data attributes): positive red, negative blue.
    var colours = document.getElementById('jacobian-heatmap').dataset;
    Plotly.react('jacobian-heatmap', [{
      type: 'heatmap', z: J, x: labels, y: labels, zmin: -0.25, zmax: 0.25,
      colorscale: [[0, colours.negative], [0.5, colours.zero], [1, colours.positive]],
      colorbar: {title: {text: '∂s_i/∂x_j'}, thickness: 12}, hovertemplate: 'J[%{y},%{x}] = %{z:.4f}<extra></extra>'
    }], {
      title: {text: 'Jacobian J = diag(s) − s sᵀ', font: FONT}, font: FONT, margin: {l: 50, r: 10, t: 40, b: 40},
      xaxis: {title: {text: 'input x_j'}, type: 'category'},
      yaxis: {title: {text: 'output s_i'}, type: 'category', autorange: 'reversed'}
    }, PLOT_CONFIG);

    // ‖J‖_F against a for these logits, the current a marked.
    var as = [], fro = [];
    for (var e = -2; e <= 2.0001; e += 0.05) {
      var aa = Math.pow(10, e);
      as.push(aa);
      fro.push(frobenius(jacobian(softmax(base.x.map(function (v) { return aa * v; })))));
    }
    Plotly.react('jacobian-norm', [{
      type: 'scatter', mode: 'lines', x: as, y: fro, line: {color: '#009E73', width: 2}, name: '‖J‖_F',
      hovertemplate: 'a = %{x:.3g}: ‖J‖_F = %{y:.3g}<extra></extra>'
    }, {
      type: 'scatter', mode: 'markers', x: [a], y: [frobenius(J)], marker: {size: 11, color: '#D55E00'},
      name: 'current a', hoverinfo: 'skip'
    }], {
      title: {text: '‖J‖_F against the scale a', font: FONT}, font: FONT, showlegend: false,
      margin: {l: 50, r: 10, t: 40, b: 40}, xaxis: {type: 'log', title: {text: 'a'}},
      yaxis: {title: {text: '‖J‖_F'}, rangemode: 'tozero'}
    }, PLOT_CONFIG);
  }

  // ---- widget 2: the score histogram, scaled or not --------------------------------------

  var HIST_PAIRS = 2000, HIST_MAX_DIM = 512, HIST_RANGE = 75;
  var histDraws = null;  // drawn on first use: (2 × HIST_PAIRS) vectors of HIST_MAX_DIM
  function scores(d, scaled) {
    if (!histDraws) histDraws = normals(4, 2 * HIST_PAIRS * HIST_MAX_DIM);
    var out = new Array(HIST_PAIRS), f = scaled ? 1 / Math.sqrt(d) : 1;
    for (var p = 0; p < HIST_PAIRS; ++p) {
      var s = 0, q = 2 * p * HIST_MAX_DIM, k = q + HIST_MAX_DIM;
      for (var c = 0; c < d; ++c) s += histDraws[q + c] * histDraws[k + c];
      out[p] = s * f;
    }
    return out;
  }
  function drawHistogram() {
    var d = dimFromSlider(el('hist-dk-slider').value), scaled = el('hist-scaled').checked;
    var v = scores(d, scaled);
    var mean = v.reduce(function (a, b) { return a + b; }, 0) / v.length;
    var sd = Math.sqrt(v.reduce(function (a, b) { return a + (b - mean) * (b - mean); }, 0) / (v.length - 1));
    var theory = scaled ? 1 : Math.sqrt(d), xs = [], ys = [];
    for (var t = -HIST_RANGE; t <= HIST_RANGE; t += HIST_RANGE / 300) {
      xs.push(t);
      ys.push(Math.exp(-0.5 * t * t / (theory * theory)) / (theory * Math.sqrt(2 * Math.PI)));
    }
    el('hist-dk-value').textContent = String(d);
    el('hist-numbers').textContent = HIST_PAIRS + ' scores q·k' + (scaled ? '/√d_k' : '') + ' at d_k = ' + d +
        ': mean ' + fmt(mean, 2) + ', standard deviation ' + fmt(sd, 3) + ' (theory ' + fmt(theory, 3) + ')';
    Plotly.react('score-histogram', [{
      type: 'histogram', x: v, histnorm: 'probability density', marker: {color: '#56B4E9'},
      xbins: {start: -HIST_RANGE, end: HIST_RANGE, size: scaled ? 0.25 : Math.max(0.25, Math.sqrt(d) / 4)},
      name: 'measured', hovertemplate: '%{x}: %{y:.3g}<extra></extra>'
    }, {
      type: 'scatter', mode: 'lines', x: xs, y: ys, line: {color: '#D55E00', dash: 'dash', width: 2},
      name: scaled ? 'N(0, 1)' : 'N(0, d_k)', hoverinfo: 'skip'
    }], {
      title: {text: scaled ? 'scores divided by √d_k' : 'raw scores q·k', font: FONT}, font: FONT,
      margin: {l: 55, r: 10, t: 40, b: 45}, legend: {x: 0.98, xanchor: 'right', y: 0.98},
      xaxis: {range: [-HIST_RANGE, HIST_RANGE], title: {text: 'score (same axis for both settings)'}},
      yaxis: {title: {text: 'density'}, rangemode: 'tozero'}
    }, PLOT_CONFIG);
  }

  function start() {
    if (typeof Plotly === 'undefined') {
      el('try-status').textContent = 'The interactive figures need JavaScript and assets/plotly-cartesian.min.js ' +
          'beside this page.';
      return;
    }
    ['a-slider', 'dk-slider'].forEach(function (id) { el(id).addEventListener('input', drawSoftmax); });
    ['logits-seed', 'logits-random', 'dk-scaled'].forEach(function (id) { el(id).addEventListener('change', drawSoftmax); });
    el('hist-dk-slider').addEventListener('input', drawHistogram);
    el('hist-scaled').addEventListener('change', drawHistogram);
    drawSoftmax();
    drawHistogram();
    el('try-status').textContent = '';
    document.body.setAttribute('data-interactive', 'ready');
  }
  // A link to a claim (#C7) or a reference section opens the closed <details> it is in,
  // so that the claims table's links land on the evidence, open.
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    if (!target) return;
    for (var d = target.closest('details'); d; d = d.parentElement && d.parentElement.closest('details')) d.open = true;
    target.scrollIntoView();
  }
  window.addEventListener('hashchange', openTarget);
  function ready() {
    openTarget();
    start();
  }
  if (document.readyState === 'loading')
    document.addEventListener('DOMContentLoaded', ready);
  else
    ready();
})();
