// Dividing runs among processes (attnlab/run_distributor.hpp): the assignment by cost, the
// one-process default, and the gathering that ends every process alike on a failure.
#include "attnlab/run_distributor.hpp"

#include <algorithm>
#include <numeric>
#include <nlohmann/json.hpp>

namespace attnlab::lab {
namespace {

class OneProcess final : public RunDistributor {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string broadcast(const std::string& text) const override { return text; }
  std::vector<std::string> gather(const std::string& bytes) const override { return {bytes}; }
};

enum Status : char { kDone = 'D', kFailed = 'F', kInterrupted = 'I' };

}  // namespace

const RunDistributor& one_process() {
  static const OneProcess p;
  return p;
}

std::vector<int> assign_runs(const std::vector<double>& costs, int processes) {
  if (processes < 1) throw Error("assign_runs: " + std::to_string(processes) + " processes");
  std::vector<size_t> order(costs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(static_cast<size_t>(processes), 0.0);
  std::vector<int> owner(costs.size(), 0);
  for (size_t i : order) {
    const auto least = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = static_cast<int>(least);
    load[least] += std::max(costs[i], 0.0);
  }
  return owner;
}

std::string pack(const std::vector<std::string>& parts) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& p : parts) j.push_back(nlohmann::json::binary(std::vector<uint8_t>(p.begin(), p.end())));
  const std::vector<uint8_t> cbor = nlohmann::json::to_cbor(j);
  return {cbor.begin(), cbor.end()};
}

std::vector<std::string> unpack(const std::string& packed) {
  try {
    std::vector<std::string> parts;
    for (const auto& p : nlohmann::json::from_cbor(packed.begin(), packed.end())) {
      const auto& raw = p.get_binary();
      parts.emplace_back(raw.begin(), raw.end());
    }
    return parts;
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("unpack: malformed bytes (") + e.what() + ")");
  }
}

std::vector<std::string> gather_shares(const RunDistributor& d, const ShareOutcome& mine) {
  const char status = !mine.failure.empty() ? kFailed : mine.interrupted ? kInterrupted : kDone;
  const std::vector<std::string> all =
      d.gather(pack({std::string(1, status), status == kDone ? mine.payload : mine.failure}));
  // Rank 0 decides for everyone: the lowest rank that failed, else the lowest interrupted.
  std::string decision;
  std::vector<std::string> payloads;
  if (d.rank() == 0) {
    std::string interrupted;
    for (const auto& bytes : all) {
      const std::vector<std::string> parts = unpack(bytes);
      if (parts.size() != 2 || parts[0].size() != 1) throw Error("gather_shares: malformed share");
      if (parts[0][0] == kFailed && decision.empty()) decision = std::string(1, kFailed) + parts[1];
      if (parts[0][0] == kInterrupted && interrupted.empty()) interrupted = std::string(1, kInterrupted) + parts[1];
      payloads.push_back(parts[1]);
    }
    if (decision.empty()) decision = interrupted;
  }
  decision = d.broadcast(decision);
  if (!decision.empty() && decision[0] == kInterrupted) throw Interrupted(decision.substr(1));
  if (!decision.empty()) throw Error(decision.substr(1));
  return payloads;
}

}  // namespace attnlab::lab
