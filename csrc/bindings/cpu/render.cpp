// relaxops._C: the GenDR mesh rasterizer (csrc/render/render.h) and its buffers (csrc/render/buffers.h); ip / fp: the
// options of make_render_params; bi, sizes (C, Ct, Tt): those of make_buffer_params.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include "../../render/buffers.h"
#include "../../render/render.h"
#include "../binding_utils.h"
#include "../bindings.h"

namespace py = pybind11;
using std::uintptr_t;

namespace relaxops {

void bind_render(py::module_& m) {
  m.def("render_forward", [](int dtype, const std::vector<int64_t>& ip, const std::vector<double>& fp, double reach,
                             int64_t tile_size, int64_t max_entries, int num_threads, uintptr_t face_vertices,
                             uintptr_t textures, uintptr_t offsets, uintptr_t image, uintptr_t aggr) {
    const auto P = make_render_params(ip, fp);
    check_mesh_offsets(as_ptr<const int64_t>(offsets), P.B, P.N);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      render_forward_cpu<T>(P, reach, tile_size, max_entries, num_threads, as_ptr<const T>(face_vertices),
                            as_ptr<const T>(textures), as_ptr<const int64_t>(offsets), as_ptr<T>(image),
                            as_ptr<T>(aggr));
    });
  });
  m.def("render_backward", [](int dtype, const std::vector<int64_t>& ip, const std::vector<double>& fp, double reach,
                              int64_t tile_size, int64_t max_entries, int num_threads, uintptr_t face_vertices,
                              uintptr_t textures, uintptr_t offsets, uintptr_t image, uintptr_t aggr,
                              uintptr_t grad_image, uintptr_t grad_face_vertices, uintptr_t grad_textures) {
    const auto P = make_render_params(ip, fp);
    check_mesh_offsets(as_ptr<const int64_t>(offsets), P.B, P.N);
    py::gil_scoped_release nogil;
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      render_backward_cpu<T>(P, reach, tile_size, max_entries, num_threads, as_ptr<const T>(face_vertices),
                             as_ptr<const T>(textures), as_ptr<const int64_t>(offsets), as_ptr<const T>(image),
                             as_ptr<const T>(aggr), as_ptr<const T>(grad_image), as_ptr<T>(grad_face_vertices),
                             as_ptr<T>(grad_textures));
    });
  });
  m.def("render_buffers_forward",
        [](int dtype, const std::vector<int64_t>& ip, const std::vector<double>& fp, const std::vector<int64_t>& bi,
           const BufferSizes& sizes, const std::vector<double>& background, double reach, int64_t tile_size,
           int64_t max_entries, int num_threads, uintptr_t face_vertices, uintptr_t attributes, uintptr_t face_uvs,
           uintptr_t texture, uintptr_t offsets, uintptr_t buffers, uintptr_t aggr) {
          const auto P = make_render_params(ip, fp);
          const auto Q = make_buffer_params(bi, sizes, background);
          check_mesh_offsets(as_ptr<const int64_t>(offsets), P.B, P.N);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            buffers_forward_cpu<T>(P, Q, reach, tile_size, max_entries, num_threads, as_ptr<const T>(face_vertices),
                                   as_ptr<const T>(attributes), as_ptr<const T>(face_uvs), as_ptr<const T>(texture),
                                   as_ptr<const int64_t>(offsets), background.data(), as_ptr<T>(buffers),
                                   as_ptr<T>(aggr));
          });
        });
  m.def("render_buffers_backward",
        [](int dtype, const std::vector<int64_t>& ip, const std::vector<double>& fp, const std::vector<int64_t>& bi,
           const BufferSizes& sizes, const std::vector<double>& background, double reach, int64_t tile_size,
           int64_t max_entries, int num_threads, uintptr_t face_vertices, uintptr_t attributes, uintptr_t face_uvs,
           uintptr_t texture, uintptr_t offsets, uintptr_t buffers, uintptr_t aggr, uintptr_t grad_buffers,
           uintptr_t grad_face_vertices, uintptr_t grad_attributes, uintptr_t grad_face_uvs, uintptr_t grad_texture) {
          const auto P = make_render_params(ip, fp);
          const auto Q = make_buffer_params(bi, sizes, background);
          check_mesh_offsets(as_ptr<const int64_t>(offsets), P.B, P.N);
          py::gil_scoped_release nogil;
          by_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            buffers_backward_cpu<T>(P, Q, reach, tile_size, max_entries, num_threads, as_ptr<const T>(face_vertices),
                                    as_ptr<const T>(attributes), as_ptr<const T>(face_uvs), as_ptr<const T>(texture),
                                    as_ptr<const int64_t>(offsets), as_ptr<const T>(buffers), as_ptr<const T>(aggr),
                                    as_ptr<const T>(grad_buffers), as_ptr<T>(grad_face_vertices),
                                    as_ptr<T>(grad_attributes), as_ptr<T>(grad_face_uvs), as_ptr<T>(grad_texture));
          });
        });
  m.def("render_ids", []() {
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
    const char* an[] = {"hard",  "max",          "probabilistic", "einstein",        "hamacher", "frank",
                        "yager", "aczel_alsina", "dombi",         "schweizer_sklar", "average"};
    const int ai[] = {kAlphaHard, kMax,         kProbabilistic, kEinstein,       kHamacher, kFrank,
                      kYager,     kAczelAlsina, kDombi,         kSchweizerSklar, kAverage};
    for (int i = 0; i < kNumTConorms; ++i) alpha[an[i]] = ai[i];
    return py::make_tuple(dist, alpha);
  });
}

}  // namespace relaxops
