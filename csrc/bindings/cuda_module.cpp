// relaxops._cuda: the CUDA kernels, one bind function per family (bindings/cuda/<family>.cpp). Torch-free: buffers
// are raw device addresses (std::uintptr_t) of contiguous tensors and `stream` is a cudaStream_t handle
// (torch.cuda.current_stream().cuda_stream); the Python wrappers check dtype, device, contiguity and shapes first.
// Imports without a GPU or driver: device_count() is then 0. Build notes: docs/build.md.
#include <pybind11/pybind11.h>

#include <string>

#include "../sortnet/sortnet.h"
#include "bindings.h"

#ifndef RELAXOPS_CUDA_ARCHS
#define RELAXOPS_CUDA_ARCHS ""
#endif

namespace py = pybind11;

PYBIND11_MODULE(_cuda, m) {
  m.doc() = "relaxops CUDA kernels (torch-free; pointers to contiguous device buffers, stream handles)";
  m.def("device_count", &relaxops::cuda_device_count, "Visible CUDA devices (0 without a GPU or driver).");
  m.def("device_name", &relaxops::cuda_device_name, py::arg("device") = 0);
  m.def(
      "cuda_archs", []() { return std::string(RELAXOPS_CUDA_ARCHS); },
      "CMAKE_CUDA_ARCHITECTURES the module was built for.");
  m.def("runtime_version", &relaxops::cuda_runtime_version,
        "CUDA runtime version linked into the module (1000 * major + 10 * minor).");
  m.def("driver_version", &relaxops::cuda_driver_version, "CUDA version of the driver (0 without a driver).");

  relaxops::bind_sortnet(m);
  relaxops::bind_baselines(m);
  relaxops::bind_otsort(m);
  relaxops::bind_fastsort(m);
  relaxops::bind_logic(m);
  relaxops::bind_render(m);
  relaxops::bind_algorithms(m);
  relaxops::bind_training(m);
}
