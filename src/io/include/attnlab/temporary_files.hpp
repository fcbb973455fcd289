#pragma once
// The temporary files attnlab writes beside its outputs, and what removes them when a run
// is cut short. Their names prove whose they are: ".attnlab-PID-N.tmp" (a file being
// written) and ".NAME.tmp-PID" / ".NAME.old-PID" (an output directory being built or
// moved aside). Only such names, of a process that is no longer alive, are ever removed
// as stale.
#include <filesystem>
#include <optional>
#include <string>
#include <sys/types.h>

namespace attnlab::io {

// The PID that `digits` (the part of a temporary name after its prefix) spells, if it is
// nothing but a positive decimal number that fits a pid_t.
std::optional<pid_t> pid_in_name(const std::string& digits);

// True if no process `pid` exists (never for this process).
bool process_is_dead(pid_t pid);

// The name of a new temporary file beside `target` (short, so that a target name at the
// file system's limit still leaves room).
std::string temporary_name(const std::string& target);

// Removes from `dir` the temporary files (".attnlab-PID-N.tmp") of processes that died.
void remove_stale_temporaries(const std::filesystem::path& dir);

// While alive, `path` is removed if SIGINT, SIGTERM or SIGHUP ends the process (where that
// signal would end it: a handler a host such as Python installed is left alone): a file, or
// (directory_tree) a directory this process created, with everything in it (symlinks in it
// are removed, never followed).
class RemoveOnSignal {
 public:
  enum class Kind { file, directory_tree };
  explicit RemoveOnSignal(const std::string& path, Kind kind = Kind::file);
  ~RemoveOnSignal();
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;

 private:
  int slot_ = -1;
};

}  // namespace attnlab::io
