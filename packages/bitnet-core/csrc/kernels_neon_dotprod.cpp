// NEON kernels with the ARMv8.2 dot product (SDOT), compiled with +dotprod
// (simd_flags.cmake); kernels_neon() picks this table where the CPU has it.
#if defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#define BITNET_ISA_NS neon_dotprod
#define BITNET_ISA_NAME "neon+dotprod"
#define BITNET_NEON 1
#include "kernels_isa.inc"

namespace bitnet {
const KernelTable *kernels_neon_dotprod() { return &neon_dotprod::table; }
}  // namespace bitnet
#else
#include "kernels.h"
namespace bitnet {
const KernelTable *kernels_neon_dotprod() { return nullptr; }
}  // namespace bitnet
#endif
