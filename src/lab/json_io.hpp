#pragma once
// JSON and file helpers shared by output.cpp and report.cpp (private to the library).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "attnlab/lab.hpp"

namespace attnlab::lab {
nlohmann::json verdict_json(const Verdict& v);
nlohmann::json result_json(const Result& r, bool with_tables);
void write_text_file(const std::filesystem::path& file, const std::string& text);  // throws Error
}  // namespace attnlab::lab
