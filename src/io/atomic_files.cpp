// Safe replacement of output files (attnlab/atomic_files.hpp). The checks run on
// every output before the first byte is written, so an error leaves every file as
// it was; the remaining race (a file changing type between the check and the
// rename) needs another process working against the user and is not defended.
#include "attnlab/atomic_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <memory>
#include <optional>

#include "attnlab/error.hpp"
#include "attnlab/temporary_files.hpp"

namespace attnlab::io {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw Error(fmt::format("{}: {}", name, what));
}

std::string errno_text() { return std::strerror(errno); }

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The file that writing `path` must replace: `path` itself, or the end of its chain of
// symlinks (the links stay links). Throws if that exists and is not a regular file.
std::string resolve_target(const std::string& path) {
  std::string p = path;
  for (int hops = 0; hops <= 40; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno != ENOENT) fail(path, "cannot write: " + errno_text() + " (no output file was changed)");
      if (hops > 0)
        fail(path, fmt::format("cannot write: a symlink to {}, which does not exist (no output file was changed)", p));
      return p;  // a new file; a missing directory is reported when it is created
    }
    if (S_ISREG(st.st_mode)) return p;
    if (!S_ISLNK(st.st_mode))
      fail(path, fmt::format("cannot write: it exists and is {}; attnlab replaces only regular files "
                             "(no output file was changed)",
                             kind_of(st.st_mode)));
    std::error_code ec;
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) fail(path, "cannot write: " + ec.message() + " (no output file was changed)");
    p = target.is_absolute() ? target.string() : (fs::path(p).parent_path() / target).string();
  }
  fail(path, "cannot write: too many levels of symbolic links (no output file was changed)");
}

// What makes two paths the same file: (device, inode) if it exists, else its canonical path.
struct Identity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string canonical;
  bool operator==(const Identity& o) const {
    return exists == o.exists && (exists ? dev == o.dev && ino == o.ino : canonical == o.canonical);
  }
};

std::optional<Identity> identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return Identity{true, st.st_dev, st.st_ino, {}};
  std::error_code ec;
  const fs::path c = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return std::nullopt;
  return Identity{false, 0, 0, c.string()};
}

// Creates `path` (which must not exist) holding `bytes`, with permissions `mode`
// (before the umask). Returns why it failed, or nothing; on failure the partial file is removed.
std::optional<std::string> write_new_file(const std::string& path, const std::string& bytes, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return errno_text();
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = w < 0 ? errno_text() : "short write";
      ::close(fd);
      ::unlink(path.c_str());
      return why;
    }
    done += static_cast<size_t>(w);
  }
  if (::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(path.c_str());
    return why;
  }
  return std::nullopt;
}

}  // namespace

void require_distinct_files(const std::vector<std::string>& outputs, const std::vector<std::string>& inputs) {
  std::vector<std::optional<Identity>> seen;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto id = identity_of(outputs[i]);
    for (size_t j = 0; j < i && id; ++j)
      if (seen[j] && *seen[j] == *id)
        fail(outputs[i], outputs[i] == outputs[j]
                             ? std::string("given for two outputs")
                             : fmt::format("the same file as the output {} (given for two outputs)", outputs[j]));
    for (const auto& in : inputs) {
      if (in.empty() || !id) continue;
      const auto in_id = identity_of(in);
      if (in_id && in_id->exists && *in_id == *id)
        fail(outputs[i], fmt::format("the same file as the input {}; write the output elsewhere "
                                     "(no output file was changed)",
                                     in));
    }
    seen.push_back(id);
  }
}

void check_output_path(const std::string& path) {
  if (path.empty()) throw Error("an output file name is empty");
  const fs::path dir = fs::path(resolve_target(path)).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec))
    fail(path, fmt::format("cannot write: the directory {} does not exist", dir.string()));
  if (::access(dir.empty() ? "." : dir.c_str(), W_OK) != 0)
    fail(path, fmt::format("cannot write: {}", errno_text()));
}

void write_file_atomically(const std::string& path, const std::string& bytes, const std::vector<std::string>& inputs) {
  write_files_atomically({{path, bytes}}, inputs);
}

void write_files_atomically(const std::vector<std::pair<std::string, std::string>>& path_and_bytes,
                            const std::vector<std::string>& inputs) {
  // Everything foreseeable is checked before anything is written: a rename can
  // still fail after others succeeded, but not because of what is at the paths.
  std::vector<std::string> paths, targets;
  for (const auto& [path, bytes] : path_and_bytes) {
    if (path.empty()) throw Error("an output file name is empty");
    paths.push_back(path);
    targets.push_back(resolve_target(path));
  }
  require_distinct_files(paths, inputs);
  for (const auto& target : targets) remove_stale_temporaries(fs::path(target).parent_path());
  std::vector<std::string> temps;  // written so far, one per output
  std::vector<std::unique_ptr<RemoveOnSignal>> removed_on_signal;  // a large write can take seconds
  for (size_t i = 0; i < path_and_bytes.size(); ++i) {
    struct stat st {};
    const mode_t mode = ::stat(targets[i].c_str(), &st) == 0 ? (st.st_mode & 07777) : 0666;  // keep a file's permissions
    temps.push_back(temporary_name(targets[i]));
    removed_on_signal.push_back(std::make_unique<RemoveOnSignal>(temps.back()));
    if (const auto why = write_new_file(temps.back(), path_and_bytes[i].second, mode)) {
      temps.pop_back();
      for (const auto& t : temps) ::unlink(t.c_str());
      fail(paths[i], fmt::format("cannot write: {} (no output file was changed)", *why));
    }
  }
  for (size_t i = 0; i < temps.size(); ++i) {
    if (std::rename(temps[i].c_str(), targets[i].c_str()) != 0) {
      const std::string why = errno_text();
      for (size_t j = i; j < temps.size(); ++j) ::unlink(temps[j].c_str());
      fail(paths[i], fmt::format("cannot replace: {}", why));
    }
  }
}

}  // namespace attnlab::io
