#pragma once
// Writing the applications' output files without ever destroying what is not theirs.
//
// Every output is written to a short-named temporary file next to its target and then
// renamed over it, so that the target holds either its old content or the complete new
// one. The rules, checked for every output before anything is written:
//  * An existing target that is not a regular file (a directory, device node, FIFO or
//    socket) is an error: attnlab replaces only regular files. (Writing through to a
//    FIFO or device was rejected: it cannot be atomic, and a FIFO can block forever.)
//  * A symlink is never replaced by a file: the file it points to is replaced and the
//    link stays. A dangling symlink is an error.
//  * Two outputs that are the same file (the same path spelled differently, a symlink,
//    a hard link) are an error, and so is an output that is the same file as an input.
//    Files are compared by identity: (device, inode) for files that exist, the
//    canonical path for files that do not exist yet.
//  * Temporary names are short (".attnlab-PID-N.tmp"), so any name the file system
//    accepts as a target is accepted. SIGINT, SIGTERM or SIGHUP during the writing removes
//    them, and those of dead processes are removed beside the next output written
//    (attnlab/temporary_files.hpp).
// Output directories have their own rule (attnlab/output_directory.hpp).
// Errors are attnlab::Error naming the file.
#include <string>
#include <utility>
#include <vector>

namespace attnlab::io {

// Throws unless `outputs` are pairwise different files and none is one of `inputs`.
// `outputs` may name files that do not exist yet; inputs that do not exist are ignored.
void require_distinct_files(const std::vector<std::string>& outputs, const std::vector<std::string>& inputs = {});

// The checks write_file_atomically makes before writing, and that the directory exists:
// for a program that would otherwise learn only after long work that it cannot write.
void check_output_path(const std::string& path);

// Writes `bytes` to `path` (see the rules above).
void write_file_atomically(const std::string& path, const std::string& bytes,
                           const std::vector<std::string>& inputs = {});

// Writes several files so that none is replaced unless all were written: every
// temporary file is written first, then all are renamed.
void write_files_atomically(const std::vector<std::pair<std::string, std::string>>& path_and_bytes,
                            const std::vector<std::string>& inputs = {});

}  // namespace attnlab::io
