// relaxops._cuda: fast soft sort / soft rank (csrc/fastsort/fastsort.h). op, reg as in the CPU module; perm int64
// [B, n] an input of the forward (the stable ascending sort permutation of sgn x); block int32 [B, n] written by
// it; workspace: B n doubles (forward only); lengths: int64 [B] (each row's real length) or 0 (every row full).
// The Python ops check lengths' values before a launch (the kernels clamp them to [0, n]).
#include <pybind11/pybind11.h>

#include "../../fastsort/fastsort.h"
#include "../binding_utils.h"
#include "../bindings.h"

namespace py = pybind11;
using std::uintptr_t;

namespace relaxops {

void bind_fastsort(py::module_& m) {
  m.def(
      "fastsort_forward",
      [](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n, uintptr_t x, uintptr_t perm,
         uintptr_t out, uintptr_t block, uintptr_t workspace, uintptr_t stream, uintptr_t lengths) {
        const auto P = make_fastsort_params(op, reg, eps, descending);
        fastsort_check_params(P, B, n);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          fastsort_forward_cuda<T>(P, B, n, as_ptr<const int64_t>(lengths), as_ptr<const T>(x),
                                   as_ptr<const int64_t>(perm), as_ptr<T>(out), as_ptr<int32_t>(block),
                                   as_ptr<double>(workspace), stream);
        });
      },
      py::arg("dtype"), py::arg("op"), py::arg("reg"), py::arg("eps"), py::arg("descending"), py::arg("B"),
      py::arg("n"), py::arg("x"), py::arg("perm"), py::arg("out"), py::arg("block"), py::arg("workspace"),
      py::arg("stream"), py::arg("lengths") = 0);
  m.def(
      "fastsort_backward",
      [](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n, uintptr_t grad_out,
         uintptr_t out, uintptr_t x, uintptr_t perm, uintptr_t block, uintptr_t grad_x, uintptr_t stream,
         uintptr_t lengths) {
        const auto P = make_fastsort_params(op, reg, eps, descending);
        fastsort_check_params(P, B, n);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          fastsort_backward_cuda<T>(P, B, n, as_ptr<const int64_t>(lengths), as_ptr<const T>(grad_out),
                                    as_ptr<const T>(out), as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                                    as_ptr<const int32_t>(block), as_ptr<T>(grad_x), stream);
        });
      },
      py::arg("dtype"), py::arg("op"), py::arg("reg"), py::arg("eps"), py::arg("descending"), py::arg("B"),
      py::arg("n"), py::arg("grad_out"), py::arg("out"), py::arg("x"), py::arg("perm"), py::arg("block"),
      py::arg("grad_x"), py::arg("stream"), py::arg("lengths") = 0);
}

}  // namespace relaxops
