// relaxops._C: sorting networks, their ranks and the top-k loss's helpers (csrc/sortnet/sortnet.h).
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
  m.def("relaxation_ids", []() {
    py::dict ids;
    ids["logistic"] = int(kLogistic);
    ids["logistic_phi"] = int(kLogisticPhi);
    ids["gaussian"] = int(kGaussian);
    ids["reciprocal"] = int(kReciprocal);
    ids["cauchy"] = int(kCauchy);
    ids["optimal"] = int(kOptimal);
    return ids;
  });
  // double only: a float instantiation here slows the kernels' float lane loops under LTO (docs/build.md); tests
  // read the float path through the values kernel on n = 2.
  m.def("relax_alpha", [](int kind, double steepness, double art_lambda, double d) {
    double slope;
    double a = relax_alpha<double>(make_relax(kind, steepness, art_lambda), d, &slope);
    return py::make_tuple(a, slope);
  });

  // Network arguments, in this order everywhere: n, num_layers, num_comparators, layer_ptr, cmin, cmax, then the
  // row networks (num_nets, nets, spec, C) of padded rows (make_rows in sortnet.h; (0, 0, 0, C) for full rows).
  m.def("sortnet_values_forward", [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin,
                                     uintptr_t cmax, RowGroup rg, int relax, double steepness, double art_lambda,
                                     int64_t B, uintptr_t x, uintptr_t sorted, uintptr_t d, uintptr_t alpha) {
    const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
    const RelaxParams rp = make_relax(relax, steepness, art_lambda);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      sortnet_values_forward_cpu<T>(rows, rp, B, as_ptr<const T>(x), as_ptr<T>(sorted), as_ptr<T>(d), as_ptr<T>(alpha));
    });
  });
  m.def("sortnet_values_backward",
        [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, RowGroup rg,
           int relax, double steepness, double art_lambda, int64_t B, uintptr_t grad_sorted, uintptr_t grad_alpha,
           uintptr_t d, uintptr_t alpha, uintptr_t grad_x) {
          const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
          const RelaxParams rp = make_relax(relax, steepness, art_lambda);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            sortnet_values_backward_cpu<T>(rows, rp, B, as_ptr<const T>(grad_sorted), as_ptr<const T>(grad_alpha),
                                           as_ptr<const T>(d), as_ptr<const T>(alpha), as_ptr<T>(grad_x));
          });
        });
  // topk_layout: alpha of the network that this one reverses, X / grad_X [B, n, m]; rows (0: none): only row
  // rows[b] of each, X / grad_X [B, m] (sortnet.h)
  m.def(
      "sortnet_matrix_forward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, RowGroup rg,
         int64_t B, int64_t col_begin, uintptr_t alpha, uintptr_t X, bool topk_layout, uintptr_t label_rows) {
        const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          sortnet_matrix_forward_cpu<T>(rows, B, col_begin, as_ptr<const T>(alpha), as_ptr<T>(X), topk_layout,
                                        as_ptr<const int64_t>(label_rows));
        });
      },
      py::arg("dtype"), py::arg("n"), py::arg("L"), py::arg("C"), py::arg("layer_ptr"), py::arg("cmin"),
      py::arg("cmax"), py::arg("rows_group"), py::arg("B"), py::arg("col_begin"), py::arg("alpha"), py::arg("X"),
      py::arg("topk_layout") = false, py::arg("rows") = 0);
  m.def(
      "sortnet_matrix_backward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, RowGroup rg,
         int64_t B, int64_t col_begin, uintptr_t alpha, uintptr_t grad_X, uintptr_t grad_alpha, bool topk_layout,
         uintptr_t label_rows) {
        const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          sortnet_matrix_backward_cpu<T>(rows, B, col_begin, as_ptr<const T>(alpha), as_ptr<const T>(grad_X),
                                         as_ptr<T>(grad_alpha), topk_layout, as_ptr<const int64_t>(label_rows));
        });
      },
      py::arg("dtype"), py::arg("n"), py::arg("L"), py::arg("C"), py::arg("layer_ptr"), py::arg("cmin"),
      py::arg("cmax"), py::arg("rows_group"), py::arg("B"), py::arg("col_begin"), py::arg("alpha"), py::arg("grad_X"),
      py::arg("grad_alpha"), py::arg("topk_layout") = false, py::arg("rows") = 0);
  // the top-k loss's preselection: values [B, m] and their columns index [B, m] of x [B, n]
  m.def("topk_preselect_forward", [](int dtype, int64_t B, int64_t n, int64_t m, uintptr_t x, uintptr_t target,
                                     uintptr_t values, uintptr_t index) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      topk_preselect_forward_cpu<T>(B, n, m, as_ptr<const T>(x), as_ptr<const int64_t>(target), as_ptr<T>(values),
                                    as_ptr<int64_t>(index));
    });
  });
  m.def("topk_preselect_backward",
        [](int dtype, int64_t B, int64_t n, int64_t m, uintptr_t grad_values, uintptr_t index, uintptr_t grad_x) {
          RELAXOPS_CHECK(B >= 0 && n >= 1 && m >= 1 && m <= n, "topk_preselect: m must be in [1, n]");
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            topk_preselect_backward_cpu<T>(B, n, m, as_ptr<const T>(grad_values), as_ptr<const int64_t>(index),
                                           as_ptr<T>(grad_x));
          });
        });
  // the top-k loss's top-1 term: p [B] = softmax(x [B, n])[b, index[b]]
  m.def("label_softmax_forward", [](int dtype, int64_t B, int64_t n, uintptr_t x, uintptr_t index, uintptr_t p) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      label_softmax_forward_cpu<T>(B, n, as_ptr<const T>(x), as_ptr<const int64_t>(index), as_ptr<T>(p));
    });
  });
  m.def("label_softmax_backward", [](int dtype, int64_t B, int64_t n, uintptr_t x, uintptr_t index, uintptr_t p,
                                     uintptr_t grad_p, uintptr_t grad_x) {
    RELAXOPS_CHECK(B >= 0 && n >= 1, "label_softmax: invalid sizes");
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      label_softmax_backward_cpu<T>(B, n, as_ptr<const T>(x), as_ptr<const int64_t>(index), as_ptr<const T>(p),
                                    as_ptr<const T>(grad_p), as_ptr<T>(grad_x));
    });
  });
  // ranks; saved: 0, or sortnet_rank_saved_numel(C, B, num_nets) values of the dtype (the forward writes them, the
  // backward then reads them instead of x)
  m.def("sortnet_rank_saved_numel", [](int64_t C, int64_t B, int64_t num_nets) {
    RELAXOPS_CHECK(C >= 0 && B >= 0 && num_nets >= 0, "C, B and num_nets must be >= 0");
    return sortnet_rank_saved_numel_cpu(C, B, num_nets);
  });
  m.def("sortnet_rank_forward",
        [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, RowGroup rg,
           int relax, double steepness, double art_lambda, int64_t B, uintptr_t x, uintptr_t rank, uintptr_t saved) {
          const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
          const RelaxParams rp = make_relax(relax, steepness, art_lambda);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            sortnet_rank_forward_cpu<T>(rows, rp, B, as_ptr<const T>(x), as_ptr<T>(rank), as_ptr<T>(saved));
          });
        });
  m.def("sortnet_rank_backward", [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin,
                                    uintptr_t cmax, RowGroup rg, int relax, double steepness, double art_lambda,
                                    int64_t B, uintptr_t x, uintptr_t grad_rank, uintptr_t saved, uintptr_t grad_x) {
    const Rows rows = make_rows(make_net(n, L, C, lp, cmin, cmax), rg);
    const RelaxParams rp = make_relax(relax, steepness, art_lambda);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      sortnet_rank_backward_cpu<T>(rows, rp, B, as_ptr<const T>(x), as_ptr<const T>(grad_rank), as_ptr<const T>(saved),
                                   as_ptr<T>(grad_x));
    });
  });
}

}  // namespace relaxops
