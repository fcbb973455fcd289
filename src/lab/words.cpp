// The lab's words (words.hpp): the files of src/lab/words/, compiled in one after another, each
// ended by a NUL byte (words_data.S.in), parsed once and indexed by their "experiment".
#include "lab/words.hpp"

#include <fmt/args.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

extern "C" {
extern const char attnlab_words_begin[], attnlab_words_end[];
}

namespace attnlab::lab {
namespace {

using nlohmann::json;

const std::map<std::string, json, std::less<>>& all_words() {
  static const auto files = [] {
    std::map<std::string, json, std::less<>> out;
    for (const char* p = attnlab_words_begin; p < attnlab_words_end;) {
      const std::string_view bytes(p);
      p += bytes.size() + 1;
      if (bytes.find_first_not_of(" \t\r\n") == std::string_view::npos) continue;
      json file = json::parse(bytes);
      if (!file.is_object() || !file.contains("experiment") || !file["experiment"].is_string())
        throw Error("lab words: a file of src/lab/words/ has no \"experiment\" name");
      const std::string name = file["experiment"].get<std::string>();
      for (const auto& [key, text] : file.items()) {
        const bool lines =
            text.is_array() && std::all_of(text.begin(), text.end(), [](const json& l) { return l.is_string(); });
        if (!text.is_string() && !lines)
          throw Error("lab words: " + name + ": '" + key + "' is neither a string nor a list of strings");
      }
      if (!out.emplace(name, std::move(file)).second)
        throw Error("lab words: two files of src/lab/words/ are for experiment '" + name + "'");
    }
    return out;
  }();
  return files;
}

}  // namespace

Words::Words(std::string_view experiment) : experiment_(experiment) {
  const auto& files = all_words();
  const auto it = files.find(experiment);
  if (it == files.end()) throw Error("lab words: no file of src/lab/words/ is for experiment '" + experiment_ + "'");
  entries_ = &it->second;
}

bool Words::has(std::string_view key) const { return entries_->contains(key); }

std::string Words::operator()(std::string_view key, WordArgs args) const {
  const json& file = *entries_;
  const auto it = file.find(key);
  if (it == file.end()) throw Error(fmt::format("lab words: {} has no text '{}'", experiment_, key));
  std::string pattern;
  if (it->is_string()) {
    pattern = it->get<std::string>();
  } else {
    for (const auto& line : *it) pattern += line.get<std::string>();
  }
  fmt::dynamic_format_arg_store<fmt::format_context> store;
  for (const auto& a : args) std::visit([&](const auto& v) { store.push_back(fmt::arg(a.name, v)); }, a.value);
  try {
    return fmt::vformat(pattern, store);
  } catch (const fmt::format_error& e) {
    throw Error(fmt::format("lab words: {} '{}': {}", experiment_, key, e.what()));
  }
}

void Words::fill(Figure& figure, std::string_view prefix, WordArgs args) const {
  const std::string p(prefix);
  for (auto [field, name] : {std::pair{&figure.title, ".title"}, {&figure.caption, ".caption"}, {&figure.alt, ".alt"}})
    if (has(p + name)) *field = (*this)(p + name, args);
}

void Words::fill(Verdict& verdict, std::string_view prefix, WordArgs args) const {
  const std::string p(prefix);
  for (auto [field, name] : {std::pair{&verdict.theory_text, ".theory_text"},
                             {&verdict.measured_text, ".measured_text"},
                             {&verdict.unit, ".unit"},
                             {&verdict.theory_unit, ".theory_unit"},
                             {&verdict.tolerance_unit, ".tolerance_unit"},
                             {&verdict.method, ".method"},
                             {&verdict.plain, ".plain"}})
    if (has(p + name)) *field = (*this)(p + name, args);
}

}  // namespace attnlab::lab
