// NEON kernels (arm64, where NEON is baseline).
#if defined(__aarch64__) && defined(__ARM_NEON)
#define BITNET_ISA_NS neon
#define BITNET_ISA_NAME "neon"
#include "kernels_impl.inc"

namespace bitnet {
const KernelTable *kernels_neon() { return &neon::table; }
}  // namespace bitnet
#else
#include "kernels.h"
namespace bitnet {
const KernelTable *kernels_neon() { return nullptr; }
}  // namespace bitnet
#endif
