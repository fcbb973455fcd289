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

// The manifest of `dir`: its list, or why there is none that attnlab can trust. Each way a
// manifest can fail is named (absent; a directory, symlink or other non-file at its name;
// unreadable; another attnlab's version; not a manifest at all), never all as "absent".
struct Manifest {
  std::optional<std::map<std::string, char>> listed;
  std::string problem;  // when !listed: what is wrong, "" if there is simply none
};

Manifest read_manifest(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir / kManifestName, ec);
  if (!fs::exists(st)) return {};
  if (!fs::is_regular_file(st))
    return {std::nullopt, fmt::format("its {} is {}, not the file attnlab writes", kManifestName,
                                      fs::is_symlink(st) ? "a symlink" : kind_name(kind_of(st)))};
  std::ifstream in(dir / kManifestName);
  std::string line;
  if (!in) return {std::nullopt, fmt::format("its {} cannot be read ({})", kManifestName, std::strerror(errno))};
  const std::string prefix = "attnlab output manifest ";
  if (!std::getline(in, line) || line.rfind(prefix, 0) != 0)
    return {std::nullopt, fmt::format("its {} is not a manifest attnlab wrote (it does not start with '{}')",
                                      kManifestName, kManifestHeader)};
  if (line != kManifestHeader)
    return {std::nullopt, fmt::format("its {} is of another version ('{}'; this attnlab writes '{}'), so this "
                                      "attnlab cannot tell what in it was written",
                                      kManifestName, line.substr(0, 60), kManifestHeader)};
  std::map<std::string, char> listed;
  while (std::getline(in, line))
    if (line.size() > 2 && line[1] == ' ') listed[line.substr(2)] = line[0];
  return {listed, ""};
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

// Every file under `dir` proven whole before the swap: the size the file system reports, and
// for a format with an end marker, the marker. A writer that does not report a failed write
// (gnuplot, on a full file system, exits 0 with a PNG cut at 128 KiB) would otherwise
// replace a good output with a broken one.
void require_whole_files(const fs::path& dir, const std::string& what) {
  static constexpr unsigned char kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  static constexpr unsigned char kPngEnd[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};  // IEND, its CRC
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const fs::path rel = it->path().lexically_relative(dir);
    const auto size = it->file_size(ec);
    const std::string ext = it->path().extension().string();
    auto broken = [&](const std::string& why) {
      throw Error(fmt::format("{}: {} was not written whole ({}): a write failed, is the file system full? (the "
                              "earlier output, if any, is unchanged)",
                              what, rel.string(), why));
    };
    if (ec) broken(ec.message());
    if (size == 0 && (ext == ".png" || ext == ".csv" || ext == ".json" || ext == ".html" || ext == ".gp"))
      broken("0 bytes");
    if (ext != ".png") continue;
    unsigned char head[8] = {}, tail[12] = {};
    std::ifstream in(it->path(), std::ios::binary);
    in.read(reinterpret_cast<char*>(head), sizeof head);
    if (size >= sizeof head + sizeof tail) {
      in.seekg(static_cast<std::streamoff>(size - sizeof tail));
      in.read(reinterpret_cast<char*>(tail), sizeof tail);
    }
    if (!in || std::memcmp(head, kPngSignature, sizeof head) != 0 || std::memcmp(tail, kPngEnd, sizeof tail) != 0)
      broken(fmt::format("{} bytes, not a PNG that ends with its IEND chunk", size));
  }
  if (ec) throw Error(fmt::format("{}: cannot look through {}: {}", what, dir.string(), ec.message()));
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
  const Manifest manifest = read_manifest(out);
  const auto& listed = manifest.listed;
  if (!listed) {
    if (present.empty() && manifest.problem.empty()) return check_buildable(out, what);  // empty: nothing to lose
    if (!manifest.problem.empty())
      refuse(what, out_arg,
             fmt::format("{}; nothing proves that all in it is attnlab's, so choose another --out or look through it "
                         "and remove it yourself",
                         manifest.problem));
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

void require_outside_output_directory(const std::string& file, const std::string& file_what, const std::string& out,
                                      const std::string& out_what) {
  if (file.empty()) return;
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(output_directory_path(out, out_what), ec);
  const fs::path f = fs::weakly_canonical(fs::absolute(file), ec);
  if (ec) return;  // neither can be resolved: the writes will say why
  auto d = dir.begin();
  auto p = f.begin();
  for (; d != dir.end() && p != f.end() && *d == *p; ++d, ++p) {
  }
  if (d == dir.end())
    throw Error(fmt::format("{} {}: {} the output directory ({} {}), which attnlab replaces whole; write it "
                            "elsewhere (nothing was changed)",
                            file_what, file, p == f.end() ? "is" : "is inside", out_what, out));
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
  file.close();
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
  const RemoveOnSignal removed_on_signal(tmp.string(), RemoveOnSignal::Kind::directory_tree);  // ours: just created
  try {
    fill(tmp);
    require_whole_files(tmp, what);
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
