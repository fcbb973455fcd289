#pragma once
// Dividing a sweep's runs among processes (e.g. the ranks of an MPI job) without the lab
// knowing how they talk: a RunDistributor says which process this is and moves bytes;
// the lab decides which runs each process does, serializes the results and lets rank 0
// alone assemble and write them. The default is one process (no communication).
//
// Results never depend on the number of processes: each run's seed comes from its index
// in the sweep, and rank 0 puts the gathered results back in index order.
#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/lab.hpp"

namespace attnlab::lab {

class RunDistributor {
 public:
  virtual ~RunDistributor() = default;
  virtual int rank() const = 0;  // 0 .. size() − 1; rank 0 writes the output
  virtual int size() const = 0;
  // Rank 0's `text` on every process (collective: every process calls it).
  virtual std::string broadcast(const std::string& text) const = 0;
  // Every process's `bytes`, in rank order, on rank 0; elsewhere empty (collective).
  virtual std::vector<std::string> gather(const std::string& bytes) const = 0;
};

// One process: rank 0 of 1.
const RunDistributor& one_process();

// Which process runs each item, balanced by expected cost: the costliest item first, each
// to the process with the least expected work so far (ties: the lower rank, then the lower
// index). A function of `costs` and `processes` alone, so every process computes the same.
std::vector<int> assign_runs(const std::vector<double>& costs, int processes);

// What one process did with its share: the serialized results, or why it stopped.
struct ShareOutcome {
  std::string payload;       // on success
  std::string failure;       // non-empty: the process failed; the message names the rank and the run
  bool interrupted = false;  // stopped by Ctrl-C (Interrupted)
};
// Gathers every process's outcome and ends them all alike: if any process failed, every
// one throws Error with the lowest failed rank's message (Interrupted if processes were only
// interrupted). Otherwise returns on rank 0 the payloads in rank order, elsewhere nothing.
std::vector<std::string> gather_shares(const RunDistributor& d, const ShareOutcome& mine);

// A list of byte strings as one (and back), for packing a process's several results.
std::string pack(const std::vector<std::string>& parts);
std::vector<std::string> unpack(const std::string& packed);  // throws Error on malformed input

// A Result as bytes and back, exactly (every double by its bits; NaN's sign kept).
std::string result_to_bytes(const Result& result);
Result result_from_bytes(const std::string& bytes);  // throws Error on malformed input

}  // namespace attnlab::lab
