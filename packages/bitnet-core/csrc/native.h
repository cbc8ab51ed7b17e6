// Registration hooks of the parts of bitnet_core._native. Each .cpp in csrc/
// adds its functions to the module through one of these.
#pragma once
#include <pybind11/pybind11.h>

#include <map>
#include <string>

namespace bitnet {
void register_cpu_features(pybind11::module_ &m);
void register_ops(pybind11::module_ &m);
void register_tensors(pybind11::module_ &m);
void register_model(pybind11::module_ &m);
void register_gguf(pybind11::module_ &m);
std::map<std::string, bool> cpu_features();
}  // namespace bitnet
