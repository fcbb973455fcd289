// report/index.html: the page a reader would send a colleague to explain why attention
// divides by √d_k. Sections, in order, one function each:
//   header          what the page is
//   story           the argument in five steps with the main figure (story.cpp)
//   additions       what the measurements add to the articles (story.cpp)
//   verdict table   every claim in one line, in plain words
//   try it          the interactive figures (assets/lab.js, plotly.js)
//   sources         the five articles, linked, in both languages, then the papers of C13 onwards
//   claims          one section per claim (C13 onwards under their own heading): the claim, the
//                   sources' words, the finding,
//                   the outcome over the range measured, its figures, how it was judged
//   terms           every term the page uses
//   data            experiments, the settings they ran with, figures and CSV files
#include <cmath>
#include <ctime>
#include <iterator>
#include <fmt/format.h>
#include <set>
#include <sstream>

#include "lab/report_page.hpp"
#include "lab/claim_verdict.hpp"
#include "lab/report/assets.hpp"

namespace attnlab::lab::page {
namespace {

std::string number(double x) { return std::isfinite(x) ? fmt::format("{:.4g}", x) : std::string("—"); }

std::string badge(Outcome outcome, const std::string& words) {
  return fmt::format("<span class=\"verdict {}\" title=\"{}\">{}</span>", to_string(outcome), to_string(outcome),
                     html(words));
}

std::string capitalised(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

std::vector<const Verdict*> main_checks(const std::vector<Verdict>& vs) {
  std::vector<const Verdict*> out;
  for (const auto& v : vs)
    if (!v.supplementary) out.push_back(&v);
  if (out.empty())
    for (const auto& v : vs) out.push_back(&v);
  return out;
}

// A verdict's finding for the reader: its plain words, else its measured text.
std::string finding(const Verdict& v) { return v.plain.empty() ? v.measured_text : v.plain; }

const Figure* find_figure(const std::vector<Result>& results, const std::string& experiment, const std::string& name) {
  if (const Result* r = find_result(results, experiment))
    for (const auto& f : r->figures)
      if (f.name == name) return &f;
  return nullptr;
}

// An image with its size set (layout does not jump while it loads) and lazy loading; a tap
// opens the full-size PNG (rendered at twice these pixels).
std::string figure_html(const Figure& f, bool lazy = true) {
  return fmt::format(
      "<figure id=\"fig-{0}\"><a href=\"figures/{0}.png\"><img src=\"figures/{0}.png\" width=\"{1}\" height=\"{2}\" "
      "alt=\"{3}\"{4} decoding=\"async\"></a>{5}</figure>\n",
      html(f.name), f.width, f.height,
      html(!f.alt.empty()     ? f.alt
           : !f.title.empty() ? f.title
                              : f.caption),
      lazy ? " loading=\"lazy\"" : "", f.caption.empty() ? "" : "<figcaption>" + html(f.caption) + "</figcaption>");
}

std::string source_link(const std::string& seed) {
  const SourceInfo& s = source(seed);
  return fmt::format("<a href=\"#source-{}\">{}</a>", html(seed), s.is_paper() ? html(s.cite) : "article " + html(seed));
}

// A claim that comes from the papers after 2017 rather than from the five articles.
bool from_papers(const ClaimInfo& info) {
  for (const auto& seed : info.seeds)
    if (!source(seed).is_paper()) return false;
  return !info.seeds.empty();
}

size_t count_claims(bool papers) {
  size_t n = 0;
  for (const auto& c : claims()) n += from_papers(c) == papers;
  return n;
}

// "twelve", "four", ...: counts on the page read as words.
std::string count_words(size_t n) {
  static const char* const kWords[] = {"no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                                       "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
                                       "seventeen", "eighteen", "nineteen", "twenty"};
  return n < std::size(kWords) ? kWords[n] : std::to_string(n);
}

std::string header(const ReportOptions& o, double seconds) {
  const std::time_t now = std::time(nullptr);
  char stamp[64];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return fmt::format(
      "<header>\n<h1>Why attention divides by √d<sub>k</sub></h1>\n"
      "<p class=\"lead\">Transformers compute attention as softmax(QKᵀ/√d<sub>k</sub>)·V. Five short articles explain "
      "the √d<sub>k</sub>; this page takes their {} claims one by one and tests each against a measurement, then "
      "says plainly where the data agree with them, where they do not, and what they add.{}</p>\n"
      "<p class=\"sub\">Written by attnlab's lab (<code>make demo</code>), random seed {}{}, on {} in {:.0f} s. "
      "Every number below is recomputed from scratch on each run; the data are in <a href=\"data/\">data/</a>.</p>\n"
      "</header>\n"
      "<nav class=\"toc\"><a href=\"#story\">The argument</a><a href=\"#adds\">What the measurements add</a>"
      "<a href=\"#verdicts\">All claims</a><a href=\"#try\">Try it</a><a href=\"#sources\">The articles</a>"
      "<a href=\"#terms\">Terms</a><a href=\"#data\">Data</a></nav>\n",
      count_words(count_claims(false)),
      count_claims(true) == 0
          ? std::string()
          : fmt::format(" Then {} more claims, from papers after 2017, on what today's models do to keep the attention "
                        "logits in range, measured the same way (<a href=\"#after-2017\">after 2017</a>).",
                        count_words(count_claims(true))),
      o.seed, o.quick ? " (quick configuration: small samples, for tests)" : "", stamp, seconds);
}

std::string story_section(const Story& s) {
  std::string h = "<section id=\"story\" class=\"story\">\n<h2>The argument in five steps</h2>\n";
  for (const auto& p : s.paragraphs) h += "<p>" + p + "</p>\n";
  if (s.figure) h += figure_html(*s.figure, false);
  return h + "</section>\n";
}

std::string additions_box(const Story& s) {
  if (s.additions.empty()) return "";
  std::string h = "<aside id=\"adds\" class=\"box\">\n<h2>What the measurements add</h2>\n<ul>\n";
  for (const auto& a : s.additions) h += "<li>" + a + "</li>\n";
  return h + "</ul>\n</aside>\n";
}

std::string verdict_table(const std::vector<ClaimEntry>& claims) {
  std::string h =
      "<section id=\"verdicts\">\n<h2>All " + count_words(claims.size()) + " claims at a glance</h2>\n"
      "<p class=\"muted\">“Holds”: the measurement agrees with the claim within the stated tolerance. “Does not "
      "hold”: it contradicts it. “Depends on …”: it holds over part of the range measured and not over the rest. "
      "“Mixed”: some of its checks hold and some do not. Each rule is given in the claim's section.</p>\n"
      "<table class=\"reflow\">\n<thead><tr><th>claim</th><th>verdict</th><th>what was measured</th></tr></thead>\n"
      "<tbody>\n";
  for (const auto& c : claims) {
    const auto mains = main_checks(c.verdicts);
    std::string found = c.verdicts.empty() ? "not measured in this run" : html(finding(*mains.front()));
    h += fmt::format(
        "<tr><td data-label=\"claim\"><a href=\"#{0}\">{0}</a> {1}</td><td data-label=\"verdict\">{2}</td>"
        "<td data-label=\"measured\">{3}</td></tr>\n",
        html(c.info.id), html(c.info.title), badge(aggregate(c.verdicts), capitalised(plain_outcome(c.verdicts))),
        found);
  }
  return h + "</tbody>\n</table>\n</section>\n";
}

std::string try_section() {
  return R"(<section id="try">
<h2>Try it: the scale, the softmax and its gradient</h2>
<p>Article 000 shows an animation of the softmax as its inputs are multiplied by a growing factor. Here you move
the factor yourself. The logits are either article 001's x = (1, 1, 2, 4), or the scores q·k of one query against 8
random keys whose components are drawn from a normal distribution with mean 0 and variance 1, at a size d<sub>k</sub> you choose,
divided by √d<sub>k</sub> or not. The bars are the softmax's weights; the heatmap is its Jacobian (how much each
weight moves when each logit moves); ‖J‖<sub>F</sub> is the Jacobian's size. Watch it fade as one weight takes
everything.</p>
<p id="try-status" class="muted">The interactive figures need JavaScript.</p>
<div class="controls">
<label>scale a = <span id="a-value">1</span> <input id="a-slider" type="range" min="-2" max="2" step="0.02" value="0"
 aria-label="scale a, logarithmic"></label>
<fieldset><legend>logits</legend>
<label><input type="radio" name="logits" id="logits-seed" checked> x = (1, 1, 2, 4)</label>
<label><input type="radio" name="logits" id="logits-random"> scores q·k of one query and 8 keys</label>
</fieldset>
<fieldset id="dk-controls" disabled><legend>for the scores q·k</legend>
<label>d<sub>k</sub> = <span id="dk-value">64</span> <input id="dk-slider" type="range" min="0" max="12" step="1"
 value="6" aria-label="d_k, powers of two"></label>
<label><input type="checkbox" id="dk-scaled" checked> divide by √d<sub>k</sub></label>
</fieldset>
</div>
<p id="softmax-numbers" class="numbers"></p>
<div class="plots">
<div id="softmax-bars" class="plot"></div>
<div id="jacobian-heatmap" class="plot"></div>
<div id="jacobian-norm" class="plot"></div>
</div>
<h3>The spread of the scores, with and without the scale</h3>
<p>2000 scores q·k, each from a fresh pair q, k of size d<sub>k</sub> with components from a normal distribution of
mean 0 and variance 1. Without the scale their standard deviation is √d<sub>k</sub>; divided by √d<sub>k</sub> it is 1 at
every size (claims C1 and C2). The horizontal axis stays the same, so the two settings can be compared.</p>
<div class="controls">
<label>d<sub>k</sub> = <span id="hist-dk-value">64</span> <input id="hist-dk-slider" type="range" min="0" max="9"
 step="1" value="6" aria-label="d_k of the histogram, powers of two"></label>
<label><input type="checkbox" id="hist-scaled"> divide by √d<sub>k</sub></label>
</div>
<p id="hist-numbers" class="numbers"></p>
<div id="score-histogram" class="plot"></div>
</section>
)";
}

std::string source_item(const SourceInfo& s) {
  std::string h = fmt::format("<li id=\"source-{}\"><b>{}</b>", html(s.seed), html(s.title));
  if (!s.original_title.empty()) h += fmt::format(" (<span lang=\"zh\">{}</span>)", html(s.original_title));
  if (!s.url.empty()) h += fmt::format(": <a href=\"{0}\">{0}</a>", html(s.url));
  if (!s.note.empty()) h += (s.url.empty() ? ": " : "; ") + html(s.note);
  return h + ".</li>\n";
}

std::string sources_section() {
  std::string h =
      "<section id=\"sources\">\n<h2>The five articles</h2>\n<p>Claims C1–C12 come from five short Chinese-language "
      "articles (stored with the project; the claims and their sources are listed in the project's "
      "<code>docs/claims.md</code>). Each claim's section quotes them in the original and in English.</p>\n<ol start=\"0\">\n";
  std::string papers;
  for (const auto& s : sources()) (s.is_paper() ? papers : h) += source_item(s);
  h += "</ol>\n";
  if (!papers.empty())
    h += "<h3>The papers after 2017</h3>\n<p>Claims C13 onwards come from these papers and reports, on what models "
         "trained since do to keep the attention logits in range.</p>\n<ul>\n" + papers + "</ul>\n";
  return h + "</section>\n";
}

std::string quotes_html(const ClaimInfo& info) {
  std::string h;
  for (const auto& q : info.quotes) {
    const SourceInfo& s = source(q.seed);
    h += fmt::format(
        "<blockquote class=\"quote\"><div class=\"original\" lang=\"{}\">{}</div>{}<cite>{}{}</cite></blockquote>\n",
        html(q.lang), html(q.original),
        q.english.empty() ? "" : "<div class=\"english\" lang=\"en\">" + html(q.english) + "</div>", source_link(q.seed),
        s.url.empty() ? "" : fmt::format(", <a href=\"{0}\">original</a>", html(s.url)));
  }
  if (info.quotes.size() < info.seeds.size() || info.quotes.empty()) {
    std::string also;
    for (const auto& seed : info.seeds) also += (also.empty() ? "" : ", ") + source_link(seed);
    h += "<p class=\"muted\">Stated in " + also + ".</p>\n";
  }
  return h;
}

std::string ranges_html(const Verdict& v) {
  if (v.ranges.empty()) return "";
  std::string h = fmt::format(
      "<table class=\"ranges reflow\">\n<thead><tr><th>{}</th><th>outcome</th><th>measured</th></tr></thead>\n<tbody>\n",
      html(v.range_variable));
  for (const auto& r : v.ranges) {
    const std::string span = r.from == r.to ? number(r.from) : number(r.from) + "–" + number(r.to);
    const std::string words = r.outcome == Outcome::confirmed ? "holds"
                              : r.outcome == Outcome::refuted ? "does not hold"
                                                              : "unclear";
    h += fmt::format("<tr><td data-label=\"{}\">{}</td><td data-label=\"outcome\">{}</td><td data-label=\"measured\">{}</td></tr>\n",
                     html(v.range_variable), span, badge(r.outcome, capitalised(words)), html(r.text));
  }
  return h + "</tbody>\n</table>\n";
}

// One check on a claim: theory, measured, tolerance, how judged, its verdict, how to rerun it.
std::string check_table(const ReportOptions& o, const ClaimInfo& info, const Verdict& v) {
  std::ostringstream h;
  h << "<table class=\"reflow\">\n<tbody>\n";
  if (v.title != info.title || v.supplementary)
    h << "<tr><th colspan=\"2\">" << (v.supplementary ? "Checked beside the claim (not counted in its verdict): " : "")
      << html(v.title) << "</th></tr>\n";
  h << "<tr><th>theory</th><td data-label=\"theory\">" << html(v.theory_text)
    << (std::isfinite(v.theory) ? " (" + number(v.theory) + ")" : "") << "</td></tr>\n";
  h << "<tr><th>measured</th><td data-label=\"measured\">" << html(v.measured_text)
    << (std::isfinite(v.measured) ? " (" + number(v.measured) + ")" : "") << "</td></tr>\n";
  h << "<tr><th>tolerance</th><td data-label=\"tolerance\">" << number(v.tolerance) << "</td></tr>\n";
  h << "<tr><th>rule</th><td data-label=\"rule\">" << html(v.method) << "</td></tr>\n";
  h << "<tr><th>verdict</th><td data-label=\"verdict\">" << badge(v.outcome, to_string(v.outcome))
    << " experiment <code>" << html(v.experiment) << "</code>: <code>attnlab run " << html(v.experiment) << " --seed "
    << o.seed << (o.quick ? " --quick" : "") << "</code></td></tr>\n";
  h << "</tbody>\n</table>\n";
  return h.str();
}

std::string claim_section(const ReportOptions& o, const std::vector<Result>& results, const ClaimEntry& c) {
  const ClaimInfo& info = c.info;
  std::ostringstream h;
  h << "<section class=\"claim\" id=\"" << html(info.id) << "\">\n<h2>" << html(info.id) << ". " << html(info.title) << " "
    << badge(aggregate(c.verdicts), capitalised(plain_outcome(c.verdicts))) << "</h2>\n";
  h << "<p class=\"statement\"><b>The claim.</b> " << html(info.statement) << "</p>\n";
  h << quotes_html(info);
  if (c.verdicts.empty()) {
    std::string measuring;
    for (const Experiment* e : experiments())
      for (const auto& id : e->claims)
        if (id == info.id) measuring += (measuring.empty() ? "" : ", ") + ("<code>" + html(e->name) + "</code>");
    h << "<p>No experiment run for this report measures " << html(info.id)
      << (measuring.empty() ? " (none exists yet)" : " (" + measuring + " would; it was not run)")
      << ": the verdict is <b>pending</b>.</p>\n</section>\n";
    return h.str();
  }
  for (const Verdict* v : main_checks(c.verdicts)) {
    h << "<p class=\"finding\"><b>What we measured.</b> " << html(finding(*v)) << "</p>\n";
    h << ranges_html(*v);
  }
  std::set<std::string> shown;
  for (const auto& v : c.verdicts)
    if (!v.figure.empty() && shown.insert(v.figure).second)
      if (const Figure* f = find_figure(results, v.experiment, v.figure)) h << figure_html(*f);
  std::set<std::string> setups;
  for (const auto& v : c.verdicts)
    if (const Result* r = find_result(results, v.experiment); r && !r->setup.empty() && setups.insert(r->setup).second)
      h << "<p class=\"setup\"><b>How it was measured.</b> " << html(r->setup) << "</p>\n";
  for (const auto& v : c.verdicts)
    if (v.supplementary)
      h << "<p class=\"finding\"><b>Also checked:</b> " << html(v.title) << " " << badge(v.outcome, capitalised(plain_outcome({v})))
        << " " << html(finding(v)) << "</p>\n";
  h << "<details><summary>How it was judged: theory, measurement, tolerance and rule</summary>\n";
  for (const auto& v : c.verdicts) h << check_table(o, info, v);
  h << "</details>\n</section>\n";
  return h.str();
}

std::string terms_section() {
  return R"(<section id="terms">
<h2>Terms</h2>
<dl>
<dt id="term-score">score, logit</dt><dd>The number attention computes for a pair of positions before the softmax: the dot
product q·k of a query and a key (divided by √d<sub>k</sub> in the published formula).</dd>
<dt id="term-dk">d<sub>k</sub>, head size</dt><dd>The number of components of each query and key vector: 64 in BERT and GPT-2,
128 in most recent language models; this page calls 64–256 “the sizes models use”.</dd>
<dt id="term-softmax">softmax</dt><dd>softmax(x)<sub>i</sub> = e<sup>x<sub>i</sub></sup> / Σ<sub>j</sub> e<sup>x<sub>j</sub></sup>:
turns scores into weights that are positive and add up to 1.</dd>
<dt id="term-scale">scale</dt><dd>The factor the scores are multiplied by before the softmax: 1/√d<sub>k</sub> in the published
formula; “no scale” means 1. Some models use others: 1/d<sub>k</sub>, or factors that grow with the number of keys n
(log₅₁₂(n)/√d<sub>k</sub>, “entropy-invariant”; s·ln(n)/√d<sub>k</sub>, “SSMax”, scalable softmax).</dd>
<dt id="term-saturated">saturated row</dt><dd>A softmax row that puts almost all its weight on one position: here, largest
weight above 0.99. “One-hot” is the limit: one weight 1, the others 0.</dd>
<dt id="term-entropy">entropy</dt><dd>−Σ p<sub>i</sub> ln p<sub>i</sub>, in nats: ln n when the weight is spread evenly over n
positions, 0 when one position has it all.</dd>
<dt id="term-jacobian">Jacobian J</dt><dd>The matrix of how much each softmax weight s<sub>i</sub> moves when each score
x<sub>j</sub> moves: J = diag(s) − s sᵀ.</dd>
<dt id="term-fro">‖J‖<sub>F</sub>, Frobenius norm</dt><dd>The square root of the sum of the squared entries of J: its overall
size. 0 for a one-hot softmax.</dd>
<dt id="term-gradient">gradient</dt><dd>How much the training loss changes with each parameter or input; training moves the
parameters against it. Back-propagation passes it through the softmax by multiplying with J (the vector–Jacobian
product, VJP).</dd>
<dt id="term-typical">typical row</dt><dd>The median over the rows of a matrix: half the rows are above, half below. Used because
a few rows can dominate a total.</dd>
<dt id="term-init">initialisation</dt><dd>The random values a model's parameters start from. “Unit”: queries and keys start with
components of variance about 1, as the articles assume.</dd>
<dt id="term-optim">Adam, SGD, learning rate</dt><dd>Two ways to update parameters from the gradient: SGD steps in proportion to it
(with momentum), Adam divides each step by the gradient's running size, so a uniformly small gradient still gives
full-size steps. The learning rate is the step size.</dd>
<dt id="term-heldout">held-out accuracy</dt><dd>The fraction of examples the model answers correctly among examples it was not
trained on.</dd>
<dt id="term-verdicts">holds, does not hold, depends, mixed</dt><dd>See <a href="#verdicts">All claims</a>. Each rule is in the
claim's section under “How it was judged”.</dd>
</dl>
</section>
)";
}

std::string data_section(const ReportOptions& o, const std::vector<Result>& results) {
  std::ostringstream h;
  h << "<section id=\"data\">\n<h2>Experiments, settings and data</h2>\n"
    << "<p>Each experiment below ran with the settings listed (every default resolved). Its tables are CSV files in "
       "<code>data/</code>, its figures PNG files in <code>figures/</code> with the gnuplot script that drew each "
       "(<code>figures/*.gp</code>), and <code>report.json</code> holds every verdict. The interactive figures use "
       "plotly.js (MIT licence, <a href=\"assets/"
    << assets::kPlotlyLicense.file << "\">assets/" << assets::kPlotlyLicense.file << "</a>). Reproduce the page with "
    << "<code>attnlab report --seed " << o.seed << (o.quick ? " --quick" : "") << "</code>.</p>\n";
  h << "<table class=\"reflow\">\n<thead><tr><th>experiment</th><th>time</th><th>figures and data</th><th>settings</th>"
       "</tr></thead>\n<tbody>\n";
  for (const auto& r : results) {
    h << "<tr><td data-label=\"experiment\"><code>" << html(r.experiment) << "</code></td><td data-label=\"time\">"
      << fmt::format("{:.1f} s", r.seconds) << "</td><td data-label=\"files\">";
    for (const auto& f : r.figures) h << "<a href=\"figures/" << html(f.name) << ".png\">" << html(f.name) << ".png</a> ";
    for (const auto& t : r.tables) h << "<a href=\"data/" << html(t.name) << ".csv\">" << html(t.name) << ".csv</a> ";
    h << "</td><td data-label=\"settings\"><details><summary>" << r.config.size() << " settings</summary><code>";
    for (const auto& [k, v] : r.config) h << html(k) << "=" << html(v) << " ";
    h << "</code></details></td></tr>\n";
  }
  h << "</tbody>\n</table>\n";
  // Figures that no claim shows (e.g. learning curves), so that every figure is on the page.
  std::string extra;
  for (const auto& r : results)
    for (const auto& f : r.figures) {
      bool attached = false;
      for (const auto& v : r.verdicts) attached = attached || v.figure == f.name;
      if (!attached) extra += figure_html(f);
    }
  if (!extra.empty()) h << "<h3>More figures</h3>\n" << extra;
  h << "</section>\n";
  return h.str();
}

}  // namespace

std::string html(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

const Result* find_result(const std::vector<Result>& results, const std::string& experiment) {
  for (const auto& r : results)
    if (r.experiment == experiment) return &r;
  return nullptr;
}

const Table* find_table(const std::vector<Result>& results, const std::string& experiment, const std::string& table) {
  if (const Result* r = find_result(results, experiment))
    for (const auto& t : r->tables)
      if (t.name == table) return &t;
  return nullptr;
}

Outcome aggregate(const std::vector<Verdict>& all) { return claim_verdict(all); }

std::string plain_outcome(const std::vector<Verdict>& verdicts) {
  const Outcome outcome = aggregate(verdicts);
  if (outcome == Outcome::pending) return "not measured";
  // Over the range measured: does the outcome change along it?
  for (const Verdict* v : main_checks(verdicts)) {
    if (v->ranges.size() < 2) continue;
    const auto& last = v->ranges.back();
    if (outcome == Outcome::inconclusive) return "depends on " + v->range_variable;
    if (outcome == Outcome::confirmed && last.outcome == Outcome::confirmed)
      return fmt::format("holds for {} ≥ {}", v->range_variable, number(last.from));
  }
  switch (outcome) {
    case Outcome::confirmed: return "holds";
    case Outcome::refuted: return "does not hold";
    default: return "mixed";
  }
}

std::string build_page(const ReportOptions& o, const std::vector<Result>& results, const std::vector<ClaimEntry>& claims,
                       const Story& story, double seconds) {
  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>Why attention divides by √d_k: every claim, measured</title>\n"
      "<link rel=\"stylesheet\" href=\"assets/" + std::string(assets::kReportCss.file) + "\">\n"
      "<script src=\"assets/" + std::string(assets::kPlotly.file) + "\" defer></script>\n"
      "<script src=\"assets/" + std::string(assets::kLabJs.file) + "\" defer></script>\n</head>\n<body>\n";
  page += header(o, seconds) + story_section(story) + additions_box(story) + verdict_table(claims) + try_section() +
          sources_section();
  bool after_2017 = false;
  for (const auto& c : claims) {
    if (!after_2017 && from_papers(c.info)) {
      after_2017 = true;
      page += "<h2 id=\"after-2017\" class=\"part\">After 2017: how today's models keep the logits in range</h2>\n"
              "<p>The articles argue for 1/√d<sub>k</sub> alone. Models trained since add more: a scale that grows "
              "with the number of keys, a cap on the logits, a scale of 1/d<sub>k</sub> tied to how the model is "
              "widened. Each claim below comes from the paper that proposed it and is measured here, at the small "
              "sizes a CPU allows, with the same rules as C1–C12: where an effect does not appear at this scale the "
              "verdict says so.</p>\n";
    }
    page += claim_section(o, results, c);
  }
  return page + terms_section() + data_section(o, results) + "</body>\n</html>\n";
}

}  // namespace attnlab::lab::page
