// Writing results: CSV tables, JSON, and the figures (via plot_gnuplot.cpp).
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnlab/lab.hpp"
#include "lab/json_io.hpp"

namespace attnlab::lab {

namespace fs = std::filesystem;

void write_csv(const Table& table, const fs::path& file) {
  std::ofstream out(file);
  if (!out) throw Error("cannot write " + file.string());
  for (size_t c = 0; c < table.column_names.size(); ++c) out << (c ? "," : "") << table.column_names[c];
  out << "\n";
  for (size_t r = 0; r < table.rows(); ++r) {
    for (size_t c = 0; c < table.columns.size(); ++c) out << (c ? "," : "") << fmt::format("{:.17g}", table.columns[c][r]);
    out << "\n";
  }
  out.close();  // its errors too (a full file system)
  if (!out) throw Error("error while writing " + file.string() + ": is the file system full?");
}

nlohmann::json ranges_json(const std::vector<RangeOutcome>& ranges) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : ranges)
    out.push_back({{"from", r.from}, {"to", r.to}, {"verdict", to_string(r.outcome)}, {"text", r.text}});
  return out;
}

nlohmann::json verdict_json(const Verdict& v) {
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  return {{"id", v.claim},
          {"title", v.title},
          {"statement", v.statement},
          {"seeds", v.seeds},
          {"verdict", to_string(v.outcome)},
          {"theory", num(v.theory)},
          {"theory_text", v.theory_text},
          {"measured", num(v.measured)},
          {"measured_text", v.measured_text},
          {"tolerance", num(v.tolerance)},
          {"unit", v.unit},
          {"theory_unit", v.theory_unit.empty() ? v.unit : v.theory_unit},
          {"tolerance_unit", v.tolerance_unit.empty() ? v.unit : v.tolerance_unit},
          {"method", v.method},
          {"figure", v.figure.empty() ? nlohmann::json(nullptr) : nlohmann::json("figures/" + v.figure + ".png")},
          {"experiment", v.experiment},
          {"supplementary", v.supplementary},
          {"plain", v.plain},
          {"range_variable", v.range_variable},
          {"ranges", ranges_json(v.ranges)}};
}

nlohmann::json result_json(const Result& r, bool with_tables) {
  nlohmann::json j;
  j["experiment"] = r.experiment;
  j["seed"] = r.seed;
  j["config"] = r.config;
  j["setup"] = r.setup;
  j["seconds"] = r.seconds;
  j["verdicts"] = nlohmann::json::array();
  for (const auto& v : r.verdicts) j["verdicts"].push_back(verdict_json(v));
  j["figures"] = nlohmann::json::array();
  for (const auto& f : r.figures)
    j["figures"].push_back({{"name", f.name},
                            {"title", f.title},
                            {"caption", f.caption},
                            {"alt", f.alt},
                            {"file", "figures/" + f.name + ".png"}});
  j["tables"] = nlohmann::json::array();
  for (const auto& t : r.tables) {
    nlohmann::json tj{{"name", t.name}, {"file", "data/" + t.name + ".csv"}, {"columns", t.column_names}};
    if (with_tables) {
      nlohmann::json data = nlohmann::json::object();
      for (size_t c = 0; c < t.columns.size(); ++c) {
        nlohmann::json col = nlohmann::json::array();
        for (double x : t.columns[c]) col.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr));
        data[t.column_names[c]] = col;
      }
      tj["data"] = data;
    }
    j["tables"].push_back(tj);
  }
  j["notes"] = r.notes;
  return j;
}

std::string to_json(const Result& result, bool with_tables) { return result_json(result, with_tables).dump(2); }

void write_text_file(const fs::path& file, const std::string& text) {
  std::ofstream out(file);
  if (!out) throw Error("cannot write " + file.string());
  out << text;
  out.close();  // its errors too (a full file system)
  if (!out) throw Error("error while writing " + file.string() + ": is the file system full?");
}

void write_result(const Result& result, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir / "data", ec);
  if (ec) throw Error("cannot create " + (dir / "data").string() + ": " + ec.message());
  fs::create_directories(dir / "figures", ec);
  if (ec) throw Error("cannot create " + (dir / "figures").string() + ": " + ec.message());
  for (const auto& t : result.tables) write_csv(t, dir / "data" / (t.name + ".csv"));
  for (const auto& f : result.figures) render_figure(f, dir / "figures" / (f.name + ".png"));
  write_text_file(dir / (result.experiment.empty() ? std::string("result.json") : result.experiment + ".json"),
                  to_json(result, false) + "\n");
}

}  // namespace attnlab::lab
