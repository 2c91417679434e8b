// relaxops._cuda: sorting networks and their ranks (csrc/sortnet/sortnet.h). The network arrays layer_ptr, cmin,
// cmax are device int32 arrays.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../../sortnet/sortnet.h"
#include "../binding_utils.h"
#include "../bindings.h"

namespace py = pybind11;
using std::uintptr_t;
using RowGroup = std::tuple<int64_t, uintptr_t, uintptr_t, int64_t>;

namespace relaxops {

void bind_sortnet(py::module_& m) {
  // Network arguments, in this order everywhere: n, num_layers, num_comparators, layer_ptr, cmin, cmax, then the
  // row networks (num_nets, nets, spec, C) of padded rows, device arrays (make_rows in sortnet.h; (0, 0, 0, C) for
  // full rows). The workspace query takes the network sizes only (with row networks: n, the most layers, C).
  m.def("sortnet_values_forward",
        [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, RowGroup rg,
           int relax, double steepness, double art_lambda, int64_t B, uintptr_t x, uintptr_t sorted, uintptr_t d,
           uintptr_t alpha, uintptr_t stream) {
          const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
          const RelaxParams rp = make_relax(relax, steepness, art_lambda);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            sortnet_values_forward_cuda<T>(rows, rp, B, as_ptr<const T>(x), as_ptr<T>(sorted), as_ptr<T>(d),
                                           as_ptr<T>(alpha), stream);
          });
        });
  m.def("sortnet_values_backward",
        [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, RowGroup rg,
           int relax, double steepness, double art_lambda, int64_t B, uintptr_t grad_sorted, uintptr_t grad_alpha,
           uintptr_t d, uintptr_t alpha, uintptr_t grad_x, uintptr_t stream) {
          const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
          const RelaxParams rp = make_relax(relax, steepness, art_lambda);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            sortnet_values_backward_cuda<T>(rows, rp, B, as_ptr<const T>(grad_sorted), as_ptr<const T>(grad_alpha),
                                            as_ptr<const T>(d), as_ptr<const T>(alpha), as_ptr<T>(grad_x), stream);
          });
        });
  m.def("sortnet_matrix_forward",
        [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, RowGroup rg,
           int64_t B, int64_t col_begin, uintptr_t alpha, uintptr_t X, uintptr_t stream) {
          const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            sortnet_matrix_forward_cuda<T>(rows, B, col_begin, as_ptr<const T>(alpha), as_ptr<T>(X), stream);
          });
        });
  m.def(
      "sortnet_matrix_backward_workspace_bytes",
      [](int dtype, int64_t n, int64_t L, int64_t C, int64_t B, int64_t col_begin) {
        RELAXOPS_CHECK(B >= 0, "negative batch size");
        const NetView net = make_net(n, L, C, 0, 0, 0);
        return by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          return sortnet_matrix_backward_workspace_bytes_cuda<T>(net, B, col_begin);
        });
      },
      "Bytes of device workspace sortnet_matrix_backward needs for this network size and batch (may be 0).");
  m.def(
      "sortnet_matrix_backward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, RowGroup rg,
         int64_t B, int64_t col_begin, uintptr_t alpha, uintptr_t grad_X, uintptr_t grad_alpha, uintptr_t workspace,
         int64_t workspace_bytes, uintptr_t stream) {
        const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          sortnet_matrix_backward_cuda<T>(rows, B, col_begin, as_ptr<const T>(alpha), as_ptr<const T>(grad_X),
                                          as_ptr<T>(grad_alpha), as_ptr<void>(workspace), workspace_bytes, stream);
        });
      },
      "grad_alpha from grad_X; `workspace` is a device buffer of at least "
      "sortnet_matrix_backward_workspace_bytes(dtype, n, L, C, B, col_begin) bytes, used on `stream` only.");
  m.def(
      "sortnet_rank_forward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, RowGroup rg,
         int relax, double steepness, double art_lambda, int64_t B, uintptr_t x, uintptr_t rank, uintptr_t workspace,
         int64_t workspace_elements, uintptr_t stream) {
        const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
        const RelaxParams rp = make_relax(relax, steepness, art_lambda);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          sortnet_rank_forward_cuda<T>(rows, rp, B, as_ptr<const T>(x), as_ptr<T>(rank), as_ptr<T>(workspace),
                                       workspace_elements, stream);
        });
      },
      "rank from x; `workspace` is a device buffer of at least B * C elements of the dtype.");
  m.def(
      "sortnet_rank_backward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, RowGroup rg,
         int relax, double steepness, double art_lambda, int64_t B, uintptr_t x, uintptr_t grad_rank, uintptr_t grad_x,
         uintptr_t workspace, int64_t workspace_elements, uintptr_t stream) {
        const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
        const RelaxParams rp = make_relax(relax, steepness, art_lambda);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          sortnet_rank_backward_cuda<T>(rows, rp, B, as_ptr<const T>(x), as_ptr<const T>(grad_rank), as_ptr<T>(grad_x),
                                        as_ptr<T>(workspace), workspace_elements, stream);
        });
      },
      "grad_x from x and grad_rank; `workspace` is a device buffer of at least B * (3 C + n) elements of the dtype.");
}

}  // namespace relaxops
