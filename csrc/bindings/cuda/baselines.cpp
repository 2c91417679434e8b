// relaxops._cuda: NeuralSort / SoftSort (csrc/baselines/baselines.h). perm: int64 [B, n], an input here (the stable
// ascending sort permutation of the real entries, pads last); lengths, ks: int64 [B] or 0; workspace: device
// buffer of the data dtype, sized as documented in baselines.h.
#include <pybind11/pybind11.h>

#include "../../baselines/baselines.h"
#include "../binding_utils.h"
#include "../bindings.h"

namespace py = pybind11;
using std::uintptr_t;

namespace relaxops {

void bind_baselines(py::module_& m) {
  m.def("neuralsort_forward",
        [](int dtype, int64_t B, int64_t n, int64_t k, double tau, uintptr_t x, uintptr_t perm, uintptr_t lengths,
           uintptr_t ks, bool left, uintptr_t X, uintptr_t workspace, uintptr_t stream) {
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            neuralsort_forward_cuda<T>(B, n, k, tau, as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                                       as_ptr<const int64_t>(lengths), as_ptr<const int64_t>(ks), left, as_ptr<T>(X),
                                       as_ptr<T>(workspace), stream);
          });
        });
  m.def("neuralsort_backward", [](int dtype, int64_t B, int64_t n, int64_t k, double tau, uintptr_t grad_X, uintptr_t X,
                                  uintptr_t x, uintptr_t perm, uintptr_t lengths, uintptr_t ks, bool left,
                                  uintptr_t grad_x, uintptr_t workspace, uintptr_t stream) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      neuralsort_backward_cuda<T>(B, n, k, tau, as_ptr<const T>(grad_X), as_ptr<const T>(X), as_ptr<const T>(x),
                                  as_ptr<const int64_t>(perm), as_ptr<const int64_t>(lengths),
                                  as_ptr<const int64_t>(ks), left, as_ptr<T>(grad_x), as_ptr<T>(workspace), stream);
    });
  });
  m.def("softsort_forward", [](int dtype, int64_t B, int64_t n, int64_t k, double tau, double pow, uintptr_t x,
                               uintptr_t perm, uintptr_t lengths, uintptr_t ks, bool left, uintptr_t X,
                               uintptr_t stream) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      softsort_forward_cuda<T>(B, n, k, tau, pow, as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                               as_ptr<const int64_t>(lengths), as_ptr<const int64_t>(ks), left, as_ptr<T>(X), stream);
    });
  });
  m.def("softsort_backward", [](int dtype, int64_t B, int64_t n, int64_t k, double tau, double pow, uintptr_t grad_X,
                                uintptr_t X, uintptr_t x, uintptr_t perm, uintptr_t lengths, uintptr_t ks, bool left,
                                uintptr_t grad_x, uintptr_t workspace, uintptr_t stream) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      softsort_backward_cuda<T>(B, n, k, tau, pow, as_ptr<const T>(grad_X), as_ptr<const T>(X), as_ptr<const T>(x),
                                as_ptr<const int64_t>(perm), as_ptr<const int64_t>(lengths), as_ptr<const int64_t>(ks),
                                left, as_ptr<T>(grad_x), as_ptr<T>(workspace), stream);
    });
  });
}

}  // namespace relaxops
