// relaxops._cuda: logic gate networks: gate layers (csrc/logic/logic.h), the convolutional layer (conv.h) and
// packed inference (packed.h). The layer kernels take the dtype code (0..3: float32, float64, float16, bfloat16)
// and dispatch in logic.cu / conv.cu, where the half types exist.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../../logic/conv.h"
#include "../../logic/logic.h"
#include "../../logic/lut.h"
#include "../../logic/packed.h"
#include "../binding_utils.h"
#include "../bindings.h"

namespace py = pybind11;
using std::uintptr_t;

namespace relaxops {

void bind_logic(py::module_& m) {
  // Gate layers: feature-major [n, B] device buffers; coef / grad_coef float32 (float64 for dtype 1); grad_xt /
  // grad_coef may be 0.
  m.def("logic_forward", [](int dtype, int64_t B, int64_t n_in, int64_t n_out, uintptr_t xt, uintptr_t a, uintptr_t b,
                            uintptr_t coef, uintptr_t yt, uintptr_t stream) {
    check_dtype(dtype, kBFloat16);
    py::gil_scoped_release nogil;
    logic_forward_cuda(dtype, B, n_in, n_out, as_ptr<const void>(xt), as_ptr<const int64_t>(a),
                       as_ptr<const int64_t>(b), as_ptr<const void>(coef), as_ptr<void>(yt), stream);
  });
  m.def("logic_backward", [](int dtype, int64_t B, int64_t n_in, int64_t n_out, uintptr_t xt, uintptr_t a, uintptr_t b,
                             uintptr_t coef, uintptr_t grad_yt, uintptr_t csr_start, uintptr_t csr_entry,
                             uintptr_t grad_xt, uintptr_t grad_coef, uintptr_t stream) {
    check_dtype(dtype, kBFloat16);
    py::gil_scoped_release nogil;
    logic_backward_cuda(dtype, B, n_in, n_out, as_ptr<const void>(xt), as_ptr<const int64_t>(a),
                        as_ptr<const int64_t>(b), as_ptr<const void>(coef), as_ptr<const void>(grad_yt),
                        as_ptr<const int64_t>(csr_start), as_ptr<const int64_t>(csr_entry), as_ptr<void>(grad_xt),
                        as_ptr<void>(grad_coef), stream);
  });

  // With an output activation and noise (logic.h): act 0/1/2, seed < 0 for none; st = sigmoid(z) for act 2;
  // grad_u = grad_yt sig (1 - sig) from the saved sigmoid, over n elements.
  m.def("logic_forward_act",
        [](int dtype, int64_t B, int64_t n_in, int64_t n_out, uintptr_t xt, uintptr_t a, uintptr_t b, uintptr_t coef,
           int act, int64_t seed, double noise_scale, uintptr_t yt, uintptr_t st, uintptr_t stream) {
          check_dtype(dtype, kBFloat16);
          py::gil_scoped_release nogil;
          logic_forward_act_cuda(dtype, B, n_in, n_out, as_ptr<const void>(xt), as_ptr<const int64_t>(a),
                                 as_ptr<const int64_t>(b), as_ptr<const void>(coef), act, seed, noise_scale,
                                 as_ptr<void>(yt), as_ptr<void>(st), stream);
        });
  m.def("logic_act_grad", [](int dtype, int64_t n, uintptr_t grad_yt, uintptr_t sig, uintptr_t grad_u,
                             uintptr_t stream) {
    check_dtype(dtype, kBFloat16);
    py::gil_scoped_release nogil;
    logic_act_grad_cuda(dtype, n, as_ptr<const void>(grad_yt), as_ptr<const void>(sig), as_ptr<void>(grad_u), stream);
  });

  // Convolutional layer: x [B, C_in, H, W], leaves int64 [C_out, L, 3], coef [C_out, L - 1, 4] device buffers;
  // grad_x / grad_coef may be 0; the backward takes a device workspace of logic_conv_backward_workspace(...) bytes.
  m.def(
      "logic_conv_backward_workspace",
      [](int dtype, ConvShape shape, ConvGeometry geom, bool need_x, bool need_w) {
        return logic_conv_backward_cuda_workspace(dtype, make_conv_params(shape, geom), need_x, need_w);
      },
      "bytes of device workspace logic_conv_backward needs (may be 0).");
  m.def("logic_conv_forward", [](int dtype, ConvShape shape, ConvGeometry geom, uintptr_t x, uintptr_t leaves,
                                 uintptr_t coef, uintptr_t y, uintptr_t stream) {
    check_dtype(dtype, kBFloat16);
    const auto P = make_conv_params(shape, geom);
    py::gil_scoped_release nogil;
    logic_conv_forward_cuda(dtype, P, as_ptr<const void>(x), as_ptr<const int64_t>(leaves), as_ptr<const void>(coef),
                            as_ptr<void>(y), stream);
  });
  m.def("logic_conv_backward", [](int dtype, ConvShape shape, ConvGeometry geom, uintptr_t x, uintptr_t leaves,
                                  uintptr_t coef, uintptr_t grad_y, uintptr_t csr_start, uintptr_t csr_entry,
                                  uintptr_t grad_x, uintptr_t grad_coef, uintptr_t workspace, uintptr_t stream) {
    check_dtype(dtype, kBFloat16);
    const auto P = make_conv_params(shape, geom);
    py::gil_scoped_release nogil;
    logic_conv_backward_cuda(dtype, P, as_ptr<const void>(x), as_ptr<const int64_t>(leaves), as_ptr<const void>(coef),
                             as_ptr<const void>(grad_y), as_ptr<const int64_t>(csr_start),
                             as_ptr<const int64_t>(csr_entry), as_ptr<void>(grad_x), as_ptr<void>(grad_coef),
                             as_ptr<void>(workspace), stream);
  });

  m.def("logic_conv_forward_act",
        [](int dtype, ConvShape shape, ConvGeometry geom, uintptr_t x, uintptr_t leaves, uintptr_t coef, int act,
           int64_t seed, double noise_scale, uintptr_t y, uintptr_t stream) {
          check_dtype(dtype, kBFloat16);
          const auto P = make_conv_params(shape, geom);
          py::gil_scoped_release nogil;
          logic_conv_forward_act_cuda(dtype, P, as_ptr<const void>(x), as_ptr<const int64_t>(leaves),
                                      as_ptr<const void>(coef), act, seed, noise_scale, as_ptr<void>(y), stream);
        });
  m.def("logic_conv_backward_act",
        [](int dtype, ConvShape shape, ConvGeometry geom, uintptr_t x, uintptr_t leaves, uintptr_t coef, int act,
           int64_t seed, double noise_scale, uintptr_t grad_y, uintptr_t csr_start, uintptr_t csr_entry,
           uintptr_t grad_x, uintptr_t grad_coef, uintptr_t workspace, uintptr_t stream) {
          check_dtype(dtype, kBFloat16);
          const auto P = make_conv_params(shape, geom);
          py::gil_scoped_release nogil;
          logic_conv_backward_act_cuda(dtype, P, as_ptr<const void>(x), as_ptr<const int64_t>(leaves),
                                       as_ptr<const void>(coef), act, seed, noise_scale, as_ptr<const void>(grad_y),
                                       as_ptr<const int64_t>(csr_start), as_ptr<const int64_t>(csr_entry),
                                       as_ptr<void>(grad_x), as_ptr<void>(grad_coef), as_ptr<void>(workspace), stream);
        });

  // Packed inference: device words uint64 [D, ceil(B / 64)]; the plan's widths and op_start are host arrays,
  // src_a / src_b / dst / op device arrays.
  m.def("logic_pack", [](uintptr_t x, int64_t B, int64_t D, uintptr_t words, uintptr_t stream) {
    py::gil_scoped_release nogil;
    logic_pack_cuda(as_ptr<const uint8_t>(x), B, D, as_ptr<uint64_t>(words), stream);
  });
  m.def("logic_unpack", [](uintptr_t words, int64_t B, int64_t D, uintptr_t x, uintptr_t stream) {
    py::gil_scoped_release nogil;
    logic_unpack_cuda(as_ptr<const uint64_t>(words), B, D, as_ptr<uint8_t>(x), stream);
  });
  m.def(
      "logic_packed_layers_workspace",
      [](int64_t L, uintptr_t widths, uintptr_t op_start, int64_t B) {
        return logic_packed_layers_cuda_workspace(make_plan(L, widths, op_start, 0, 0, 0, 0), B);
      },
      "uint64 words of device workspace logic_packed_layers needs (may be 0).");
  m.def("logic_packed_layers",
        [](int64_t L, uintptr_t widths, uintptr_t op_start, uintptr_t src_a, uintptr_t src_b, uintptr_t dst,
           uintptr_t op, int64_t B, uintptr_t in, uintptr_t out, uintptr_t workspace, uintptr_t stream) {
          const auto plan = make_plan(L, widths, op_start, src_a, src_b, dst, op);
          py::gil_scoped_release nogil;
          logic_packed_layers_cuda(plan, B, as_ptr<const uint64_t>(in), as_ptr<uint64_t>(out),
                                   as_ptr<uint64_t>(workspace), stream);
        });
  m.def("logic_group_count", [](uintptr_t words, int64_t B, int64_t D, int64_t k, uintptr_t counts, uintptr_t stream) {
    py::gil_scoped_release nogil;
    logic_group_count_cuda(as_ptr<const uint64_t>(words), B, D, k, as_ptr<int32_t>(counts), stream);
  });

  // Lookup-table layers (lut.h): feature-major [n, B] device buffers, idx int64 [k, n_out], table [n_out, 2^k] in
  // the data dtype (0 float32, 1 float64); seed < 0: no noise; grad_xt / grad_table may be 0.
  m.def("logic_lut_forward",
        [](int dtype, int64_t B, int64_t n_in, int64_t n_out, int k, uintptr_t xt, uintptr_t idx, uintptr_t table,
           int act, int64_t seed, double noise_scale, uintptr_t yt, uintptr_t st, uintptr_t stream) {
          check_dtype(dtype, kFloat64);
          py::gil_scoped_release nogil;
          logic_lut_forward_cuda(dtype, B, n_in, n_out, k, as_ptr<const void>(xt), as_ptr<const int64_t>(idx),
                                 as_ptr<const void>(table), act, seed, noise_scale, as_ptr<void>(yt), as_ptr<void>(st),
                                 stream);
        });
  m.def("logic_lut_backward", [](int dtype, int64_t B, int64_t n_in, int64_t n_out, int k, uintptr_t xt, uintptr_t idx,
                                 uintptr_t table, int act, uintptr_t grad_yt, uintptr_t s, uintptr_t csr_start,
                                 uintptr_t csr_entry, uintptr_t grad_xt, uintptr_t grad_table, uintptr_t stream) {
    check_dtype(dtype, kFloat64);
    py::gil_scoped_release nogil;
    logic_lut_backward_cuda(dtype, B, n_in, n_out, k, as_ptr<const void>(xt), as_ptr<const int64_t>(idx),
                            as_ptr<const void>(table), act, as_ptr<const void>(grad_yt), as_ptr<const void>(s),
                            as_ptr<const int64_t>(csr_start), as_ptr<const int64_t>(csr_entry), as_ptr<void>(grad_xt),
                            as_ptr<void>(grad_table), stream);
  });
}

}  // namespace relaxops
