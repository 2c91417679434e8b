// relaxops._cuda: the CUDA kernels. Torch-free: buffers are raw device addresses (std::uintptr_t) of
// contiguous tensors and `stream` is a cudaStream_t handle (torch.cuda.current_stream().cuda_stream); the
// Python wrappers check dtype, device, contiguity and shapes first. Arguments are those of relaxops._C plus
// a trailing stream (matrix_backward also takes a workspace, see sortnet_matrix_backward_workspace_bytes).
// Imports without a GPU or driver: device_count() is then 0.
#include <pybind11/pybind11.h>

#include <string>

#include "../baselines/baselines.h"
#include "../common/relax.h"
#include "../sortnet/sortnet.h"
#include "binding_utils.h"

#ifndef RELAXOPS_CUDA_ARCHS
#define RELAXOPS_CUDA_ARCHS ""
#endif

namespace py = pybind11;
using relaxops::as_ptr;
using relaxops::dispatch;
using relaxops::make_net;
using relaxops::make_relax;
using std::uintptr_t;

namespace {

template <typename T>
struct ValuesForward {
  static void run(relaxops::NetView net, relaxops::RelaxParams rp, int64_t B, uintptr_t x, uintptr_t sorted,
                  uintptr_t d, uintptr_t alpha, uintptr_t stream) {
    relaxops::sortnet_values_forward_cuda<T>(net, rp, B, as_ptr<const T>(x), as_ptr<T>(sorted), as_ptr<T>(d),
                                             as_ptr<T>(alpha), stream);
  }
};
template <typename T>
struct ValuesBackward {
  static void run(relaxops::NetView net, relaxops::RelaxParams rp, int64_t B, uintptr_t grad_sorted,
                  uintptr_t grad_alpha, uintptr_t d, uintptr_t alpha, uintptr_t grad_x, uintptr_t stream) {
    relaxops::sortnet_values_backward_cuda<T>(net, rp, B, as_ptr<const T>(grad_sorted),
                                              as_ptr<const T>(grad_alpha), as_ptr<const T>(d),
                                              as_ptr<const T>(alpha), as_ptr<T>(grad_x), stream);
  }
};
template <typename T>
struct MatrixForward {
  static void run(relaxops::NetView net, int64_t B, int64_t col_begin, uintptr_t alpha, uintptr_t X,
                  uintptr_t stream) {
    relaxops::sortnet_matrix_forward_cuda<T>(net, B, col_begin, as_ptr<const T>(alpha), as_ptr<T>(X), stream);
  }
};
template <typename T>
struct MatrixBackwardWorkspace {
  static int64_t run(relaxops::NetView net, int64_t B, int64_t col_begin) {
    return relaxops::sortnet_matrix_backward_workspace_bytes_cuda<T>(net, B, col_begin);
  }
};
template <typename T>
struct MatrixBackward {
  static void run(relaxops::NetView net, int64_t B, int64_t col_begin, uintptr_t alpha, uintptr_t grad_X,
                  uintptr_t grad_alpha, uintptr_t workspace, int64_t workspace_bytes, uintptr_t stream) {
    relaxops::sortnet_matrix_backward_cuda<T>(net, B, col_begin, as_ptr<const T>(alpha), as_ptr<const T>(grad_X),
                                              as_ptr<T>(grad_alpha), as_ptr<void>(workspace), workspace_bytes,
                                              stream);
  }
};

}  // namespace

PYBIND11_MODULE(_cuda, m) {
  m.doc() = "relaxops CUDA kernels (torch-free; pointers to contiguous device buffers, stream handles)";
  m.def("device_count", &relaxops::cuda_device_count, "Visible CUDA devices (0 without a GPU or driver).");
  m.def("device_name", &relaxops::cuda_device_name, py::arg("device") = 0);
  m.def("cuda_archs", []() { return std::string(RELAXOPS_CUDA_ARCHS); },
        "CMAKE_CUDA_ARCHITECTURES the module was built for.");
  m.def("runtime_version", &relaxops::cuda_runtime_version,
        "CUDA runtime version linked into the module (1000 * major + 10 * minor).");
  m.def("driver_version", &relaxops::cuda_driver_version, "CUDA version of the driver (0 without a driver).");

  // Network arguments, in this order everywhere: n, num_layers, num_comparators, layer_ptr, cmin, cmax
  // (layer_ptr, cmin, cmax: device int32 arrays).
  m.def(
      "sortnet_values_forward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int relax,
         double steepness, double art_lambda, int64_t B, uintptr_t x, uintptr_t sorted, uintptr_t d,
         uintptr_t alpha, uintptr_t stream) {
        py::gil_scoped_release nogil;
        dispatch<ValuesForward>(dtype, make_net(n, L, C, lp, cmin, cmax), make_relax(relax, steepness, art_lambda),
                                B, x, sorted, d, alpha, stream);
      });
  m.def(
      "sortnet_values_backward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int relax,
         double steepness, double art_lambda, int64_t B, uintptr_t grad_sorted, uintptr_t grad_alpha,
         uintptr_t d, uintptr_t alpha, uintptr_t grad_x, uintptr_t stream) {
        py::gil_scoped_release nogil;
        dispatch<ValuesBackward>(dtype, make_net(n, L, C, lp, cmin, cmax),
                                 make_relax(relax, steepness, art_lambda), B, grad_sorted, grad_alpha, d, alpha,
                                 grad_x, stream);
      });
  m.def("sortnet_matrix_forward", [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin,
                                     uintptr_t cmax, int64_t B, int64_t col_begin, uintptr_t alpha, uintptr_t X,
                                     uintptr_t stream) {
    py::gil_scoped_release nogil;
    dispatch<MatrixForward>(dtype, make_net(n, L, C, lp, cmin, cmax), B, col_begin, alpha, X, stream);
  });
  m.def(
      "sortnet_matrix_backward_workspace_bytes",
      [](int dtype, int64_t n, int64_t L, int64_t C, int64_t B, int64_t col_begin) {
        RELAXOPS_CHECK(B >= 0, "negative batch size");
        return dispatch<MatrixBackwardWorkspace>(dtype, make_net(n, L, C, 0, 0, 0), B, col_begin);
      },
      "Bytes of device workspace sortnet_matrix_backward needs for this network size and batch (may be 0).");
  m.def(
      "sortnet_matrix_backward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int64_t B,
         int64_t col_begin, uintptr_t alpha, uintptr_t grad_X, uintptr_t grad_alpha, uintptr_t workspace,
         int64_t workspace_bytes, uintptr_t stream) {
        py::gil_scoped_release nogil;
        dispatch<MatrixBackward>(dtype, make_net(n, L, C, lp, cmin, cmax), B, col_begin, alpha, grad_X, grad_alpha,
                                 workspace, workspace_bytes, stream);
      },
      "grad_alpha from grad_X; `workspace` is a device buffer of at least "
      "sortnet_matrix_backward_workspace_bytes(dtype, n, L, C, B, col_begin) bytes, used on `stream` only.");

  // NeuralSort / SoftSort (csrc/baselines/baselines.h). dtype: 0 = float32, 1 = float64; perm: int64 [B, n],
  // an input here (the stable ascending sort permutation); workspace: device buffer of the data dtype, sized
  // as documented in baselines.h (0 for softsort_forward).
  {
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0) f(float{});
      else f(double{});
    };
    m.def("neuralsort_forward", [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, uintptr_t x,
                                           uintptr_t perm, uintptr_t X, uintptr_t workspace, uintptr_t stream) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::neuralsort_forward_cuda<T>(B, n, k, tau, as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                                             as_ptr<T>(X), as_ptr<T>(workspace), stream);
      });
    });
    m.def("neuralsort_backward", [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, uintptr_t grad_X,
                                            uintptr_t X, uintptr_t x, uintptr_t perm, uintptr_t grad_x,
                                            uintptr_t workspace, uintptr_t stream) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::neuralsort_backward_cuda<T>(B, n, k, tau, as_ptr<const T>(grad_X), as_ptr<const T>(X),
                                              as_ptr<const T>(x), as_ptr<const int64_t>(perm), as_ptr<T>(grad_x),
                                              as_ptr<T>(workspace), stream);
      });
    });
    m.def("softsort_forward", [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, double pow,
                                         uintptr_t x, uintptr_t perm, uintptr_t X, uintptr_t stream) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::softsort_forward_cuda<T>(B, n, k, tau, pow, as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                                           as_ptr<T>(X), stream);
      });
    });
    m.def("softsort_backward", [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, double pow,
                                          uintptr_t grad_X, uintptr_t X, uintptr_t x, uintptr_t perm,
                                          uintptr_t grad_x, uintptr_t workspace, uintptr_t stream) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::softsort_backward_cuda<T>(B, n, k, tau, pow, as_ptr<const T>(grad_X), as_ptr<const T>(X),
                                            as_ptr<const T>(x), as_ptr<const int64_t>(perm), as_ptr<T>(grad_x),
                                            as_ptr<T>(workspace), stream);
      });
    });
  }
}
