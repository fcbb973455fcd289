// The _attnlab_mpi extension (built when MPI is found): ring attention over NumPy shards
// for attnlab.mpi (python/attnlab/mpi.py), which passes mpi4py's communicator as its
// Fortran handle (comm.py2f(): an integer any MPI converts back, no mpi4py C API needed).
// float32, C-contiguous [B, H, n, d] arrays (the Python side makes them so).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <vector>

#include "attnlab/error.hpp"
#include "attnlab/ring_attention.hpp"

namespace py = pybind11;
using Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

namespace {

attnlab::ConstView<float> view(const Array& a, const char* name) {
  if (a.ndim() != 4) throw attnlab::Error(std::string(name) + ": expected [B, H, n, d], got " + std::to_string(a.ndim()) + " dimensions");
  return {a.data(), attnlab::Shape{a.shape(0), a.shape(1), a.shape(2), a.shape(3)}};
}

Array empty(const attnlab::Shape& s) { return Array(std::vector<py::ssize_t>{s[0], s[1], s[2], s[3]}); }

attnlab::TensorView<float> out_view(Array& a) {
  return {a.mutable_data(), attnlab::Shape{a.shape(0), a.shape(1), a.shape(2), a.shape(3)}};
}

// The ring's options from attnlab.mpi's arguments.
struct Options {
  attnlab::AttentionOptions<float> o;
  std::vector<float> sinks, alibi_slopes;
  attnlab::ComputeConfig config;
  attnlab::mpi::RingLayout layout;
  MPI_Comm comm;
};
Options options(int64_t comm, const std::vector<int64_t>& chunks, bool causal, const std::string& scale,
                std::optional<double> softcap, const std::vector<float>& sinks, const std::vector<int64_t>& window,
                const std::vector<float>& alibi_slopes, int threads) {
  Options x;
  x.comm = MPI_Comm_f2c(static_cast<MPI_Fint>(comm));
  x.layout = attnlab::mpi::RingLayout::from_chunks(chunks);
  x.o.causal = causal ? attnlab::Causal::top_left : attnlab::Causal::none;
  x.o.scale = attnlab::ScalePolicy::parse(scale);
  x.o.softcap = softcap;
  x.sinks = sinks;
  x.o.sinks = x.sinks;
  if (!window.empty() && window.size() != 2)
    throw attnlab::Error("window: expected (left, right), got " + std::to_string(window.size()) + " values");
  if (!window.empty()) x.o.window = {window[0], window[1]};
  x.alibi_slopes = alibi_slopes;
  x.o.alibi_slopes = x.alibi_slopes;
  attnlab::check_threads(threads);
  x.config.threads = threads;
  return x;
}

}  // namespace

PYBIND11_MODULE(_attnlab_mpi, m) {
  m.doc() = "Ring attention over MPI for attnlab.mpi (docs/scale-out.md).";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const attnlab::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.def(
      "ring_forward",
      [](int64_t comm, const std::vector<int64_t>& chunks, const Array& q, const Array& k, const Array& v, bool causal,
         const std::string& scale, std::optional<double> softcap, const std::vector<float>& sinks,
         const std::vector<int64_t>& window, const std::vector<float>& alibi_slopes, int threads) {
        const Options x = options(comm, chunks, causal, scale, softcap, sinks, window, alibi_slopes, threads);
        const auto qv = view(q, "q"), kv = view(k, "k"), vv = view(v, "v");
        Array out = empty({qv.batch(), qv.heads(), qv.seq(), vv.dim()}), lse = empty({qv.batch(), qv.heads(), qv.seq(), 1});
        auto ov = out_view(out), lv = out_view(lse);
        {
          py::gil_scoped_release unlocked;
          attnlab::mpi::ring_attention_forward(x.comm, x.layout, qv, kv, vv, x.o, {ov, lv}, x.config);
        }
        return py::make_tuple(out, lse);
      },
      py::arg("comm"), py::arg("chunks"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal"), py::arg("scale"),
      py::arg("softcap"), py::arg("sinks"), py::arg("window"), py::arg("alibi_slopes"), py::arg("threads"));
  m.def(
      "ring_backward",
      [](int64_t comm, const std::vector<int64_t>& chunks, const Array& q, const Array& k, const Array& v,
         const Array& out, const Array& lse, const Array& grad_out, bool causal, const std::string& scale,
         std::optional<double> softcap, const std::vector<float>& sinks, const std::vector<int64_t>& window,
         const std::vector<float>& alibi_slopes, int threads) {
        const Options x = options(comm, chunks, causal, scale, softcap, sinks, window, alibi_slopes, threads);
        const auto qv = view(q, "q"), kv = view(k, "k"), vv = view(v, "v");
        Array dq = empty(qv.shape()), dk = empty(kv.shape()), dv = empty(vv.shape());
        std::vector<float> dsinks(sinks.size());
        auto dqv = out_view(dq), dkv = out_view(dk), dvv = out_view(dv);
        const auto ov = view(out, "out"), lv = view(lse, "lse"), gv = view(grad_out, "grad_out");
        {
          py::gil_scoped_release unlocked;
          attnlab::mpi::ring_attention_backward(x.comm, x.layout, qv, kv, vv, ov, lv, gv, x.o, {dqv, dkv, dvv, dsinks},
                                                x.config);
        }
        return py::make_tuple(dq, dk, dv, dsinks);
      },
      py::arg("comm"), py::arg("chunks"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"),
      py::arg("grad_out"), py::arg("causal"), py::arg("scale"), py::arg("softcap"), py::arg("sinks"), py::arg("window"),
      py::arg("alibi_slopes"), py::arg("threads"));
}
