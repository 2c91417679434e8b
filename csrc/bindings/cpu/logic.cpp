// relaxops._C: logic gate networks: gate layers (csrc/logic/logic.h), the convolutional layer (conv.h) and
// packed inference (packed.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <iterator>
#include <vector>

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
  // Gate layers: feature-major [n, B] buffers; coef in the data dtype; grad_xt / grad_coef may be 0 (not computed).
  m.def("logic_forward", [](int dtype, int64_t B, int64_t n_in, int64_t n_out, uintptr_t xt, uintptr_t a, uintptr_t b,
                            uintptr_t coef, uintptr_t yt) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      logic_forward_cpu<T>(B, n_in, n_out, as_ptr<const T>(xt), as_ptr<const int64_t>(a), as_ptr<const int64_t>(b),
                           as_ptr<const T>(coef), as_ptr<T>(yt));
    });
  });
  m.def("logic_coef", [](int dtype, int64_t n_out, uintptr_t w, bool training, uintptr_t coef) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      logic_coef_cpu<T>(n_out, as_ptr<const T>(w), training, as_ptr<T>(coef));
    });
  });
  m.def("logic_coef_backward", [](int dtype, int64_t n_out, uintptr_t w, uintptr_t grad_coef, uintptr_t grad_w) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      logic_coef_backward_cpu<T>(n_out, as_ptr<const T>(w), as_ptr<const T>(grad_coef), as_ptr<T>(grad_w));
    });
  });
  m.def("logic_transpose", [](int dtype, int64_t rows, int64_t cols, uintptr_t src, uintptr_t dst) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      logic_transpose_cpu<T>(rows, cols, as_ptr<const T>(src), as_ptr<T>(dst));
    });
  });
  m.def("logic_backward", [](int dtype, int64_t B, int64_t n_in, int64_t n_out, uintptr_t xt, uintptr_t a, uintptr_t b,
                             uintptr_t coef, uintptr_t grad_yt, uintptr_t csr_start, uintptr_t csr_entry,
                             uintptr_t grad_xt, uintptr_t grad_coef) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      logic_backward_cpu<T>(B, n_in, n_out, as_ptr<const T>(xt), as_ptr<const int64_t>(a), as_ptr<const int64_t>(b),
                            as_ptr<const T>(coef), as_ptr<const T>(grad_yt), as_ptr<const int64_t>(csr_start),
                            as_ptr<const int64_t>(csr_entry), as_ptr<T>(grad_xt), as_ptr<T>(grad_coef));
    });
  });

  // With an output activation and noise (logic.h): act 0/1/2, seed < 0 for none; st = sigmoid(z) for act 2;
  // grad_u = grad_yt sig (1 - sig) from the saved sigmoid, over n elements.
  m.def("logic_forward_act", [](int dtype, int64_t B, int64_t n_in, int64_t n_out, uintptr_t xt, uintptr_t a,
                                uintptr_t b, uintptr_t coef, int act, int64_t seed, double noise_scale, uintptr_t yt,
                                uintptr_t st) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      logic_forward_act_cpu<T>(B, n_in, n_out, as_ptr<const T>(xt), as_ptr<const int64_t>(a), as_ptr<const int64_t>(b),
                               as_ptr<const T>(coef), act, seed, T(noise_scale), as_ptr<T>(yt), as_ptr<T>(st));
    });
  });
  m.def("logic_act_grad", [](int dtype, int64_t n, uintptr_t grad_yt, uintptr_t sig, uintptr_t grad_u) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      logic_act_grad_cpu<T>(n, as_ptr<const T>(grad_yt), as_ptr<const T>(sig), as_ptr<T>(grad_u));
    });
  });

  // Convolutional layer: x [B, C_in, H, W], leaves int64 [C_out, L, 3], coef [C_out, L - 1, 4]; grad_x / grad_coef
  // may be 0 (not computed).
  m.def(
      "logic_conv_forward",
      [](int dtype, ConvShape shape, ConvGeometry geom, uintptr_t x, uintptr_t leaves, uintptr_t coef, uintptr_t y) {
        const auto P = make_conv_params(shape, geom);
        py::gil_scoped_release nogil;
        by_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          logic_conv_forward_cpu<T>(P, as_ptr<const T>(x), as_ptr<const int64_t>(leaves), as_ptr<const T>(coef),
                                    as_ptr<T>(y));
        });
      },
      "shape = (B, C_in, H, W, C_out, L), geometry = (kh, kw, sh, sw, ph, pw)");
  m.def("logic_conv_backward",
        [](int dtype, ConvShape shape, ConvGeometry geom, uintptr_t x, uintptr_t leaves, uintptr_t coef,
           uintptr_t grad_y, uintptr_t csr_start, uintptr_t csr_entry, uintptr_t grad_x, uintptr_t grad_coef) {
          const auto P = make_conv_params(shape, geom);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            logic_conv_backward_cpu<T>(P, as_ptr<const T>(x), as_ptr<const int64_t>(leaves), as_ptr<const T>(coef),
                                       as_ptr<const T>(grad_y), as_ptr<const int64_t>(csr_start),
                                       as_ptr<const int64_t>(csr_entry), as_ptr<T>(grad_x), as_ptr<T>(grad_coef));
          });
        });

  m.def("logic_conv_forward_act", [](int dtype, ConvShape shape, ConvGeometry geom, uintptr_t x, uintptr_t leaves,
                                     uintptr_t coef, int act, int64_t seed, double noise_scale, uintptr_t y) {
    const auto P = make_conv_params(shape, geom);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      logic_conv_forward_act_cpu<T>(P, as_ptr<const T>(x), as_ptr<const int64_t>(leaves), as_ptr<const T>(coef), act,
                                    seed, T(noise_scale), as_ptr<T>(y));
    });
  });
  m.def("logic_conv_backward_act", [](int dtype, ConvShape shape, ConvGeometry geom, uintptr_t x, uintptr_t leaves,
                                      uintptr_t coef, int act, int64_t seed, double noise_scale, uintptr_t grad_y,
                                      uintptr_t csr_start, uintptr_t csr_entry, uintptr_t grad_x, uintptr_t grad_coef) {
    const auto P = make_conv_params(shape, geom);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      logic_conv_backward_act_cpu<T>(P, as_ptr<const T>(x), as_ptr<const int64_t>(leaves), as_ptr<const T>(coef), act,
                                     seed, T(noise_scale), as_ptr<const T>(grad_y), as_ptr<const int64_t>(csr_start),
                                     as_ptr<const int64_t>(csr_entry), as_ptr<T>(grad_x), as_ptr<T>(grad_coef));
    });
  });

  // Packed inference: words uint64 [D, ceil(B / 64)]; simd -1 = best, 0 portable, 1 AVX2, 2 AVX-512;
  // num_threads 0 = torch.get_num_threads().
  m.def("logic_simd_best", &logic_simd_best);
  m.def(
      "logic_packed_fusable_ops", []() { return std::vector<int>(std::begin(kFusableOps), std::end(kFusableOps)); },
      "The gate ids of the fused runs of a packed program (kFusableOps of packed.h).");
  m.def(
      "logic_gate_coef",
      []() {
        py::list rows;
        for (const auto& r : kLogicGateCoef) rows.append(py::make_tuple(r[0], r[1], r[2], r[3]));
        return rows;
      },
      "The 16 x 4 gate coefficient table kLogicGateCoef of logic.h.");
  m.def("logic_pack", [](uintptr_t x, int64_t B, int64_t D, uintptr_t words, int num_threads) {
    py::gil_scoped_release nogil;
    logic_pack_cpu(as_ptr<const uint8_t>(x), B, D, as_ptr<uint64_t>(words), num_threads);
  });
  m.def("logic_unpack", [](uintptr_t words, int64_t B, int64_t D, uintptr_t x, int num_threads) {
    py::gil_scoped_release nogil;
    logic_unpack_cpu(as_ptr<const uint64_t>(words), B, D, as_ptr<uint8_t>(x), num_threads);
  });
  m.def("logic_packed_layers", [](int64_t D0, int64_t slots, int64_t steps, uintptr_t op_start, uintptr_t src_a,
                                  uintptr_t src_b, uintptr_t src_c, uintptr_t dst, uintptr_t op, int64_t DL,
                                  uintptr_t out_slot, uintptr_t out_kind, int64_t B, uintptr_t in, uintptr_t out,
                                  int simd, int num_threads) {
    const auto prog = make_program(D0, slots, steps, op_start, src_a, src_b, src_c, dst, op, DL, out_slot, out_kind);
    py::gil_scoped_release nogil;
    logic_packed_layers_cpu(prog, B, as_ptr<const uint64_t>(in), as_ptr<uint64_t>(out), simd, num_threads);
  });
  m.def("logic_group_count",
        [](uintptr_t words, int64_t B, int64_t D, int64_t k, uintptr_t counts, int simd, int num_threads) {
          py::gil_scoped_release nogil;
          logic_group_count_cpu(as_ptr<const uint64_t>(words), B, D, k, as_ptr<int32_t>(counts), simd, num_threads);
        });
  m.def("logic_packed_forward", [](int64_t D0, int64_t slots, int64_t steps, uintptr_t op_start, uintptr_t src_a,
                                   uintptr_t src_b, uintptr_t src_c, uintptr_t dst, uintptr_t op, int64_t DL,
                                   uintptr_t out_slot, uintptr_t out_kind, int64_t B, uintptr_t in_words,
                                   uintptr_t in_bool, int64_t k, uintptr_t counts, int simd, int num_threads) {
    const auto prog = make_program(D0, slots, steps, op_start, src_a, src_b, src_c, dst, op, DL, out_slot, out_kind);
    py::gil_scoped_release nogil;
    logic_packed_forward_cpu(prog, B, as_ptr<const uint64_t>(in_words), as_ptr<const uint8_t>(in_bool), k,
                             as_ptr<int32_t>(counts), simd, num_threads);
  });

  // Lookup-table layers (lut.h): feature-major [n, B] buffers, idx int64 [k, n_out], table [n_out, 2^k] in the data
  // dtype; seed < 0: no noise; the forward writes st (act 2), the backward takes the saved sigmoid s; grad_xt /
  // grad_table may be 0.
  m.def("logic_lut_forward",
        [](int dtype, int64_t B, int64_t n_in, int64_t n_out, int k, uintptr_t xt, uintptr_t idx, uintptr_t table,
           int act, int64_t seed, double noise_scale, uintptr_t yt, uintptr_t st) {
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            logic_lut_forward_cpu<T>(B, n_in, n_out, k, as_ptr<const T>(xt), as_ptr<const int64_t>(idx),
                                     as_ptr<const T>(table), act, seed, noise_scale, as_ptr<T>(yt), as_ptr<T>(st));
          });
        });
  m.def("logic_lut_backward", [](int dtype, int64_t B, int64_t n_in, int64_t n_out, int k, uintptr_t xt, uintptr_t idx,
                                 uintptr_t table, int act, uintptr_t grad_yt, uintptr_t s, uintptr_t csr_start,
                                 uintptr_t csr_entry, uintptr_t grad_xt, uintptr_t grad_table) {
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      logic_lut_backward_cpu<T>(B, n_in, n_out, k, as_ptr<const T>(xt), as_ptr<const int64_t>(idx),
                                as_ptr<const T>(table), act, as_ptr<const T>(grad_yt), as_ptr<const T>(s),
                                as_ptr<const int64_t>(csr_start), as_ptr<const int64_t>(csr_entry), as_ptr<T>(grad_xt),
                                as_ptr<T>(grad_table));
    });
  });
}

}  // namespace relaxops
