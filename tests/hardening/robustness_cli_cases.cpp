// The command line's hostile inputs: bad flags, unreadable, corrupt or
// mistyped .npy files, wrong ranks. Each case runs the real `attnlab` binary
// and records its exit status and first line of stderr.
#include <sys/stat.h>
#include <sys/wait.h>

#include <unistd.h>

#include <array>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnlab/npy.hpp"
#include "robustness_cases.hpp"

#ifndef ATTNLAB_CLI_PATH
#error "ATTNLAB_CLI_PATH must be defined"
#endif

namespace attnlab::robustness {
namespace {

namespace fs = std::filesystem;

// The cases' working directory: made new by mkdtemp, so this process wrote everything in
// it, and removed with its contents when the process ends.
class ScratchDir {
 public:
  ScratchDir() {
    std::string name = (fs::temp_directory_path() / "attnlab-robustness-XXXXXX").string();
    if (::mkdtemp(name.data()) == nullptr) throw std::runtime_error("robustness: mkdtemp failed for " + name);
    path_ = name;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

fs::path scratch() {
  static const ScratchDir dir;
  return dir.path();
}

void write_bytes(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

// A valid float32 .npy of the given shape.
std::string npy_f32(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n), 0.25f);
  return npy::encode(std::span<const float>(v), shape);
}

// A .npy whose header says `descr` and `fortran`, followed by `payload` bytes.
std::string npy_raw(const std::string& descr, bool fortran, const std::string& shape, size_t payload) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + std::string(payload, '\0');
}

// Runs attnlab with `args` (shell-quoted by the caller) in the scratch directory.
std::string run_cli(const std::string& args) {
  const std::string cmd = "cd '" + scratch().string() + "' && '" ATTNLAB_CLI_PATH "' " + args + " 2>&1 >/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return "result: could not start attnlab";
  std::string out;
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) out += buf.data();
  const int status = ::pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  // The first line, or the error after an experiment's progress lines.
  const size_t error_at = out.rfind("\nattnlab: error: ");
  std::string first = out.substr(error_at == std::string::npos ? 0 : error_at + 1);
  first = first.substr(0, first.find('\n'));
  if (first.find(scratch().string()) != std::string::npos)  // keep the table free of the temp path
    first.replace(first.find(scratch().string()), scratch().string().size(), "DIR");
  if (!WIFEXITED(status)) return "CRASH (signal " + std::to_string(WTERMSIG(status)) + "): " + first;
  return "exit " + std::to_string(code) + ": " + first;
}

void prepare_files() {
  const fs::path d = scratch();
  write_bytes(d / "q.npy", npy_f32({1, 2, 4, 8}));
  write_bytes(d / "kv.npy", npy_f32({1, 2, 4, 8}));
  write_bytes(d / "rank1.npy", npy_f32({8}));
  write_bytes(d / "rank5.npy", npy_f32({1, 1, 2, 4, 8}));
  write_bytes(d / "garbage.npy", "this is not a numpy file at all");
  const std::string good = npy_f32({1, 2, 4, 8});
  write_bytes(d / "truncated.npy", good.substr(0, good.size() - 10));
  write_bytes(d / "fortran.npy", npy_raw("<f4", true, "(1, 2, 4, 8)", 256));
  write_bytes(d / "int32.npy", npy_raw("<i4", false, "(1, 2, 4, 8)", 256));
  write_bytes(d / "q_f16.npy", npy_raw("<f2", false, "(1, 2, 4, 8)", 128));
  write_bytes(d / "q_u2.npy", npy_raw("<u2", false, "(1, 2, 4, 8)", 128));
  write_bytes(d / "huge_shape.npy", npy_raw("<f4", false, "(100000, 100000, 100000, 100000)", 16));
  // Outputs that are not attnlab's to replace.
  fs::remove(d / "fifo");
  ::mkfifo((d / "fifo").c_str(), 0666);
  fs::create_directories(d / "precious");
  write_bytes(d / "precious" / "thesis.tex", "x");
  write_bytes(d / "notes.txt", "x");
  // A run's directory (its manifest lists data/ and data/x.csv) into which the user put
  // data/sub/thesis.tex; a directory of theirs that looks like a report; one from an
  // attnlab older than the manifest.
  fs::create_directories(d / "ran" / "data" / "sub");
  write_bytes(d / "ran" / ".attnlab-manifest", "attnlab output manifest 1\nd data\nf data/x.csv\n");
  write_bytes(d / "ran" / "data" / "x.csv", "a\n");
  write_bytes(d / "ran" / "data" / "sub" / "thesis.tex", "x");
  fs::create_directories(d / "J");
  write_bytes(d / "J" / "package.json", "{}");
  fs::create_directories(d / "old-report" / "data");
  write_bytes(d / "old-report" / ".attnlab-output", "written by attnlab\n");
  write_bytes(d / "old-report" / "index.html", "x");
  write_bytes(d / "magic_only.npy", std::string("\x93NUMPY\x01\x00", 8));
  fs::create_directories(d / "v2" / "data");  // a manifest of another version
  write_bytes(d / "v2" / ".attnlab-manifest", "attnlab output manifest 2\nd data\n");
  fs::create_directories(d / "ranj" / "data");  // a run's output, for --json inside it
  write_bytes(d / "ranj" / ".attnlab-manifest", "attnlab output manifest 1\nd data\nf data/x.csv\n");
  write_bytes(d / "ranj" / "data" / "x.csv", "a\n");
  write_bytes(d / "nan.npy", [] {
    std::vector<float> v(64, 0.5f);
    v[5] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<int64_t> shape{1, 2, 4, 8};
    return npy::encode(std::span<const float>(v), shape);
  }());
}

}  // namespace

std::vector<Case> cli_cases() {
  prepare_files();
  const std::string qkv = "--q q.npy --k kv.npy --v kv.npy";
  std::vector<Case> c;
  auto add = [&](std::string cls, std::string example, std::string args) {
    c.push_back({std::move(cls), "`attnlab " + example + "`", [args] { return run_cli(args); }});
  };
  add("bad flag: unknown option", "attention ... --bogus", "attention " + qkv + " --out o.npy --bogus");
  add("bad flag: missing value", "attention --q", "attention --q");
  add("bad flag: negative threads", "attention ... --threads -1", "attention " + qkv + " --out o.npy --threads -1");
  add("bad flag: unknown scale policy", "attention ... --scale sqrt", "attention " + qkv + " --out o.npy --scale sqrt");
  add("bad flag: unknown subcommand", "frobnicate", "frobnicate");
  add("bad flag: unknown experiment parameter", "run variance --set bogus=1", "run variance --set bogus=1 --out runs");
  add("unreadable file", "attention --q missing.npy ...",
      "attention --q missing.npy --k kv.npy --v kv.npy --out o.npy");
  add("corrupt file: not .npy", "attention --q garbage.npy ...",
      "attention --q garbage.npy --k kv.npy --v kv.npy --out o.npy");
  add("corrupt file: truncated", "attention --q truncated.npy ...",
      "attention --q truncated.npy --k kv.npy --v kv.npy --out o.npy");
  add("corrupt file: shape larger than the data", "attention --q huge_shape.npy ...",
      "attention --q huge_shape.npy --k kv.npy --v kv.npy --out o.npy");
  add("unsupported file: Fortran order", "attention --q fortran.npy ...",
      "attention --q fortran.npy --k kv.npy --v kv.npy --out o.npy");
  add("unsupported file: int32 dtype", "attention --q int32.npy ...",
      "attention --q int32.npy --k kv.npy --v kv.npy --out o.npy");
  // Issue 15: float16 files, and bfloat16 stored as uint16 ('<u2') with --bf16.
  add("dtype mismatch: float16 q, float32 k and v", "attention --q q_f16.npy --k kv.npy ...",
      "attention --q q_f16.npy --k kv.npy --v kv.npy --out o.npy");
  add("uint16 file without --bf16", "attention --q q_u2.npy --k q_u2.npy --v q_u2.npy ...",
      "attention --q q_u2.npy --k q_u2.npy --v q_u2.npy --out o.npy");
  add("--bf16 with float32 files", "attention ... --bf16", "attention " + qkv + " --out o.npy --bf16");
  add("wrong rank: 1-D", "attention --q rank1.npy ...", "attention --q rank1.npy --k kv.npy --v kv.npy --out o.npy");
  add("wrong rank: 5-D", "attention --q rank5.npy ...", "attention --q rank5.npy --k kv.npy --v kv.npy --out o.npy");
  add("NaN in an input file", "attention --q nan.npy ...", "attention --q nan.npy --k kv.npy --v kv.npy --out o.npy");
  add("output into a missing directory", "attention ... --out no/such/dir/o.npy",
      "attention " + qkv + " --out no/such/dir/o.npy");
  // Issue 18: outputs that are not attnlab's, one file for two outputs, unbounded numbers.
  add("output is a FIFO (or a device node)", "attention ... --out fifo", "attention " + qkv + " --out fifo");
  add("output is a directory", "attention ... --out precious", "attention " + qkv + " --out precious");
  add("one file for two outputs", "attention-backward ... --dq dq.npy --dk ./dq.npy",
      "attention-backward " + qkv + " --grad-out q.npy --dq dq.npy --dk ./dq.npy --dv dv.npy");
  add("output over an input", "attention --q q.npy ... --out q.npy", "attention " + qkv + " --out q.npy");
  add("report into a directory attnlab did not write", "report --quick --only saturation --out precious",
      "report --quick --only saturation --out precious");
  add("run into a regular file", "run saturation --quick --out notes.txt", "run saturation --quick --out notes.txt");
  add("threads beyond the bound", "attention ... --threads 99999", "attention " + qkv + " --out o.npy --threads 99999");
  add("threads beyond the bound: bench", "bench --threads 65536", "bench --threads 65536");
  add("integer parameter beyond 32 bits", "run saturation --quick --set grid=4294967297",
      "run saturation --quick --set grid=4294967297 --out runs");
  add("bad flag: scale beyond double's range", "attention ... --scale 1e-400",
      "attention " + qkv + " --out o.npy --scale 1e-400");
  add("bad flag: negative ssmax parameter", "attention ... --scale ssmax:-1",
      "attention " + qkv + " --out o.npy --scale ssmax:-1");
  add("bad flag: --causal-align without --causal", "attention ... --causal-align bottom_right",
      "attention " + qkv + " --out o.npy --causal-align bottom_right");
  add("bench --json into a missing directory", "bench --json nodir/x.json", "bench --json nodir/x.json");
  // Issue 17: the variants' flags.
  add("bad flag: window side below -1", "attention ... --window -2,0", "attention " + qkv + " --out o.npy --window -2,0");
  add("bad flag: window of one number", "attention ... --window 5", "attention " + qkv + " --out o.npy --window 5");
  add("bad flag: softcap 0", "attention ... --softcap 0", "attention " + qkv + " --out o.npy --softcap 0");
  add("bad flag: ALiBi slopes of the wrong count", "attention ... --alibi-slopes 0.5,0.25,0.125",
      "attention " + qkv + " --out o.npy --alibi-slopes 0.5,0.25,0.125");
  add("bad flag: cu_seqlens not ending at the total", "attention ... --cu-seqlens-q 0,2,3 --cu-seqlens-k 0,2,4",
      "attention " + qkv + " --out o.npy --cu-seqlens-q 0,2,3 --cu-seqlens-k 0,2,4");
  add("bad flag: dropout_p of 1", "attention ... --dropout-p 1", "attention " + qkv + " --out o.npy --dropout-p 1");
  add("bad flag: --dsinks without --sinks", "attention-backward ... --dsinks ds.npy",
      "attention-backward " + qkv + " --grad-out q.npy --dq dq.npy --dk dk.npy --dv dv.npy --dsinks ds.npy");
  // Issue 14: decoding shapes and the read bandwidth.
  add("bad flag: --kv-heads that does not divide --heads", "bench --heads 4 --kv-heads 3",
      "bench --heads 4 --kv-heads 3 --seq 8 --impls attnlab");
  add("bad flag: an option that needs another (peak --passes without --memory)", "peak --passes 3",
      "peak --passes 3");
  // Issue 47: files attnlab did not write, NaN, seeds out of range, empty list elements, sizes.
  add("run into a directory with a file of the user's deep inside", "run saturation --quick --out ran",
      "run saturation --quick --out ran");
  add("report into a directory that only looks like a report", "report --quick --only saturation --out J",
      "report --quick --only saturation --out J");
  add("run into a directory from an attnlab older than the manifest", "run saturation --quick --out old-report/",
      "run saturation --quick --out old-report/");
  add("bad flag: NaN for a ranged number", "peak --seconds nan", "peak --seconds nan");
  add("bad flag: negative seed", "attention ... --dropout-p 0.5 --seed -1",
      "attention " + qkv + " --out o.npy --dropout-p 0.5 --seed -1");
  add("bad flag: seed beyond 2^64 - 1", "attention ... --dropout-p 0.5 --seed 18446744073709551616",
      "attention " + qkv + " --out o.npy --dropout-p 0.5 --seed 18446744073709551616");
  add("bad flag: negative seed of a report", "report --seed -1", "report --quick --only saturation --seed -1 --out rep");
  add("bad flag: empty element in a list", "attention ... --sinks 1,,2", "attention " + qkv + " --out o.npy --sinks 1,,2");
  add("bad flag: empty element in a parameter list", "run saturation --set x=1,,2",
      "run saturation --quick --set x=1,,2 --out runs");
  add("bench shape whose element count overflows int64", "bench --batch 65536 --heads 65536 --seq 65536 --dim 65536",
      "bench --batch 65536 --heads 65536 --seq 65536 --dim 65536");
  add("experiment buffer beyond memory", "run variance --quick --seq 16777216 --dims 1",
      "run variance --quick --seq 16777216 --dims 1 --out runs");
  // Issue 55: a file cut after its version, outputs inside the output directory, a manifest of
  // another version, a negative size parameter, an allocation beyond the address space.
  add("corrupt file: magic and version only", "attention --q magic_only.npy ...",
      "attention --q magic_only.npy --k q.npy --v q.npy --out o.npy");
  add("--json inside the output directory", "run saturation --quick --out ranj --json ranj/data/x.csv",
      "run saturation --quick --out ranj --json ranj/data/x.csv");
  add("--json that is the output directory", "run saturation --quick --out X --json X",
      "run saturation --quick --out X --json X");
  add("run into a directory whose manifest is of another version", "run saturation --quick --out v2",
      "run saturation --quick --out v2");
  add("negative size parameter", "run gradflow --quick --set table_keys=-1",
      "run gradflow --quick --set table_keys=-1 --out runs");
  return c;
}

}  // namespace attnlab::robustness
