// Temporary files: their names, stale ones, and removal on a fatal signal
// (attnlab/temporary_files.hpp).
#include "attnlab/temporary_files.hpp"

#include <signal.h>
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
// async-signal-safe functions (unlink, sigaction, raise), never allocate.
constexpr int kSlots = 64;
char g_paths[kSlots][PATH_MAX];
std::atomic<bool> g_used[kSlots];
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[sizeof(kSignals) / sizeof(kSignals[0])];

void remove_and_die(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (g_used[i].load(std::memory_order_acquire)) ::unlink(g_paths[i]);
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

RemoveOnSignal::RemoveOnSignal(const std::string& path) {
  if (path.size() >= PATH_MAX) return;
  install_handlers_once();
  for (int i = 0; i < kSlots; ++i) {
    static std::mutex claim;
    std::lock_guard<std::mutex> lock(claim);
    if (g_used[i].load(std::memory_order_relaxed)) continue;
    std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
    g_used[i].store(true, std::memory_order_release);
    slot_ = i;
    return;
  }
}

RemoveOnSignal::~RemoveOnSignal() {
  if (slot_ >= 0) g_used[slot_].store(false, std::memory_order_release);
}

}  // namespace attnlab::io
