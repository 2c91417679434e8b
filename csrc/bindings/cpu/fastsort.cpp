// relaxops._C: fast soft sort / soft rank (csrc/fastsort/fastsort.h). op: 0 = soft_rank, 1 = soft_sort; reg:
// 0 = l2, 1 = kl; x, out, grad_out, grad_x [B, n]; perm int64 and block int32 [B, n], written by the forward;
// lengths: int64 [B] (each row's real length) or 0 (every row full), the last argument.
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
      [](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n, uintptr_t x, uintptr_t out,
         uintptr_t perm, uintptr_t block, uintptr_t lengths) {
        const auto P = make_fastsort_params(op, reg, eps, descending);
        fastsort_check_params(P, B, n);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          fastsort_forward_cpu<T>(P, B, n, as_ptr<const int64_t>(lengths), as_ptr<const T>(x), as_ptr<T>(out),
                                  as_ptr<int64_t>(perm), as_ptr<int32_t>(block));
        });
      },
      py::arg("dtype"), py::arg("op"), py::arg("reg"), py::arg("eps"), py::arg("descending"), py::arg("B"),
      py::arg("n"), py::arg("x"), py::arg("out"), py::arg("perm"), py::arg("block"), py::arg("lengths") = 0);
  m.def(
      "fastsort_backward",
      [](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n, uintptr_t grad_out,
         uintptr_t out, uintptr_t x, uintptr_t perm, uintptr_t block, uintptr_t grad_x, uintptr_t lengths) {
        const auto P = make_fastsort_params(op, reg, eps, descending);
        fastsort_check_params(P, B, n);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          fastsort_backward_cpu<T>(P, B, n, as_ptr<const int64_t>(lengths), as_ptr<const T>(grad_out),
                                   as_ptr<const T>(out), as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                                   as_ptr<const int32_t>(block), as_ptr<T>(grad_x));
        });
      },
      py::arg("dtype"), py::arg("op"), py::arg("reg"), py::arg("eps"), py::arg("descending"), py::arg("B"),
      py::arg("n"), py::arg("grad_out"), py::arg("out"), py::arg("x"), py::arg("perm"), py::arg("block"),
      py::arg("grad_x"), py::arg("lengths") = 0);

  // Test entry points of the GPU's chunked PAV for long rows: the forward and backward above with the row cut
  // into `chunks` chunks, merged as the CUDA kernels do (serial, for tests only).
  m.def(
      "fastsort_forward_chunked",
      [](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n, uintptr_t x, uintptr_t out,
         uintptr_t perm, uintptr_t block, int chunks, uintptr_t lengths) {
        const auto P = make_fastsort_params(op, reg, eps, descending);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          fastsort_forward_chunked_cpu<T>(P, B, n, as_ptr<const int64_t>(lengths), as_ptr<const T>(x), as_ptr<T>(out),
                                          as_ptr<int64_t>(perm), as_ptr<int32_t>(block), chunks);
        });
      },
      py::arg("dtype"), py::arg("op"), py::arg("reg"), py::arg("eps"), py::arg("descending"), py::arg("B"),
      py::arg("n"), py::arg("x"), py::arg("out"), py::arg("perm"), py::arg("block"), py::arg("chunks"),
      py::arg("lengths") = 0);
  m.def(
      "fastsort_backward_chunked",
      [](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n, uintptr_t grad_out,
         uintptr_t out, uintptr_t x, uintptr_t perm, uintptr_t block, uintptr_t grad_x, int chunks, uintptr_t lengths) {
        const auto P = make_fastsort_params(op, reg, eps, descending);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          fastsort_backward_chunked_cpu<T>(P, B, n, as_ptr<const int64_t>(lengths), as_ptr<const T>(grad_out),
                                           as_ptr<const T>(out), as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                                           as_ptr<const int32_t>(block), as_ptr<T>(grad_x), chunks);
        });
      },
      py::arg("dtype"), py::arg("op"), py::arg("reg"), py::arg("eps"), py::arg("descending"), py::arg("B"),
      py::arg("n"), py::arg("grad_out"), py::arg("out"), py::arg("x"), py::arg("perm"), py::arg("block"),
      py::arg("grad_x"), py::arg("chunks"), py::arg("lengths") = 0);
}

}  // namespace relaxops
