// relaxops._C: training solvers: linear assignment (csrc/training/assignment.h).
#include <pybind11/pybind11.h>

#include "../../training/assignment.h"
#include "../binding_utils.h"
#include "../bindings.h"

namespace py = pybind11;
using std::uintptr_t;

namespace relaxops {

void bind_training(py::module_& m) {
  // returns the number of items with non-finite scores; onehot may be 0 (not written)
  m.def(
      "assignment",
      [](int dtype, int64_t B, int64_t d, uintptr_t theta, uintptr_t perm, uintptr_t onehot, int threads) -> int64_t {
        const AssignmentParams P{B, d};
        assignment_check_params(P);
        py::gil_scoped_release nogil;
        return by_dtype(dtype, [&](auto t) -> int64_t {
          using T = decltype(t);
          return assignment_cpu<T>(P, as_ptr<const T>(theta), as_ptr<int64_t>(perm), as_ptr<T>(onehot), threads);
        });
      },
      py::arg("dtype"), py::arg("B"), py::arg("d"), py::arg("theta"), py::arg("perm"), py::arg("onehot") = 0,
      py::arg("threads") = 0);
}

}  // namespace relaxops
