// CPU feature detection, read at run time so one wheel picks the best kernels
// on every machine. x86: cpuid + the OS's saved-state check (via GCC/Clang's
// __builtin_cpu_supports, which consults xgetbv); arm64: NEON is baseline,
// SDOT from HWCAP (kernels_neon.cpp).
#include <pybind11/stl.h>

#include <map>
#include <string>

#include "kernels.h"
#include "native.h"

namespace py = pybind11;

namespace bitnet {

std::map<std::string, bool> cpu_features() {
    std::map<std::string, bool> f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f["sse4_2"] = __builtin_cpu_supports("sse4.2");
    f["avx"] = __builtin_cpu_supports("avx");
    f["avx2"] = __builtin_cpu_supports("avx2");
    f["fma"] = __builtin_cpu_supports("fma");
    f["f16c"] = __builtin_cpu_supports("f16c");
    f["avx512f"] = __builtin_cpu_supports("avx512f");
    f["avx512bw"] = __builtin_cpu_supports("avx512bw");
    f["avx512vl"] = __builtin_cpu_supports("avx512vl");
    f["avx512vnni"] = __builtin_cpu_supports("avx512vnni");
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
    f["avxvnni"] = __builtin_cpu_supports("avxvnni");
#else
    f["avxvnni"] = false;
#endif
    f["neon"] = false;
#elif defined(__aarch64__)
    f["neon"] = true;
    f["dotprod"] = cpu_has_dotprod();  // SDOT: picks the +dotprod NEON table
#endif
    return f;
}

std::string architecture() {
#if defined(__x86_64__)
    return "x86_64";
#elif defined(__aarch64__)
    return "aarch64";
#else
    return "other";
#endif
}

void register_cpu_features(py::module_ &m) {
    m.def("cpu_features", &cpu_features,
          "Map of CPU feature name -> supported (checked at run time, OS support included).");
    m.def("architecture", &architecture, "The CPU architecture this module was compiled for.");
}

}  // namespace bitnet
