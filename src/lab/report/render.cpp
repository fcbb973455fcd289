// Fills the page's templates (kainjow's header-only Mustache) with a view model given as
// JSON. Mustache escapes every {{field}} for HTML, so the view holds plain text; the markup
// is in the templates.
#include <kainjow/mustache.hpp>

#include "lab/report/assets.hpp"
#include "lab/report/view.hpp"

namespace attnlab::lab::page {
namespace {

namespace mustache = kainjow::mustache;

// JSON as Mustache data. An empty string, null and false are all "absent" to a section
// ({{#x}}…{{/x}}), so that a template can test for a field the data may leave empty.
mustache::data to_data(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::object: {
      mustache::data d{mustache::data::type::object};
      for (const auto& [key, value] : j.items()) d.set(key, to_data(value));
      return d;
    }
    case nlohmann::json::value_t::array: {
      mustache::data d{mustache::data::type::list};
      for (const auto& value : j) d.push_back(to_data(value));
      return d;
    }
    case nlohmann::json::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      return s.empty() ? mustache::data{false} : mustache::data{s};
    }
    case nlohmann::json::value_t::boolean:
      return mustache::data{j.get<bool>()};
    case nlohmann::json::value_t::null:
      return mustache::data{false};
    default:
      return mustache::data{j.dump()};  // numbers: the view formats those meant for readers
  }
}

const assets::Asset* find_template(const std::string& name) {
  for (const auto& t : assets::kTemplates)
    if (name == t.file) return &t;
  return nullptr;
}

}  // namespace

std::string render(const std::string& name, const nlohmann::json& view) {
  const assets::Asset* page = find_template(name + ".mustache");
  if (page == nullptr) throw Error("report: no template " + name + ".mustache");
  mustache::data data = to_data(view);
  // Every template is a partial under its file name (no field has a dot in its name).
  for (const auto& t : assets::kTemplates) data.set(t.file, std::string(t.bytes));
  mustache::mustache tmpl{std::string(page->bytes)};
  const std::string out = tmpl.render(data);
  if (!tmpl.is_valid()) throw Error("report: template " + name + ".mustache: " + tmpl.error_message());
  return out;
}

}  // namespace attnlab::lab::page
