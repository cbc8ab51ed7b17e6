// The native module of bitnet-core: `bitnet_core._native`.
#include "native.h"

PYBIND11_MODULE(_native, m) {
    m.doc() = "bitnet-core native code: CPU feature detection and CPU kernels";
    bitnet::register_cpu_features(m);
    bitnet::register_tensors(m);
    bitnet::register_ops(m);
    bitnet::register_model(m);
    bitnet::register_gguf(m);
}
