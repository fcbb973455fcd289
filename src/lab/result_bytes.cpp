// A Result as bytes and back (attnlab/run_distributor.hpp), so that ranks can hand their
// results to rank 0. CBOR through nlohmann::json; every double travels as its 64 bits (a
// JSON number would lose NaN, its sign and infinities, which the CSVs print).
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>

#include "attnlab/run_distributor.hpp"

namespace attnlab::lab {
namespace {
using nlohmann::json;

json bits(double x) { return std::bit_cast<uint64_t>(x); }
double from_bits(const json& j) { return std::bit_cast<double>(j.get<uint64_t>()); }

json doubles(const std::vector<double>& xs) {
  std::vector<uint8_t> raw(xs.size() * sizeof(double));
  if (!xs.empty()) std::memcpy(raw.data(), xs.data(), raw.size());
  return json::binary(std::move(raw));
}
std::vector<double> doubles_from(const json& j) {
  const auto& raw = j.get_binary();
  if (raw.size() % sizeof(double) != 0) throw Error("result bytes: a list of doubles of " + std::to_string(raw.size()) + " bytes");
  std::vector<double> xs(raw.size() / sizeof(double));
  if (!xs.empty()) std::memcpy(xs.data(), raw.data(), raw.size());
  return xs;
}
json optional_double(const std::optional<double>& x) { return x ? bits(*x) : json(nullptr); }
std::optional<double> optional_from(const json& j) {
  return j.is_null() ? std::nullopt : std::optional<double>(from_bits(j));
}

json series_json(const Series& s) {
  return {{"label", s.label}, {"style", static_cast<int>(s.style)}, {"x", doubles(s.x)}, {"y", doubles(s.y)},
          {"y_low", doubles(s.y_low)}, {"y_high", doubles(s.y_high)}, {"color", s.color}};
}
Series series_from(const json& j) {
  Series s;
  s.label = j.at("label");
  s.style = static_cast<Style>(j.at("style").get<int>());
  s.x = doubles_from(j.at("x"));
  s.y = doubles_from(j.at("y"));
  s.y_low = doubles_from(j.at("y_low"));
  s.y_high = doubles_from(j.at("y_high"));
  s.color = j.at("color");
  return s;
}

json panel_json(const Panel& p) {
  json j{{"title", p.title},         {"x_label", p.x_label},           {"y_label", p.y_label},
         {"log_x", p.log_x},         {"log_y", p.log_y},               {"x_min", optional_double(p.x_min)},
         {"x_max", optional_double(p.x_max)}, {"y_min", optional_double(p.y_min)}, {"y_max", optional_double(p.y_max)},
         {"x_tics", doubles(p.x_tics)}, {"y_tics", doubles(p.y_tics)}, {"legend_position", p.legend_position},
         {"series", json::array()},  {"heatmap", nullptr}};
  for (const auto& s : p.series) j["series"].push_back(series_json(s));
  if (p.heatmap) {
    const Heatmap& h = *p.heatmap;
    j["heatmap"] = {{"rows", h.rows},
                    {"cols", h.cols},
                    {"values", doubles(h.values)},
                    {"colorbar_label", h.colorbar_label},
                    {"symmetric_range", h.symmetric_range},
                    {"color_limit", bits(h.color_limit)},
                    {"annotate", h.annotate}};
  }
  return j;
}
Panel panel_from(const json& j) {
  Panel p;
  p.title = j.at("title");
  p.x_label = j.at("x_label");
  p.y_label = j.at("y_label");
  p.log_x = j.at("log_x");
  p.log_y = j.at("log_y");
  p.x_min = optional_from(j.at("x_min"));
  p.x_max = optional_from(j.at("x_max"));
  p.y_min = optional_from(j.at("y_min"));
  p.y_max = optional_from(j.at("y_max"));
  p.x_tics = doubles_from(j.at("x_tics"));
  p.y_tics = doubles_from(j.at("y_tics"));
  p.legend_position = j.at("legend_position");
  for (const auto& s : j.at("series")) p.series.push_back(series_from(s));
  if (const json& h = j.at("heatmap"); !h.is_null()) {
    Heatmap m;
    m.rows = h.at("rows");
    m.cols = h.at("cols");
    m.values = doubles_from(h.at("values"));
    m.colorbar_label = h.at("colorbar_label");
    m.symmetric_range = h.at("symmetric_range");
    m.color_limit = from_bits(h.at("color_limit"));
    m.annotate = h.at("annotate");
    p.heatmap = std::move(m);
  }
  return p;
}

json verdict_bytes_json(const Verdict& v) {
  json j{{"claim", v.claim},
         {"title", v.title},
         {"statement", v.statement},
         {"seeds", v.seeds},
         {"theory", bits(v.theory)},
         {"theory_text", v.theory_text},
         {"measured", bits(v.measured)},
         {"measured_text", v.measured_text},
         {"tolerance", bits(v.tolerance)},
         {"unit", v.unit},
         {"theory_unit", v.theory_unit},
         {"tolerance_unit", v.tolerance_unit},
         {"method", v.method},
         {"outcome", static_cast<int>(v.outcome)},
         {"figure", v.figure},
         {"experiment", v.experiment},
         {"check", v.check},
         {"supplementary", v.supplementary},
         {"plain", v.plain},
         {"range_variable", v.range_variable},
         {"ranges", json::array()}};
  for (const auto& r : v.ranges)
    j["ranges"].push_back({{"from", bits(r.from)}, {"to", bits(r.to)}, {"outcome", static_cast<int>(r.outcome)}, {"text", r.text}});
  return j;
}
Verdict verdict_from(const json& j) {
  Verdict v;
  v.claim = j.at("claim");
  v.title = j.at("title");
  v.statement = j.at("statement");
  v.seeds = j.at("seeds").get<std::vector<std::string>>();
  v.theory = from_bits(j.at("theory"));
  v.theory_text = j.at("theory_text");
  v.measured = from_bits(j.at("measured"));
  v.measured_text = j.at("measured_text");
  v.tolerance = from_bits(j.at("tolerance"));
  v.unit = j.at("unit");
  v.theory_unit = j.at("theory_unit");
  v.tolerance_unit = j.at("tolerance_unit");
  v.method = j.at("method");
  v.outcome = static_cast<Outcome>(j.at("outcome").get<int>());
  v.figure = j.at("figure");
  v.experiment = j.at("experiment");
  v.check = j.at("check");
  v.supplementary = j.at("supplementary");
  v.plain = j.at("plain");
  v.range_variable = j.at("range_variable");
  for (const auto& r : j.at("ranges"))
    v.ranges.push_back({from_bits(r.at("from")), from_bits(r.at("to")), static_cast<Outcome>(r.at("outcome").get<int>()),
                        r.at("text").get<std::string>()});
  return v;
}

}  // namespace

std::string result_to_bytes(const Result& r) {
  json j{{"experiment", r.experiment}, {"seed", r.seed},   {"config", r.config}, {"setup", r.setup},
         {"notes", r.notes},           {"seconds", bits(r.seconds)}, {"tables", json::array()},
         {"figures", json::array()},   {"verdicts", json::array()}};
  for (const auto& t : r.tables) {
    json columns = json::array();
    for (const auto& c : t.columns) columns.push_back(doubles(c));
    j["tables"].push_back({{"name", t.name}, {"column_names", t.column_names}, {"columns", columns}});
  }
  for (const auto& f : r.figures) {
    json panels = json::array();
    for (const auto& p : f.panels) panels.push_back(panel_json(p));
    j["figures"].push_back({{"name", f.name},
                            {"title", f.title},
                            {"caption", f.caption},
                            {"alt", f.alt},
                            {"layout_rows", f.layout_rows},
                            {"layout_cols", f.layout_cols},
                            {"width", f.width},
                            {"height", f.height},
                            {"panels", panels}});
  }
  for (const auto& v : r.verdicts) j["verdicts"].push_back(verdict_bytes_json(v));
  const std::vector<uint8_t> cbor = json::to_cbor(j);
  return {cbor.begin(), cbor.end()};
}

Result result_from_bytes(const std::string& bytes) {
  try {
    const json j = json::from_cbor(bytes.begin(), bytes.end());
    Result r;
    r.experiment = j.at("experiment");
    r.seed = j.at("seed");
    r.config = j.at("config").get<Config>();
    r.setup = j.at("setup");
    r.notes = j.at("notes").get<std::vector<std::string>>();
    r.seconds = from_bits(j.at("seconds"));
    for (const auto& t : j.at("tables")) {
      Table table;
      table.name = t.at("name");
      table.column_names = t.at("column_names").get<std::vector<std::string>>();
      for (const auto& c : t.at("columns")) table.columns.push_back(doubles_from(c));
      r.tables.push_back(std::move(table));
    }
    for (const auto& f : j.at("figures")) {
      Figure figure;
      figure.name = f.at("name");
      figure.title = f.at("title");
      figure.caption = f.at("caption");
      figure.alt = f.at("alt");
      figure.layout_rows = f.at("layout_rows");
      figure.layout_cols = f.at("layout_cols");
      figure.width = f.at("width");
      figure.height = f.at("height");
      for (const auto& p : f.at("panels")) figure.panels.push_back(panel_from(p));
      r.figures.push_back(std::move(figure));
    }
    for (const auto& v : j.at("verdicts")) r.verdicts.push_back(verdict_from(v));
    return r;
  } catch (const json::exception& e) {
    throw Error(std::string("result bytes: malformed (") + e.what() + ")");
  }
}

}  // namespace attnlab::lab
