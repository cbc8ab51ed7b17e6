"""Device arrays and the buffer pool."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from ocl_helpers import acts

from bitnet_core.errors import ShapeError, UnsupportedOperationError
from bitnet_opencl import CLArray
from bitnet_opencl.buffers import SLACK, BufferPool, size_class


def test_to_device_dtypes(ocl):
    cases = [
        (np.arange(6, dtype=np.float64), np.float32),
        (np.arange(6, dtype=np.int64), np.int32),
        (np.ones((2, 3), np.float16), np.float16),
        (np.arange(-3, 3, dtype=np.int8), np.int8),
        (np.array([True, False]), np.uint8),
    ]
    for host, dtype in cases:
        dev = ocl.to_device(host)
        assert isinstance(dev, CLArray) and dev.shape == host.shape and dev.dtype == dtype
        np.testing.assert_array_equal(ocl.to_host(dev), host.astype(dtype))
    with pytest.raises(UnsupportedOperationError):
        ocl.to_device(np.array(["text"]))
    with pytest.raises(UnsupportedOperationError):
        ocl.to_device(np.array([2**40]))


def test_empty_is_zero_and_reshape_is_a_view(ocl):
    z = ocl.empty((3, 4, 5))
    np.testing.assert_array_equal(ocl.to_host(z), np.zeros((3, 4, 5), np.float32))
    assert ocl.to_host(ocl.empty((0, 4))).shape == (0, 4)
    v = ocl.to_device(np.arange(12, dtype=np.float32))
    m = ocl.reshape(v, (3, -1))
    assert m.shape == (3, 4) and m.buffer is v.buffer
    np.testing.assert_array_equal(ocl.to_host(m), np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(ShapeError):
        v.reshape(5, -1)
    with pytest.raises(ShapeError):
        v.reshape(-1, -1)


def test_pool_reuses_buffers(ocl, rng):
    x = ocl.to_device(acts(rng, 4, 100))
    for _ in range(3):  # warm the size classes
        ocl.silu(x)
    gc.collect()
    before = ocl.memory_stats()["allocations"]
    for _ in range(50):
        y = ocl.silu(x)
        del y
    assert ocl.memory_stats()["allocations"] == before
    assert ocl.memory_stats()["reuses"] > 0


def test_size_classes_have_slack():
    for n in (0, 1, 100, 4096, 5000, 10**6, 3 * 10**8):
        c = size_class(n)
        assert c >= n + SLACK
        assert c <= max(256, (n + SLACK) * 1.125 + 256)


def test_a_buffer_finalized_while_the_pool_is_locked_does_not_deadlock(ocl):
    """The collector can run a pooled array's finalizer in the middle of ``acquire``, on the
    thread holding the pool's lock (NVIDIA's OpenCL on an H100 hung so in the conformance
    kit): giving the buffer back must not take that lock again, and the buffer is kept."""
    rt = ocl.runtime
    pool = BufferPool(rt.cl, rt.context)  # its own, so a deadlock stalls nothing else
    held = [pool.acquire(1000)]
    take = pool.take

    def take_while_collecting(key):
        cycle: list = [held.pop()]
        cycle.append(cycle)  # garbage only the collector frees
        del cycle
        gc.collect()  # what any allocation can set off; the block's finalizer runs here
        return take(key)

    pool.take = take_while_collecting
    done = threading.Event()

    def acquire() -> None:
        pool.acquire(1000)  # dropped at once: given back too
        done.set()

    threading.Thread(target=acquire, daemon=True).start()
    assert done.wait(30), "BufferPool.acquire deadlocked on a finalizer giving a buffer back"
    pool.take = take
    pool.collect()
    assert pool.misses == 2 and pool.cached_bytes == 2 * size_class(1000)
    assert pool.acquire(1000) is not None and pool.hits == 1
