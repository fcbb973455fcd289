// The language-model study's text (attnlab/lm.hpp): the King James Version from Debian's
// bible-kjv, or any file, as character tokens with a fixed validation split.
//
// Split: the text is cut into chunks of kChunkBytes; chunk c goes to validation when
// c % kValidationEvery == kValidationEvery − 1 (every 10th chunk, so validation samples the
// whole text rather than one book), to training otherwise. Each part is its chunks joined in
// order. The alphabet is the text's distinct bytes, sorted; token id = rank in the alphabet.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "attnlab/error.hpp"
#include "attnlab/lm.hpp"

extern char** environ;

namespace attnlab::train::lm {
namespace {

constexpr size_t kChunkBytes = 4096;
constexpr size_t kValidationEvery = 10;
constexpr const char* kKjvRange = "Gen1:1-Rev22:21";

Corpus split(const std::string& name, const std::string& text) {
  if (text.size() < kChunkBytes * kValidationEvery)
    throw Error(name + ": the text has " + std::to_string(text.size()) + " bytes; the split needs at least " +
                std::to_string(kChunkBytes * kValidationEvery) + " (" + std::to_string(kValidationEvery) +
                " chunks of " + std::to_string(kChunkBytes) + ")");
  Corpus c;
  c.name = name;
  std::array<bool, 256> seen{};
  for (unsigned char ch : text) seen[ch] = true;
  std::array<uint8_t, 256> id{};
  for (int b = 0; b < 256; ++b)
    if (seen[static_cast<size_t>(b)]) {
      id[static_cast<size_t>(b)] = static_cast<uint8_t>(c.alphabet.size());
      c.alphabet.push_back(static_cast<char>(b));
    }
  c.train.reserve(text.size());
  for (size_t start = 0, chunk = 0; start < text.size(); start += kChunkBytes, ++chunk) {
    auto& part = chunk % kValidationEvery == kValidationEvery - 1 ? c.validation : c.train;
    const size_t end = std::min(text.size(), start + kChunkBytes);
    for (size_t i = start; i < end; ++i) part.push_back(id[static_cast<unsigned char>(text[i])]);
  }
  return c;
}

// The standard output of `program args...` (no shell). Throws naming `what` if it cannot run.
std::string run_and_read(const std::string& program, const std::vector<std::string>& args, const std::string& what) {
  int fds[2];
  if (pipe(fds) != 0) throw Error(what + ": cannot create a pipe: " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> argv{const_cast<char*>(program.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw Error(what + ": cannot run '" + program + "' (" + std::strerror(rc) +
                "); install Debian's bible-kjv (scripts/debian-packages.txt)");
  }
  std::string out;
  std::array<char, 1 << 16> buf;
  for (;;) {
    const ssize_t n = read(fds[0], buf.data(), buf.size());
    if (n > 0) {
      out.append(buf.data(), static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error(what + ": '" + program + "' failed (exit status " +
                std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                "); install Debian's bible-kjv (scripts/debian-packages.txt)");
  return out;
}

// "Ge1:1 In the beginning..." → "In the beginning...": each line's verse reference removed.
std::string strip_references(const std::string& raw) {
  static const std::regex reference("^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ ");
  std::string text;
  text.reserve(raw.size());
  std::istringstream lines(raw);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_search(line, m, reference)) line.erase(0, static_cast<size_t>(m.length(0)));
    text += line;
    text += '\n';
  }
  return text;
}

}  // namespace

Corpus kjv_corpus(const std::string& program) {
  const std::string raw = run_and_read(program, {"-f", kKjvRange}, "bible-kjv");
  if (raw.empty())
    throw Error("bible-kjv: '" + program + " -f " + kKjvRange +
                "' wrote nothing; install Debian's bible-kjv (scripts/debian-packages.txt)");
  return split("bible-kjv", strip_references(raw));
}

Corpus text_corpus(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Error("corpus: no such file: " + path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("corpus: cannot read " + path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("corpus: cannot read " + path);
  const std::string name = std::filesystem::path(path).filename().string();
  if (text.empty()) throw Error("corpus: " + path + " is empty");
  return split(name, text);
}

}  // namespace attnlab::train::lm
