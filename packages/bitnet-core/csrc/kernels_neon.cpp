// NEON kernels (arm64, where NEON is baseline): the ARMv8.0 build, and the
// run-time choice between it and the +dotprod build (kernels_neon_dotprod.cpp).
#if defined(__aarch64__) && defined(__ARM_NEON)
#define BITNET_ISA_NS neon
#define BITNET_ISA_NAME "neon"
#define BITNET_NEON 1
#include "kernels_isa.inc"

#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace bitnet {
bool cpu_has_dotprod() {
#if defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__APPLE__)
    int v = 0;
    size_t n = sizeof(v);
    return sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &n, nullptr, 0) == 0 && v != 0;
#else
    return false;
#endif
}

const KernelTable *kernels_neon() {
    static const KernelTable *chosen =
        cpu_has_dotprod() && kernels_neon_dotprod() ? kernels_neon_dotprod() : &neon::table;
    return chosen;
}
}  // namespace bitnet
#else
#include "kernels.h"
namespace bitnet {
bool cpu_has_dotprod() { return false; }
const KernelTable *kernels_neon() { return nullptr; }
}  // namespace bitnet
#endif
