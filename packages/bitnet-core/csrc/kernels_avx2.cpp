// AVX2 + FMA + F16C kernels (compiled with those flags, see simd_flags.cmake).
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define BITNET_ISA_NS avx2
#define BITNET_ISA_NAME "avx2"
#include "kernels_isa.inc"

namespace bitnet {
const KernelTable *kernels_avx2() { return &avx2::table; }
}  // namespace bitnet
#else
#include "kernels.h"
namespace bitnet {
const KernelTable *kernels_avx2() { return nullptr; }
}  // namespace bitnet
#endif
