// The rules of attnlab/atomic_files.hpp, each on the file that once was destroyed:
// a device node, a FIFO, a symlink, one file given for two outputs (spelled
// differently, linked), an output over an input, a name at the length limit, and
// output directories attnlab did not write. Also a .npy whose header and size disagree
// by gigabytes (sparse), which must be an error before anything is read.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "attnlab/atomic_files.hpp"
#include "attnlab/error.hpp"
#include "attnlab/npy.hpp"

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
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }
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

TEST_F(AtomicFiles, OnlyAMarkedOrEmptyDirectoryMayBeReplaced) {
  EXPECT_NO_THROW(io::check_replaceable_directory(path("missing"), "--out"));
  fs::create_directory(path("empty"));
  EXPECT_NO_THROW(io::check_replaceable_directory(path("empty"), "--out"));
  fs::create_directory(path("precious"));
  write("precious/thesis.tex", "x");
  EXPECT_NE(message_of([&] { io::check_replaceable_directory(path("precious"), "--out"); }).find("did not write"),
            std::string::npos);
  write("file", "x");
  EXPECT_NE(message_of([&] { io::check_replaceable_directory(path("file"), "--out"); }).find("regular file"),
            std::string::npos);
  fs::create_directory(path("ours"));
  write("ours/x.csv", "x");
  io::mark_output_directory(path("ours"));
  EXPECT_NO_THROW(io::check_replaceable_directory(path("ours"), "--out"));
  // A report from before the marker: nothing in it but what attnlab writes.
  fs::create_directories(path("old-report/data"));
  fs::create_directory(path("old-report/figures"));
  write("old-report/index.html", "x");
  write("old-report/report.json", "{}");
  EXPECT_NO_THROW(io::check_replaceable_directory(path("old-report"), "--out"));
  // ... and one file of anyone else's in it keeps it safe.
  write("old-report/notes.txt", "mine");
  EXPECT_NE(message_of([&] { io::check_replaceable_directory(path("old-report"), "--out"); }).find("did not write"),
            std::string::npos);
}

TEST_F(AtomicFiles, ANpyFileMuchLargerThanItsHeaderSaysIsRefusedUnread) {
  const std::vector<float> v{1, 2};
  attnlab::npy::save<float>(path("big.npy"), v, std::vector<int64_t>{2});
  ASSERT_EQ(::truncate(path("big.npy").c_str(), off_t{20} << 30), 0);  // sparse: 20 GB of zeros
  const std::string m = message_of([&] { attnlab::npy::load(path("big.npy")); });
  EXPECT_NE(m.find("big.npy: corrupt .npy file"), std::string::npos) << m;
}

}  // namespace
