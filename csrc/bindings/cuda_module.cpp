// relaxops._cuda: the CUDA kernels. Torch-free: buffers are raw device addresses (std::uintptr_t) of
// contiguous tensors and `stream` is a cudaStream_t handle (torch.cuda.current_stream().cuda_stream); the
// Python wrappers check dtype, device, contiguity and shapes first. Arguments are those of relaxops._C plus
// a trailing stream (matrix_backward also takes a workspace, see sortnet_matrix_backward_workspace_bytes).
// Imports without a GPU or driver: device_count() is then 0.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "../algorithms/shortest_path.h"
#include "../baselines/baselines.h"
#include "../common/relax.h"
#include "../fastsort/fastsort.h"
#include "../logic/conv.h"
#include "../logic/logic.h"
#include "../logic/packed.h"
#include "../otsort/otsort.h"
#include "../sortnet/sortnet.h"
#include "../algorithms/bubble_sort.h"
#include "../algorithms/edit_distance.h"
#include "../training/assignment.h"
#include "binding_utils.h"

#ifndef RELAXOPS_CUDA_ARCHS
#define RELAXOPS_CUDA_ARCHS ""
#endif

namespace py = pybind11;
using relaxops::as_ptr;
using relaxops::dispatch;
using relaxops::make_net;
using relaxops::make_plan;
using relaxops::make_relax;
using std::uintptr_t;

namespace {

template <typename T>
struct ValuesForward {
  static void run(relaxops::NetView net, relaxops::RelaxParams rp, int64_t B, uintptr_t x, uintptr_t sorted,
                  uintptr_t d, uintptr_t alpha, uintptr_t stream) {
    relaxops::sortnet_values_forward_cuda<T>(net, rp, B, as_ptr<const T>(x), as_ptr<T>(sorted), as_ptr<T>(d),
                                             as_ptr<T>(alpha), stream);
  }
};
template <typename T>
struct ValuesBackward {
  static void run(relaxops::NetView net, relaxops::RelaxParams rp, int64_t B, uintptr_t grad_sorted,
                  uintptr_t grad_alpha, uintptr_t d, uintptr_t alpha, uintptr_t grad_x, uintptr_t stream) {
    relaxops::sortnet_values_backward_cuda<T>(net, rp, B, as_ptr<const T>(grad_sorted), as_ptr<const T>(grad_alpha),
                                              as_ptr<const T>(d), as_ptr<const T>(alpha), as_ptr<T>(grad_x), stream);
  }
};
template <typename T>
struct MatrixForward {
  static void run(relaxops::NetView net, int64_t B, int64_t col_begin, uintptr_t alpha, uintptr_t X, uintptr_t stream) {
    relaxops::sortnet_matrix_forward_cuda<T>(net, B, col_begin, as_ptr<const T>(alpha), as_ptr<T>(X), stream);
  }
};
template <typename T>
struct MatrixBackwardWorkspace {
  static int64_t run(relaxops::NetView net, int64_t B, int64_t col_begin) {
    return relaxops::sortnet_matrix_backward_workspace_bytes_cuda<T>(net, B, col_begin);
  }
};
template <typename T>
struct MatrixBackward {
  static void run(relaxops::NetView net, int64_t B, int64_t col_begin, uintptr_t alpha, uintptr_t grad_X,
                  uintptr_t grad_alpha, uintptr_t workspace, int64_t workspace_bytes, uintptr_t stream) {
    relaxops::sortnet_matrix_backward_cuda<T>(net, B, col_begin, as_ptr<const T>(alpha), as_ptr<const T>(grad_X),
                                              as_ptr<T>(grad_alpha), as_ptr<void>(workspace), workspace_bytes, stream);
  }
};

// sortnet ranks (issue 16)
template <typename T>
struct RankForward {
  static void run(relaxops::NetView net, relaxops::RelaxParams rp, int64_t B, uintptr_t x, uintptr_t rank,
                  uintptr_t workspace, int64_t workspace_elements, uintptr_t stream) {
    relaxops::sortnet_rank_forward_cuda<T>(net, rp, B, as_ptr<const T>(x), as_ptr<T>(rank), as_ptr<T>(workspace),
                                           workspace_elements, stream);
  }
};
template <typename T>
struct RankBackward {
  static void run(relaxops::NetView net, relaxops::RelaxParams rp, int64_t B, uintptr_t x, uintptr_t grad_rank,
                  uintptr_t grad_x, uintptr_t workspace, int64_t workspace_elements, uintptr_t stream) {
    relaxops::sortnet_rank_backward_cuda<T>(net, rp, B, as_ptr<const T>(x), as_ptr<const T>(grad_rank),
                                            as_ptr<T>(grad_x), as_ptr<T>(workspace), workspace_elements, stream);
  }
};

}  // namespace

PYBIND11_MODULE(_cuda, m) {
  m.doc() = "relaxops CUDA kernels (torch-free; pointers to contiguous device buffers, stream handles)";
  m.def("device_count", &relaxops::cuda_device_count, "Visible CUDA devices (0 without a GPU or driver).");
  m.def("device_name", &relaxops::cuda_device_name, py::arg("device") = 0);
  m.def(
      "cuda_archs", []() { return std::string(RELAXOPS_CUDA_ARCHS); },
      "CMAKE_CUDA_ARCHITECTURES the module was built for.");
  m.def("runtime_version", &relaxops::cuda_runtime_version,
        "CUDA runtime version linked into the module (1000 * major + 10 * minor).");
  m.def("driver_version", &relaxops::cuda_driver_version, "CUDA version of the driver (0 without a driver).");

  // Network arguments, in this order everywhere: n, num_layers, num_comparators, layer_ptr, cmin, cmax
  // (layer_ptr, cmin, cmax: device int32 arrays).
  m.def("sortnet_values_forward", [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin,
                                     uintptr_t cmax, int relax, double steepness, double art_lambda, int64_t B,
                                     uintptr_t x, uintptr_t sorted, uintptr_t d, uintptr_t alpha, uintptr_t stream) {
    py::gil_scoped_release nogil;
    dispatch<ValuesForward>(dtype, make_net(n, L, C, lp, cmin, cmax), make_relax(relax, steepness, art_lambda), B, x,
                            sorted, d, alpha, stream);
  });
  m.def("sortnet_values_backward",
        [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int relax,
           double steepness, double art_lambda, int64_t B, uintptr_t grad_sorted, uintptr_t grad_alpha, uintptr_t d,
           uintptr_t alpha, uintptr_t grad_x, uintptr_t stream) {
          py::gil_scoped_release nogil;
          dispatch<ValuesBackward>(dtype, make_net(n, L, C, lp, cmin, cmax), make_relax(relax, steepness, art_lambda),
                                   B, grad_sorted, grad_alpha, d, alpha, grad_x, stream);
        });
  m.def("sortnet_matrix_forward",
        [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int64_t B,
           int64_t col_begin, uintptr_t alpha, uintptr_t X, uintptr_t stream) {
          py::gil_scoped_release nogil;
          dispatch<MatrixForward>(dtype, make_net(n, L, C, lp, cmin, cmax), B, col_begin, alpha, X, stream);
        });
  m.def(
      "sortnet_matrix_backward_workspace_bytes",
      [](int dtype, int64_t n, int64_t L, int64_t C, int64_t B, int64_t col_begin) {
        RELAXOPS_CHECK(B >= 0, "negative batch size");
        return dispatch<MatrixBackwardWorkspace>(dtype, make_net(n, L, C, 0, 0, 0), B, col_begin);
      },
      "Bytes of device workspace sortnet_matrix_backward needs for this network size and batch (may be 0).");
  m.def(
      "sortnet_matrix_backward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int64_t B,
         int64_t col_begin, uintptr_t alpha, uintptr_t grad_X, uintptr_t grad_alpha, uintptr_t workspace,
         int64_t workspace_bytes, uintptr_t stream) {
        py::gil_scoped_release nogil;
        dispatch<MatrixBackward>(dtype, make_net(n, L, C, lp, cmin, cmax), B, col_begin, alpha, grad_X, grad_alpha,
                                 workspace, workspace_bytes, stream);
      },
      "grad_alpha from grad_X; `workspace` is a device buffer of at least "
      "sortnet_matrix_backward_workspace_bytes(dtype, n, L, C, B, col_begin) bytes, used on `stream` only.");
  // sortnet ranks (issue 16)
  m.def(
      "sortnet_rank_forward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int relax,
         double steepness, double art_lambda, int64_t B, uintptr_t x, uintptr_t rank, uintptr_t workspace,
         int64_t workspace_elements, uintptr_t stream) {
        py::gil_scoped_release nogil;
        dispatch<RankForward>(dtype, make_net(n, L, C, lp, cmin, cmax), make_relax(relax, steepness, art_lambda), B, x,
                              rank, workspace, workspace_elements, stream);
      },
      "rank from x; `workspace` is a device buffer of at least B * C elements of the dtype.");
  m.def(
      "sortnet_rank_backward",
      [](int dtype, int64_t n, int64_t L, int64_t C, uintptr_t lp, uintptr_t cmin, uintptr_t cmax, int relax,
         double steepness, double art_lambda, int64_t B, uintptr_t x, uintptr_t grad_rank, uintptr_t grad_x,
         uintptr_t workspace, int64_t workspace_elements, uintptr_t stream) {
        py::gil_scoped_release nogil;
        dispatch<RankBackward>(dtype, make_net(n, L, C, lp, cmin, cmax), make_relax(relax, steepness, art_lambda), B, x,
                               grad_rank, grad_x, workspace, workspace_elements, stream);
      },
      "grad_x from x and grad_rank; `workspace` is a device buffer of at least B * (3 C + n) elements of the dtype.");

  // NeuralSort / SoftSort (csrc/baselines/baselines.h). dtype: 0 = float32, 1 = float64; perm: int64 [B, n],
  // an input here (the stable ascending sort permutation); workspace: device buffer of the data dtype, sized
  // as documented in baselines.h (0 for softsort_forward).
  {
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0)
        f(float{});
      else
        f(double{});
    };
    m.def("neuralsort_forward", [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, uintptr_t x,
                                           uintptr_t perm, uintptr_t X, uintptr_t workspace, uintptr_t stream) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::neuralsort_forward_cuda<T>(B, n, k, tau, as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                                             as_ptr<T>(X), as_ptr<T>(workspace), stream);
      });
    });
    m.def("neuralsort_backward",
          [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, uintptr_t grad_X, uintptr_t X, uintptr_t x,
                     uintptr_t perm, uintptr_t grad_x, uintptr_t workspace, uintptr_t stream) {
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::neuralsort_backward_cuda<T>(B, n, k, tau, as_ptr<const T>(grad_X), as_ptr<const T>(X),
                                                    as_ptr<const T>(x), as_ptr<const int64_t>(perm), as_ptr<T>(grad_x),
                                                    as_ptr<T>(workspace), stream);
            });
          });
    m.def("softsort_forward", [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, double pow,
                                         uintptr_t x, uintptr_t perm, uintptr_t X, uintptr_t stream) {
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::softsort_forward_cuda<T>(B, n, k, tau, pow, as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                                           as_ptr<T>(X), stream);
      });
    });
    m.def("softsort_backward",
          [by_dtype](int dtype, int64_t B, int64_t n, int64_t k, double tau, double pow, uintptr_t grad_X, uintptr_t X,
                     uintptr_t x, uintptr_t perm, uintptr_t grad_x, uintptr_t workspace, uintptr_t stream) {
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::softsort_backward_cuda<T>(B, n, k, tau, pow, as_ptr<const T>(grad_X), as_ptr<const T>(X),
                                                  as_ptr<const T>(x), as_ptr<const int64_t>(perm), as_ptr<T>(grad_x),
                                                  as_ptr<T>(workspace), stream);
            });
          });
  }

  // Optimal-transport sort (csrc/otsort/otsort.h). dtype: 0 = float32, 1 = float64; loop parameters as in the CPU
  // module; workspace: a device buffer sized by ot_cuda_workspace (of double for ot_implicit_backward).
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
    m.def("ot_sinkhorn_forward", [by_dtype, params](int dtype, Sizes s, Loop l, uintptr_t xs, uintptr_t y,
                                                    uintptr_t loga, uintptr_t logb, uintptr_t f, uintptr_t g,
                                                    uintptr_t eps, uintptr_t iters, uintptr_t history,
                                                    uintptr_t workspace, uintptr_t stream) {
      const relaxops::OtParams p = params(s, l);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::ot_sinkhorn_forward_cuda<T>(p, as_ptr<const T>(xs), as_ptr<const T>(y), as_ptr<const T>(loga),
                                              as_ptr<const T>(logb), as_ptr<T>(f), as_ptr<T>(g), as_ptr<T>(eps),
                                              as_ptr<int32_t>(iters), as_ptr<T>(history), as_ptr<T>(workspace), stream);
      });
    });
    m.def("ot_apply_forward",
          [by_dtype, params](int dtype, Sizes s, Loop l, uintptr_t xs, uintptr_t y, uintptr_t f, uintptr_t g,
                             uintptr_t eps, uintptr_t loga, uintptr_t logb, uintptr_t u, uintptr_t v, uintptr_t cols,
                             uintptr_t rows, uintptr_t plan, uintptr_t stream) {
            const relaxops::OtParams p = params(s, l);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::ot_apply_forward_cuda<T>(p, as_ptr<const T>(xs), as_ptr<const T>(y), as_ptr<const T>(f),
                                                 as_ptr<const T>(g), as_ptr<const T>(eps), as_ptr<const T>(loga),
                                                 as_ptr<const T>(logb), as_ptr<const T>(u), as_ptr<const T>(v),
                                                 as_ptr<T>(cols), as_ptr<T>(rows), as_ptr<T>(plan), stream);
            });
          });
    m.def("ot_apply_backward", [by_dtype, params](int dtype, Sizes s, Loop l, uintptr_t gcols, uintptr_t grows,
                                                  uintptr_t gplan, uintptr_t xs, uintptr_t y, uintptr_t f, uintptr_t g,
                                                  uintptr_t eps, uintptr_t loga, uintptr_t logb, uintptr_t u,
                                                  uintptr_t v, uintptr_t cols, uintptr_t rows,
                                                  std::vector<uintptr_t> out, uintptr_t stream) {
      RELAXOPS_CHECK(out.size() == 8, "ot_apply_backward: 8 outputs (gxs, gy, gf, gg, gu, gv, gloga, glogb)");
      const relaxops::OtParams p = params(s, l);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::ot_apply_backward_cuda<T>(
            p, as_ptr<const T>(gcols), as_ptr<const T>(grows), as_ptr<const T>(gplan), as_ptr<const T>(xs),
            as_ptr<const T>(y), as_ptr<const T>(f), as_ptr<const T>(g), as_ptr<const T>(eps), as_ptr<const T>(loga),
            as_ptr<const T>(logb), as_ptr<const T>(u), as_ptr<const T>(v), as_ptr<const T>(cols), as_ptr<const T>(rows),
            as_ptr<T>(out[0]), as_ptr<T>(out[1]), as_ptr<T>(out[2]), as_ptr<T>(out[3]), as_ptr<T>(out[4]),
            as_ptr<T>(out[5]), as_ptr<T>(out[6]), as_ptr<T>(out[7]), stream);
      });
    });
    m.def("ot_implicit_backward", [by_dtype, params](int dtype, Sizes s, Loop l, uintptr_t gf, uintptr_t gg,
                                                     uintptr_t xs, uintptr_t y, uintptr_t f, uintptr_t g, uintptr_t eps,
                                                     uintptr_t loga, uintptr_t logb, std::vector<uintptr_t> out,
                                                     uintptr_t workspace, uintptr_t stream) {
      RELAXOPS_CHECK(out.size() == 4, "ot_implicit_backward: 4 outputs (gxs, gy, gloga, glogb)");
      const relaxops::OtParams p = params(s, l);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::ot_implicit_backward_cuda<T>(
            p, as_ptr<const T>(gf), as_ptr<const T>(gg), as_ptr<const T>(xs), as_ptr<const T>(y), as_ptr<const T>(f),
            as_ptr<const T>(g), as_ptr<const T>(eps), as_ptr<const T>(loga), as_ptr<const T>(logb), as_ptr<T>(out[0]),
            as_ptr<T>(out[1]), as_ptr<T>(out[2]), as_ptr<T>(out[3]), as_ptr<T>(workspace), stream);
      });
    });
    m.def("ot_unrolled_backward", [by_dtype, params](int dtype, Sizes s, Loop l, uintptr_t gf, uintptr_t gg,
                                                     uintptr_t xs, uintptr_t y, uintptr_t loga, uintptr_t logb,
                                                     uintptr_t iters, uintptr_t history, std::vector<uintptr_t> out,
                                                     uintptr_t workspace, uintptr_t stream) {
      RELAXOPS_CHECK(out.size() == 4, "ot_unrolled_backward: 4 outputs (gxs, gy, gloga, glogb)");
      const relaxops::OtParams p = params(s, l);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::ot_unrolled_backward_cuda<T>(
            p, as_ptr<const T>(gf), as_ptr<const T>(gg), as_ptr<const T>(xs), as_ptr<const T>(y), as_ptr<const T>(loga),
            as_ptr<const T>(logb), as_ptr<const int32_t>(iters), as_ptr<const T>(history), as_ptr<T>(out[0]),
            as_ptr<T>(out[1]), as_ptr<T>(out[2]), as_ptr<T>(out[3]), as_ptr<T>(workspace), stream);
      });
    });
  }

  // Fast soft sort / soft rank (csrc/fastsort/fastsort.h). dtype: 0 = float32, 1 = float64; op: 0 = soft_rank,
  // 1 = soft_sort; reg: 0 = l2, 1 = kl; perm int64 [B, n] an input of the forward (the stable ascending sort
  // permutation of sgn x); block int32 [B, n] written by it; workspace: B n doubles (forward only).
  {
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0)
        f(float{});
      else
        f(double{});
    };
    m.def("fastsort_forward", [by_dtype](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n,
                                         uintptr_t x, uintptr_t perm, uintptr_t out, uintptr_t block,
                                         uintptr_t workspace, uintptr_t stream) {
      const auto P = relaxops::make_fastsort_params(op, reg, eps, descending);
      relaxops::fastsort_check_params(P, B, n);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::fastsort_forward_cuda<T>(P, B, n, as_ptr<const T>(x), as_ptr<const int64_t>(perm), as_ptr<T>(out),
                                           as_ptr<int32_t>(block), as_ptr<double>(workspace), stream);
      });
    });
    m.def("fastsort_backward",
          [by_dtype](int dtype, int op, int reg, double eps, int descending, int64_t B, int64_t n, uintptr_t grad_out,
                     uintptr_t out, uintptr_t x, uintptr_t perm, uintptr_t block, uintptr_t grad_x, uintptr_t stream) {
            const auto P = relaxops::make_fastsort_params(op, reg, eps, descending);
            relaxops::fastsort_check_params(P, B, n);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::fastsort_backward_cuda<T>(P, B, n, as_ptr<const T>(grad_out), as_ptr<const T>(out),
                                                  as_ptr<const T>(x), as_ptr<const int64_t>(perm),
                                                  as_ptr<const int32_t>(block), as_ptr<T>(grad_x), stream);
            });
          });
  }

  // Logic gate layers (csrc/logic/logic.h): feature-major [n, B] device buffers; dtype 0 = float32, 1 = float64,
  // 2 = float16, 3 = bfloat16 (coef / grad_coef float32, float64 for dtype 1); grad_xt / grad_coef may be 0.
  m.def("logic_forward", [](int dtype, int64_t B, int64_t n_in, int64_t n_out, uintptr_t xt, uintptr_t a, uintptr_t b,
                            uintptr_t coef, uintptr_t yt, uintptr_t stream) {
    RELAXOPS_CHECK(dtype >= 0 && dtype <= 3, "dtype must be 0..3 (float32, float64, float16, bfloat16)");
    py::gil_scoped_release nogil;
    relaxops::logic_forward_cuda(dtype, B, n_in, n_out, as_ptr<const void>(xt), as_ptr<const int64_t>(a),
                                 as_ptr<const int64_t>(b), as_ptr<const void>(coef), as_ptr<void>(yt), stream);
  });
  m.def("logic_backward", [](int dtype, int64_t B, int64_t n_in, int64_t n_out, uintptr_t xt, uintptr_t a, uintptr_t b,
                             uintptr_t coef, uintptr_t grad_yt, uintptr_t csr_start, uintptr_t csr_entry,
                             uintptr_t grad_xt, uintptr_t grad_coef, uintptr_t stream) {
    RELAXOPS_CHECK(dtype >= 0 && dtype <= 3, "dtype must be 0..3 (float32, float64, float16, bfloat16)");
    py::gil_scoped_release nogil;
    relaxops::logic_backward_cuda(dtype, B, n_in, n_out, as_ptr<const void>(xt), as_ptr<const int64_t>(a),
                                  as_ptr<const int64_t>(b), as_ptr<const void>(coef), as_ptr<const void>(grad_yt),
                                  as_ptr<const int64_t>(csr_start), as_ptr<const int64_t>(csr_entry),
                                  as_ptr<void>(grad_xt), as_ptr<void>(grad_coef), stream);
  });

  // Convolutional logic layer (csrc/logic/conv.h): x [B, C_in, H, W], leaves int64 [C_out, L, 3], coef
  // [C_out, L - 1, 4] device buffers; dtype as for logic_forward; shape = (B, C_in, H, W, C_out, L), geometry =
  // (kh, kw, sh, sw, ph, pw); grad_x / grad_coef may be 0; the backward takes a device workspace of
  // logic_conv_backward_workspace(...) bytes.
  {
    using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
    using Geometry = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
    auto params = [](const Shape& s, const Geometry& g) {
      return relaxops::make_logic_conv_params(std::get<0>(s), std::get<1>(s), std::get<2>(s), std::get<3>(s),
                                              std::get<4>(s), std::get<5>(s), std::get<0>(g), std::get<1>(g),
                                              std::get<2>(g), std::get<3>(g), std::get<4>(g), std::get<5>(g));
    };
    m.def(
        "logic_conv_backward_workspace",
        [params](int dtype, Shape shape, Geometry geom, bool need_x, bool need_w) {
          return relaxops::logic_conv_backward_cuda_workspace(dtype, params(shape, geom), need_x, need_w);
        },
        "bytes of device workspace logic_conv_backward needs (may be 0).");
    m.def("logic_conv_forward", [params](int dtype, Shape shape, Geometry geom, uintptr_t x, uintptr_t leaves,
                                         uintptr_t coef, uintptr_t y, uintptr_t stream) {
      RELAXOPS_CHECK(dtype >= 0 && dtype <= 3, "dtype must be 0..3 (float32, float64, float16, bfloat16)");
      const auto P = params(shape, geom);
      py::gil_scoped_release nogil;
      relaxops::logic_conv_forward_cuda(dtype, P, as_ptr<const void>(x), as_ptr<const int64_t>(leaves),
                                        as_ptr<const void>(coef), as_ptr<void>(y), stream);
    });
    m.def("logic_conv_backward",
          [params](int dtype, Shape shape, Geometry geom, uintptr_t x, uintptr_t leaves, uintptr_t coef,
                   uintptr_t grad_y, uintptr_t csr_start, uintptr_t csr_entry, uintptr_t grad_x, uintptr_t grad_coef,
                   uintptr_t workspace, uintptr_t stream) {
            RELAXOPS_CHECK(dtype >= 0 && dtype <= 3, "dtype must be 0..3 (float32, float64, float16, bfloat16)");
            const auto P = params(shape, geom);
            py::gil_scoped_release nogil;
            relaxops::logic_conv_backward_cuda(
                dtype, P, as_ptr<const void>(x), as_ptr<const int64_t>(leaves), as_ptr<const void>(coef),
                as_ptr<const void>(grad_y), as_ptr<const int64_t>(csr_start), as_ptr<const int64_t>(csr_entry),
                as_ptr<void>(grad_x), as_ptr<void>(grad_coef), as_ptr<void>(workspace), stream);
          });
  }

  // Packed logic inference (csrc/logic/packed.h): device words uint64 [D, ceil(B / 64)]; the plan's widths and
  // op_start are host arrays, src_a / src_b / dst / op device arrays.
  m.def("logic_pack", [](uintptr_t x, int64_t B, int64_t D, uintptr_t words, uintptr_t stream) {
    py::gil_scoped_release nogil;
    relaxops::logic_pack_cuda(as_ptr<const uint8_t>(x), B, D, as_ptr<uint64_t>(words), stream);
  });
  m.def("logic_unpack", [](uintptr_t words, int64_t B, int64_t D, uintptr_t x, uintptr_t stream) {
    py::gil_scoped_release nogil;
    relaxops::logic_unpack_cuda(as_ptr<const uint64_t>(words), B, D, as_ptr<uint8_t>(x), stream);
  });
  m.def(
      "logic_packed_layers_workspace",
      [](int64_t L, uintptr_t widths, uintptr_t op_start, int64_t B) {
        return relaxops::logic_packed_layers_cuda_workspace(make_plan(L, widths, op_start, 0, 0, 0, 0), B);
      },
      "uint64 words of device workspace logic_packed_layers needs (may be 0).");
  m.def("logic_packed_layers",
        [](int64_t L, uintptr_t widths, uintptr_t op_start, uintptr_t src_a, uintptr_t src_b, uintptr_t dst,
           uintptr_t op, int64_t B, uintptr_t in, uintptr_t out, uintptr_t workspace, uintptr_t stream) {
          const auto plan = make_plan(L, widths, op_start, src_a, src_b, dst, op);
          py::gil_scoped_release nogil;
          relaxops::logic_packed_layers_cuda(plan, B, as_ptr<const uint64_t>(in), as_ptr<uint64_t>(out),
                                             as_ptr<uint64_t>(workspace), stream);
        });
  m.def("logic_group_count", [](uintptr_t words, int64_t B, int64_t D, int64_t k, uintptr_t counts, uintptr_t stream) {
    py::gil_scoped_release nogil;
    relaxops::logic_group_count_cuda(as_ptr<const uint64_t>(words), B, D, k, as_ptr<int32_t>(counts), stream);
  });

  m.def("render_forward",
        [](int dtype, const std::vector<int64_t>& ip, const std::vector<double>& fp, double reach, int64_t tile_size,
           uintptr_t face_vertices, uintptr_t textures, uintptr_t image, uintptr_t aggr, uintptr_t stream) {
          RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
          const auto P = relaxops::make_render_params(ip, fp);
          py::gil_scoped_release nogil;
          relaxops::render_forward_cuda(dtype, P, reach, tile_size, as_ptr<const void>(face_vertices),
                                        as_ptr<const void>(textures), as_ptr<void>(image), as_ptr<void>(aggr), stream);
        });
  m.def("render_backward",
        [](int dtype, const std::vector<int64_t>& ip, const std::vector<double>& fp, double reach, int64_t tile_size,
           uintptr_t face_vertices, uintptr_t textures, uintptr_t image, uintptr_t aggr, uintptr_t grad_image,
           uintptr_t grad_face_vertices, uintptr_t grad_textures, uintptr_t stream) {
          RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
          const auto P = relaxops::make_render_params(ip, fp);
          py::gil_scoped_release nogil;
          relaxops::render_backward_cuda(dtype, P, reach, tile_size, as_ptr<const void>(face_vertices),
                                         as_ptr<const void>(textures), as_ptr<const void>(image),
                                         as_ptr<const void>(aggr), as_ptr<const void>(grad_image),
                                         as_ptr<void>(grad_face_vertices), as_ptr<void>(grad_textures), stream);
        });

  // Relaxed algorithms: shortest path on grids (csrc/algorithms/shortest_path.h)
  // The CPU module's arguments (ints, floats as there); the forward also takes counts (int32 [B], "while") and a
  // workspace of shortest_path_workspace(ints, floats, K, False) elements (0 elements: none needed), the backward the
  // step count K read from the forward's steps and a workspace of shortest_path_workspace(ints, floats, K, True).
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
    m.def("shortest_path_workspace", [params](Ints i, Floats f, int64_t K, bool backward) {
      return relaxops::shortest_path_cuda_workspace(params(i, f), K, backward);
    });
    m.def("shortest_path_forward",
          [params, by_dtype](int dtype, Ints i, Floats f, uintptr_t cost, uintptr_t out, uintptr_t jac, uintptr_t pi,
                             uintptr_t steps, uintptr_t counts, uintptr_t workspace, uintptr_t stream) {
            const relaxops::SpParams P = params(i, f);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::shortest_path_forward_cuda<T>(P, as_ptr<const T>(cost), as_ptr<T>(out), as_ptr<T>(jac),
                                                      as_ptr<T>(pi), as_ptr<int32_t>(steps), as_ptr<int32_t>(counts),
                                                      as_ptr<T>(workspace), stream);
            });
          });
    m.def("shortest_path_backward",
          [params, by_dtype](int dtype, Ints i, Floats f, int64_t K, uintptr_t grad_out, uintptr_t jac, uintptr_t pi,
                             uintptr_t grad_cost, uintptr_t workspace, uintptr_t stream) {
            const relaxops::SpParams P = params(i, f);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::shortest_path_backward_cuda<T>(P, K, as_ptr<const T>(grad_out), as_ptr<const T>(jac),
                                                       as_ptr<const T>(pi), as_ptr<T>(grad_cost), as_ptr<T>(workspace),
                                                       stream);
            });
          });
  }

  // Relaxed algorithms: edit distance and bubble sort (csrc/algorithms/edit_distance.h, bubble_sort.h)
  // dtype: 0 = float32, 1 = float64; layouts and workspace sizes in the headers.
  {
    auto by_dtype = [](int dtype, auto&& f) {
      RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
      if (dtype == 0)
        f(float{});
      else
        f(double{});
    };
    m.def("edit_distance_workspace", [](int64_t B, int64_t n, int64_t m_, int64_t K, bool backward) {
      return relaxops::edit_distance_cuda_workspace(relaxops::EditDistanceParams{B, n, m_, K, 1.0}, backward);
    });
    m.def("edit_distance_forward",
          [by_dtype](int dtype, int64_t B, int64_t n, int64_t m_, int64_t K, double beta, uintptr_t s, uintptr_t t,
                     uintptr_t D, uintptr_t cos, uintptr_t workspace, uintptr_t stream) {
            const relaxops::EditDistanceParams P{B, n, m_, K, beta};
            relaxops::edit_distance_check_params(P);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::edit_distance_forward_cuda<T>(P, as_ptr<const T>(s), as_ptr<const T>(t), as_ptr<T>(D),
                                                      as_ptr<T>(cos), as_ptr<T>(workspace), stream);
            });
          });
    m.def("edit_distance_backward",
          [by_dtype](int dtype, int64_t B, int64_t n, int64_t m_, int64_t K, double beta, uintptr_t grad_distance,
                     uintptr_t grad_D, uintptr_t s, uintptr_t t, uintptr_t D, uintptr_t cos, uintptr_t grad_s,
                     uintptr_t grad_t, uintptr_t workspace, uintptr_t stream) {
            const relaxops::EditDistanceParams P{B, n, m_, K, beta};
            relaxops::edit_distance_check_params(P);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::edit_distance_backward_cuda<T>(P, as_ptr<const T>(grad_distance), as_ptr<const T>(grad_D),
                                                       as_ptr<const T>(s), as_ptr<const T>(t), as_ptr<const T>(D),
                                                       as_ptr<const T>(cos), as_ptr<T>(grad_s), as_ptr<T>(grad_t),
                                                       as_ptr<T>(workspace), stream);
            });
          });
    // bubble sort: passes = min(max_iter, n); row_trips: int32 [B] (forward)
    m.def("bubble_sort_workspace", [](int64_t B, int64_t n, int64_t passes, bool backward) {
      return relaxops::bubble_cuda_workspace(relaxops::BubbleParams{B, n, 1.0, 0, passes, 0.0}, backward);
    });
    m.def("bubble_sort_forward",
          [by_dtype](int dtype, int64_t B, int64_t n, double beta, int hard, int64_t passes, double epsilon,
                     uintptr_t x, uintptr_t sorted, uintptr_t swaps, uintptr_t any_swap, uintptr_t states,
                     uintptr_t trips, uintptr_t row_trips, uintptr_t workspace, uintptr_t stream) {
            const relaxops::BubbleParams P{B, n, beta, hard, passes, epsilon};
            relaxops::bubble_check_params(P);
            py::gil_scoped_release nogil;
            by_dtype(dtype, [&](auto tag) {
              using T = decltype(tag);
              relaxops::bubble_sort_forward_cuda<T>(P, as_ptr<const T>(x), as_ptr<T>(sorted), as_ptr<T>(swaps),
                                                    as_ptr<T>(any_swap), as_ptr<T>(states), as_ptr<int32_t>(trips),
                                                    as_ptr<int32_t>(row_trips), as_ptr<T>(workspace), stream);
            });
          });
    m.def("bubble_sort_backward", [by_dtype](int dtype, int64_t B, int64_t n, double beta, int hard, int64_t passes,
                                             double epsilon, uintptr_t grad_sorted, uintptr_t grad_swaps,
                                             uintptr_t grad_any, uintptr_t x, uintptr_t states, uintptr_t trips,
                                             uintptr_t grad_x, uintptr_t workspace, uintptr_t stream) {
      const relaxops::BubbleParams P{B, n, beta, hard, passes, epsilon};
      relaxops::bubble_check_params(P);
      py::gil_scoped_release nogil;
      by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        relaxops::bubble_sort_backward_cuda<T>(
            P, as_ptr<const T>(grad_sorted), as_ptr<const T>(grad_swaps), as_ptr<const T>(grad_any), as_ptr<const T>(x),
            as_ptr<const T>(states), as_ptr<const int32_t>(trips), as_ptr<T>(grad_x), as_ptr<T>(workspace), stream);
      });
    });
  }

  // Training solvers: linear assignment (csrc/training/assignment.h); dtype: 0 = float32, 1 = float64.
  m.def("assignment_workspace",
        [](int64_t B, int64_t d) { return relaxops::assignment_cuda_workspace(relaxops::AssignmentParams{B, d}); });
  m.def("assignment",
        [](int dtype, int64_t B, int64_t d, uintptr_t theta, uintptr_t perm, uintptr_t workspace, uintptr_t stream) {
          const relaxops::AssignmentParams P{B, d};
          relaxops::assignment_check_params(P);
          RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
          py::gil_scoped_release nogil;
          if (dtype == 0)
            relaxops::assignment_cuda<float>(P, as_ptr<const float>(theta), as_ptr<int64_t>(perm),
                                             as_ptr<void>(workspace), stream);
          else
            relaxops::assignment_cuda<double>(P, as_ptr<const double>(theta), as_ptr<int64_t>(perm),
                                              as_ptr<void>(workspace), stream);
        });
}
