#pragma once
// The lab's words: every sentence an experiment writes (its setup and notes, each figure's
// caption and alt text, each verdict's units, method and finding) is a template in
// src/lab/words/<experiment>.json, compiled into the program (words_data.S.in). The C++
// computes the numbers and passes them by name; the template says how they read
// ("{ratio:.3g}×", fmt's syntax), so a writer edits the words without touching the code.
// Private to the lab.
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "attnlab/lab.hpp"

namespace attnlab::lab {

// One named value for a template: {name} or {name:spec} in the text.
struct WordArg {
  const char* name;
  std::variant<int64_t, double, std::string> value;

  template <class T>
  requires std::is_integral_v<T> WordArg(const char* n, T v) : name(n), value(static_cast<int64_t>(v)) {}
  template <class T>
  requires std::is_floating_point_v<T> WordArg(const char* n, T v) : name(n), value(static_cast<double>(v)) {}
  WordArg(const char* n, std::string v) : name(n), value(std::move(v)) {}
  WordArg(const char* n, const char* v) : name(n), value(std::string(v)) {}
  WordArg(const char* n, std::string_view v) : name(n), value(std::string(v)) {}
};
using WordArgs = std::initializer_list<WordArg>;

// The words of one experiment. A key names one template; its text in the file is a string or a
// list of strings joined as they stand (so that a long sentence can be written over lines).
class Words {
 public:
  // Throws Error when no words file names this experiment.
  explicit Words(std::string_view experiment);

  // The template `key` filled with args (arguments it does not name are ignored). Throws Error
  // naming the experiment and the key when there is no such key, or when the template names an
  // argument that is not given or formats it with a spec its type does not take.
  std::string operator()(std::string_view key, WordArgs args = {}) const;
  bool has(std::string_view key) const;

  // The fields of a figure or verdict that the file writes, from the keys `<prefix>.<field>`:
  // a figure's title, caption and alt; a verdict's theory_text, measured_text, unit, theory_unit,
  // tolerance_unit, method and plain. Fields without a key are left as they are.
  void fill(Figure& figure, std::string_view prefix, WordArgs args = {}) const;
  void fill(Verdict& verdict, std::string_view prefix, WordArgs args = {}) const;

 private:
  std::string experiment_;
  const nlohmann::json* entries_;  // the file's parsed JSON object
};

}  // namespace attnlab::lab
