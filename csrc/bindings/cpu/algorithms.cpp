// relaxops._C: relaxed algorithms: shortest path on grids, edit distance and bubble sort
// (csrc/algorithms/shortest_path.h, edit_distance.h, bubble_sort.h; layouts in the headers).
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
  // Shortest path: cost, out, grad_out, grad_cost [B, H, W]; jac [B, n_iter - 1, 8, H, W + 2] or 0 (the forward
  // saves nothing); pi [B, 8, H, W + 2]; steps int32 [1] (written by the forward, read by the backward).
  m.def("shortest_path_ids", []() {
    py::dict ids;
    ids["probabilistic"] = int(kSpProbabilistic);
    ids["hamacher"] = int(kSpHamacher);
    ids["yager_1"] = int(kSpYager1);
    ids["for"] = int(kSpFor);
    ids["while"] = int(kSpWhile);
    return ids;
  });
  m.def(
      "shortest_path_workspace",
      [](SpInts i, SpFloats f, int64_t K, bool backward) {
        return shortest_path_cpu_workspace(make_sp_params(i, f), K, backward);
      },
      "elements of work buffers a forward (or a backward with K steps) allocates");
  m.def("shortest_path_forward", [](int dtype, SpInts i, SpFloats f, uintptr_t cost, uintptr_t out, uintptr_t jac,
                                    uintptr_t pi, uintptr_t steps) {
    const SpParams P = make_sp_params(i, f);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      shortest_path_forward_cpu<T>(P, as_ptr<const T>(cost), as_ptr<T>(out), as_ptr<T>(jac), as_ptr<T>(pi),
                                   as_ptr<int32_t>(steps));
    });
  });
  m.def("shortest_path_backward", [](int dtype, SpInts i, SpFloats f, uintptr_t steps, uintptr_t grad_out,
                                     uintptr_t jac, uintptr_t pi, uintptr_t grad_cost) {
    const SpParams P = make_sp_params(i, f);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      shortest_path_backward_cpu<T>(P, as_ptr<const int32_t>(steps), as_ptr<const T>(grad_out), as_ptr<const T>(jac),
                                    as_ptr<const T>(pi), as_ptr<T>(grad_cost));
    });
  });

  m.def("edit_distance_forward", [](int dtype, int64_t B, int64_t n, int64_t m_, int64_t K, double beta, uintptr_t s,
                                    uintptr_t t, uintptr_t D, uintptr_t cos) {
    const EditDistanceParams P{B, n, m_, K, beta};
    edit_distance_check_params(P);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      edit_distance_forward_cpu<T>(P, as_ptr<const T>(s), as_ptr<const T>(t), as_ptr<T>(D), as_ptr<T>(cos));
    });
  });
  m.def("edit_distance_backward",
        [](int dtype, int64_t B, int64_t n, int64_t m_, int64_t K, double beta, uintptr_t grad_distance,
           uintptr_t grad_D, uintptr_t s, uintptr_t t, uintptr_t D, uintptr_t cos, uintptr_t grad_s, uintptr_t grad_t) {
          const EditDistanceParams P{B, n, m_, K, beta};
          edit_distance_check_params(P);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto tag) {
            using T = decltype(tag);
            edit_distance_backward_cpu<T>(P, as_ptr<const T>(grad_distance), as_ptr<const T>(grad_D),
                                          as_ptr<const T>(s), as_ptr<const T>(t), as_ptr<const T>(D),
                                          as_ptr<const T>(cos), as_ptr<T>(grad_s), as_ptr<T>(grad_t));
          });
        });

  // bubble sort: passes = min(max_iter, n); states [B, passes, n + 3]; trips int32 [1]
  m.def("bubble_sort_forward",
        [](int dtype, int64_t B, int64_t n, double beta, int hard, int64_t passes, double epsilon, uintptr_t x,
           uintptr_t sorted, uintptr_t swaps, uintptr_t any_swap, uintptr_t states, uintptr_t trips) {
          const BubbleParams P{B, n, beta, hard, passes, epsilon};
          bubble_check_params(P);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            bubble_sort_forward_cpu<T>(P, as_ptr<const T>(x), as_ptr<T>(sorted), as_ptr<T>(swaps), as_ptr<T>(any_swap),
                                       as_ptr<T>(states), as_ptr<int32_t>(trips));
          });
        });
  m.def("bubble_sort_backward", [](int dtype, int64_t B, int64_t n, double beta, int hard, int64_t passes,
                                   double epsilon, uintptr_t grad_sorted, uintptr_t grad_swaps, uintptr_t grad_any,
                                   uintptr_t x, uintptr_t states, uintptr_t trips, uintptr_t grad_x) {
    const BubbleParams P{B, n, beta, hard, passes, epsilon};
    bubble_check_params(P);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      bubble_sort_backward_cpu<T>(P, as_ptr<const T>(grad_sorted), as_ptr<const T>(grad_swaps),
                                  as_ptr<const T>(grad_any), as_ptr<const T>(x), as_ptr<const T>(states),
                                  as_ptr<const int32_t>(trips), as_ptr<T>(grad_x));
    });
  });
}

}  // namespace relaxops
