# Per-file SIMD flags: each kernels_<isa>.cpp is compiled for its instruction
# set only; which table runs is decided at run time from cpu_features().
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64" AND NOT MSVC)
  set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/csrc/kernels_avx2.cpp
    PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/csrc/kernels_avx512.cpp
    PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mavx2;-mfma;-mf16c")
endif()
if(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64|ARM64" AND NOT MSVC)
  # the SDOT build; kernels_neon.cpp stays ARMv8.0 and picks at run time
  set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/csrc/kernels_neon_dotprod.cpp
    PROPERTIES COMPILE_OPTIONS "-march=armv8.2-a+dotprod")
endif()
