// relaxops._C: the C++ CPU kernels, one bind function per family (bindings/cpu/<family>.cpp). Torch-free: buffers
// are raw addresses (std::uintptr_t) of contiguous host memory; the Python wrappers check dtype, device,
// contiguity and shapes first. Build notes: docs/build.md.
#include <pybind11/pybind11.h>

#include "../common/cpu_parallel.h"
#include "bindings.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "relaxops C++ CPU kernels (torch-free; pointers to contiguous host buffers)";
  m.def("num_threads", &relaxops::cpu_threads);
  m.def("set_num_threads", [](int threads) {
    if (threads < 1) throw py::value_error("set_num_threads: threads must be >= 1");
    relaxops::set_cpu_threads(threads);
  });
  m.def("use_torch_threads", &relaxops::set_use_torch_threads,
        "Run parallel loops on PyTorch's OpenMP threads while they start on time (default True), or always on "
        "relaxops' own pool (False).");
  m.def("torch_threads_found", &relaxops::torch_threads_found);

  relaxops::bind_sortnet(m);
  relaxops::bind_baselines(m);
  relaxops::bind_otsort(m);
  relaxops::bind_fastsort(m);
  relaxops::bind_logic(m);
  relaxops::bind_render(m);
  relaxops::bind_algorithms(m);
  relaxops::bind_training(m);
}
