// relaxops._C: the C++ CPU kernels. Torch-free: buffers are passed as raw addresses (std::uintptr_t)
// of contiguous host memory; the Python wrappers check dtype, device, contiguity and shapes first.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../algorithms/shortest_path.h"
#include "../baselines/baselines.h"
#include "../common/cpu_parallel.h"
#include "../common/relax.h"
#include "../fastsort/fastsort.h"
#include "../logic/conv.h"
#include "../logic/logic.h"
#include "../logic/packed.h"
#include "../otsort/otsort.h"
#include "../render/render.h"
#include "../sortnet/sortnet.h"
#include "../algorithms/bubble_sort.h"
#include "../algorithms/edit_distance.h"
#include "../training/assignment.h"
#include "binding_utils.h"

namespace py = pybind11;
using relaxops::as_ptr;
using relaxops::dispatch;
using relaxops::make_net;
using relaxops::make_program;
using relaxops::make_relax;
using std::uintptr_t;

namespace {

template <typename T>
struct ValuesForward {
  static void run(relaxops::NetView net, relaxops::RelaxParams rp, int64_t B, uintptr_t x, uintptr_t sorted,
                  uintptr_t d, uintptr_t alpha) {
    relaxops::sortnet_values_forward_cpu<T>(net, rp, B, as_ptr<const T>(x), as_ptr<T>(sorted), as_ptr<T>(d),
                                            as_ptr<T>(alpha));
  }
};
template <typename T>
struct ValuesBackward {
  static void run(relaxops::NetView net, relaxops::RelaxParams rp, int64_t B, uintptr_t grad_sorted,
                  uintptr_t grad_alpha, uintptr_t d, uintptr_t alpha, uintptr_t grad_x) {
    relaxops::sortnet_values_backward_cpu<T>(net, rp, B, as_ptr<const T>(grad_sorted), as_ptr<const T>(grad_alpha),
                                             as_ptr<const T>(d), as_ptr<const T>(alpha), as_ptr<T>(grad_x));
  }
};
template <typename T>
struct MatrixForward {
  static void run(relaxops::NetView net, int64_t B, int64_t col_begin, uintptr_t alpha, uintptr_t X, bool topk,
                  uintptr_t rows) {
    relaxops::sortnet_matrix_forward_cpu<T>(net, B, col_begin, as_ptr<const T>(alpha), as_ptr<T>(X), topk,
                                            as_ptr<const int64_t>(rows));
  }
};
template <typename T>
struct MatrixBackward {
  static void run(relaxops::NetView net, int64_t B, int64_t col_begin, uintptr_t alpha, uintptr_t grad_X,
                  uintptr_t grad_alpha, bool topk, uintptr_t rows) {
    relaxops::sortnet_matrix_backward_cpu<T>(net, B, col_begin, as_ptr<const T>(alpha), as_ptr<const T>(grad_X),
                                             as_ptr<T>(grad_alpha), topk, as_ptr<const int64_t>(rows));
  }
};
template <typename T>
struct PreselectForward {
  static void run(int64_t B, int64_t n, int64_t m, uintptr_t x, uintptr_t target, uintptr_t values, uintptr_t index) {
    relaxops::topk_preselect_forward_cpu<T>(B, n, m, as_ptr<const T>(x), as_ptr<const int64_t>(target),
                                            as_ptr<T>(values), as_ptr<int64_t>(index));
  }
};
template <typename T>
struct LabelSoftmaxForward {
  static void run(int64_t B, int64_t n, uintptr_t x, uintptr_t index, uintptr_t p) {
    relaxops::label_softmax_forward_cpu<T>(B, n, as_ptr<const T>(x), as_ptr<const int64_t>(index), as_ptr<T>(p));
  }
};
template <typename T>
struct LabelSoftmaxBackward {
  static void run(int64_t B, int64_t n, uintptr_t x, uintptr_t index, uintptr_t p, uintptr_t grad_p, uintptr_t grad_x) {
    relaxops::label_softmax_backward_cpu<T>(B, n, as_ptr<const T>(x), as_ptr<const int64_t>(index), as_ptr<const T>(p),
                                            as_ptr<const T>(grad_p), as_ptr<T>(grad_x));
  }
};
template <typename T>
struct PreselectBackward {
  static void run(int64_t B, int64_t n, int64_t m, uintptr_t grad_values, uintptr_t index, uintptr_t grad_x) {
    relaxops::topk_preselect_backward_cpu<T>(B, n, m, as_ptr<const T>(grad_values), as_ptr<const int64_t>(index),
                                             as_ptr<T>(grad_x));
  }
};

// sortnet ranks (issue 16): rank_forward / rank_backward of sortnet.h
template <typename T>
struct RankForward {
  static void run(relaxops::NetView net, relaxops::RelaxParams rp, int64_t B, uintptr_t x, uintptr_t rank,
                  uintptr_t saved) {
    relaxops::sortnet_rank_forward_cpu<T>(net, rp, B, as_ptr<const T>(x), as_ptr<T>(rank), as_ptr<T>(saved));
  }
};
template <typename T>
struct RankBackward {
  static void run(relaxops::NetView net, relaxops::RelaxParams rp, int64_t B, uintptr_t x, uintptr_t grad_rank,
                  uintptr_t saved, uintptr_t grad_x) {
    relaxops::sortnet_rank_backward_cpu<T>(net, rp, B, as_ptr<const T>(x), as_ptr<const T>(grad_rank),
                                           as_ptr<const T>(saved), as_ptr<T>(grad_x));
  }
};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "relaxops C++ CPU kernels (torch-free; pointers to contiguous host buffers)";
  m.def("num_threads", &relaxops::cpu_threads);
  m.def("set_num_threads", [](int threads) {
    if (threads < 1) throw py::value_error("set_num_threads: threads must be >= 1");
    relaxops::set_cpu_threads(threads);
  });
  m.def("use_torch_threads", &relaxops::set_use_torch_threads,
        "Run parallel loops on PyTorch's OpenMP threads while they start on time (default True), or always on "
        "relaxops' own pool (False).");
  m.def("torch_threads_found", &relaxops::torch_threads_found);
  m.def("relaxation_ids", []() {
    py::dict ids;
    ids["logistic"] = int(relaxops::kLogistic);
    ids["logistic_phi"] = int(relaxops::kLogisticPhi);
    ids["gaussian"] = int(relaxops::kGaussian);
    ids["reciprocal"] = int(relaxops::kReciprocal);
    ids["cauchy"] = int(relaxops::kCauchy);
    ids["optimal"] = int(relaxops::kOptimal);
    return ids;
  });
  // double only: instantiating relax_alpha<float> in this file made the kernels' lane loops 8x slower (with LTO
  // the linker kept one copy of the inline float functions, and the kernels called it instead of vectorizing);
  // tests read the float path through the values kernel on n = 2.
  m.def("relax_alpha", [](int kind, double steepness, double art_lambda, double d) {
    double slope;
    double a = relaxops::relax_alpha<double>(make_relax(kind, steepness, art_lambda), d, &slope);
    return py::make_tuple(a, slope);
  });

  // Network arguments, in this order everywhere: n, num_layers, num_comparators, layer_ptr, cmin, cmax.
  m.def("sortnet_values_forward", [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin,
                                     uintptr_t cmax, int relax, double steepness, double art_lambda, int64_t B,
                                     uintptr_t x, uintptr_t sorted, uintptr_t d, uintptr_t alpha) {
    py::gil_scoped_release nogil;
    dispatch<ValuesForward>(dtype, make_net(n, L, C, lp, cmin, cmax), make_relax(relax, steepness, art_lambda), B, x,
                            sorted, d, alpha);
  });
  m.def("sortnet_values_backward",
        [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int relax,
           double steepness, double art_lambda, int64_t B, uintptr_t grad_sorted, uintptr_t grad_alpha, uintptr_t d,
           uintptr_t alpha, uintptr_t grad_x) {
          py::gil_scoped_release nogil;
          dispatch<ValuesBackward>(dtype, make_net(n, L, C, lp, cmin, cmax), make_relax(relax, steepness, art_lambda),
                                   B, grad_sorted, grad_alpha, d, alpha, grad_x);
        });
  // topk_layout: alpha of the network that this one reverses, X / grad_X [B, n, m]; rows (0: none): only row
  // rows[b] of each, X / grad_X [B, m] (sortnet.h)
  m.def(
      "sortnet_matrix_forward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int64_t B,
         int64_t col_begin, uintptr_t alpha, uintptr_t X, bool topk_layout, uintptr_t rows) {
        RELAXOPS_CHECK(col_begin >= 0 && col_begin < n, "col_begin must be in [0, n)");
        py::gil_scoped_release nogil;
        dispatch<MatrixForward>(dtype, make_net(n, L, C, lp, cmin, cmax), B, col_begin, alpha, X, topk_layout, rows);
      },
      py::arg("dtype"), py::arg("n"), py::arg("L"), py::arg("C"), py::arg("layer_ptr"), py::arg("cmin"),
      py::arg("cmax"), py::arg("B"), py::arg("col_begin"), py::arg("alpha"), py::arg("X"),
      py::arg("topk_layout") = false, py::arg("rows") = 0);
  m.def(
      "sortnet_matrix_backward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int64_t B,
         int64_t col_begin, uintptr_t alpha, uintptr_t grad_X, uintptr_t grad_alpha, bool topk_layout, uintptr_t rows) {
        RELAXOPS_CHECK(col_begin >= 0 && col_begin < n, "col_begin must be in [0, n)");
        py::gil_scoped_release nogil;
        dispatch<MatrixBackward>(dtype, make_net(n, L, C, lp, cmin, cmax), B, col_begin, alpha, grad_X, grad_alpha,
                                 topk_layout, rows);
      },
      py::arg("dtype"), py::arg("n"), py::arg("L"), py::arg("C"), py::arg("layer_ptr"), py::arg("cmin"),
      py::arg("cmax"), py::arg("B"), py::arg("col_begin"), py::arg("alpha"), py::arg("grad_X"), py::arg("grad_alpha"),
      py::arg("topk_layout") = false, py::arg("rows") = 0);
  // the top-k loss's preselection (sortnet.h): values [B, m] and their columns index [B, m] of x [B, n]
  m.def("topk_preselect_forward", [](int dtype, int64_t B, int64_t n, int64_t m, uintptr_t x, uintptr_t target,
                                     uintptr_t values, uintptr_t index) {
    py::gil_scoped_release nogil;
    dispatch<PreselectForward>(dtype, B, n, m, x, target, values, index);
  });
  m.def("topk_preselect_backward",
        [](int dtype, int64_t B, int64_t n, int64_t m, uintptr_t grad_values, uintptr_t index, uintptr_t grad_x) {
          RELAXOPS_CHECK(B >= 0 && n >= 1 && m >= 1 && m <= n, "topk_preselect: m must be in [1, n]");
          py::gil_scoped_release nogil;
          dispatch<PreselectBackward>(dtype, B, n, m, grad_values, index, grad_x);
        });
  // the top-k loss's top-1 term (sortnet.h): p [B] = softmax(x [B, n])[b, index[b]]
  m.def("label_softmax_forward", [](int dtype, int64_t B, int64_t n, uintptr_t x, uintptr_t index, uintptr_t p) {
    py::gil_scoped_release nogil;
    dispatch<LabelSoftmaxForward>(dtype, B, n, x, index, p);
  });
  m.def("label_softmax_backward", [](int dtype, int64_t B, int64_t n, uintptr_t x, uintptr_t index, uintptr_t p,
                                     uintptr_t grad_p, uintptr_t grad_x) {
    RELAXOPS_CHECK(B >= 0 && n >= 1, "label_softmax: invalid sizes");
    py::gil_scoped_release nogil;
    dispatch<LabelSoftmaxBackward>(dtype, B, n, x, index, p, grad_p, grad_x);
  });
  // sortnet ranks (issue 16); saved: 0, or sortnet_rank_saved_numel(C, B) values of the dtype (the forward writes
  // them, the backward then reads them instead of x)
  m.def("sortnet_rank_saved_numel", [](int64_t C, int64_t B) {
    RELAXOPS_CHECK(C >= 0 && B >= 0, "C and B must be >= 0");
    return relaxops::sortnet_rank_saved_numel_cpu(C, B);
  });
  m.def("sortnet_rank_forward",
        [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int relax,
           double steepness, double art_lambda, int64_t B, uintptr_t x, uintptr_t rank, uintptr_t saved) {
          py::gil_scoped_release nogil;
          dispatch<RankForward>(dtype, make_net(n, L, C, lp, cmin, cmax), make_relax(relax, steepness, art_lambda), B,
                                x, rank, saved);
        });
  m.def("sortnet_rank_backward", [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin,
                                    uintptr_t cmax, int relax, double steepness, double art_lambda, int64_t B,
                                    uintptr_t x, uintptr_t grad_rank, uintptr_t saved, uintptr_t grad_x) {
    py::gil_scoped_release nogil;
    dispatch<RankBackward>(dtype, make_net(n, L, C, lp, cmin, cmax), make_relax(relax, steepness, art_lambda), B, x,
                           grad_rank, saved, grad_x);
  });

  // NeuralSort / SoftSort (csrc/baselines/baselines.h). dtype: 0 = float32, 1 = float64; perm: int64 [B, n],
  // written by the forward kernels; X, grad_X: [B, n, k].
  {
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0)
        f(float{});
      else
        f(double{});
    };
    m.def("neuralsort_forward", [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, uintptr_t x,
                                           uintptr_t X, uintptr_t perm) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::neuralsort_forward_cpu<T>(B, n, k, tau, as_ptr<const T>(x), as_ptr<T>(X), as_ptr<int64_t>(perm));
      });
    });
    m.def("neuralsort_backward", [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, uintptr_t grad_X,
                                            uintptr_t X, uintptr_t x, uintptr_t perm, uintptr_t grad_x) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::neuralsort_backward_cpu<T>(B, n, k, tau, as_ptr<const T>(grad_X), as_ptr<const T>(X),
                                             as_ptr<const T>(x), as_ptr<const int64_t>(perm), as_ptr<T>(grad_x));
      });
    });
    m.def("softsort_forward", [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, double pow,
                                         uintptr_t x, uintptr_t X, uintptr_t perm) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::softsort_forward_cpu<T>(B, n, k, tau, pow, as_ptr<const T>(x), as_ptr<T>(X), as_ptr<int64_t>(perm));
      });
    });
    m.def("softsort_backward",
          [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, double pow, uintptr_t grad_X, uintptr_t X,
                     uintptr_t x, uintptr_t perm, uintptr_t grad_x) {
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::softsort_backward_cpu<T>(B, n, k, tau, pow, as_ptr<const T>(grad_X), as_ptr<const T>(X),
                                                 as_ptr<const T>(x), as_ptr<const int64_t>(perm), as_ptr<T>(grad_x));
            });
          });
  }

  // Optimal-transport sort (csrc/otsort/otsort.h). dtype: 0 = float32, 1 = float64; every call takes the loop
  // parameters (R, n, m, epsilon, epsilon0, decay, tolerance, max_iterations, history_len) first; iters: int32
  // [R]; history / plan / gplan may be 0 (none).
  {
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0)
        f(float{});
      else
        f(double{});
    };
    using Sizes = std::tuple<int64_t, int64_t, int64_t>;
    using Loop = std::tuple<double, double, double, double, int64_t, int64_t>;
    auto params = [](const Sizes& s, const Loop& l) {
      return relaxops::OtParams{std::get<0>(s), std::get<1>(s), std::get<2>(s), std::get<0>(l), std::get<1>(l),
                                std::get<2>(l), std::get<3>(l), std::get<4>(l), std::get<5>(l)};
    };
    m.def("ot_sinkhorn_forward",
          [by_dtype, params](int dtype, Sizes s, Loop l, uintptr_t xs, uintptr_t y, uintptr_t loga, uintptr_t logb,
                             uintptr_t f, uintptr_t g, uintptr_t eps, uintptr_t iters, uintptr_t history) {
            const relaxops::OtParams p = params(s, l);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::ot_sinkhorn_forward_cpu<T>(p, as_ptr<const T>(xs), as_ptr<const T>(y), as_ptr<const T>(loga),
                                                   as_ptr<const T>(logb), as_ptr<T>(f), as_ptr<T>(g), as_ptr<T>(eps),
                                                   as_ptr<int32_t>(iters), as_ptr<T>(history));
            });
          });
    m.def("ot_apply_forward",
          [by_dtype, params](int dtype, Sizes s, Loop l, uintptr_t xs, uintptr_t y, uintptr_t f, uintptr_t g,
                             uintptr_t eps, uintptr_t loga, uintptr_t logb, uintptr_t u, uintptr_t v, uintptr_t cols,
                             uintptr_t rows, uintptr_t plan) {
            const relaxops::OtParams p = params(s, l);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::ot_apply_forward_cpu<T>(p, as_ptr<const T>(xs), as_ptr<const T>(y), as_ptr<const T>(f),
                                                as_ptr<const T>(g), as_ptr<const T>(eps), as_ptr<const T>(loga),
                                                as_ptr<const T>(logb), as_ptr<const T>(u), as_ptr<const T>(v),
                                                as_ptr<T>(cols), as_ptr<T>(rows), as_ptr<T>(plan));
            });
          });
    m.def(
        "ot_apply_backward",
        [by_dtype, params](int dtype, Sizes s, Loop l, uintptr_t gcols, uintptr_t grows, uintptr_t gplan, uintptr_t xs,
                           uintptr_t y, uintptr_t f, uintptr_t g, uintptr_t eps, uintptr_t loga, uintptr_t logb,
                           uintptr_t u, uintptr_t v, uintptr_t cols, uintptr_t rows, std::vector<uintptr_t> out) {
          RELAXOPS_CHECK(out.size() == 8, "ot_apply_backward: 8 outputs (gxs, gy, gf, gg, gu, gv, gloga, glogb)");
          const relaxops::OtParams p = params(s, l);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto tag) {
            using T = decltype(tag);
            relaxops::ot_apply_backward_cpu<T>(
                p, as_ptr<const T>(gcols), as_ptr<const T>(grows), as_ptr<const T>(gplan), as_ptr<const T>(xs),
                as_ptr<const T>(y), as_ptr<const T>(f), as_ptr<const T>(g), as_ptr<const T>(eps), as_ptr<const T>(loga),
                as_ptr<const T>(logb), as_ptr<const T>(u), as_ptr<const T>(v), as_ptr<const T>(cols),
                as_ptr<const T>(rows), as_ptr<T>(out[0]), as_ptr<T>(out[1]), as_ptr<T>(out[2]), as_ptr<T>(out[3]),
                as_ptr<T>(out[4]), as_ptr<T>(out[5]), as_ptr<T>(out[6]), as_ptr<T>(out[7]));
          });
        });
    m.def("ot_implicit_backward",
          [by_dtype, params](int dtype, Sizes s, Loop l, uintptr_t gf, uintptr_t gg, uintptr_t xs, uintptr_t y,
                             uintptr_t f, uintptr_t g, uintptr_t eps, uintptr_t loga, uintptr_t logb, uintptr_t gxs,
                             uintptr_t gy, uintptr_t gloga, uintptr_t glogb) {
            const relaxops::OtParams p = params(s, l);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::ot_implicit_backward_cpu<T>(p, as_ptr<const T>(gf), as_ptr<const T>(gg), as_ptr<const T>(xs),
                                                    as_ptr<const T>(y), as_ptr<const T>(f), as_ptr<const T>(g),
                                                    as_ptr<const T>(eps), as_ptr<const T>(loga), as_ptr<const T>(logb),
                                                    as_ptr<T>(gxs), as_ptr<T>(gy), as_ptr<T>(gloga), as_ptr<T>(glogb));
            });
          });
    m.def("ot_unrolled_backward",
          [by_dtype, params](int dtype, Sizes s, Loop l, uintptr_t gf, uintptr_t gg, uintptr_t xs, uintptr_t y,
                             uintptr_t loga, uintptr_t logb, uintptr_t iters, uintptr_t history, uintptr_t gxs,
                             uintptr_t gy, uintptr_t gloga, uintptr_t glogb) {
            const relaxops::OtParams p = params(s, l);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::ot_unrolled_backward_cpu<T>(p, as_ptr<const T>(gf), as_ptr<const T>(gg), as_ptr<const T>(xs),
                                                    as_ptr<const T>(y), as_ptr<const T>(loga), as_ptr<const T>(logb),
                                                    as_ptr<const int32_t>(iters), as_ptr<const T>(history),
                                                    as_ptr<T>(gxs), as_ptr<T>(gy), as_ptr<T>(gloga), as_ptr<T>(glogb));
            });
          });
  }

  // Fast soft sort / soft rank (csrc/fastsort/fastsort.h). dtype: 0 = float32, 1 = float64; op: 0 = soft_rank,
  // 1 = soft_sort; reg: 0 = l2, 1 = kl; x, out, grad_out, grad_x [B, n]; perm int64 and block int32 [B, n], written
  // by the forward.
  {
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0)
        f(float{});
      else
        f(double{});
    };
    m.def("fastsort_forward", [by_dtype](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n,
                                         uintptr_t x, uintptr_t out, uintptr_t perm, uintptr_t block) {
      const auto P = relaxops::make_fastsort_params(op, reg, eps, descending);
      relaxops::fastsort_check_params(P, B, n);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::fastsort_forward_cpu<T>(P, B, n, as_ptr<const T>(x), as_ptr<T>(out), as_ptr<int64_t>(perm),
                                          as_ptr<int32_t>(block));
      });
    });
    m.def("fastsort_backward",
          [by_dtype](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n, uintptr_t grad_out,
                     uintptr_t out, uintptr_t x, uintptr_t perm, uintptr_t block, uintptr_t grad_x) {
            const auto P = relaxops::make_fastsort_params(op, reg, eps, descending);
            relaxops::fastsort_check_params(P, B, n);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::fastsort_backward_cpu<T>(P, B, n, as_ptr<const T>(grad_out), as_ptr<const T>(out),
                                                 as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                                                 as_ptr<const int32_t>(block), as_ptr<T>(grad_x));
            });
          });
  }

  // Test entry points of the GPU's chunked PAV for long rows (fastsort.h): the forward and backward above with the
  // row cut into `chunks` chunks, merged as the CUDA kernels do (serial, for tests only).
  {
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0)
        f(float{});
      else
        f(double{});
    };
    m.def("fastsort_forward_chunked",
          [by_dtype](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n, uintptr_t x,
                     uintptr_t out, uintptr_t perm, uintptr_t block, int chunks) {
            const auto P = relaxops::make_fastsort_params(op, reg, eps, descending);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::fastsort_forward_chunked_cpu<T>(P, B, n, as_ptr<const T>(x), as_ptr<T>(out),
                                                        as_ptr<int64_t>(perm), as_ptr<int32_t>(block), chunks);
            });
          });
    m.def("fastsort_backward_chunked",
          [by_dtype](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n, uintptr_t grad_out,
                     uintptr_t out, uintptr_t x, uintptr_t perm, uintptr_t block, uintptr_t grad_x, int chunks) {
            const auto P = relaxops::make_fastsort_params(op, reg, eps, descending);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::fastsort_backward_chunked_cpu<T>(P, B, n, as_ptr<const T>(grad_out), as_ptr<const T>(out),
                                                         as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                                                         as_ptr<const int32_t>(block), as_ptr<T>(grad_x), chunks);
            });
          });
  }

  // Logic gate layers (csrc/logic/logic.h): feature-major [n, B] buffers; dtype 0 = float32, 1 = float64 (coef
  // in the same type); grad_xt / grad_coef may be 0 (not computed).
  {
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0)
        f(float{});
      else
        f(double{});
    };
    m.def("logic_forward", [by_dtype](int dtype, int64_t B, int64_t n_in, int64_t n_out, uintptr_t xt, uintptr_t a,
                                      uintptr_t b, uintptr_t coef, uintptr_t yt) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::logic_forward_cpu<T>(B, n_in, n_out, as_ptr<const T>(xt), as_ptr<const int64_t>(a),
                                       as_ptr<const int64_t>(b), as_ptr<const T>(coef), as_ptr<T>(yt));
      });
    });
    m.def("logic_coef", [by_dtype](int dtype, int64_t n_out, uintptr_t w, bool training, uintptr_t coef) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::logic_coef_cpu<T>(n_out, as_ptr<const T>(w), training, as_ptr<T>(coef));
      });
    });
    m.def("logic_coef_backward", [by_dtype](int dtype, int64_t n_out, uintptr_t w, uintptr_t grad_coef,
                                            uintptr_t grad_w) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::logic_coef_backward_cpu<T>(n_out, as_ptr<const T>(w), as_ptr<const T>(grad_coef), as_ptr<T>(grad_w));
      });
    });
    m.def("logic_transpose", [by_dtype](int dtype, int64_t rows, int64_t cols, uintptr_t src, uintptr_t dst) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::logic_transpose_cpu<T>(rows, cols, as_ptr<const T>(src), as_ptr<T>(dst));
      });
    });
    m.def("logic_backward", [by_dtype](int dtype, int64_t B, int64_t n_in, int64_t n_out, uintptr_t xt, uintptr_t a,
                                       uintptr_t b, uintptr_t coef, uintptr_t grad_yt, uintptr_t csr_start,
                                       uintptr_t csr_entry, uintptr_t grad_xt, uintptr_t grad_coef) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::logic_backward_cpu<T>(B, n_in, n_out, as_ptr<const T>(xt), as_ptr<const int64_t>(a),
                                        as_ptr<const int64_t>(b), as_ptr<const T>(coef), as_ptr<const T>(grad_yt),
                                        as_ptr<const int64_t>(csr_start), as_ptr<const int64_t>(csr_entry),
                                        as_ptr<T>(grad_xt), as_ptr<T>(grad_coef));
      });
    });
  }

  // Convolutional logic layer (csrc/logic/conv.h): x [B, C_in, H, W], leaves int64 [C_out, L, 3], coef
  // [C_out, L - 1, 4]; dtype 0 = float32, 1 = float64; grad_x / grad_coef may be 0 (not computed).
  {
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0)
        f(float{});
      else
        f(double{});
    };
    using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
    using Geometry = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
    auto params = [](const Shape& s, const Geometry& g) {
      return relaxops::make_logic_conv_params(std::get<0>(s), std::get<1>(s), std::get<2>(s), std::get<3>(s),
                                              std::get<4>(s), std::get<5>(s), std::get<0>(g), std::get<1>(g),
                                              std::get<2>(g), std::get<3>(g), std::get<4>(g), std::get<5>(g));
    };
    m.def(
        "logic_conv_forward",
        [by_dtype, params](int dtype, Shape shape, Geometry geom, uintptr_t x, uintptr_t leaves, uintptr_t coef,
                           uintptr_t y) {
          const auto P = params(shape, geom);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto tag) {
            using T = decltype(tag);
            relaxops::logic_conv_forward_cpu<T>(P, as_ptr<const T>(x), as_ptr<const int64_t>(leaves),
                                                as_ptr<const T>(coef), as_ptr<T>(y));
          });
        },
        "shape = (B, C_in, H, W, C_out, L), geometry = (kh, kw, sh, sw, ph, pw)");
    m.def("logic_conv_backward",
          [by_dtype, params](int dtype, Shape shape, Geometry geom, uintptr_t x, uintptr_t leaves, uintptr_t coef,
                             uintptr_t grad_y, uintptr_t csr_start, uintptr_t csr_entry, uintptr_t grad_x,
                             uintptr_t grad_coef) {
            const auto P = params(shape, geom);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::logic_conv_backward_cpu<T>(P, as_ptr<const T>(x), as_ptr<const int64_t>(leaves),
                                                   as_ptr<const T>(coef), as_ptr<const T>(grad_y),
                                                   as_ptr<const int64_t>(csr_start), as_ptr<const int64_t>(csr_entry),
                                                   as_ptr<T>(grad_x), as_ptr<T>(grad_coef));
            });
          });
  }

  // Packed logic inference (csrc/logic/packed.h): words uint64 [D, ceil(B / 64)]; simd -1 = best, 0 portable,
  // 1 AVX2, 2 AVX-512; num_threads 0 = torch.get_num_threads().
  m.def("logic_simd_best", &relaxops::logic_simd_best);
  m.def(
      "logic_packed_fusable_ops",
      []() { return std::vector<int>(std::begin(relaxops::kFusableOps), std::end(relaxops::kFusableOps)); },
      "The gate ids of the fused runs of a packed program (kFusableOps of packed.h).");
  m.def(
      "logic_gate_coef",
      []() {
        py::list rows;
        for (const auto& r : relaxops::kLogicGateCoef) rows.append(py::make_tuple(r[0], r[1], r[2], r[3]));
        return rows;
      },
      "The 16 x 4 gate coefficient table kLogicGateCoef of logic.h.");
  m.def("logic_pack", [](uintptr_t x, int64_t B, int64_t D, uintptr_t words, int num_threads) {
    py::gil_scoped_release nogil;
    relaxops::logic_pack_cpu(as_ptr<const uint8_t>(x), B, D, as_ptr<uint64_t>(words), num_threads);
  });
  m.def("logic_unpack", [](uintptr_t words, int64_t B, int64_t D, uintptr_t x, int num_threads) {
    py::gil_scoped_release nogil;
    relaxops::logic_unpack_cpu(as_ptr<const uint64_t>(words), B, D, as_ptr<uint8_t>(x), num_threads);
  });
  m.def("logic_packed_layers", [](int64_t D0, int64_t slots, int64_t steps, uintptr_t op_start, uintptr_t src_a,
                                  uintptr_t src_b, uintptr_t src_c, uintptr_t dst, uintptr_t op, int64_t DL,
                                  uintptr_t out_slot, uintptr_t out_kind, int64_t B, uintptr_t in, uintptr_t out,
                                  int simd, int num_threads) {
    const auto prog = make_program(D0, slots, steps, op_start, src_a, src_b, src_c, dst, op, DL, out_slot, out_kind);
    py::gil_scoped_release nogil;
    relaxops::logic_packed_layers_cpu(prog, B, as_ptr<const uint64_t>(in), as_ptr<uint64_t>(out), simd, num_threads);
  });
  m.def("logic_group_count", [](uintptr_t words, int64_t B, int64_t D, int64_t k, uintptr_t counts, int simd,
                                int num_threads) {
    py::gil_scoped_release nogil;
    relaxops::logic_group_count_cpu(as_ptr<const uint64_t>(words), B, D, k, as_ptr<int32_t>(counts), simd, num_threads);
  });
  m.def("logic_packed_forward", [](int64_t D0, int64_t slots, int64_t steps, uintptr_t op_start, uintptr_t src_a,
                                   uintptr_t src_b, uintptr_t src_c, uintptr_t dst, uintptr_t op, int64_t DL,
                                   uintptr_t out_slot, uintptr_t out_kind, int64_t B, uintptr_t in_words,
                                   uintptr_t in_bool, int64_t k, uintptr_t counts, int simd, int num_threads) {
    const auto prog = make_program(D0, slots, steps, op_start, src_a, src_b, src_c, dst, op, DL, out_slot, out_kind);
    py::gil_scoped_release nogil;
    relaxops::logic_packed_forward_cpu(prog, B, as_ptr<const uint64_t>(in_words), as_ptr<const uint8_t>(in_bool), k,
                                       as_ptr<int32_t>(counts), simd, num_threads);
  });

  m.def("render_forward", [](int dtype, const std::vector<int64_t>& ip, const std::vector<double>& fp, double reach,
                             int64_t tile_size, int64_t max_entries, int num_threads, uintptr_t face_vertices,
                             uintptr_t textures, uintptr_t image, uintptr_t aggr) {
    const auto P = relaxops::make_render_params(ip, fp);
    py::gil_scoped_release nogil;
    if (dtype == 0)
      relaxops::render_forward_cpu<float>(P, reach, tile_size, max_entries, num_threads,
                                          as_ptr<const float>(face_vertices), as_ptr<const float>(textures),
                                          as_ptr<float>(image), as_ptr<float>(aggr));
    else
      relaxops::render_forward_cpu<double>(P, reach, tile_size, max_entries, num_threads,
                                           as_ptr<const double>(face_vertices), as_ptr<const double>(textures),
                                           as_ptr<double>(image), as_ptr<double>(aggr));
  });
  m.def("render_backward",
        [](int dtype, const std::vector<int64_t>& ip, const std::vector<double>& fp, double reach, int64_t tile_size,
           int64_t max_entries, int num_threads, uintptr_t face_vertices, uintptr_t textures, uintptr_t image,
           uintptr_t aggr, uintptr_t grad_image, uintptr_t grad_face_vertices, uintptr_t grad_textures) {
          const auto P = relaxops::make_render_params(ip, fp);
          py::gil_scoped_release nogil;
          if (dtype == 0)
            relaxops::render_backward_cpu<float>(
                P, reach, tile_size, max_entries, num_threads, as_ptr<const float>(face_vertices),
                as_ptr<const float>(textures), as_ptr<const float>(image), as_ptr<const float>(aggr),
                as_ptr<const float>(grad_image), as_ptr<float>(grad_face_vertices), as_ptr<float>(grad_textures));
          else
            relaxops::render_backward_cpu<double>(
                P, reach, tile_size, max_entries, num_threads, as_ptr<const double>(face_vertices),
                as_ptr<const double>(textures), as_ptr<const double>(image), as_ptr<const double>(aggr),
                as_ptr<const double>(grad_image), as_ptr<double>(grad_face_vertices), as_ptr<double>(grad_textures));
        });
  m.def("render_ids", []() {
    using namespace relaxops;
    py::dict dist, alpha;
    const char* dn[] = {
        "hard",        "uniform",         "cubic_hermite", "wigner_semicircle", "gaussian",   "laplace",
        "logistic",    "gudermannian",    "cauchy",        "reciprocal",        "gumbel_max", "gumbel_min",
        "exponential", "exponential_rev", "gamma",         "gamma_rev",         "levy",       "levy_rev"};
    const int di[] = {kDistHard,      kDistUniform,   kDistCubicHermite, kDistWigner,         kDistGaussian,
                      kDistLaplace,   kDistLogistic,  kDistGudermannian, kDistCauchy,         kDistReciprocal,
                      kDistGumbelMax, kDistGumbelMin, kDistExponential,  kDistExponentialRev, kDistGamma,
                      kDistGammaRev,  kDistLevy,      kDistLevyRev};
    for (int i = 0; i < kNumDistributions; ++i) dist[dn[i]] = di[i];
    const char* an[] = {"hard",  "max",   "probabilistic", "einstein", "hamacher",
                        "frank", "yager", "aczel_alsina",  "dombi",    "schweizer_sklar"};
    const int ai[] = {kAlphaHard, kMax,   kProbabilistic, kEinstein, kHamacher,
                      kFrank,     kYager, kAczelAlsina,   kDombi,    kSchweizerSklar};
    for (int i = 0; i < kNumTConorms; ++i) alpha[an[i]] = ai[i];
    return py::make_tuple(dist, alpha);
  });

  // Relaxed algorithms: shortest path on grids (csrc/algorithms/shortest_path.h)
  // ints (B, H, W, n_iter, n_trace, loop, t_conorm, max_iter), floats (beta, hamacher_p, epsilon); dtype: 0 = float32,
  // 1 = float64; cost, out, grad_out, grad_cost [B, H, W]; jac [B, n_iter - 1, 8, H, W + 2] or 0 (the forward saves
  // nothing); pi [B, 8, H, W + 2]; steps int32 [1] (written by the forward, read by the backward).
  {
    using Ints = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int64_t>;
    using Floats = std::tuple<double, double, double>;
    auto params = [](const Ints& i, const Floats& f) {
      relaxops::SpParams P{std::get<0>(i), std::get<1>(i), std::get<2>(i), std::get<3>(i),
                           std::get<4>(i), std::get<5>(i), std::get<6>(i), std::get<0>(f),
                           std::get<1>(f), std::get<2>(f), std::get<7>(i)};
      relaxops::sp_check_params(P);
      return P;
    };
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0)
        f(float{});
      else
        f(double{});
    };
    m.def("shortest_path_ids", []() {
      py::dict ids;
      ids["probabilistic"] = int(relaxops::kSpProbabilistic);
      ids["hamacher"] = int(relaxops::kSpHamacher);
      ids["yager_1"] = int(relaxops::kSpYager1);
      ids["for"] = int(relaxops::kSpFor);
      ids["while"] = int(relaxops::kSpWhile);
      return ids;
    });
    m.def(
        "shortest_path_workspace",
        [params](Ints i, Floats f, int64_t K, bool backward) {
          return relaxops::shortest_path_cpu_workspace(params(i, f), K, backward);
        },
        "elements of work buffers a forward (or a backward with K steps) allocates");
    m.def("shortest_path_forward", [params, by_dtype](int dtype, Ints i, Floats f, uintptr_t cost, uintptr_t out,
                                                      uintptr_t jac, uintptr_t pi, uintptr_t steps) {
      const relaxops::SpParams P = params(i, f);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::shortest_path_forward_cpu<T>(P, as_ptr<const T>(cost), as_ptr<T>(out), as_ptr<T>(jac), as_ptr<T>(pi),
                                               as_ptr<int32_t>(steps));
      });
    });
    m.def("shortest_path_backward", [params, by_dtype](int dtype, Ints i, Floats f, uintptr_t steps, uintptr_t grad_out,
                                                       uintptr_t jac, uintptr_t pi, uintptr_t grad_cost) {
      const relaxops::SpParams P = params(i, f);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::shortest_path_backward_cpu<T>(P, as_ptr<const int32_t>(steps), as_ptr<const T>(grad_out),
                                                as_ptr<const T>(jac), as_ptr<const T>(pi), as_ptr<T>(grad_cost));
      });
    });
  }

  // Relaxed algorithms: edit distance and bubble sort (csrc/algorithms/edit_distance.h, bubble_sort.h)
  // dtype: 0 = float32, 1 = float64; layouts in the headers.
  {
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0)
        f(float{});
      else
        f(double{});
    };
    m.def("edit_distance_forward", [by_dtype](int dtype, int64_t B, int64_t n, int64_t m_, int64_t K, double beta,
                                              uintptr_t s, uintptr_t t, uintptr_t D, uintptr_t cos) {
      const relaxops::EditDistanceParams P{B, n, m_, K, beta};
      relaxops::edit_distance_check_params(P);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::edit_distance_forward_cpu<T>(P, as_ptr<const T>(s), as_ptr<const T>(t), as_ptr<T>(D), as_ptr<T>(cos));
      });
    });
    m.def("edit_distance_backward", [by_dtype](int dtype, int64_t B, int64_t n, int64_t m_, int64_t K, double beta,
                                               uintptr_t grad_distance, uintptr_t grad_D, uintptr_t s, uintptr_t t,
                                               uintptr_t D, uintptr_t cos, uintptr_t grad_s, uintptr_t grad_t) {
      const relaxops::EditDistanceParams P{B, n, m_, K, beta};
      relaxops::edit_distance_check_params(P);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::edit_distance_backward_cpu<T>(P, as_ptr<const T>(grad_distance), as_ptr<const T>(grad_D),
                                                as_ptr<const T>(s), as_ptr<const T>(t), as_ptr<const T>(D),
                                                as_ptr<const T>(cos), as_ptr<T>(grad_s), as_ptr<T>(grad_t));
      });
    });
    // bubble sort: passes = min(max_iter, n); states [B, passes, n + 3]; trips int32 [1]
    m.def("bubble_sort_forward", [by_dtype](int dtype, int64_t B, int64_t n, double beta, int hard, int64_t passes,
                                            double epsilon, uintptr_t x, uintptr_t sorted, uintptr_t swaps,
                                            uintptr_t any_swap, uintptr_t states, uintptr_t trips) {
      const relaxops::BubbleParams P{B, n, beta, hard, passes, epsilon};
      relaxops::bubble_check_params(P);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::bubble_sort_forward_cpu<T>(P, as_ptr<const T>(x), as_ptr<T>(sorted), as_ptr<T>(swaps),
                                             as_ptr<T>(any_swap), as_ptr<T>(states), as_ptr<int32_t>(trips));
      });
    });
    m.def("bubble_sort_backward", [by_dtype](int dtype, int64_t B, int64_t n, double beta, int hard, int64_t passes,
                                             double epsilon, uintptr_t grad_sorted, uintptr_t grad_swaps,
                                             uintptr_t grad_any, uintptr_t x, uintptr_t states, uintptr_t trips,
                                             uintptr_t grad_x) {
      const relaxops::BubbleParams P{B, n, beta, hard, passes, epsilon};
      relaxops::bubble_check_params(P);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::bubble_sort_backward_cpu<T>(P, as_ptr<const T>(grad_sorted), as_ptr<const T>(grad_swaps),
                                              as_ptr<const T>(grad_any), as_ptr<const T>(x), as_ptr<const T>(states),
                                              as_ptr<const int32_t>(trips), as_ptr<T>(grad_x));
      });
    });
  }

  // Training solvers: linear assignment (csrc/training/assignment.h); dtype: 0 = float32, 1 = float64.
  // returns the number of items with non-finite scores; onehot may be 0 (not written)
  m.def(
      "assignment",
      [](int dtype, int64_t B, int64_t d, uintptr_t theta, uintptr_t perm, uintptr_t onehot, int threads) -> int64_t {
        const relaxops::AssignmentParams P{B, d};
        relaxops::assignment_check_params(P);
        RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
        py::gil_scoped_release nogil;
        if (dtype == 0)
          return relaxops::assignment_cpu<float>(P, as_ptr<const float>(theta), as_ptr<int64_t>(perm),
                                                 as_ptr<float>(onehot), threads);
        return relaxops::assignment_cpu<double>(P, as_ptr<const double>(theta), as_ptr<int64_t>(perm),
                                                as_ptr<double>(onehot), threads);
      },
      py::arg("dtype"), py::arg("B"), py::arg("d"), py::arg("theta"), py::arg("perm"), py::arg("onehot") = 0,
      py::arg("threads") = 0);
}
