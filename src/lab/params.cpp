// Params: binding of string configuration keys to the fields of an experiment's config struct.
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

}  // namespace

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

void Params::bind(const std::string& name, const std::string& help, const std::string& type,
                  std::function<void(const std::string&)> set, std::function<std::string()> get) {
  for (const auto& b : bindings_)
    if (b.parameter.name == name) throw Error("lab: parameter '" + name + "' bound twice");
  bindings_.push_back({Parameter{name, get(), help, type}, std::move(set), std::move(get)});
}

void Params::add(const std::string& name, int64_t& field, const std::string& help) {
  bind(name, help, "int", [&field, name](const std::string& t) { field = parse_int(name, t); },
       [&field] { return std::to_string(field); });
}
void Params::add(const std::string& name, double& field, const std::string& help) {
  bind(name, help, "float", [&field, name](const std::string& t) { field = parse_double(name, t); },
       [&field] { return format_double(field); });
}
void Params::add(const std::string& name, bool& field, const std::string& help) {
  bind(name, help, "bool", [&field, name](const std::string& t) { field = parse_bool(name, t); },
       [&field] { return std::string(field ? "true" : "false"); });
}
void Params::add(const std::string& name, std::string& field, const std::string& help) {
  bind(name, help, "string", [&field](const std::string& t) { field = trim(t); }, [&field] { return field; });
}
void Params::add(const std::string& name, std::vector<int64_t>& field, const std::string& help) {
  bind(
      name, help, "int list",
      [&field, name](const std::string& t) {
        std::vector<int64_t> v;
        for (const auto& s : split_list(name, t)) v.push_back(parse_int(name, s));
        field = std::move(v);
      },
      [&field] { return join(field, [](int64_t x) { return std::to_string(x); }); });
}
void Params::add(const std::string& name, std::vector<double>& field, const std::string& help) {
  bind(
      name, help, "float list",
      [&field, name](const std::string& t) {
        std::vector<double> v;
        for (const auto& s : split_list(name, t)) v.push_back(parse_double(name, s));
        field = std::move(v);
      },
      [&field] { return join(field, format_double); });
}
void Params::add(const std::string& name, std::vector<std::string>& field, const std::string& help) {
  bind(
      name, help, "string list", [&field, name](const std::string& t) { field = split_list(name, t); },
      [&field] { return join(field, [](const std::string& s) { return s; }); });
}

std::vector<Parameter> Params::describe() const {
  std::vector<Parameter> out;
  for (const auto& b : bindings_) {
    Parameter p = b.parameter;
    p.default_value = b.get();
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
}

Config Params::values() const {
  Config c;
  for (const auto& b : bindings_) c[b.parameter.name] = b.get();
  return c;
}

}  // namespace attnlab::lab
