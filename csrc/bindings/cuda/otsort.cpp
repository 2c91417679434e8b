// relaxops._cuda: optimal-transport sort (csrc/otsort/otsort.h). Sizes, loop parameters and row lengths (n_len,
// m_len: device addresses, the last arguments) as in the CPU module; workspace: a device buffer sized by
// ot_cuda_workspace (of double for ot_implicit_backward).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include "../../otsort/otsort.h"
#include "../binding_utils.h"
#include "../bindings.h"

namespace py = pybind11;
using std::uintptr_t;

namespace relaxops {

// The loop parameters and the rows' own sizes: n_len / m_len, addresses of int64 [R] (0: every row full).
inline OtParams ot_params(const OtSizes& s, const OtLoop& l, uintptr_t n_len, uintptr_t m_len) {
  OtParams p = make_ot_params(s, l);
  p.n_len = as_ptr<const int64_t>(n_len);
  p.m_len = as_ptr<const int64_t>(m_len);
  return p;
}

void bind_otsort(py::module_& m) {
  m.def("ot_sinkhorn_forward",
        [](int dtype, OtSizes s, OtLoop l, uintptr_t xs, uintptr_t y, uintptr_t loga, uintptr_t logb, uintptr_t f,
           uintptr_t g, uintptr_t eps, uintptr_t iters, uintptr_t history, uintptr_t workspace, uintptr_t stream,
           uintptr_t n_len, uintptr_t m_len) {
          const OtParams p = ot_params(s, l, n_len, m_len);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            ot_sinkhorn_forward_cuda<T>(p, as_ptr<const T>(xs), as_ptr<const T>(y), as_ptr<const T>(loga),
                                        as_ptr<const T>(logb), as_ptr<T>(f), as_ptr<T>(g), as_ptr<T>(eps),
                                        as_ptr<int32_t>(iters), as_ptr<T>(history), as_ptr<T>(workspace), stream);
          });
        });
  m.def("ot_apply_forward", [](int dtype, OtSizes s, OtLoop l, uintptr_t xs, uintptr_t y, uintptr_t f, uintptr_t g,
                               uintptr_t eps, uintptr_t loga, uintptr_t logb, uintptr_t u, uintptr_t v, uintptr_t cols,
                               uintptr_t rows, uintptr_t plan, uintptr_t stream, uintptr_t n_len, uintptr_t m_len) {
    const OtParams p = ot_params(s, l, n_len, m_len);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      ot_apply_forward_cuda<T>(p, as_ptr<const T>(xs), as_ptr<const T>(y), as_ptr<const T>(f), as_ptr<const T>(g),
                               as_ptr<const T>(eps), as_ptr<const T>(loga), as_ptr<const T>(logb), as_ptr<const T>(u),
                               as_ptr<const T>(v), as_ptr<T>(cols), as_ptr<T>(rows), as_ptr<T>(plan), stream);
    });
  });
  // out: gxs, gy, gf, gg, gu, gv, gloga, glogb
  m.def("ot_apply_backward", [](int dtype, OtSizes s, OtLoop l, uintptr_t gcols, uintptr_t grows, uintptr_t gplan,
                                uintptr_t xs, uintptr_t y, uintptr_t f, uintptr_t g, uintptr_t eps, uintptr_t loga,
                                uintptr_t logb, uintptr_t u, uintptr_t v, uintptr_t cols, uintptr_t rows,
                                std::vector<uintptr_t> out, uintptr_t stream, uintptr_t n_len, uintptr_t m_len) {
    RELAXOPS_CHECK(out.size() == 8, "ot_apply_backward: 8 outputs (gxs, gy, gf, gg, gu, gv, gloga, glogb)");
    const OtParams p = ot_params(s, l, n_len, m_len);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      ot_apply_backward_cuda<T>(p, as_ptr<const T>(gcols), as_ptr<const T>(grows), as_ptr<const T>(gplan),
                                as_ptr<const T>(xs), as_ptr<const T>(y), as_ptr<const T>(f), as_ptr<const T>(g),
                                as_ptr<const T>(eps), as_ptr<const T>(loga), as_ptr<const T>(logb), as_ptr<const T>(u),
                                as_ptr<const T>(v), as_ptr<const T>(cols), as_ptr<const T>(rows), as_ptr<T>(out[0]),
                                as_ptr<T>(out[1]), as_ptr<T>(out[2]), as_ptr<T>(out[3]), as_ptr<T>(out[4]),
                                as_ptr<T>(out[5]), as_ptr<T>(out[6]), as_ptr<T>(out[7]), stream);
    });
  });
  // out: gxs, gy, gloga, glogb
  m.def("ot_implicit_backward", [](int dtype, OtSizes s, OtLoop l, uintptr_t gf, uintptr_t gg, uintptr_t xs,
                                   uintptr_t y, uintptr_t f, uintptr_t g, uintptr_t eps, uintptr_t loga, uintptr_t logb,
                                   std::vector<uintptr_t> out, uintptr_t workspace, uintptr_t stream, uintptr_t n_len,
                                   uintptr_t m_len) {
    RELAXOPS_CHECK(out.size() == 4, "ot_implicit_backward: 4 outputs (gxs, gy, gloga, glogb)");
    const OtParams p = ot_params(s, l, n_len, m_len);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      ot_implicit_backward_cuda<T>(p, as_ptr<const T>(gf), as_ptr<const T>(gg), as_ptr<const T>(xs), as_ptr<const T>(y),
                                   as_ptr<const T>(f), as_ptr<const T>(g), as_ptr<const T>(eps), as_ptr<const T>(loga),
                                   as_ptr<const T>(logb), as_ptr<T>(out[0]), as_ptr<T>(out[1]), as_ptr<T>(out[2]),
                                   as_ptr<T>(out[3]), as_ptr<T>(workspace), stream);
    });
  });
  m.def("ot_unrolled_backward", [](int dtype, OtSizes s, OtLoop l, uintptr_t gf, uintptr_t gg, uintptr_t xs,
                                   uintptr_t y, uintptr_t loga, uintptr_t logb, uintptr_t iters, uintptr_t history,
                                   std::vector<uintptr_t> out, uintptr_t workspace, uintptr_t stream, uintptr_t n_len,
                                   uintptr_t m_len) {
    RELAXOPS_CHECK(out.size() == 4, "ot_unrolled_backward: 4 outputs (gxs, gy, gloga, glogb)");
    const OtParams p = ot_params(s, l, n_len, m_len);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      ot_unrolled_backward_cuda<T>(p, as_ptr<const T>(gf), as_ptr<const T>(gg), as_ptr<const T>(xs), as_ptr<const T>(y),
                                   as_ptr<const T>(loga), as_ptr<const T>(logb), as_ptr<const int32_t>(iters),
                                   as_ptr<const T>(history), as_ptr<T>(out[0]), as_ptr<T>(out[1]), as_ptr<T>(out[2]),
                                   as_ptr<T>(out[3]), as_ptr<T>(workspace), stream);
    });
  });
}

}  // namespace relaxops
