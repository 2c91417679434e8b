// relaxops._cuda: the GenDR mesh rasterizer (csrc/render/render.h) and its buffers (csrc/render/buffers.h); ip / fp:
// the options of make_render_params; bi, sizes (C, Ct, Tt): those of make_buffer_params.
// The kernels take the dtype code (0 or 1) and dispatch in render.cu.
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
                             int64_t tile_size, uintptr_t face_vertices, uintptr_t textures, uintptr_t offsets,
                             uintptr_t image, uintptr_t aggr, uintptr_t stream) {
    check_dtype(dtype, kFloat64);
    const auto P = make_render_params(ip, fp);
    py::gil_scoped_release nogil;
    render_forward_cuda(dtype, P, reach, tile_size, as_ptr<const void>(face_vertices), as_ptr<const void>(textures),
                        as_ptr<const int64_t>(offsets), as_ptr<void>(image), as_ptr<void>(aggr), stream);
  });
  m.def("render_backward",
        [](int dtype, const std::vector<int64_t>& ip, const std::vector<double>& fp, double reach, int64_t tile_size,
           uintptr_t face_vertices, uintptr_t textures, uintptr_t offsets, uintptr_t image, uintptr_t aggr,
           uintptr_t grad_image, uintptr_t grad_face_vertices, uintptr_t grad_textures, uintptr_t stream) {
          check_dtype(dtype, kFloat64);
          const auto P = make_render_params(ip, fp);
          py::gil_scoped_release nogil;
          render_backward_cuda(dtype, P, reach, tile_size, as_ptr<const void>(face_vertices),
                               as_ptr<const void>(textures), as_ptr<const int64_t>(offsets), as_ptr<const void>(image),
                               as_ptr<const void>(aggr), as_ptr<const void>(grad_image),
                               as_ptr<void>(grad_face_vertices), as_ptr<void>(grad_textures), stream);
        });
  m.def("render_buffers_forward",
        [](int dtype, const std::vector<int64_t>& ip, const std::vector<double>& fp, const std::vector<int64_t>& bi,
           const BufferSizes& sizes, const std::vector<double>& background, double reach, int64_t tile_size,
           uintptr_t face_vertices, uintptr_t attributes, uintptr_t face_uvs, uintptr_t texture, uintptr_t offsets,
           uintptr_t buffers, uintptr_t aggr, uintptr_t stream) {
          check_dtype(dtype, kFloat64);
          const auto P = make_render_params(ip, fp);
          const auto Q = make_buffer_params(bi, sizes, background);
          py::gil_scoped_release nogil;
          buffers_forward_cuda(dtype, P, Q, reach, tile_size, as_ptr<const void>(face_vertices),
                               as_ptr<const void>(attributes), as_ptr<const void>(face_uvs),
                               as_ptr<const void>(texture), as_ptr<const int64_t>(offsets), background.data(),
                               as_ptr<void>(buffers), as_ptr<void>(aggr), stream);
        });
  m.def("render_buffers_backward",
        [](int dtype, const std::vector<int64_t>& ip, const std::vector<double>& fp, const std::vector<int64_t>& bi,
           const BufferSizes& sizes, const std::vector<double>& background, double reach, int64_t tile_size,
           uintptr_t face_vertices, uintptr_t attributes, uintptr_t face_uvs, uintptr_t texture, uintptr_t offsets,
           uintptr_t buffers, uintptr_t aggr, uintptr_t grad_buffers, uintptr_t grad_face_vertices,
           uintptr_t grad_attributes, uintptr_t grad_face_uvs, uintptr_t grad_texture, uintptr_t stream) {
          check_dtype(dtype, kFloat64);
          const auto P = make_render_params(ip, fp);
          const auto Q = make_buffer_params(bi, sizes, background);
          py::gil_scoped_release nogil;
          buffers_backward_cuda(dtype, P, Q, reach, tile_size, as_ptr<const void>(face_vertices),
                                as_ptr<const void>(attributes), as_ptr<const void>(face_uvs),
                                as_ptr<const void>(texture), as_ptr<const int64_t>(offsets),
                                as_ptr<const void>(buffers), as_ptr<const void>(aggr), as_ptr<const void>(grad_buffers),
                                as_ptr<void>(grad_face_vertices), as_ptr<void>(grad_attributes),
                                as_ptr<void>(grad_face_uvs), as_ptr<void>(grad_texture), stream);
        });
}

}  // namespace relaxops
