#pragma once
// Output directories (`report --out`, `run --out`): built whole in a hidden sibling, then
// swapped in, so that the destination holds either the earlier output or the complete new one.
//
// The one rule for replacing a directory: attnlab deletes only what it can prove it wrote.
// Every directory it builds carries a manifest (kManifestName) listing each file and
// directory in it with its kind; a destination may be replaced only if it does not exist,
// is empty, or holds a manifest and nothing that the manifest does not list with the same
// kind (a listed file that became a directory or a symlink is not attnlab's any more).
// Anything else is refused before any work, naming the first entry not recognised, and
// nothing is changed. A directory from an attnlab older than the manifest is refused too
// (it cannot be proven), with a message saying what to do.
#include <filesystem>
#include <functional>
#include <string>

namespace attnlab::io {

inline constexpr const char* kManifestName = ".attnlab-manifest";

// `out` as the directory it names: absolute, normalised, without a trailing slash
// ("rep/" and "rep" are one directory). Throws attnlab::Error naming `what` (the option)
// if it is empty or has no parent to build beside ("/").
std::filesystem::path output_directory_path(const std::string& out, const std::string& what);

// Throws attnlab::Error naming `what` and `out` unless `out` may be replaced (the rule
// above) and the directory it would be built in exists or can be created and written.
void check_replaceable_directory(const std::string& out, const std::string& what);

// Throws attnlab::Error naming both options unless the output file `file` (say --json) lies
// outside the output directory `out` and is not `out` itself (compared with symlinks resolved):
// the directory is replaced whole, so a file inside it would be overwritten by the swap, or,
// written after it, make the directory one attnlab did not wholly write.
void require_outside_output_directory(const std::string& file, const std::string& file_what, const std::string& out,
                                      const std::string& out_what);

// Writes the manifest of `dir` (a directory attnlab has just built): every entry under it.
void write_manifest(const std::filesystem::path& dir);

// Checks `out` (as above), then lets `fill` write the new content (and do the work that
// produces it) into a hidden sibling directory ".NAME.tmp-PID", writes its manifest,
// checks `out` again and swaps the new directory in. If `fill` throws, `out` is left as it
// was. Hidden siblings of dead processes (an interrupted run) are cleaned up first.
void build_output_directory(const std::string& out, const std::string& what,
                            const std::function<void(const std::filesystem::path& dir)>& fill);

}  // namespace attnlab::io
