// Output directories replaced only when attnlab can prove it wrote all of them
// (attnlab/output_directory.hpp).
#include "attnlab/output_directory.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "attnlab/error.hpp"
#include "attnlab/temporary_files.hpp"

namespace attnlab::io {
namespace {

namespace fs = std::filesystem;

constexpr const char* kManifestHeader = "attnlab output manifest 1";
// What attnlab wrote into its output directories before the manifest existed.
constexpr const char* kOldMarkerName = ".attnlab-output";

// The kind of an entry, as the manifest records it: 'd' directory, 'f' regular file,
// anything else (a symlink, a FIFO...) is never attnlab's.
char kind_of(const fs::file_status& st) {
  if (fs::is_directory(st)) return 'd';
  if (fs::is_regular_file(st)) return 'f';
  return '?';
}

const char* kind_name(char kind) {
  return kind == 'd' ? "a directory" : kind == 'f' ? "a regular file" : "neither a regular file nor a directory";
}

[[noreturn]] void refuse(const std::string& what, const std::string& out, const std::string& why) {
  throw Error(fmt::format("{} {}: {} (nothing was changed)", what, out, why));
}

// Every entry under `dir` (not following symlinks), by path relative to it, sorted.
std::map<std::string, char> entries_of(const fs::path& dir, std::error_code& ec) {
  std::map<std::string, char> out;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string rel = it->path().lexically_relative(dir).generic_string();
    if (rel != kManifestName) out[rel] = kind_of(it->symlink_status(ec));
  }
  return out;
}

// The manifest of `dir`, or nothing if it has none (or not a regular file).
std::optional<std::map<std::string, char>> read_manifest(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(dir / kManifestName, ec))) return std::nullopt;
  std::ifstream in(dir / kManifestName);
  std::string line;
  if (!std::getline(in, line) || line != kManifestHeader) return std::nullopt;
  std::map<std::string, char> listed;
  while (std::getline(in, line))
    if (line.size() > 2 && line[1] == ' ') listed[line.substr(2)] = line[0];
  return listed;
}

// The directory `out` would be built in must exist or be creatable: its nearest existing
// ancestor must be a directory this process can write.
void check_buildable(const fs::path& out, const std::string& what) {
  fs::path p = out.parent_path();
  std::error_code ec;
  while (!fs::exists(fs::symlink_status(p, ec)) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  if (!fs::is_directory(p, ec))
    refuse(what, out.string(), fmt::format("cannot create it: {} is not a directory", p.string()));
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    refuse(what, out.string(), fmt::format("cannot create it in {}: {}", p.string(), std::strerror(errno)));
}

// An interrupted run (killed, Ctrl-C) may leave its hidden work directories next to OUT:
// ".OUT.tmp-PID" (half built) and, if it died between the two renames, ".OUT.old-PID" (the
// earlier output, moved aside). Those of dead processes are cleaned up: the earlier output
// is put back if OUT is missing, the rest removed.
void recover_interrupted(const fs::path& out) {
  std::error_code ec;
  const std::string stem = out.filename().string();
  for (const auto& entry : fs::directory_iterator(out.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    for (const std::string kind : {".tmp-", ".old-"}) {
      const std::string prefix = "." + stem + kind;
      if (name.rfind(prefix, 0) != 0) continue;
      const auto pid = pid_in_name(name.substr(prefix.size()));
      if (!pid || !process_is_dead(*pid)) continue;
      std::error_code e2;
      if (kind == ".old-" && !fs::exists(fs::symlink_status(out, e2)))
        fs::rename(entry.path(), out, e2);
      else
        fs::remove_all(entry.path(), e2);
    }
  }
}

}  // namespace

fs::path output_directory_path(const std::string& out, const std::string& what) {
  if (out.empty()) throw Error(fmt::format("{}: an empty directory name", what));
  fs::path p = fs::absolute(out).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "rep/" -> "rep"
  if (!p.has_filename() || p == p.root_path() || p.filename() == "..")
    throw Error(fmt::format("{} {}: names no directory attnlab could replace (nothing was changed)", what, out));
  return p;
}

void check_replaceable_directory(const std::string& out_arg, const std::string& what) {
  const fs::path out = output_directory_path(out_arg, what);
  struct stat st {};
  if (::lstat(out.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR)
      refuse(what, out_arg, fmt::format("cannot use it: {}", std::strerror(errno)));
    return check_buildable(out, what);
  }
  if (S_ISLNK(st.st_mode))
    refuse(what, out_arg, "is a symlink; attnlab replaces its output directory whole, so give the directory itself");
  if (!S_ISDIR(st.st_mode))
    refuse(what, out_arg,
           fmt::format("exists and is {}, not a directory attnlab wrote", S_ISREG(st.st_mode) ? "a regular file" : "not a directory"));
  std::error_code ec;
  const auto present = entries_of(out, ec);
  if (ec) refuse(what, out_arg, fmt::format("cannot look through it: {}", ec.message()));
  const auto listed = read_manifest(out);
  if (!listed) {
    if (present.empty()) return check_buildable(out, what);  // empty: nothing to lose
    if (present.count(kOldMarkerName) != 0)
      refuse(what, out_arg,
             fmt::format("was written by an attnlab older than its {} (the list of the files it wrote), so nothing "
                         "proves that all in it is attnlab's; look through it, then remove it yourself or choose "
                         "another --out",
                         kManifestName));
    refuse(what, out_arg,
           fmt::format("is a directory attnlab did not write (no {} in it); it would be replaced whole, so choose "
                       "another --out or remove it yourself",
                       kManifestName));
  }
  for (const auto& [rel, kind] : present) {
    const auto it = listed->find(rel);
    if (it == listed->end())
      refuse(what, out_arg,
             fmt::format("{} is not among what attnlab wrote there (its {} does not list it); it would be deleted with the "
                         "directory, so move it out or choose another --out",
                         rel, kManifestName));
    if (it->second != kind)
      refuse(what, out_arg,
             fmt::format("{} is {} where attnlab wrote {}; it would be deleted with the directory, so move it out "
                         "or choose another --out",
                         rel, kind_name(kind), kind_name(it->second)));
  }
  check_buildable(out, what);
}

void write_manifest(const fs::path& dir) {
  std::error_code ec;
  const auto present = entries_of(dir, ec);
  if (ec) throw Error(fmt::format("cannot list {}: {}", dir.string(), ec.message()));
  std::ostringstream text;
  text << kManifestHeader << "\n";
  for (const auto& [rel, kind] : present) text << kind << ' ' << rel << "\n";
  std::ofstream file(dir / kManifestName);
  file << text.str();
  file.flush();
  if (!file) throw Error(fmt::format("cannot write {}", (dir / kManifestName).string()));
}

void build_output_directory(const std::string& out_arg, const std::string& what,
                            const std::function<void(const fs::path&)>& fill) {
  const fs::path out = output_directory_path(out_arg, what);
  check_replaceable_directory(out_arg, what);  // before any work
  const fs::path parent = out.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error(fmt::format("{}: cannot create {}: {}", what, parent.string(), ec.message()));
  recover_interrupted(out);
  const std::string stem = out.filename().string();
  const fs::path tmp = parent / fmt::format(".{}.tmp-{}", stem, ::getpid());
  const fs::path old = parent / fmt::format(".{}.old-{}", stem, ::getpid());
  fs::remove_all(tmp, ec);  // ours by name and PID
  fs::create_directory(tmp, ec);
  if (ec) throw Error(fmt::format("{}: cannot create {}: {}", what, tmp.string(), ec.message()));
  try {
    fill(tmp);
    write_manifest(tmp);
    check_replaceable_directory(out_arg, what);  // again: the work took a while
    fs::remove_all(old, ec);
    const bool had_old = fs::exists(fs::symlink_status(out, ec));
    if (had_old) {
      fs::rename(out, old, ec);
      if (ec) throw Error(fmt::format("{}: cannot move the earlier {} aside: {}", what, out.string(), ec.message()));
    }
    fs::rename(tmp, out, ec);
    if (ec) {
      std::error_code ec2;
      if (had_old) fs::rename(old, out, ec2);
      throw Error(fmt::format("{}: cannot rename {} to {}: {}", what, tmp.string(), out.string(), ec.message()));
    }
    if (had_old) fs::remove_all(old, ec);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace attnlab::io
