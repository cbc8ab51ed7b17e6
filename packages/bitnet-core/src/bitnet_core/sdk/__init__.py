"""The backend SDK: what every device backend builds on, so it writes only its device's part.

A backend package imports ``bitnet_core.hal`` (the protocols), this package and
``bitnet_core.errors``, nothing else of the core (``tools/tests/test_imports.py``).

- Providers: ``provider`` (``DeviceProvider``, ``GpuProvider``), ``checks``,
  ``runtime`` (the device SDK's import, probes), ``trace`` (``LaunchTrace``),
  ``packing`` (weight layouts), ``arrays``, ``elementwise``, ``attention``,
  ``pool`` (free lists), ``host_memory`` (``lazy_zeros``, ``page_zeros``).
- Runners: ``runner`` (``GenericRunner``, the Level-2 engine a fused runner
  subclasses), ``kv_cache`` (``KVCache``, ``Sequence``, ``KVCacheConfig``, the KV
  dtype a provider keeps), ``shared_pages`` (host KV pages a prefix cache maps into
  sequences), ``memory_pool`` (``MemoryPool``), ``weights``
  (``ModelWeights`` on the host, ``DeviceWeights`` on a device), ``fused``
  (a fused step's layers and batched step), ``step_profile``.
"""
