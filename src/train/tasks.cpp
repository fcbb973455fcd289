// Synthetic tasks that need attention, generated on the fly from a seed.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "attnlab/error.hpp"
#include "attnlab/train.hpp"

namespace attnlab::train {

int64_t vocab_size(const TaskConfig& task) {
  // recall: keys [0, n_keys), values [n_keys, n_keys + n_values)
  // copy:   content [0, n_content), marker n_content, query n_content + 1
  return task.kind == TaskKind::associative_recall ? task.n_keys + task.n_values : task.n_content + 2;
}

int64_t n_classes(const TaskConfig& task) {
  return task.kind == TaskKind::associative_recall ? task.n_values : task.n_content;
}

int64_t sequence_length(const TaskConfig& task) {
  return task.kind == TaskKind::associative_recall ? 2 * task.n_pairs + 1 : task.seq_len;
}

void validate(const TaskConfig& task) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("task: " + what);
  };
  if (task.kind == TaskKind::associative_recall) {
    need(task.n_pairs >= 1 && task.n_pairs <= 4096, "n_pairs must be in [1, 4096], got " + std::to_string(task.n_pairs));
    need(task.n_keys >= task.n_pairs && task.n_keys <= 1 << 20,
         "n_keys must be in [n_pairs, 2^20] (keys are distinct), got " + std::to_string(task.n_keys));
    need(task.n_values >= 2 && task.n_values <= 1 << 20,
         "n_values must be in [2, 2^20], got " + std::to_string(task.n_values));
  } else {
    need(task.seq_len >= 3 && task.seq_len <= 8192, "seq_len must be in [3, 8192], got " + std::to_string(task.seq_len));
    need(task.n_content >= 2 && task.n_content <= 1 << 20,
         "n_content must be in [2, 2^20], got " + std::to_string(task.n_content));
  }
}

Batch make_batch(const TaskConfig& task, int64_t batch, uint64_t seed) {
  validate(task);
  if (batch < 1) throw Error("task: batch must be ≥ 1, got " + std::to_string(batch));
  Batch out;
  out.batch = batch;
  out.seq = sequence_length(task);
  out.tokens.resize(static_cast<size_t>(batch * out.seq));
  out.targets.resize(static_cast<size_t>(batch));
  std::mt19937_64 rng(seed);
  if (task.kind == TaskKind::associative_recall) {
    std::vector<int32_t> keys(static_cast<size_t>(task.n_keys));
    std::iota(keys.begin(), keys.end(), 0);
    std::uniform_int_distribution<int32_t> value(0, static_cast<int32_t>(task.n_values - 1));
    std::vector<int32_t> values(static_cast<size_t>(task.n_pairs));
    for (int64_t b = 0; b < batch; ++b) {
      // A partial Fisher-Yates shuffle draws n_pairs distinct keys.
      for (int64_t p = 0; p < task.n_pairs; ++p) {
        std::uniform_int_distribution<int64_t> pick(p, task.n_keys - 1);
        std::swap(keys[static_cast<size_t>(p)], keys[static_cast<size_t>(pick(rng))]);
      }
      int32_t* row = out.tokens.data() + b * out.seq;
      for (int64_t p = 0; p < task.n_pairs; ++p) {
        values[static_cast<size_t>(p)] = value(rng);
        row[2 * p] = keys[static_cast<size_t>(p)];
        row[2 * p + 1] = static_cast<int32_t>(task.n_keys) + values[static_cast<size_t>(p)];
      }
      const int64_t asked = std::uniform_int_distribution<int64_t>(0, task.n_pairs - 1)(rng);
      row[out.seq - 1] = keys[static_cast<size_t>(asked)];
      out.targets[static_cast<size_t>(b)] = values[static_cast<size_t>(asked)];
    }
  } else {
    const auto marker = static_cast<int32_t>(task.n_content), query = static_cast<int32_t>(task.n_content + 1);
    std::uniform_int_distribution<int32_t> content(0, static_cast<int32_t>(task.n_content - 1));
    std::uniform_int_distribution<int64_t> where(0, out.seq - 3);  // the marker is followed by content
    for (int64_t b = 0; b < batch; ++b) {
      int32_t* row = out.tokens.data() + b * out.seq;
      for (int64_t i = 0; i + 1 < out.seq; ++i) row[i] = content(rng);
      const int64_t p = where(rng);
      row[p] = marker;
      row[out.seq - 1] = query;
      out.targets[static_cast<size_t>(b)] = row[p + 1];
    }
  }
  return out;
}

}  // namespace attnlab::train
