"""Kernel providers that ship inside bitnet-core (the numpy reference; the C++ CPU kernels)."""
