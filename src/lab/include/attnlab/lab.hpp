#pragma once
// The lab: experiments that measure the claims of docs/claims.md (C1–C12 from the five
// articles, C13 onwards from papers after 2017) and return numbers, figures (as data)
// and verdicts.
//
// An experiment is one file src/lab/exp_<name>.cpp that returns its description,
// listed in src/lab/experiments.hpp and registry.cpp:
//
//   namespace {
//   struct MyConfig {
//     int64_t n = 128;                      // defaults live here
//     std::vector<int64_t> dims{16, 64};
//     void bind(attnlab::lab::Params& p) {         // each parameter once, with its rule
//       using namespace attnlab::lab::rules;
//       p.add("n", n, "number of keys", at_least(2));
//       p.add("dims", dims, "head dims, comma-separated", each(positive()));
//     }
//   };
//   attnlab::lab::Result run_mine(const MyConfig& c, attnlab::lab::RunContext& ctx) {
//     const Measured m = measure_mine(c, ctx);      // the numbers (and the tables)
//     attnlab::lab::Result r;
//     r.tables = {m.table};
//     r.figures = {figure_mine(c, m)};              // figures as data
//     r.verdicts = {verdict_c1(c, m)};              // each verdict computed from the measurement
//     return r;
//   }
//   }  // namespace
//   attnlab::lab::Experiment mine_experiment() {
//     return attnlab::lab::make_experiment<MyConfig>("mine", "one-line summary", {"C1"}, run_mine,
//                                                    /*quick=*/{{"n", "16"}});
//   }
//
// A program adds its own with register_experiment(make_experiment<Cfg>(...)).
// It is run with a string→string configuration (the CLI's --set key=value and
// Python's keyword arguments both become one), which is parsed into the config
// struct; unknown keys, unparsable values and values that break their parameter's rule
// are attnlab::Error naming the key, the value and the rule.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attnlab/error.hpp"

namespace attnlab::lab {

class RunDistributor;  // attnlab/run_distributor.hpp

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- configuration --------------------------------------------------------

using Config = std::map<std::string, std::string>;

// One parameter of an experiment, as shown by `attnlab run NAME --help`.
struct Parameter {
  std::string name;
  std::string default_value;  // the config struct's default, formatted as it would be typed
  std::string help;
  std::string type;           // "int", "float", "bool", "string", "int list", "float list", "string list"
  std::string rule;           // what a value must be ("≥ 1", "one of a, b"), "" when any value of the type is
};

// What a parameter's value must be, as data: shown by `attnlab run NAME --help` and checked
// by Params::apply(). Bounds and choices apply to a number or word, and to each element of
// a list. Combine with &: above(0) & at_most(1) is (0, 1].
struct Rule {
  std::optional<double> min, max;
  bool min_open = false, max_open = false;  // (min, …) rather than [min, …]
  std::vector<std::string> choices;         // the allowed words ("" when any)
  size_t min_items = 0;                     // lists: at least this many elements
  bool increasing = false;                  // lists: strictly increasing
  // A value that must parse as something named `parses_what` (a scale policy, an optimiser):
  // the parser throws Error saying what is wrong.
  std::string parses_what;
  std::function<void(const std::string&)> parse;

  // "", "≥ 2", "in (0, 1]", "one of a, b", "at least 2 values, each ≥ 2, increasing" (list: of a list)
  std::string describe(bool list = false) const;
};
Rule operator&(Rule a, const Rule& b);

namespace rules {
Rule at_least(double v);           // ≥ v
Rule at_most(double v);            // ≤ v
Rule above(double v);              // > v
Rule below(double v);              // < v
Rule positive();                   // > 0
Rule in_range(double lo, double hi);  // [lo, hi]
Rule one_of(std::vector<std::string> words);
Rule parses_as(std::string what, std::function<void(const std::string&)> parse);
Rule non_empty();                  // a list of at least one element
Rule at_least_items(size_t n);     // a list of at least n elements
Rule increasing();                 // a list, strictly increasing
Rule each(Rule element);           // a list whose every element follows `element` (documents intent: bounds apply per element)
}  // namespace rules

// Binds parameter names to the fields of a config struct. Lists are comma-separated
// ("16,64,256"); bools accept true/false/1/0/yes/no.
// "a, b,c" -> {"a", "b", "c"}: the one rule for comma lists (parameters and the command
// line's list options). An empty list or element ("1,,2") is an error naming `key`.
std::vector<std::string> split_list(const std::string& key, const std::string& text);

class Params {
 public:
  void add(const std::string& name, int64_t& field, const std::string& help, Rule rule = {});
  void add(const std::string& name, double& field, const std::string& help, Rule rule = {});
  void add(const std::string& name, bool& field, const std::string& help);
  void add(const std::string& name, std::string& field, const std::string& help, Rule rule = {});
  void add(const std::string& name, std::vector<int64_t>& field, const std::string& help, Rule rule = {});
  void add(const std::string& name, std::vector<double>& field, const std::string& help, Rule rule = {});
  void add(const std::string& name, std::vector<std::string>& field, const std::string& help, Rule rule = {});
  // A rule across parameters ("0 < a_min < a_max"), declared beside them: `holds` reads
  // the bound fields after apply() has set them all.
  void check(std::vector<std::string> keys, std::string rule, std::function<bool()> holds);

  // The parameters with the fields' current values as defaults.
  std::vector<Parameter> describe() const;
  // Sets the bound fields from config, then checks every parameter's rule and every
  // cross-parameter rule. Throws Error for an unknown key (listing the known ones), a value
  // that does not parse ("n: 'abc' is not an integer") or one that breaks its rule
  // ("n: 1 breaks the rule ≥ 2").
  void apply(const Config& config) const;
  // The fields' current values, formatted (the configuration actually run).
  Config values() const;

 private:
  struct Binding {
    Parameter parameter;
    std::function<void(const std::string&)> set;  // throws Error
    std::function<std::string()> get;
    std::function<void()> check;  // throws Error when the field breaks its rule
  };
  struct CrossCheck {
    std::vector<std::string> keys;
    std::string rule;
    std::function<bool()> holds;
  };
  std::vector<Binding> bindings_;
  std::vector<CrossCheck> cross_checks_;
  void bind(const std::string& name, const std::string& help, const std::string& type, const Rule& rule,
            std::function<void(const std::string&)> set, std::function<std::string()> get,
            std::function<void()> check);
};

// ---- results --------------------------------------------------------------

// A table of doubles, column-major: columns[c][row]. Written as DIR/data/<name>.csv.
struct Table {
  std::string name;                          // file stem, e.g. "variance_by_dim"
  std::vector<std::string> column_names;
  std::vector<std::vector<double>> columns;  // columns.size() == column_names.size(), equal lengths

  Table() = default;
  Table(std::string name, std::vector<std::string> column_names);
  void add_row(const std::vector<double>& row);  // throws Error if row.size() != number of columns
  size_t rows() const { return columns.empty() ? 0 : columns.front().size(); }
  const std::vector<double>& column(const std::string& name) const;  // throws Error if absent
};

// How a series is drawn.
enum class Style {
  points,       // measured values: markers
  lines,        // measured values: solid line
  linespoints,  // measured values: line and markers
  theory,       // a prediction: dashed line, drawn beside the measured points
  bars,         // boxes at x of height y (histograms, bar charts); x are bin centres
  band,         // filled region between y_low and y_high (e.g. min..max over seeds); y ignored
  steps,        // histogram outline
};

struct Series {
  std::string label;  // legend text ("" = no legend entry)
  Style style = Style::points;
  std::vector<double> x, y;
  std::vector<double> y_low, y_high;  // for Style::band (same length as x); else empty
  std::string color;                  // "" = automatic; otherwise a colour name or "#rrggbb"
};

// A heatmap: a rows×cols matrix drawn as coloured cells (row 0 at the top).
struct Heatmap {
  int64_t rows = 0, cols = 0;
  std::vector<double> values;  // row-major, rows*cols
  std::string colorbar_label;
  bool symmetric_range = true;  // colour range ±max|value| with a diverging palette
  double color_limit = 0;       // if > 0: colour range ±color_limit (symmetric) or [0, color_limit], e.g. shared by panels
  bool annotate = false;        // print each value in its cell (small matrices)
};

// One plot area. A Figure holds one panel or a grid of them (small multiples).
struct Panel {
  std::string title;
  std::string x_label, y_label;
  bool log_x = false, log_y = false;
  std::optional<double> x_min, x_max, y_min, y_max;
  std::vector<double> x_tics, y_tics;  // explicit tic positions (labelled %g); empty = automatic
  std::vector<Series> series;
  std::optional<Heatmap> heatmap;  // if set, the panel is a heatmap and series are ignored
  std::string legend_position = "top right";  // gnuplot's `set key` position words, or "off"
};

struct Figure {
  std::string name;   // file stem: the figure is written as DIR/figures/<name>.png
  std::string title;  // over the whole figure
  std::string caption;  // one or two sentences for the report: what to look at
  std::string alt;      // what the figure shows, in words, for readers who cannot see it (the img's alt text)
  int layout_rows = 1, layout_cols = 1;  // panel grid; panels fill it row by row
  int width = 900, height = 600;         // pixels
  std::vector<Panel> panels;
};

enum class Outcome { confirmed, refuted, inconclusive, pending };
const char* to_string(Outcome outcome);
Outcome parse_outcome(const std::string& text);  // throws Error

// The outcome over one part of the range a claim was measured on (e.g. d_k from 16 to
// 256), for claims whose outcome depends on where the measurement stops.
struct RangeOutcome {
  double from = 0, to = 0;   // the measured points of the part, inclusive
  Outcome outcome = Outcome::inconclusive;
  std::string text;          // what was measured there, in plain words
};

// The verdict on one claim, as one experiment measured it.
struct Verdict {
  std::string claim;             // "C1"
  std::string title;             // short claim title (filled from claims() by make_verdict)
  std::string statement;         // the measurable prediction
  std::vector<std::string> seeds;  // source seeds, e.g. {"001", "004"}
  double theory = kNaN;          // the number theory predicts (NaN if only text)
  std::string theory_text;       // e.g. "Var(q·k) = d_k σ⁴"
  double measured = kNaN;        // the number measured
  std::string measured_text;     // e.g. "worst relative error 2.1% over 66 settings"
  double tolerance = kNaN;       // the agreement required, in the units of `method`
  // What `theory`, `measured` and `tolerance` are, for the reader: a unit ("nats", "steps") or
  // what they are a ratio of ("ratio without/with the scale"). theory_unit and tolerance_unit
  // say it where their number is of another kind ("" = the same as `unit`).
  std::string unit, theory_unit, tolerance_unit;
  std::string method;            // how the verdict was computed, in one or two sentences
  Outcome outcome = Outcome::inconclusive;
  std::string figure;            // name of the Figure in the same Result that shows it ("" = none)
  std::string experiment;        // filled by run(): the experiment that produced it
  // The check's name, unique within its claim: "statement" (make_verdict's) for the test of the
  // claim's statement, another word for a check set beside it. claims.json's "main_check" names,
  // per claim, the one check whose contradiction refutes the claim (lab/claim_verdict.hpp).
  std::string check = "statement";
  // Filled by run() from claims.json: true for every check but the claim's main one (a side
  // check: it can make a claim that holds "mixed", never one that fails hold).
  bool supplementary = false;
  // The finding in plain words, for a reader who has not read `method`: one or two
  // sentences with the numbers that matter, no parameter names.
  std::string plain;
  // If the outcome depends on the range measured: the outcome over each part of it, in order.
  std::string range_variable;         // e.g. "d_k"
  std::vector<RangeOutcome> ranges;
};

// A verdict pre-filled with the claim's title, statement and seeds from claims().
Verdict make_verdict(const std::string& claim_id);

struct Result {
  std::string experiment;  // filled by run()
  uint64_t seed = 0;       // filled by run()
  // The full configuration actually run: filled by run() from the parameters; an
  // experiment whose parameters default to a preset (0 or empty = "the preset's") writes
  // the values it used here and they replace the parameters' own.
  Config config;
  std::string setup;       // what was measured and on what, in plain words (the report shows it)
  std::vector<Table> tables;
  std::vector<Figure> figures;
  std::vector<Verdict> verdicts;
  std::vector<std::string> notes;  // free-form lines worth printing (e.g. a reproduced table)
  double seconds = 0;      // wall time of the run (filled by run())
};

// ---- the catalogue of claims (src/lab/claims.json, compiled in) -------------

// One of the sources (src/lab/claims.json, "sources"): the five articles (seeds "000".."004")
// that C1–C12 come from, then the papers of C13 onwards (ids such as "ssmax").
struct SourceInfo {
  std::string seed;         // "000", or a paper's id ("ssmax")
  std::string title;        // in English
  std::string original_title;  // in the original language ("" when that is English)
  std::string url;          // the original article; "" if the stored copy names none
  std::string note;         // e.g. what it cites, when it gives no address of its own
  std::string cite = "";    // a paper's short citation ("Nakanishi 2025"); "" for the articles
  bool is_paper() const { return !cite.empty(); }
};
const std::vector<SourceInfo>& sources();  // the articles 000..004, then the papers
const SourceInfo& source(const std::string& seed);  // throws Error for an unknown id

// A sentence of a source that states a claim, as written and in English.
struct Quote {
  std::string seed;
  std::string original;  // the source's own words; [brackets] mark characters the stored copy lost
  std::string english;   // the translation; "" when the original is in English
  std::string lang = "zh";  // the original's language (an HTML lang code)
};

struct ClaimInfo {
  std::string id, title, statement;
  std::vector<std::string> seeds;
  std::vector<Quote> quotes;
  std::string main_check = "statement";  // the Verdict::check that decides the claim (claims.json)
};
const std::vector<ClaimInfo>& claims();  // C1, C2, ..., in order
const ClaimInfo& claim(const std::string& id);  // throws Error for an unknown id

// ---- experiments ------------------------------------------------------------

struct RunContext {
  uint64_t seed = 0;
  // OpenMP threads for the experiment's loops (0: OpenMP's default). Only the speed
  // depends on it: results are bitwise identical for any thread count.
  int threads = 0;
  // Progress messages ("gradflow: d_k 1024 (5/9)"); may be empty. Called from the running thread.
  std::function<void(const std::string&)> progress;
  void report(const std::string& message) const {
    if (progress) progress(message);
  }
  // Asked (from the running thread, at most every 10 ms) whether to stop, e.g. Python's
  // Ctrl-C; may be empty. When it answers true the run throws attnlab::Interrupted. The
  // lab's loops and the training study ask it (src/lab/interrupt.hpp).
  std::function<bool()> interrupt;
  // The processes a sweep's runs may be divided among (attnlab/run_distributor.hpp); nullptr:
  // this process alone. An experiment that divides its runs (train, hedge) returns the same Result on
  // every process; the caller writes it on rank 0 only.
  const RunDistributor* distributor = nullptr;
};

struct Experiment {
  std::string name;
  std::string summary;
  std::vector<std::string> claims;  // claim ids it gives verdicts on, e.g. {"C1", "C2"}
  std::function<std::vector<Parameter>()> parameters;
  std::function<Result(const Config&, RunContext&)> run;  // parses config, then runs
  Config quick;  // overrides for a fast run (report --quick and the tests)
};

// The lab's experiments (an explicit list in src/lab/registry.cpp) and any registered
// by the program, sorted by name.
std::vector<const Experiment*> experiments();
const Experiment* find_experiment(const std::string& name);  // nullptr if absent
// Adds an experiment beside the lab's own (a program's or a test's). Throws Error on a duplicate name.
void register_experiment(Experiment experiment);

// Runs an experiment: fills Result's experiment, seed, config, seconds and
// each verdict's experiment. Throws Error for an unknown name or bad configuration, and
// Interrupted once `interrupt` (RunContext::interrupt) answered true.
Result run(const std::string& name, const Config& config = {}, uint64_t seed = 0,
           const std::function<void(const std::string&)>& progress = {},
           const std::function<bool()>& interrupt = {}, const RunDistributor* distributor = nullptr);

// An experiment from a typed body: Cfg is a default-constructible struct with
// `void bind(Params&)`; a string configuration is parsed into it before each run.
template <class Cfg>
Experiment make_experiment(std::string name, std::string summary, std::vector<std::string> claim_ids,
                           std::function<Result(const Cfg&, RunContext&)> body, Config quick = {}) {
  Experiment e;
  e.name = std::move(name);
  e.summary = std::move(summary);
  e.claims = std::move(claim_ids);
  e.quick = std::move(quick);
  e.parameters = [] {
    Cfg cfg;
    Params p;
    cfg.bind(p);
    return p.describe();
  };
  e.run = [body](const Config& config, RunContext& ctx) {
    Cfg cfg;
    Params p;
    cfg.bind(p);
    p.apply(config);
    Result r = body(cfg, ctx);
    Config used = p.values();
    for (auto& [key, value] : r.config) used[key] = value;  // the experiment's resolved presets
    r.config = std::move(used);
    return r;
  };
  return e;
}

// ---- output -----------------------------------------------------------------

// Writes DIR/data/<table>.csv for each table, DIR/figures/<figure>.png for each
// figure (rendered by gnuplot; the generated script is kept beside it as .gp),
// and DIR/<experiment>.json (the result without the tables' data).
// Throws Error if a file cannot be written or gnuplot fails.
void write_result(const Result& result, const std::filesystem::path& dir);

// CSV of one table (header line, then rows; numbers with 17 significant digits).
void write_csv(const Table& table, const std::filesystem::path& file);

// Renders one figure to a PNG with gnuplot. Throws Error (with gnuplot's message) on failure.
void render_figure(const Figure& figure, const std::filesystem::path& png);
// True if gnuplot with a PNG terminal is available (cached).
bool plotting_available();

// JSON of a result (tables included only if with_tables), as a string.
std::string to_json(const Result& result, bool with_tables = false);

// ---- the report -------------------------------------------------------------

struct ReportOptions {
  std::filesystem::path out = "report";
  bool quick = false;     // each experiment's quick overrides
  uint64_t seed = 0;
  std::vector<std::string> only;  // experiment names to run (empty = all registered)
  std::function<void(const std::string&)> progress;
  // The processes the experiments are divided among (attnlab/run_distributor.hpp); nullptr:
  // this process alone. Rank 0 alone writes the report; the others return an empty summary.
  const RunDistributor* distributor = nullptr;
};

struct ReportSummary {
  std::filesystem::path index_html;
  std::vector<Verdict> claims;  // one aggregated verdict per claim of claims() (pending if unmeasured)
  double seconds = 0;
};

// Runs the experiments and writes OUT/index.html, OUT/report.json, OUT/figures/, OUT/data/.
// Atomic: everything is built in a temporary sibling directory and renamed over OUT
// only when complete; on failure OUT is left as it was. Throws Error.
ReportSummary write_report(const ReportOptions& options);

}  // namespace attnlab::lab
