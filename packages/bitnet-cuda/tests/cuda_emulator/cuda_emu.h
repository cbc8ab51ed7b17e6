// A CPU emulator for the CUDA kernels of bitnet_kernels.cu (tests only).
//
// The .cu file is compiled as C++ with this header in front. Each launch runs
// the grid block after block; a block's threads are fibers (ucontext) run by
// one OS thread, switched at every synchronization point: __syncthreads()
// waits for every live thread of the block, a warp shuffle for every live lane
// of the warp (lanes publish their value, wait, read their partner's, wait).
// A pass in which no thread can move (a barrier some thread never reaches) is
// reported as an error instead of hanging. __shared__ variables are statics:
// blocks run one at a time, so a block owns them while it runs.
//
// What this checks: the kernels' indexing, packing, reductions and launch
// geometry against the numpy reference. What it cannot: GPU timing, memory
// ordering between concurrently running blocks, the compiler's PTX.
#pragma once
#define BITNET_CUDA_EMULATOR 1  // the kernels' hook for what has no C++ spelling (inline PTX)
// fibers switch with _setjmp/_longjmp between stacks, which fortified longjmp rejects
#undef _FORTIFY_SOURCE
#include <setjmp.h>
#include <ucontext.h>

#include <memory>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __shared__ static
#define __restrict__ __restrict

using std::max;
using std::min;

// Blocks run one at a time (and a block's threads are fibers of one OS thread): memory
// is coherent, so fences are no-ops and an atomic is a plain read-modify-write.
inline void __threadfence() {}
inline int atomicAdd(int *p, int v) {
    const int old = *p;
    *p = old + v;
    return old;
}
template <typename T>
inline T __ldcg(const T *p) {
    return *p;
}

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct uint4 {
    uint32_t x, y, z, w;
};
struct int4 {
    int32_t x, y, z, w;
};
struct float2 {
    float x, y;
};
struct float4 {
    float x, y, z, w;
};
struct __half {
    uint16_t x;
};
struct __half2 {
    uint16_t x, y;
};

namespace bitnet_emu {

enum class Wait { none, block, warp, done };

constexpr std::size_t kStack = 64 * 1024;

struct Fiber {
    ucontext_t start;  // used once per launch, to enter the fiber's stack
    jmp_buf jb;        // every later switch: no signal-mask system call
    char *stack = nullptr;
    bool started = false;
    unsigned shuffles = 0;  // in this block: shuffle k uses slot buffer k % 2
    dim3 tid;
    unsigned lane = 0, warp = 0;
    Wait wait = Wait::none;
};

struct Grid {
    dim3 grid, block, block_idx;
    std::vector<Fiber> fibers;
    std::vector<uint32_t> slots;  // two 32-bit values per thread, for shuffles
    std::vector<uint32_t> mma;    // six per thread: one mma.sync's A and B registers
    jmp_buf scheduler;
    Fiber *current = nullptr;
    void (*body)(void *) = nullptr;
    void *body_arg = nullptr;
};

inline Grid *&grid_state() {
    static Grid *g = nullptr;
    return g;
}

// fiber stacks, kept from launch to launch (1024 threads at most)
inline char *stack_for(unsigned i) {
    static std::vector<std::unique_ptr<char[]>> stacks;
    while (stacks.size() <= i) stacks.emplace_back(new char[kStack]);
    return stacks[i].get();
}

inline void yield(Wait w) {
    Grid &g = *grid_state();
    Fiber *f = g.current;
    f->wait = w;
    if (!_setjmp(f->jb)) _longjmp(g.scheduler, 1);
}

// A fiber runs the kernel body once per block of its launch: after each block it waits
// (done) until the scheduler resumes it for the next one, so its context is made once.
inline void fiber_main() {
    Grid &g = *grid_state();
    for (;;) {
        g.body(g.body_arg);
        Fiber *f = g.current;
        f->wait = Wait::done;
        if (!_setjmp(f->jb)) _longjmp(g.scheduler, 1);
    }
}

// run fiber f until it yields or ends
inline void resume(Grid &g, Fiber &f) {
    g.current = &f;
    if (_setjmp(g.scheduler)) return;
    if (f.started) _longjmp(f.jb, 1);
    f.started = true;
    ucontext_t here;
    swapcontext(&here, &f.start);  // never resumed: the fiber comes back by _longjmp
}

// Runs body() as every thread of every block; throws when the threads deadlock.
inline void run_grid(const unsigned *grid, const unsigned *block, void (*body)(void *), void *arg) {
    Grid g;
    g.grid = {grid[0], grid[1], grid[2]};
    g.block = {block[0], block[1], block[2]};
    g.body = body;
    g.body_arg = arg;
    const unsigned n = g.block.x * g.block.y * g.block.z;
    if (n == 0 || n > 1024 || n % 32) throw std::runtime_error("emulator: block size must be 32..1024, a multiple of 32");
    g.fibers.resize(n);
    g.slots.assign(2 * n, 0);
    g.mma.assign(6 * n, 0);
    for (unsigned i = 0; i < n; ++i) {
        Fiber &f = g.fibers[i];
        f.stack = stack_for(i);
        f.tid = {i % g.block.x, (i / g.block.x) % g.block.y, i / (g.block.x * g.block.y)};
        f.lane = i % 32;
        f.warp = i / 32;
        getcontext(&f.start);  // (system calls: once per launch, not per block)
        f.start.uc_stack.ss_sp = f.stack;
        f.start.uc_stack.ss_size = kStack;
        f.start.uc_link = nullptr;
        makecontext(&f.start, fiber_main, 0);
    }
    Grid *saved = grid_state();
    grid_state() = &g;
    for (unsigned bz = 0; bz < g.grid.z; ++bz)
        for (unsigned by = 0; by < g.grid.y; ++by)
            for (unsigned bx = 0; bx < g.grid.x; ++bx) {
                g.block_idx = {bx, by, bz};
                for (auto &f : g.fibers) f.wait = Wait::none, f.shuffles = 0;
                for (;;) {
                    bool moved = false, all_done = true;
                    for (auto &f : g.fibers) {
                        if (f.wait != Wait::none) continue;
                        resume(g, f);
                        moved = true;
                    }
                    // release the barriers every live participant has reached
                    bool block_ready = true;
                    for (auto &f : g.fibers) {
                        if (f.wait != Wait::done) all_done = false;
                        if (f.wait != Wait::done && f.wait != Wait::block) block_ready = false;
                    }
                    if (all_done) break;
                    bool released = false;
                    if (block_ready) {
                        for (auto &f : g.fibers)
                            if (f.wait == Wait::block) f.wait = Wait::none, released = true;
                    }
                    for (unsigned w = 0; w < n / 32; ++w) {
                        bool ready = true, any = false;
                        for (unsigned l = 0; l < 32; ++l) {
                            Wait s = g.fibers[w * 32 + l].wait;
                            if (s == Wait::warp) any = true;
                            else if (s != Wait::done) ready = false;
                        }
                        if (ready && any)
                            for (unsigned l = 0; l < 32; ++l)
                                if (g.fibers[w * 32 + l].wait == Wait::warp)
                                    g.fibers[w * 32 + l].wait = Wait::none, released = true;
                    }
                    if (!moved && !released) {
                        grid_state() = saved;
                        throw std::runtime_error("emulator: deadlock (a barrier some live thread never reaches)");
                    }
                }
            }
    grid_state() = saved;
}

// One warp barrier per shuffle: lanes write their value, wait for the whole warp, read
// their partner's. Consecutive shuffles alternate between two slot buffers, so a lane
// can only overwrite a buffer after the next shuffle's barrier, when every lane of the
// warp has read it.
template <class T>
T shfl_xor(T v, int offset) {
    static_assert(sizeof(T) == 4, "32-bit shuffles only");
    Grid &g = *grid_state();
    Fiber *f = g.current;
    const std::size_t base = (f->shuffles++ % 2) * g.fibers.size() + f->warp * 32;
    std::memcpy(&g.slots[base + f->lane], &v, 4);
    yield(Wait::warp);
    T r;
    std::memcpy(&r, &g.slots[base + ((f->lane ^ static_cast<unsigned>(offset)) & 31u)], 4);
    return r;
}

// mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32, d += a * b, warp-collective: every lane
// stages its A (4) and B (2) registers, the warp meets, and each lane computes its four D
// elements from the registers of the lanes that hold them (PTX ISA fragment layouts:
// A (row r, k) in lane (r % 8) * 4 + (k % 16) / 4, register (r >= 8) + 2 (k >= 16), byte k % 4;
// B (k, col n) in lane n * 4 + (k % 16) / 4, register k >= 16, byte k % 4;
// D register i of lane l: row l / 4 + 8 (i >= 2), col 2 (l % 4) + i % 2).
inline void mma_m16n8k32_u8s8(int (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    Grid &g = *grid_state();
    Fiber *f = g.current;
    uint32_t *warp = &g.mma[f->warp * 32 * 6];
    std::copy(a, a + 4, warp + f->lane * 6);
    std::copy(b, b + 2, warp + f->lane * 6 + 4);
    yield(Wait::warp);
    auto a_at = [&](int r, int k) {
        const uint32_t reg = warp[((r % 8) * 4 + (k % 16) / 4) * 6 + (r >= 8) + 2 * (k >= 16)];
        return static_cast<int>(static_cast<uint8_t>(reg >> (8 * (k % 4))));
    };
    auto b_at = [&](int k, int n) {
        const uint32_t reg = warp[(n * 4 + (k % 16) / 4) * 6 + 4 + (k >= 16)];
        return static_cast<int>(static_cast<int8_t>(reg >> (8 * (k % 4))));
    };
    for (int i = 0; i < 4; ++i) {
        const int row = static_cast<int>(f->lane / 4) + (i >= 2 ? 8 : 0);
        const int col = static_cast<int>(f->lane % 4) * 2 + (i & 1);
        int sum = 0;
        for (int k = 0; k < 32; ++k) sum += a_at(row, k) * b_at(k, col);
        d[i] += sum;
    }
    yield(Wait::warp);  // no lane restages before every lane has read
}

template <class... A, std::size_t... I>
void call(void (*k)(A...), void **args, std::index_sequence<I...>) {
    k(*static_cast<std::remove_cv_t<std::remove_reference_t<A>> *>(args[I])...);
}

template <class... A>
void launch(void (*k)(A...), const unsigned *grid, const unsigned *block, void **args) {
    struct Call {
        void (*k)(A...);
        void **args;
    } c{k, args};
    run_grid(
        grid, block,
        [](void *p) {
            auto *c = static_cast<Call *>(p);
            call(c->k, c->args, std::index_sequence_for<A...>{});
        },
        &c);
}

inline float half_to_float(uint16_t h) {
    const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else {  // subnormal: normalize
            int e = -1;
            uint32_t m = man;
            do {
                ++e;
                m <<= 1;
            } while (!(m & 0x400));
            bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ff) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

}  // namespace bitnet_emu

#define threadIdx (bitnet_emu::grid_state()->current->tid)
#define blockIdx (bitnet_emu::grid_state()->block_idx)
#define blockDim (bitnet_emu::grid_state()->block)
#define gridDim (bitnet_emu::grid_state()->grid)

inline void __syncthreads() { bitnet_emu::yield(bitnet_emu::Wait::block); }
inline float __shfl_xor_sync(unsigned, float v, int o) { return bitnet_emu::shfl_xor(v, o); }
inline int __shfl_xor_sync(unsigned, int v, int o) { return bitnet_emu::shfl_xor(v, o); }
template <class T>
inline T __ldg(const T *p) {
    return *p;
}
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; ++i)
        c += static_cast<int>(static_cast<int8_t>(a >> (8 * i))) * static_cast<int>(static_cast<int8_t>(b >> (8 * i)));
    return c;
}
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }  // one rounding
inline float2 __half22float2(__half2 h) { return {bitnet_emu::half_to_float(h.x), bitnet_emu::half_to_float(h.y)}; }
inline float __half2float(__half h) { return bitnet_emu::half_to_float(h.x); }
inline __half __ushort_as_half(unsigned short b) { return __half{b}; }
inline float __uint_as_float(unsigned b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
inline __half __float2half_rn(float v) {  // round to nearest even, as the GPU and numpy
    const _Float16 h = static_cast<_Float16>(v);
    __half r;
    std::memcpy(&r.x, &h, 2);
    return r;
}
