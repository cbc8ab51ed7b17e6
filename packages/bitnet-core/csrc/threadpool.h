// A small persistent thread pool for the CPU kernels.
//
// `parallel_for(n, grain, threads, fn, ctx)` splits [0, n) into chunks of
// `grain` items handed out dynamically (an atomic counter), so a thread that
// the OS descheduled does not hold the others back. The calling thread works
// too. Workers spin briefly after a job (a decode step issues hundreds of
// small kernels back to back, and a futex wake-up per kernel would cost more
// than the kernel), then sleep on a condition variable.
//
// The interface is a plain function pointer + context so that the SIMD
// translation units (compiled with their own -m flags) share no inline
// templates with the rest of the module.
#pragma once
#include <cstdint>
#include <vector>

namespace bitnet {

using RangeFn = void (*)(void *ctx, int64_t begin, int64_t end);

// Runs fn(ctx, b, e) over [0, n) in chunks of `grain` on up to `threads`
// threads (0 = default_threads()). Returns after every chunk ran.
void parallel_for(int64_t n, int64_t grain, int threads, RangeFn fn, void *ctx);

// The CPUs this process may run on (sched_getaffinity), at least 1.
int default_threads();

// Pin the pool's threads: the thread that calls parallel_for to cpus[0], worker
// i to cpus[(i + 1) % size] (workers now and later; a caller on its next job).
// Empty: no pinning from now on (threads already pinned stay where they are).
// Returns false where the OS has no per-thread affinity (not Linux).
bool set_thread_affinity(const std::vector<int> &cpus);

// The CPU list set by set_thread_affinity (empty: not pinned).
std::vector<int> thread_affinity();

}  // namespace bitnet
