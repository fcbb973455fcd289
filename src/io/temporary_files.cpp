// Temporary files: their names, stale ones, and removal on a fatal signal
// (attnlab/temporary_files.hpp).
#include "attnlab/temporary_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fmt/format.h>
#include <mutex>

namespace attnlab::io {
namespace {

namespace fs = std::filesystem;

// The paths to remove on a signal, in fixed storage: the handler may only call
// async-signal-safe functions (system calls: unlinkat, openat, getdents64, sigaction, raise),
// never allocate.
constexpr int kSlots = 64;
char g_paths[kSlots][PATH_MAX];
std::atomic<bool> g_used[kSlots];
bool g_tree[kSlots];  // a directory this process created: removed with all in it
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[sizeof(kSignals) / sizeof(kSignals[0])];

// The kernel's linux_dirent64: d_ino (8 bytes), d_off (8), d_reclen (2), d_type (1), d_name.
constexpr size_t kReclenAt = 16, kTypeAt = 18, kNameAt = 19;

bool dot_or_dotdot(const char* n) { return n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')); }

// Removes `name` in the directory `parent`: a file or a symlink (never followed) by unlinkat,
// a directory after all in it. System calls only, fixed buffers on the stack, 64 levels at
// most: callable from a signal handler. Directories are read again until a pass removes
// nothing (a directory read while its entries go may skip some).
void remove_tree(int parent, const char* name, int depth) {
  const int fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    ::unlinkat(parent, name, 0);
    return;
  }
  alignas(8) char buf[4096];
  for (int pass = 0; pass < 64; ++pass) {
    bool removed = false;
    ::lseek(fd, 0, SEEK_SET);
    for (long n; (n = ::syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0;)
      for (long off = 0; off < n;) {
        const char* entry = buf + off;
        unsigned short reclen = 0;
        std::memcpy(&reclen, entry + kReclenAt, sizeof reclen);
        off += reclen;
        const unsigned char type = static_cast<unsigned char>(entry[kTypeAt]);
        const char* name = entry + kNameAt;
        if (dot_or_dotdot(name)) continue;
        bool dir = type == DT_DIR;
        if (type == DT_UNKNOWN) {
          struct stat st {};
          dir = ::fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
        }
        if (dir && depth < 64)
          remove_tree(fd, name, depth + 1);
        else
          ::unlinkat(fd, name, 0);
        removed = true;
      }
    if (!removed) break;
  }
  ::close(fd);
  ::unlinkat(parent, name, AT_REMOVEDIR);
}

void remove_and_die(int sig) {
  for (int i = 0; i < kSlots; ++i) {
    if (!g_used[i].load(std::memory_order_acquire)) continue;
    if (g_tree[i])
      remove_tree(AT_FDCWD, g_paths[i], 0);
    else
      ::unlink(g_paths[i]);
  }
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i)
    if (kSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  ::raise(sig);  // the default action: the process ends with the signal's status
}

void install_handlers_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
      struct sigaction current {};
      ::sigaction(kSignals[i], nullptr, &current);
      if (current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO)) continue;  // someone else's
      struct sigaction ours {};
      ours.sa_handler = remove_and_die;
      sigemptyset(&ours.sa_mask);
      for (int s : kSignals) sigaddset(&ours.sa_mask, s);
      ::sigaction(kSignals[i], &ours, &g_previous[i]);
    }
  });
}

}  // namespace

std::optional<pid_t> pid_in_name(const std::string& digits) {
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const long pid = std::stol(digits);
  if (pid <= 0) return std::nullopt;
  return static_cast<pid_t>(pid);
}

bool process_is_dead(pid_t pid) { return pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH; }

std::string temporary_name(const std::string& target) {
  static std::atomic<unsigned> counter{0};
  const fs::path dir = fs::path(target).parent_path();
  const std::string name = fmt::format(".attnlab-{}-{}.tmp", static_cast<long>(::getpid()), counter++);
  return dir.empty() ? name : (dir / name).string();
}

void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir.empty() ? fs::path(".") : dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string prefix = ".attnlab-", suffix = ".tmp";
    if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string middle = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    const auto dash = middle.find('-');
    if (dash == std::string::npos) continue;
    const std::string counter = middle.substr(dash + 1);
    if (counter.empty() || counter.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = pid_in_name(middle.substr(0, dash));
    std::error_code e2;
    if (pid && process_is_dead(*pid) && fs::is_regular_file(fs::symlink_status(entry.path(), e2)))
      fs::remove(entry.path(), e2);
  }
}

RemoveOnSignal::RemoveOnSignal(const std::string& path, Kind kind) {
  if (path.size() >= PATH_MAX) return;
  install_handlers_once();
  for (int i = 0; i < kSlots; ++i) {
    static std::mutex claim;
    std::lock_guard<std::mutex> lock(claim);
    if (g_used[i].load(std::memory_order_relaxed)) continue;
    std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
    g_tree[i] = kind == Kind::directory_tree;
    g_used[i].store(true, std::memory_order_release);
    slot_ = i;
    return;
  }
}

RemoveOnSignal::~RemoveOnSignal() {
  if (slot_ >= 0) g_used[slot_].store(false, std::memory_order_release);
}

}  // namespace attnlab::io
