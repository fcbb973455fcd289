// Params: binding of string configuration keys to the fields of an experiment's config
// struct, each with the rule its value must follow.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>
#include <sstream>

#include "attnlab/lab.hpp"

namespace attnlab::lab {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

constexpr long long kMaxIntParameter = 1LL << 24;

int64_t parse_int(const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(t.c_str(), &end, 10);
  if (t.empty() || end != t.c_str() + t.size() || errno == ERANGE)
    throw Error(fmt::format("{}: '{}' is not an integer", key, text));
  // Every integer parameter is a count or a size, and experiments narrow some to int
  // or multiply two: bound them here, in the type parsed, so that no later cast can
  // truncate a value past its check (grid=4294967297 became a 1-point grid).
  if (v < -kMaxIntParameter || v > kMaxIntParameter)
    throw Error(fmt::format("{}: {} is outside [-{}, {}] (2^24, the bound of every integer parameter)", key, text,
                            kMaxIntParameter, kMaxIntParameter));
  return v;
}

double parse_double(const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || errno == ERANGE || !std::isfinite(v))
    throw Error(fmt::format("{}: '{}' is not a finite number", key, text));
  return v;
}

bool parse_bool(const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  throw Error(fmt::format("{}: '{}' is not a boolean (true/false)", key, text));
}

std::string format_double(double v) { return fmt::format("{}", v); }

template <class T, class F>
std::string join(const std::vector<T>& v, F f) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += f(v[i]);
  }
  return s;
}

std::string format_bound(double v) { return fmt::format("{}", v); }

bool within(const Rule& r, double v) {
  if (r.min && (r.min_open ? !(v > *r.min) : !(v >= *r.min))) return false;
  if (r.max && (r.max_open ? !(v < *r.max) : !(v <= *r.max))) return false;
  return true;
}

void check_number(const std::string& key, const Rule& r, double v, const std::string& text, bool list) {
  if (!within(r, v)) throw Error(fmt::format("{}: {} breaks the rule {}", key, text, r.describe(list)));
}

void check_word(const std::string& key, const Rule& r, const std::string& w, bool list) {
  if (!r.choices.empty() && std::find(r.choices.begin(), r.choices.end(), w) == r.choices.end())
    throw Error(fmt::format("{}: '{}' breaks the rule {}", key, w, r.describe(list)));
  if (r.parse) {
    try {
      r.parse(w);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: '{}' is not {}: {}", key, w, r.parses_what, e.what()));
    }
  }
}

template <class T>
void check_list_shape(const std::string& key, const Rule& r, const std::vector<T>& v, const std::string& text) {
  bool increasing = true;
  if constexpr (!std::is_same_v<T, std::string>)
    for (size_t i = 1; i < v.size(); ++i) increasing = increasing && v[i] > v[i - 1];
  if (v.size() < r.min_items || (r.increasing && !increasing))
    throw Error(fmt::format("{}: '{}' breaks the rule {}", key, text, r.describe(true)));
}

}  // namespace

Rule operator&(Rule a, const Rule& b) {
  if (b.min && (!a.min || *b.min > *a.min || (*b.min == *a.min && b.min_open))) {
    a.min = b.min;
    a.min_open = b.min_open;
  }
  if (b.max && (!a.max || *b.max < *a.max || (*b.max == *a.max && b.max_open))) {
    a.max = b.max;
    a.max_open = b.max_open;
  }
  if (!b.choices.empty()) a.choices = b.choices;
  a.min_items = std::max(a.min_items, b.min_items);
  a.increasing = a.increasing || b.increasing;
  if (b.parse) {
    a.parses_what = b.parses_what;
    a.parse = b.parse;
  }
  return a;
}

std::string Rule::describe(bool list) const {
  std::vector<std::string> parts;
  if (min_items == 1) parts.push_back("at least 1 value");
  if (min_items > 1) parts.push_back(fmt::format("at least {} values", min_items));
  const std::string each = list ? "each " : "";
  if (min && max)
    parts.push_back(fmt::format("{}in {}{}, {}{}", each, min_open ? "(" : "[", format_bound(*min), format_bound(*max),
                                max_open ? ")" : "]"));
  else if (min)
    parts.push_back(fmt::format("{}{} {}", each, min_open ? ">" : "≥", format_bound(*min)));
  else if (max)
    parts.push_back(fmt::format("{}{} {}", each, max_open ? "<" : "≤", format_bound(*max)));
  if (!choices.empty()) {
    std::string words;
    for (const auto& c : choices) words += (words.empty() ? "" : ", ") + c;
    parts.push_back(fmt::format("{}one of {}", each, words));
  }
  if (parse) parts.push_back(each + parses_what);
  if (increasing) parts.push_back("increasing");
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

namespace rules {
Rule at_least(double v) {
  Rule r;
  r.min = v;
  return r;
}
Rule at_most(double v) {
  Rule r;
  r.max = v;
  return r;
}
Rule above(double v) {
  Rule r = at_least(v);
  r.min_open = true;
  return r;
}
Rule below(double v) {
  Rule r = at_most(v);
  r.max_open = true;
  return r;
}
Rule positive() { return above(0); }
Rule in_range(double lo, double hi) { return at_least(lo) & at_most(hi); }
Rule one_of(std::vector<std::string> words) {
  Rule r;
  r.choices = std::move(words);
  return r;
}
Rule parses_as(std::string what, std::function<void(const std::string&)> parse) {
  Rule r;
  r.parses_what = std::move(what);
  r.parse = std::move(parse);
  return r;
}
Rule non_empty() { return at_least_items(1); }
Rule at_least_items(size_t n) {
  Rule r;
  r.min_items = n;
  return r;
}
Rule increasing() {
  Rule r;
  r.increasing = true;
  return r;
}
Rule each(Rule element) { return element; }
}  // namespace rules

std::vector<std::string> split_list(const std::string& key, const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) items.push_back(trim(item));
  if (items.empty() || (items.size() == 1 && items[0].empty()))
    throw Error(fmt::format("{}: empty list", key));
  for (const auto& i : items)
    if (i.empty()) throw Error(fmt::format("{}: empty element in list '{}'", key, text));
  return items;
}

void Params::bind(const std::string& name, const std::string& help, const std::string& type, const Rule& rule,
                  std::function<void(const std::string&)> set, std::function<std::string()> get,
                  std::function<void()> check) {
  for (const auto& b : bindings_)
    if (b.parameter.name == name) throw Error("lab: parameter '" + name + "' bound twice");
  const bool list = type.ends_with("list");
  bindings_.push_back({Parameter{name, get(), help, type, rule.describe(list)}, std::move(set), std::move(get),
                       std::move(check)});
}

void Params::add(const std::string& name, int64_t& field, const std::string& help, Rule rule) {
  // An integer parameter is a count or a size: never negative unless its own rule says how
  // far (table_keys=-1 reached std::vector as 2^64 - 1 elements).
  if (!rule.min) rule = rule & rules::at_least(0);
  bind(name, help, "int", rule, [&field, name](const std::string& t) { field = parse_int(name, t); },
       [&field] { return std::to_string(field); },
       [&field, name, rule] { check_number(name, rule, static_cast<double>(field), std::to_string(field), false); });
}
void Params::add(const std::string& name, double& field, const std::string& help, Rule rule) {
  bind(name, help, "float", rule, [&field, name](const std::string& t) { field = parse_double(name, t); },
       [&field] { return format_double(field); },
       [&field, name, rule] { check_number(name, rule, field, format_double(field), false); });
}
void Params::add(const std::string& name, bool& field, const std::string& help) {
  bind(name, help, "bool", Rule{}, [&field, name](const std::string& t) { field = parse_bool(name, t); },
       [&field] { return std::string(field ? "true" : "false"); }, [] {});
}
void Params::add(const std::string& name, std::string& field, const std::string& help, Rule rule) {
  bind(name, help, "string", rule, [&field](const std::string& t) { field = trim(t); }, [&field] { return field; },
       [&field, name, rule] { check_word(name, rule, field, false); });
}
void Params::add(const std::string& name, std::vector<int64_t>& field, const std::string& help, Rule rule) {
  if (!rule.min) rule = rule & rules::at_least(0);  // counts or sizes, as a single integer's
  const auto get = [&field] { return join(field, [](int64_t x) { return std::to_string(x); }); };
  bind(
      name, help, "int list", rule,
      [&field, name](const std::string& t) {
        std::vector<int64_t> v;
        for (const auto& s : split_list(name, t)) v.push_back(parse_int(name, s));
        field = std::move(v);
      },
      get,
      [&field, name, rule, get] {
        check_list_shape(name, rule, field, get());
        for (int64_t x : field) check_number(name, rule, static_cast<double>(x), std::to_string(x), true);
      });
}
void Params::add(const std::string& name, std::vector<double>& field, const std::string& help, Rule rule) {
  const auto get = [&field] { return join(field, format_double); };
  bind(
      name, help, "float list", rule,
      [&field, name](const std::string& t) {
        std::vector<double> v;
        for (const auto& s : split_list(name, t)) v.push_back(parse_double(name, s));
        field = std::move(v);
      },
      get,
      [&field, name, rule, get] {
        check_list_shape(name, rule, field, get());
        for (double x : field) check_number(name, rule, x, format_double(x), true);
      });
}
void Params::add(const std::string& name, std::vector<std::string>& field, const std::string& help, Rule rule) {
  const auto get = [&field] { return join(field, [](const std::string& s) { return s; }); };
  bind(
      name, help, "string list", rule, [&field, name](const std::string& t) { field = split_list(name, t); }, get,
      [&field, name, rule, get] {
        check_list_shape(name, rule, field, get());
        for (const auto& w : field) check_word(name, rule, w, true);
      });
}

void Params::check(std::vector<std::string> keys, std::string rule, std::function<bool()> holds) {
  cross_checks_.push_back({std::move(keys), std::move(rule), std::move(holds)});
}

std::vector<Parameter> Params::describe() const {
  std::vector<Parameter> out;
  for (const auto& b : bindings_) {
    Parameter p = b.parameter;
    p.default_value = b.get();
    for (const auto& c : cross_checks_)  // the rules across parameters, shown with each of theirs
      if (std::find(c.keys.begin(), c.keys.end(), p.name) != c.keys.end())
        p.rule += (p.rule.empty() ? "" : "; ") + c.rule;
    out.push_back(std::move(p));
  }
  return out;
}

void Params::apply(const Config& config) const {
  for (const auto& [key, value] : config) {
    const Binding* found = nullptr;
    for (const auto& b : bindings_)
      if (b.parameter.name == key) found = &b;
    if (found == nullptr) {
      std::string known;
      for (const auto& b : bindings_) {
        if (!known.empty()) known += ", ";
        known += b.parameter.name;
      }
      throw Error(fmt::format("unknown parameter '{}' (known: {})", key, known.empty() ? "none" : known));
    }
    found->set(value);
  }
  for (const auto& b : bindings_) b.check();
  for (const auto& c : cross_checks_) {
    if (c.holds()) continue;
    std::string keys, values;
    for (const auto& k : c.keys) {
      keys += (keys.empty() ? "" : ", ") + k;
      for (const auto& b : bindings_)
        if (b.parameter.name == k) values += fmt::format("{}{} = {}", values.empty() ? "" : ", ", k, b.get());
    }
    throw Error(fmt::format("{}: {} {} the rule {}", keys, values, c.keys.size() == 1 ? "breaks" : "break", c.rule));
  }
}

Config Params::values() const {
  Config c;
  for (const auto& b : bindings_) c[b.parameter.name] = b.get();
  return c;
}

}  // namespace attnlab::lab
