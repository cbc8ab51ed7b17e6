// Portable kernels (no SIMD flags): the cpu-scalar provider.
#define BITNET_ISA_NS scalar
#define BITNET_ISA_NAME "scalar"
#include "kernels_isa.inc"

namespace bitnet {
const KernelTable *kernels_scalar() { return &scalar::table; }
}  // namespace bitnet
