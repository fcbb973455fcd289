// The rules of attnlab/atomic_files.hpp, each on the file that once was destroyed:
// a device node, a FIFO, a symlink, one file given for two outputs (spelled
// differently, linked), an output over an input, a name at the length limit, output
// directories attnlab did not write and temporary files left behind. Also a .npy whose header and size disagree
// by gigabytes (sparse), which must be an error before anything is read.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <iterator>
#include <string>
#include <vector>

#include "attnlab/atomic_files.hpp"
#include "attnlab/error.hpp"
#include "attnlab/npy.hpp"
#include "attnlab/output_directory.hpp"
#include "attnlab/temporary_files.hpp"

namespace {

namespace fs = std::filesystem;
namespace io = attnlab::io;
using attnlab::Error;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

class AtomicFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attnlab-atomic-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const {
    fs::create_directories(fs::path(path(name)).parent_path());
    std::ofstream(path(name)) << text;
  }
  fs::path dir_;
};

TEST_F(AtomicFiles, ANonRegularTargetIsRefusedAndKept) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0666), 0);
  EXPECT_NE(message_of([&] { io::write_file_atomically(path("fifo"), "x"); }).find("is a FIFO"), std::string::npos);
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
  fs::create_directory(path("dir"));
  EXPECT_NE(message_of([&] { io::write_file_atomically(path("dir"), "x"); }).find("is a directory"), std::string::npos);
  if (::mknod(path("fakenull").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {  // needs root
    EXPECT_NE(message_of([&] { io::write_file_atomically(path("fakenull"), "x"); }).find("character device"),
              std::string::npos);
    EXPECT_TRUE(fs::is_character_file(path("fakenull")));
  }
}

TEST_F(AtomicFiles, ASymlinkStaysALinkAndItsTargetIsReplaced) {
  write("target.txt", "old");
  fs::create_symlink("target.txt", path("link"));
  io::write_file_atomically(path("link"), "new");
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_EQ(slurp(path("target.txt")), "new");
  fs::create_symlink("nowhere.txt", path("dangling"));
  EXPECT_NE(message_of([&] { io::write_file_atomically(path("dangling"), "x"); }).find("does not exist"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(path("nowhere.txt")));
}

TEST_F(AtomicFiles, TheSameFileTwiceIsRefusedHoweverSpelled) {
  write("a.npy", "old");
  fs::create_symlink("a.npy", path("sym.npy"));
  fs::create_hard_link(path("a.npy"), path("hard.npy"));
  const std::string rel = (dir_ / "." / "a.npy").string();
  for (const std::string& other : {path("a.npy"), rel, path("sym.npy"), path("hard.npy")}) {
    const std::string m = message_of([&] { io::write_files_atomically({{path("a.npy"), "1"}, {other, "2"}}); });
    EXPECT_NE(m.find("given for two outputs"), std::string::npos) << other << ": " << m;
  }
  // Not existing yet: compared by canonical path.
  EXPECT_NE(message_of([&] { io::write_files_atomically({{path("new.npy"), "1"}, {rel.substr(0, rel.size() - 5) + "new.npy", "2"}}); })
                .find("given for two outputs"),
            std::string::npos);
  EXPECT_EQ(slurp(path("a.npy")), "old");
  // An output over an input.
  EXPECT_NE(message_of([&] { io::write_file_atomically(path("sym.npy"), "x", {path("a.npy")}); }).find("the input"),
            std::string::npos);
  EXPECT_EQ(slurp(path("a.npy")), "old");
}

TEST_F(AtomicFiles, ANameAtTheLengthLimitIsWritten) {
  const std::string name(254, 'n');
  io::write_file_atomically(path(name), "x");
  EXPECT_EQ(slurp(path(name)), "x");
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);  // no temporary left behind
}

TEST_F(AtomicFiles, ANpyFileMuchLargerThanItsHeaderSaysIsRefusedUnread) {
  const std::vector<float> v{1, 2};
  attnlab::npy::save<float>(path("big.npy"), v, std::vector<int64_t>{2});
  ASSERT_EQ(::truncate(path("big.npy").c_str(), off_t{20} << 30), 0);  // sparse: 20 GB of zeros
  const std::string m = message_of([&] { attnlab::npy::load(path("big.npy")); });
  EXPECT_NE(m.find("big.npy: corrupt .npy file"), std::string::npos) << m;
}

// Above Linux's pid_max (2^22): never a live process.
constexpr const char* kDeadPid = "4194305";

// The one rule for replacing an output directory (attnlab/output_directory.hpp): only
// what the manifest proves attnlab wrote may go, checked before any work; "DIR/" is DIR;
// a failed or interrupted build leaves the earlier output and no hidden sibling behind.
// And the temporary files beside single-file outputs (attnlab/temporary_files.hpp).
class OutputDirectory : public AtomicFiles {
 protected:
  // What attnlab builds for a run: data/, figures/ and a JSON file.
  void build(const std::string& out, const std::string& csv = "a,b\n") const {
    io::build_output_directory(out, "--out", [&](const fs::path& d) {
      fs::create_directories(d / "data");
      fs::create_directories(d / "figures");
      std::ofstream(d / "data" / "x.csv") << csv;
      std::ofstream(d / "run.json") << "{}";
    });
  }
  std::vector<std::string> hidden_siblings() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().find(".tmp-") != std::string::npos ||
          e.path().filename().string().find(".old-") != std::string::npos)
        out.push_back(e.path().filename().string());
    return out;
  }
};

TEST_F(OutputDirectory, AMissingOrEmptyDirectoryMayBeReplacedAndTheBuildListsEveryFile) {
  EXPECT_NO_THROW(io::check_replaceable_directory(path("missing"), "--out"));
  fs::create_directory(path("empty"));
  EXPECT_NO_THROW(io::check_replaceable_directory(path("empty"), "--out"));
  build(path("run"));
  const std::string manifest = slurp(path("run") + "/" + io::kManifestName);
  for (const char* line : {"d data\n", "f data/x.csv\n", "d figures\n", "f run.json\n"})
    EXPECT_NE(manifest.find(line), std::string::npos) << line << " missing from\n" << manifest;
  build(path("run"), "new\n");  // its own output: replaced
  EXPECT_EQ(slurp(path("run/data/x.csv")), "new\n");
  EXPECT_TRUE(hidden_siblings().empty());
}

TEST_F(OutputDirectory, AFileOfTheUsersDeepInsideIsNamedAndNothingIsChanged) {
  build(path("run"));
  write("run/data/sub/thesis.tex", "my thesis");
  const std::string why = message_of([&] { build(path("run"), "new\n"); });
  EXPECT_NE(why.find("data/sub is not among"), std::string::npos) << why;
  EXPECT_NE(why.find("nothing was changed"), std::string::npos) << why;
  EXPECT_EQ(slurp(path("run/data/sub/thesis.tex")), "my thesis");
  EXPECT_EQ(slurp(path("run/data/x.csv")), "a,b\n");
  EXPECT_TRUE(hidden_siblings().empty());
}

TEST_F(OutputDirectory, AListedFileThatChangedKindIsRefused) {
  build(path("run"));
  fs::remove(path("run/data/x.csv"));
  fs::create_directory_symlink(dir_, path("run/data/x.csv"));  // a link out of the directory
  const std::string why = message_of([&] { build(path("run")); });
  EXPECT_NE(why.find("data/x.csv is neither a regular file nor a directory where attnlab wrote a regular file"),
            std::string::npos)
      << why;
  EXPECT_TRUE(fs::is_symlink(path("run/data/x.csv")));
}

TEST_F(OutputDirectory, ADirectoryWithoutAManifestIsRefusedSayingWhatToDo) {
  write("J/package.json", "{}");  // looks like a run's *.json, and is not attnlab's
  EXPECT_NE(message_of([&] { io::check_replaceable_directory(path("J"), "--out"); })
                .find("is a directory attnlab did not write (no .attnlab-manifest in it)"),
            std::string::npos);
  // From an attnlab older than the manifest (its marker only): cannot be proven either.
  write("old/.attnlab-output", "This directory was written by attnlab.\n");
  write("old/index.html", "x");
  const std::string why = message_of([&] { io::check_replaceable_directory(path("old"), "--out"); });
  EXPECT_NE(why.find("older than its .attnlab-manifest"), std::string::npos) << why;
  EXPECT_NE(why.find("remove it yourself or choose another --out"), std::string::npos) << why;
  write("file", "x");
  EXPECT_NE(message_of([&] { io::check_replaceable_directory(path("file"), "--out"); }).find("a regular file"),
            std::string::npos);
  EXPECT_EQ(slurp(path("J/package.json")), "{}");
}

TEST_F(OutputDirectory, ATrailingSlashNamesTheSameDirectory) {
  EXPECT_EQ(io::output_directory_path(path("rep") + "/", "--out"), fs::path(path("rep")));
  EXPECT_EQ(io::output_directory_path(path("rep") + "//.", "--out"), fs::path(path("rep")));
  build(path("rep") + "/");
  EXPECT_TRUE(fs::exists(path("rep/data/x.csv")));
  EXPECT_FALSE(fs::exists(path("rep/..tmp-") + std::to_string(::getpid())));
  build(path("rep") + "/", "again\n");
  EXPECT_EQ(slurp(path("rep/data/x.csv")), "again\n");
  EXPECT_TRUE(hidden_siblings().empty());
  EXPECT_NE(message_of([] { io::output_directory_path("/", "--out"); }).find("names no directory"), std::string::npos);
}

TEST_F(OutputDirectory, TheDestinationIsCheckedBeforeTheWork) {
  write("precious/notes.txt", "x");
  bool worked = false;
  EXPECT_THROW(io::build_output_directory(path("precious"), "--out", [&](const fs::path&) { worked = true; }),
               attnlab::Error);
  EXPECT_FALSE(worked);
  write("plain", "x");  // a parent that is a file: the directory cannot be made
  EXPECT_NE(message_of([&] { io::check_replaceable_directory(path("plain/sub/out"), "--out"); }).find("is not a directory"),
            std::string::npos);
}

TEST_F(OutputDirectory, AFailedBuildLeavesTheEarlierOutputAndNoSibling) {
  build(path("run"));
  EXPECT_THROW(io::build_output_directory(path("run"), "--out",
                                          [](const fs::path& d) {
                                            std::ofstream(d / "half") << "x";
                                            throw attnlab::Error("gnuplot missing");
                                          }),
               attnlab::Error);
  EXPECT_EQ(slurp(path("run/data/x.csv")), "a,b\n");
  EXPECT_TRUE(hidden_siblings().empty());
}

TEST_F(OutputDirectory, HiddenSiblingsOfDeadProcessesAreCleanedUp) {
  fs::create_directories(path(std::string(".run.tmp-") + kDeadPid + "/data"));
  fs::create_directories(path(".run.tmp-1x"));  // not a PID: not ours to judge
  build(path("run"));
  EXPECT_FALSE(fs::exists(path(std::string(".run.tmp-") + kDeadPid)));
  EXPECT_TRUE(fs::exists(path(".run.tmp-1x")));
}

TEST_F(OutputDirectory, StaleTemporaryFilesOfDeadProcessesAreRemovedBesideTheNextOutput) {
  const std::string stale = std::string(".attnlab-") + kDeadPid + "-0.tmp";
  const std::string live = ".attnlab-" + std::to_string(::getpid()) + "-999.tmp";
  write(stale, "half an output");
  write(live, "being written");
  write(".attnlab-notes.tmp", "the user's");
  write(std::string(".attnlab-") + kDeadPid + "-x.tmp", "not our pattern");
  io::write_file_atomically(path("o.npy"), "x");
  EXPECT_FALSE(fs::exists(path(stale)));
  EXPECT_TRUE(fs::exists(path(live)));
  EXPECT_TRUE(fs::exists(path(".attnlab-notes.tmp")));
  EXPECT_TRUE(fs::exists(path(std::string(".attnlab-") + kDeadPid + "-x.tmp")));
}

TEST_F(OutputDirectory, ATemporaryFileIsRemovedWhenASignalEndsTheProcess) {
  const std::string tmp = path(".attnlab-1-0.tmp");
  const pid_t child = ::fork();
  if (child == 0) {
    const io::RemoveOnSignal guard(tmp);
    std::ofstream(tmp) << "half";
    ::raise(SIGTERM);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);  // still ends by the signal
  EXPECT_FALSE(fs::exists(tmp));
}


// A run cut short by SIGINT, SIGTERM or SIGHUP leaves no hidden directory: the handler removes
// the whole tree it created (files, subdirectories, a symlink, never followed), and the
// earlier output stays as it was.
TEST_F(OutputDirectory, ADirectoryBeingBuiltIsRemovedWholeWhenASignalEndsTheProcess) {
  build(path("R"), "v1\n");
  write("outside/keep.txt", "not attnlab's");
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const pid_t child = ::fork();
    if (child == 0) {
      try {
        io::build_output_directory(path("R"), "--out", [&](const fs::path& d) {
          fs::create_directories(d / "data" / "deep" / "deeper");
          for (int i = 0; i < 300; ++i) std::ofstream(d / "data" / ("t" + std::to_string(i) + ".csv")) << "x\n";
          std::ofstream(d / "data" / "deep" / "deeper" / "f.png") << "half";
          fs::create_directory_symlink(path("outside"), d / "data" / "link");
          ::raise(sig);
        });
      } catch (...) {
      }
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << sig;  // still ends by the signal
    EXPECT_EQ(hidden_siblings(), std::vector<std::string>{}) << "signal " << sig;
    EXPECT_TRUE(fs::exists(path("outside/keep.txt"))) << "the link was followed";
    std::ifstream in(path("R/data/x.csv"));
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "v1\n");
  }
}

// A file not written whole (a PNG cut short by a full file system, whose writer said nothing;
// an empty CSV) is found before the swap: an error naming it, the earlier output kept.
TEST_F(OutputDirectory, AFileNotWrittenWholeIsRefusedBeforeTheSwap) {
  build(path("R"), "v1\n");
  const std::string png_start = "\x89PNG\r\n\x1a\n", iend = std::string("\0\0\0\0IEND\xae\x42\x60\x82", 12);
  struct Broken {
    std::string name, bytes, expected;
  };
  for (const Broken& b : {Broken{"figures/cut.png", png_start + std::string(131072 - 8, 'x'),
                                 "figures/cut.png was not written whole (131072 bytes, not a PNG that ends with its IEND"},
                          Broken{"figures/not.png", "GIF89a" + iend, "figures/not.png was not written whole"},
                          Broken{"data/empty.csv", "", "data/empty.csv was not written whole (0 bytes)"}}) {
    const std::string m = message_of([&] {
      io::build_output_directory(path("R"), "--out", [&](const fs::path& d) {
        fs::create_directories(d / "figures");
        fs::create_directories(d / "data");
        std::ofstream(d / "figures" / "whole.png", std::ios::binary) << png_start << "IHDR" << iend;
        std::ofstream(d / b.name, std::ios::binary) << b.bytes;
      });
    });
    EXPECT_NE(m.find(b.expected), std::string::npos) << m;
    EXPECT_EQ(hidden_siblings(), std::vector<std::string>{});
    std::ifstream in(path("R/data/x.csv"));
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "v1\n") << b.name;
  }
  io::build_output_directory(path("R"), "--out", [&](const fs::path& d) {  // whole: accepted
    fs::create_directories(d / "figures");
    std::ofstream(d / "figures" / "whole.png", std::ios::binary) << png_start << "IHDR" << iend;
  });
  EXPECT_TRUE(fs::exists(path("R/figures/whole.png")));
}

// An output file of the same command inside the output directory (--json J/data/x.csv, the
// manifest itself, the directory itself), however it is spelled, is refused before any work.
TEST_F(OutputDirectory, AnOutputFileInsideTheOutputDirectoryIsRefused) {
  build(path("J"));
  fs::create_directory_symlink(path("J"), path("alias"));
  for (const std::string& inside : {path("J/data/x.csv"), path("J/.attnlab-manifest"), path("J/res.json"),
                                    path("J"), path("J/"), path("alias/new.json"), path("J/../J/x.json")}) {
    const std::string m = message_of([&] { io::require_outside_output_directory(inside, "--json", path("J"), "--out"); });
    EXPECT_NE(m.find("the output directory (--out"), std::string::npos) << inside << ": " << m;
  }
  for (const std::string& outside : {path("J.json"), path("Jx/a.json"), path("other/J/a.json"), std::string()})
    EXPECT_NO_THROW(io::require_outside_output_directory(outside, "--json", path("J"), "--out")) << outside;
  EXPECT_NO_THROW(io::require_outside_output_directory(path("new/x.json"), "--json", path("new2"), "--out"));
  EXPECT_ANY_THROW(io::require_outside_output_directory(path("new/x.json"), "--json", path("new"), "--out"));
}

// Each way a manifest can fail is named, never all as "no .attnlab-manifest in it".
TEST_F(OutputDirectory, EachBrokenManifestIsNamed) {
  struct Broken {
    std::string name;
    std::function<void(const fs::path&)> make;
    std::string expected;
  };
  const std::vector<Broken> cases = {
      {"garbage", [](const fs::path& m) { std::ofstream(m) << "\x7f" "ELF garbage\n"; },
       "is not a manifest attnlab wrote"},
      {"version", [](const fs::path& m) { std::ofstream(m) << "attnlab output manifest 2\nf data/x.csv\n"; },
       "is of another version ('attnlab output manifest 2'"},
      {"directory", [](const fs::path& m) { fs::remove(m), fs::create_directory(m); }, "is a directory, not the file"},
      {"symlink", [&](const fs::path& m) { fs::remove(m), fs::create_symlink(path("elsewhere"), m); },
       "is a symlink, not the file"},
  };
  for (const Broken& b : cases) {
    build(path(b.name));
    b.make(fs::path(path(b.name)) / io::kManifestName);
    const std::string m = message_of([&] { io::check_replaceable_directory(path(b.name), "--out"); });
    EXPECT_NE(m.find(b.expected), std::string::npos) << b.name << ": " << m;
    EXPECT_EQ(m.find("no .attnlab-manifest in it"), std::string::npos) << b.name << ": " << m;
  }
}

}  // namespace
