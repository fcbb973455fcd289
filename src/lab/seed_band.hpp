#pragma once
// One curve field of a cell's runs across seeds, at each evaluation step any run reached: a
// centre (the mean or the median, the caller's choice) and the lowest..highest value. A run
// that diverged stops early: its missing points are left out. Shared by the training figures.
#include <algorithm>
#include <cmath>
#include <vector>

namespace attnlab::lab {

struct SeedBand {
  std::vector<double> step, centre, lo, hi;
};

template <class Run, class Field, class Centre>
SeedBand seed_band(const std::vector<const Run*>& runs, Field field, Centre centre) {
  SeedBand a;
  size_t longest = 0;
  for (const auto* r : runs) longest = std::max(longest, r->curve.size());
  for (size_t i = 0; i < longest; ++i) {
    std::vector<double> v;
    double step = 0;
    for (const auto* r : runs)
      if (i < r->curve.size() && std::isfinite(field(r->curve[i]))) {
        v.push_back(field(r->curve[i]));
        step = static_cast<double>(r->curve[i].step);
      }
    if (v.empty()) continue;
    a.step.push_back(step);
    a.centre.push_back(centre(v));
    a.lo.push_back(*std::min_element(v.begin(), v.end()));
    a.hi.push_back(*std::max_element(v.begin(), v.end()));
  }
  return a;
}

}  // namespace attnlab::lab
