// relaxops._cuda: training solvers: linear assignment (csrc/training/assignment.h).
#include <pybind11/pybind11.h>

#include "../../training/assignment.h"
#include "../binding_utils.h"
#include "../bindings.h"

namespace py = pybind11;
using std::uintptr_t;

namespace relaxops {

void bind_training(py::module_& m) {
  m.def("assignment_workspace", [](int64_t B, int64_t d) { return assignment_cuda_workspace(AssignmentParams{B, d}); });
  m.def("assignment",
        [](int dtype, int64_t B, int64_t d, uintptr_t theta, uintptr_t perm, uintptr_t workspace, uintptr_t stream) {
          const AssignmentParams P{B, d};
          assignment_check_params(P);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            assignment_cuda<T>(P, as_ptr<const T>(theta), as_ptr<int64_t>(perm), as_ptr<void>(workspace), stream);
          });
        });
}

}  // namespace relaxops
