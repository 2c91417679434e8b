// relaxops._C: NeuralSort / SoftSort (csrc/baselines/baselines.h). perm: int64 [B, n], written by the forward
// kernels; X, grad_X: [B, n, k]; lengths, ks: int64 [B] or 0 (full rows / k columns per row).
#include <pybind11/pybind11.h>

#include "../../baselines/baselines.h"
#include "../binding_utils.h"
#include "../bindings.h"

namespace py = pybind11;
using std::uintptr_t;

namespace relaxops {

void bind_baselines(py::module_& m) {
  m.def("neuralsort_forward", [](int dtype, int64_t B, int64_t n, int64_t k, double tau, uintptr_t x, uintptr_t lengths,
                                 uintptr_t ks, bool left, uintptr_t X, uintptr_t perm) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      neuralsort_forward_cpu<T>(B, n, k, tau, as_ptr<const T>(x), as_ptr<const int64_t>(lengths),
                                as_ptr<const int64_t>(ks), left, as_ptr<T>(X), as_ptr<int64_t>(perm));
    });
  });
  m.def("neuralsort_backward",
        [](int dtype, int64_t B, int64_t n, int64_t k, double tau, uintptr_t grad_X, uintptr_t X, uintptr_t x,
           uintptr_t perm, uintptr_t lengths, uintptr_t ks, bool left, uintptr_t grad_x) {
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            neuralsort_backward_cpu<T>(B, n, k, tau, as_ptr<const T>(grad_X), as_ptr<const T>(X), as_ptr<const T>(x),
                                       as_ptr<const int64_t>(perm), as_ptr<const int64_t>(lengths),
                                       as_ptr<const int64_t>(ks), left, as_ptr<T>(grad_x));
          });
        });
  m.def("softsort_forward", [](int dtype, int64_t B, int64_t n, int64_t k, double tau, double pow, uintptr_t x,
                               uintptr_t lengths, uintptr_t ks, bool left, uintptr_t X, uintptr_t perm) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      softsort_forward_cpu<T>(B, n, k, tau, pow, as_ptr<const T>(x), as_ptr<const int64_t>(lengths),
                              as_ptr<const int64_t>(ks), left, as_ptr<T>(X), as_ptr<int64_t>(perm));
    });
  });
  m.def("softsort_backward",
        [](int dtype, int64_t B, int64_t n, int64_t k, double tau, double pow, uintptr_t grad_X, uintptr_t X,
           uintptr_t x, uintptr_t perm, uintptr_t lengths, uintptr_t ks, bool left, uintptr_t grad_x) {
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            softsort_backward_cpu<T>(B, n, k, tau, pow, as_ptr<const T>(grad_X), as_ptr<const T>(X), as_ptr<const T>(x),
                                     as_ptr<const int64_t>(perm), as_ptr<const int64_t>(lengths),
                                     as_ptr<const int64_t>(ks), left, as_ptr<T>(grad_x));
          });
        });
}

}  // namespace relaxops
