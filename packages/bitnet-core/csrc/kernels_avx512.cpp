// AVX-512 (F, BW, VL, VNNI) kernels (compiled with those flags, see simd_flags.cmake;
// test builds may emulate them with SIMDe on an AVX2 CPU, see kernels_isa.inc).
#if defined(__x86_64__) && ((defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)) || \
                            (defined(BITNET_SIMDE_AVX512) && defined(__AVX2__)))
#define BITNET_ISA_NS avx512
#define BITNET_ISA_NAME "avx512"
#include "kernels_isa.inc"

namespace bitnet {
const KernelTable *kernels_avx512() { return &avx512::table; }
}  // namespace bitnet
#else
#include "kernels.h"
namespace bitnet {
const KernelTable *kernels_avx512() { return nullptr; }
}  // namespace bitnet
#endif
