// The lab across MPI ranks (tools/attnlab/lab_ranks.hpp), run under mpirun: a report of two
// experiments, the second of which fails. The second goes to rank 1 (equal expected costs, one
// experiment per rank), so that rank 1 alone fails: every rank must end with an Error naming
// rank 1 and the experiment, none may hang, and nothing may be written. Also the assignment by
// cost on a known case. Prints "rank R: ok: MESSAGE" and exits 0 on success.
#include <cstdio>
#include <filesystem>
#include <string>

#include "attnlab/lab.hpp"
#include "attnlab/run_distributor.hpp"
#include "lab_ranks.hpp"

namespace lab = attnlab::lab;

namespace {

struct NoConfig {
  int64_t unused = 0;
  void bind(lab::Params& p) { p.add("unused", unused, "nothing"); }
};

int fail(int rank, const std::string& why) {
  std::fprintf(stderr, "rank %d: FAIL: %s\n", rank, why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return fail(-1, "usage: test_lab_ranks OUT_DIR");
  const lab::RunDistributor* ranks = attnlab::cli::lab_ranks();
  if (ranks == nullptr) return fail(-1, "not started by mpirun");
  const int rank = ranks->rank();
  if (ranks->size() < 2) return fail(rank, "needs at least 2 ranks");

  // The costliest first, each to the least loaded rank: 5 → 0; 2, 2, 1 → 1 (loads 2, 4, 5 < 5 first).
  if (lab::assign_runs({1, 5, 2, 2}, 2) != std::vector<int>{1, 0, 1, 1}) return fail(rank, "assign_runs({1, 5, 2, 2}, 2)");

  lab::register_experiment(lab::make_experiment<NoConfig>("ranks_fine", "succeeds", {"C3"},
                                                          [](const NoConfig&, lab::RunContext&) { return lab::Result{}; }));
  lab::register_experiment(lab::make_experiment<NoConfig>(
      "ranks_failing", "fails", {"C3"},
      [](const NoConfig&, lab::RunContext&) -> lab::Result { throw attnlab::Error("planted failure"); }));
  lab::ReportOptions o;
  o.out = argv[1];
  o.only = {"ranks_fine", "ranks_failing"};
  o.distributor = ranks;
  std::string message;
  try {
    lab::write_report(o);
    return fail(rank, "the report succeeded");
  } catch (const attnlab::Error& e) {
    message = e.what();
  }
  if (message.find("rank 1, experiment ranks_failing: ") == std::string::npos ||
      message.find("planted failure") == std::string::npos)
    return fail(rank, "unexpected message: " + message);
  if (rank == 0 && std::filesystem::exists(o.out)) return fail(rank, o.out.string() + " was written");
  std::printf("rank %d: ok: %s\n", rank, message.c_str());
  return 0;
}
