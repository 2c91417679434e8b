// One bind function per family: bindings/cpu/<family>.cpp for relaxops._C, bindings/cuda/<family>.cpp for
// relaxops._cuda (each module links one set).
#pragma once

#include <pybind11/pybind11.h>

namespace relaxops {

void bind_sortnet(pybind11::module_& m);
void bind_baselines(pybind11::module_& m);
void bind_otsort(pybind11::module_& m);
void bind_fastsort(pybind11::module_& m);
void bind_logic(pybind11::module_& m);
void bind_render(pybind11::module_& m);
void bind_algorithms(pybind11::module_& m);
void bind_training(pybind11::module_& m);

}  // namespace relaxops
