// relaxops._cuda: relaxed algorithms: shortest path on grids, edit distance and bubble sort
// (csrc/algorithms/shortest_path.h, edit_distance.h, bubble_sort.h; layouts and workspace sizes in the headers).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../../algorithms/bubble_sort.h"
#include "../../algorithms/edit_distance.h"
#include "../../algorithms/shortest_path.h"
#include "../binding_utils.h"
#include "../bindings.h"

namespace py = pybind11;
using std::uintptr_t;

namespace relaxops {

void bind_algorithms(py::module_& m) {
  // Shortest path: the CPU module's arguments; the forward also takes counts (int32 [B], "while") and a workspace
  // of shortest_path_workspace(ints, floats, K, False) elements (0 elements: none needed), the backward the step
  // count K read from the forward's steps and a workspace of shortest_path_workspace(ints, floats, K, True).
  m.def("shortest_path_workspace", [](SpInts i, SpFloats f, int64_t K, bool backward) {
    return shortest_path_cuda_workspace(make_sp_params(i, f), K, backward);
  });
  m.def("shortest_path_forward", [](int dtype, SpInts i, SpFloats f, uintptr_t cost, uintptr_t out, uintptr_t jac,
                                    uintptr_t pi, uintptr_t steps, uintptr_t counts, uintptr_t workspace,
                                    uintptr_t stream) {
    const SpParams P = make_sp_params(i, f);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      shortest_path_forward_cuda<T>(P, as_ptr<const T>(cost), as_ptr<T>(out), as_ptr<T>(jac), as_ptr<T>(pi),
                                    as_ptr<int32_t>(steps), as_ptr<int32_t>(counts), as_ptr<T>(workspace), stream);
    });
  });
  m.def("shortest_path_backward", [](int dtype, SpInts i, SpFloats f, int64_t K, uintptr_t grad_out, uintptr_t jac,
                                     uintptr_t pi, uintptr_t grad_cost, uintptr_t workspace, uintptr_t stream) {
    const SpParams P = make_sp_params(i, f);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      shortest_path_backward_cuda<T>(P, K, as_ptr<const T>(grad_out), as_ptr<const T>(jac), as_ptr<const T>(pi),
                                     as_ptr<T>(grad_cost), as_ptr<T>(workspace), stream);
    });
  });

  m.def("edit_distance_workspace", [](int64_t B, int64_t n, int64_t m_, int64_t K, bool backward) {
    return edit_distance_cuda_workspace(EditDistanceParams{B, n, m_, K, 1.0}, backward);
  });
  m.def("edit_distance_forward", [](int dtype, int64_t B, int64_t n, int64_t m_, int64_t K, double beta, uintptr_t s,
                                    uintptr_t t, uintptr_t D, uintptr_t cos, uintptr_t workspace, uintptr_t stream) {
    const EditDistanceParams P{B, n, m_, K, beta};
    edit_distance_check_params(P);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      edit_distance_forward_cuda<T>(P, as_ptr<const T>(s), as_ptr<const T>(t), as_ptr<T>(D), as_ptr<T>(cos),
                                    as_ptr<T>(workspace), stream);
    });
  });
  m.def("edit_distance_backward", [](int dtype, int64_t B, int64_t n, int64_t m_, int64_t K, double beta,
                                     uintptr_t grad_distance, uintptr_t grad_D, uintptr_t s, uintptr_t t, uintptr_t D,
                                     uintptr_t cos, uintptr_t grad_s, uintptr_t grad_t, uintptr_t workspace,
                                     uintptr_t stream) {
    const EditDistanceParams P{B, n, m_, K, beta};
    edit_distance_check_params(P);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      edit_distance_backward_cuda<T>(P, as_ptr<const T>(grad_distance), as_ptr<const T>(grad_D), as_ptr<const T>(s),
                                     as_ptr<const T>(t), as_ptr<const T>(D), as_ptr<const T>(cos), as_ptr<T>(grad_s),
                                     as_ptr<T>(grad_t), as_ptr<T>(workspace), stream);
    });
  });

  // bubble sort: passes = min(max_iter, n); row_trips: int32 [B] (forward)
  m.def("bubble_sort_workspace", [](int64_t B, int64_t n, int64_t passes, bool backward) {
    return bubble_cuda_workspace(BubbleParams{B, n, 1.0, 0, passes, 0.0}, backward);
  });
  m.def("bubble_sort_forward",
        [](int dtype, int64_t B, int64_t n, double beta, int hard, int64_t passes, double epsilon, uintptr_t x,
           uintptr_t sorted, uintptr_t swaps, uintptr_t any_swap, uintptr_t states, uintptr_t trips,
           uintptr_t row_trips, uintptr_t workspace, uintptr_t stream) {
          const BubbleParams P{B, n, beta, hard, passes, epsilon};
          bubble_check_params(P);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            bubble_sort_forward_cuda<T>(P, as_ptr<const T>(x), as_ptr<T>(sorted), as_ptr<T>(swaps), as_ptr<T>(any_swap),
                                        as_ptr<T>(states), as_ptr<int32_t>(trips), as_ptr<int32_t>(row_trips),
                                        as_ptr<T>(workspace), stream);
          });
        });
  m.def("bubble_sort_backward",
        [](int dtype, int64_t B, int64_t n, double beta, int hard, int64_t passes, double epsilon,
           uintptr_t grad_sorted, uintptr_t grad_swaps, uintptr_t grad_any, uintptr_t x, uintptr_t states,
           uintptr_t trips, uintptr_t grad_x, uintptr_t workspace, uintptr_t stream) {
          const BubbleParams P{B, n, beta, hard, passes, epsilon};
          bubble_check_params(P);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            bubble_sort_backward_cuda<T>(P, as_ptr<const T>(grad_sorted), as_ptr<const T>(grad_swaps),
                                         as_ptr<const T>(grad_any), as_ptr<const T>(x), as_ptr<const T>(states),
                                         as_ptr<const int32_t>(trips), as_ptr<T>(grad_x), as_ptr<T>(workspace), stream);
          });
        });
}

}  // namespace relaxops
