// The catalogue of claims and their sources, read from src/lab/claims.json (compiled into
// the program by claims_data.S.in): the one place they are written. docs/claims.md's
// tables come from the same file (tools/claims_tables.py). The quotes of C1–C12 are from
// ../shared/seeds/, as stored ([brackets] mark characters the stored copy of seed 003 lost
// to a broken encoding); those of C13 onwards from the papers, only where the wording is certain.
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "attnlab/lab.hpp"
#include "lab/claims_data.hpp"

extern "C" {
extern const char attnlab_claims_json_begin[], attnlab_claims_json_end[];
}

namespace attnlab::lab {
namespace {

using nlohmann::json;

// A field of an entry of the catalogue: a string, "" when absent (optional) or an Error naming it (required).
std::string text(const json& entry, const char* field, bool required, const std::string& where) {
  const auto it = entry.find(field);
  if (it == entry.end()) {
    if (required) throw Error("claims.json: " + where + " has no '" + field + "'");
    return "";
  }
  if (!it->is_string()) throw Error("claims.json: " + where + ": '" + field + "' is not a string");
  return it->get<std::string>();
}

const json& list(const json& parent, const char* field, const std::string& where) {
  static const json empty = json::array();
  const auto it = parent.find(field);
  if (it == parent.end()) return empty;
  if (!it->is_array()) throw Error("claims.json: " + where + ": '" + field + "' is not a list");
  return *it;
}

struct Catalogue {
  std::vector<SourceInfo> sources;
  std::vector<ClaimInfo> claims;
  std::map<std::string, std::map<std::string, double>> thresholds;  // claim id → name → value
};

SourceInfo parse_source(const json& s, size_t index) {
  const std::string where = "source " + std::to_string(index + 1);
  const std::string id = text(s, "id", true, where), at = "source '" + id + "'";
  return {id,
          text(s, "title", true, at),
          text(s, "original_title", false, at),
          text(s, "url", false, at),
          text(s, "note", false, at),
          text(s, "cite", false, at)};
}

ClaimInfo parse_claim(const json& c, size_t index, const std::vector<SourceInfo>& sources, Catalogue& out) {
  const std::string id = text(c, "id", true, "claim " + std::to_string(index + 1)), at = "claim '" + id + "'";
  auto known = [&](const std::string& seed) {
    for (const auto& s : sources)
      if (s.seed == seed) return;
    throw Error("claims.json: " + at + " names an unknown source '" + seed + "'");
  };
  ClaimInfo info{id, text(c, "title", true, at), text(c, "statement", true, at), {}, {}};
  info.main_check = text(c, "main_check", true, at);
  for (const auto& seed : list(c, "sources", at)) {
    if (!seed.is_string()) throw Error("claims.json: " + at + ": a source id is not a string");
    known(seed.get<std::string>());
    info.seeds.push_back(seed.get<std::string>());
  }
  for (const auto& q : list(c, "quotes", at)) {
    Quote quote{text(q, "source", true, at + "'s quote"), text(q, "original", true, at + "'s quote"),
                text(q, "english", false, at), "zh"};
    known(quote.seed);
    if (const std::string lang = text(q, "lang", false, at); !lang.empty()) quote.lang = lang;
    info.quotes.push_back(quote);
  }
  if (const auto t = c.find("thresholds"); t != c.end()) {
    if (!t->is_object()) throw Error("claims.json: " + at + ": 'thresholds' is not an object");
    for (const auto& [name, entry] : t->items()) {
      const auto value = entry.find("value");
      if (value == entry.end() || !value->is_number())
        throw Error("claims.json: " + at + ": threshold '" + name + "' has no numeric 'value'");
      out.thresholds[id][name] = value->get<double>();
    }
  }
  return info;
}

Catalogue parse(std::string_view bytes) {
  json j;
  try {
    j = json::parse(bytes.begin(), bytes.end());
  } catch (const json::parse_error& e) {  // names the byte where the writer's edit broke the file
    throw Error(std::string("src/lab/claims.json is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw Error("src/lab/claims.json: not a JSON object");
  Catalogue out;
  const json& sources = list(j, "sources", "the catalogue");
  for (size_t i = 0; i < sources.size(); ++i) out.sources.push_back(parse_source(sources[i], i));
  const json& claims = list(j, "claims", "the catalogue");
  for (size_t i = 0; i < claims.size(); ++i) out.claims.push_back(parse_claim(claims[i], i, out.sources, out));
  if (out.claims.empty()) throw Error("claims.json: no claims");
  return out;
}

const Catalogue& catalogue() {
  static const Catalogue c = parse(std::string_view(
      attnlab_claims_json_begin, static_cast<size_t>(attnlab_claims_json_end - attnlab_claims_json_begin)));
  return c;
}

}  // namespace

const std::vector<SourceInfo>& sources() { return catalogue().sources; }

const SourceInfo& source(const std::string& seed) {
  for (const auto& s : sources())
    if (s.seed == seed) return s;
  std::string known;
  for (const auto& s : sources()) known += (known.empty() ? "" : ", ") + s.seed;
  throw Error("unknown source '" + seed + "' (" + known + ")");
}

const std::vector<ClaimInfo>& claims() { return catalogue().claims; }

const ClaimInfo& claim(const std::string& id) {
  for (const auto& c : claims())
    if (c.id == id) return c;
  throw Error("unknown claim '" + id + "' (C1.." + claims().back().id + ")");
}

double claim_threshold(const std::string& claim_id, const std::string& name) {
  claim(claim_id);  // an unknown claim is its own error
  const auto& all = catalogue().thresholds;
  const auto it = all.find(claim_id);
  if (it != all.end())
    if (const auto t = it->second.find(name); t != it->second.end()) return t->second;
  std::string known;
  if (it != all.end())
    for (const auto& [n, v] : it->second) known += (known.empty() ? "" : ", ") + n;
  throw Error("claim " + claim_id + " has no verdict threshold '" + name + "' in src/lab/claims.json (" +
              (known.empty() ? std::string("it has none") : "it has " + known) + ")");
}

}  // namespace attnlab::lab
