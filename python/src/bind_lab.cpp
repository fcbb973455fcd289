// The lab's experiment registry (attnlab/lab.hpp) for attnlab.experiments:
// _attnlab.lab_experiments() describes them, _attnlab.lab_run() runs one with a
// string→string configuration and returns its result as plain Python data, each
// table a dict of NumPy arrays (one float64 array per column).
#include <pybind11/stl.h>

#include <string>

#include "attnlab/blas.hpp"
#include "attnlab/lab.hpp"
#include "bindings.hpp"
#include "ndarray.hpp"
#include "signatures.hpp"

namespace attnlab::python {
namespace {

py::dict describe(const lab::Experiment& e) {
  py::list params;
  for (const auto& p : e.parameters()) {
    py::dict d;
    d["name"] = p.name;
    d["default"] = p.default_value;
    d["type"] = p.type;
    d["help"] = p.help;
    d["rule"] = p.rule;
    params.append(d);
  }
  py::dict d;
  d["name"] = e.name;
  d["summary"] = e.summary;
  d["claims"] = e.claims;
  d["parameters"] = params;
  d["quick"] = e.quick;
  return d;
}

py::list lab_experiments() {
  py::list out;
  for (const auto* e : lab::experiments()) out.append(describe(*e));
  return out;
}

py::dict to_python(const lab::Verdict& v) {
  py::dict d;
  d["claim"] = v.claim;
  d["title"] = v.title;
  d["statement"] = v.statement;
  d["seeds"] = v.seeds;
  d["theory"] = v.theory;
  d["theory_text"] = v.theory_text;
  d["measured"] = v.measured;
  d["measured_text"] = v.measured_text;
  d["tolerance"] = v.tolerance;
  d["method"] = v.method;
  d["outcome"] = std::string(lab::to_string(v.outcome));
  d["figure"] = v.figure;
  d["experiment"] = v.experiment;
  d["supplementary"] = v.supplementary;  // beside the claim, left out of its overall verdict
  d["plain"] = v.plain;                  // the finding in plain words
  py::list ranges;                       // the outcome over each part of the range measured
  for (const auto& r : v.ranges) {
    py::dict rd;
    rd["from"] = r.from;
    rd["to"] = r.to;
    rd["outcome"] = std::string(lab::to_string(r.outcome));
    rd["text"] = r.text;
    ranges.append(rd);
  }
  d["range_variable"] = v.range_variable;
  d["ranges"] = ranges;
  return d;
}

// OpenBLAS's thread count is process-wide, so the program sets it, as the command line
// does at start-up (tools/attnlab/main.cpp): the training study calls OpenBLAS from each of
// its own OpenMP threads, and OpenBLAS's threads on top of those made `train --quick` 12×
// slower from Python (174 s against 14 s). A Python process may use the same OpenBLAS
// through NumPy, so the count is 1 for the run only and restored after. Speed only: results
// do not depend on it.
class OneBlasThreadDuringRun {
 public:
  OneBlasThreadDuringRun() : saved_(blas::threads()) { blas::set_threads(1); }
  ~OneBlasThreadDuringRun() { blas::set_threads(saved_); }
  OneBlasThreadDuringRun(const OneBlasThreadDuringRun&) = delete;
  OneBlasThreadDuringRun& operator=(const OneBlasThreadDuringRun&) = delete;

 private:
  int saved_;
};

py::dict lab_run(const std::string& name, const lab::Config& config, uint64_t seed) {
  lab::Result r;
  // Ctrl-C: the run asks between units of work (at most every 10 ms) and stops; whatever
  // Python's signal handler raised (KeyboardInterrupt) is raised here, the result dropped.
  std::shared_ptr<py::error_already_set> raised;
  const auto interrupt = [&raised] {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return false;
    raised = std::make_shared<py::error_already_set>();  // takes the pending exception
    return true;
  };
  try {
    py::gil_scoped_release release;  // experiments run for seconds; other threads may go on
    const OneBlasThreadDuringRun one_blas_thread;
    r = lab::run(name, config, seed, {}, interrupt);
  } catch (const Interrupted&) {
    if (raised) throw py::error_already_set(*raised);
    throw;
  }
  py::dict tables;
  for (const auto& t : r.tables) {
    py::dict columns;
    for (size_t c = 0; c < t.column_names.size(); ++c) {
      const auto& col = t.columns[c];
      py::array_t<double> a(static_cast<py::ssize_t>(col.size()));
      std::copy(col.begin(), col.end(), a.mutable_data());
      columns[py::str(t.column_names[c])] = a;
    }
    tables[py::str(t.name)] = columns;
  }
  py::list verdicts, figures;
  for (const auto& v : r.verdicts) verdicts.append(to_python(v));
  for (const auto& f : r.figures) {
    py::dict d;
    d["name"] = f.name;
    d["title"] = f.title;
    d["caption"] = f.caption;
    figures.append(d);
  }
  py::dict d;
  d["experiment"] = r.experiment;
  d["seed"] = r.seed;
  d["config"] = r.config;
  d["tables"] = tables;
  d["verdicts"] = verdicts;
  d["figures"] = figures;
  d["notes"] = r.notes;
  d["setup"] = r.setup;
  d["seconds"] = r.seconds;
  return d;
}

}  // namespace

void bind_lab(py::module_& m) {
  def(m, signatures::lab_experiments(), &lab_experiments);
  def(m, signatures::lab_run(), &lab_run);
}

}  // namespace attnlab::python
