// A CPU emulator for the CUDA kernels of bitnet_kernels.cu (tests only).
//
// The .cu file is compiled as C++ with this header in front (cupy_emulator.py first
// rewrites each `__shared__ T name[N];` into a reference to the running block's own
// copy: bitnet_emu::block_shared). A block's threads are fibers (ucontext) run by one OS
// thread, switched at every synchronization point: __syncthreads() waits for every live
// thread of the block, a warp shuffle for every live lane of the warp (lanes publish
// their value, wait, read their partner's, wait). A pass in which no thread can move (a
// barrier some thread never reaches) is reported as an error instead of hanging.
//
// What only a GPU used to show, shown here from a seed (bitnet_emu::set_seed, printed
// with every error): up to four blocks of a grid are resident at once, dispatched in a
// random order and interleaved at every barrier; between barriers a block's warps run in
// a random order (some epochs one warp runs ahead until it blocks, so a warp can reach
// the next barrier's writes before another has done its reads), and a warp's lanes
// resume in a random order. So a missing __syncthreads(), a race between blocks or an
// assumption about block order gives wrong results here too. Shared memory starts as
// 0xff bytes (NaN), as garbage does on a GPU.
//
// What this checks: the kernels' indexing, packing, reductions, barriers and launch
// geometry against the numpy reference. What it cannot: GPU timing, the memory model's
// reorderings within a thread (fences are no-ops: one OS thread), the compiler's PTX.
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
#define __restrict__ __restrict

using std::max;
using std::min;

// One OS thread runs every fiber of every resident block and switches only at barriers:
// memory is coherent, so fences are no-ops and an atomic is a plain read-modify-write.
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
constexpr unsigned kResident = 4;  // blocks of a grid running at once

struct Block;

struct Fiber {
    ucontext_t start;  // used once per launch, to enter the fiber's stack
    jmp_buf jb;        // every later switch: no signal-mask system call
    char *stack = nullptr;
    bool started = false;
    unsigned shuffles = 0;  // in this block: shuffle k uses slot buffer k % 2
    dim3 tid;
    unsigned lane = 0, warp = 0;
    Wait wait = Wait::none;
    Block *blk = nullptr;
};

// A resident block: its threads, their shuffle and mma staging, its shared memory.
struct Block {
    dim3 idx;
    bool active = false;
    std::vector<Fiber> fibers;
    std::vector<uint32_t> slots;  // two 32-bit values per thread, for shuffles
    std::vector<uint32_t> mma;    // six per thread: one mma.sync's A and B registers
    std::vector<std::vector<unsigned char>> shared;  // by declaration (block_shared)
    std::vector<unsigned> warp_order;  // this epoch's warp priorities (ahead mode)
    // threads in each state: runnable (wait none) and at a warp barrier by warp, at the
    // block barrier and done in all
    std::vector<unsigned> ready, at_warp, done_in;
    unsigned runnable = 0, at_block = 0, done = 0;
    bool ahead = false;                // this epoch: the first warp able to run, runs
};

// splitmix64: the seeded choices of one launch
struct Rng {
    uint64_t s = 0;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    unsigned below(unsigned n) { return static_cast<unsigned>(next() % n); }
    template <class T>
    void shuffle(std::vector<T> &v) {
        for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(static_cast<unsigned>(i))]);
    }
};

struct Grid {
    dim3 grid, block;
    std::vector<Block> blocks;
    jmp_buf scheduler;
    Fiber *current = nullptr;
    void (*body)(void *) = nullptr;
    void *body_arg = nullptr;
    Rng rng;
};

inline Grid *&grid_state() {
    static Grid *g = nullptr;
    return g;
}

inline uint64_t &seed() {
    static uint64_t s = 1;
    return s;
}
// the seed of the next launch's choices (cupy_emulator.py sets one per launch)
inline void set_seed(uint64_t s) { seed() = s; }

// fiber stacks, kept from launch to launch
inline char *stack_for(unsigned i) {
    static std::vector<std::unique_ptr<char[]>> stacks;
    while (stacks.size() <= i) stacks.emplace_back(new char[kStack]);
    return stacks[i].get();
}

// The running block's copy of the __shared__ variable declared at `site`.
template <class T>
T &block_shared(unsigned site) {
    Block &b = *grid_state()->current->blk;
    if (b.shared.size() <= site) b.shared.resize(site + 1);
    auto &mem = b.shared[site];
    if (mem.empty()) mem.assign(sizeof(T) + 16, 0xff);
    void *p = mem.data();
    std::size_t room = mem.size();
    return *static_cast<T *>(std::align(16, sizeof(T), p, room));
}

// every change of a thread's state goes through here (the block's counts)
inline void set_wait(Fiber &f, Wait w) {
    Block &b = *f.blk;
    auto count = [&](Wait s, int d) {
        switch (s) {
            case Wait::none: b.ready[f.warp] += d, b.runnable += d; break;
            case Wait::warp: b.at_warp[f.warp] += d; break;
            case Wait::block: b.at_block += d; break;
            case Wait::done: b.done_in[f.warp] += d, b.done += d; break;
        }
    };
    count(f.wait, -1);
    count(w, 1);
    f.wait = w;
}

inline void yield(Wait w) {
    Grid &g = *grid_state();
    Fiber *f = g.current;
    set_wait(*f, w);
    if (!_setjmp(f->jb)) _longjmp(g.scheduler, 1);
}

// A fiber runs the kernel body once per block it is given: after each block it waits
// (done) until the scheduler resumes it for the next one, so its context is made once.
inline void fiber_main() {
    Grid &g = *grid_state();
    for (;;) {
        g.body(g.body_arg);
        Fiber *f = g.current;
        set_wait(*f, Wait::done);
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

// a new epoch of block b (its start, or a __syncthreads released): fresh warp priorities
inline void new_epoch(Grid &g, Block &b) {
    b.ahead = g.rng.below(2) == 0;
    g.rng.shuffle(b.warp_order);
}

inline void start_block(Grid &g, Block &b, unsigned linear) {
    b.idx = {linear % g.grid.x, (linear / g.grid.x) % g.grid.y, linear / (g.grid.x * g.grid.y)};
    b.active = true;
    const unsigned n = static_cast<unsigned>(b.fibers.size());
    for (auto &f : b.fibers) f.wait = Wait::none, f.shuffles = 0;
    b.ready.assign(n / 32, 32);
    b.at_warp.assign(n / 32, 0);
    b.done_in.assign(n / 32, 0);
    b.runnable = n, b.at_block = 0, b.done = 0;
    for (auto &m : b.shared) std::fill(m.begin(), m.end(), 0xff);
    new_epoch(g, b);
}

// release the barriers of b that every live participant has reached
inline void release(Grid &g, Block &b) {
    const unsigned n = static_cast<unsigned>(b.fibers.size());
    if (b.at_block && b.at_block + b.done == n) {
        for (auto &f : b.fibers)
            if (f.wait == Wait::block) set_wait(f, Wait::none);
        new_epoch(g, b);
    }
    for (unsigned w = 0; w < n / 32; ++w)
        if (b.at_warp[w] && b.at_warp[w] + b.done_in[w] == 32)
            for (unsigned l = 0; l < 32; ++l)
                if (b.fibers[w * 32 + l].wait == Wait::warp) set_wait(b.fibers[w * 32 + l], Wait::none);
}

inline bool runnable(const Block &b, unsigned w) { return b.ready[w] > 0; }

// one step of block b: one of its warps (chosen by the epoch's mode) resumes each of its
// runnable lanes once, in a random order
inline void step(Grid &g, Block &b) {
    const unsigned warps = static_cast<unsigned>(b.fibers.size() / 32);
    unsigned w = warps;
    if (b.ahead) {
        for (unsigned c : b.warp_order)
            if (runnable(b, c)) {
                w = c;
                break;
            }
    } else {
        unsigned ready[32], count = 0;  // (32 warps at most)
        for (unsigned c = 0; c < warps; ++c)
            if (runnable(b, c)) ready[count++] = c;
        w = ready[g.rng.below(count)];
    }
    unsigned lanes[32], count = 0;
    for (unsigned l = 0; l < 32; ++l)
        if (b.fibers[w * 32 + l].wait == Wait::none) lanes[count++] = l;
    for (unsigned i = count; i > 1; --i) std::swap(lanes[i - 1], lanes[g.rng.below(i)]);
    for (unsigned i = 0; i < count; ++i) resume(g, b.fibers[w * 32 + lanes[i]]);
}

inline std::string seed_note() { return " (emulator seed " + std::to_string(seed()) + ")"; }

// Runs body() as every thread of every block; throws when the threads deadlock.
inline void run_grid(const unsigned *grid, const unsigned *block, void (*body)(void *), void *arg) {
    Grid g;
    g.grid = {grid[0], grid[1], grid[2]};
    g.block = {block[0], block[1], block[2]};
    g.body = body;
    g.body_arg = arg;
    g.rng.s = seed();
    const unsigned n = g.block.x * g.block.y * g.block.z;
    if (n == 0 || n > 1024 || n % 32) throw std::runtime_error("emulator: block size must be 32..1024, a multiple of 32");
    const unsigned long long total = 1ull * g.grid.x * g.grid.y * g.grid.z;
    if (total == 0) throw std::runtime_error("emulator: empty grid");
    std::vector<unsigned> order(total);  // blocks in the order they are dispatched
    for (unsigned i = 0; i < total; ++i) order[i] = i;
    g.rng.shuffle(order);
    const unsigned resident = static_cast<unsigned>(std::min<unsigned long long>(kResident, total));
    g.blocks.resize(resident);
    for (unsigned r = 0; r < resident; ++r) {
        Block &b = g.blocks[r];
        b.fibers.resize(n);
        b.slots.assign(2 * n, 0);
        b.mma.assign(6 * n, 0);
        for (unsigned w = 0; w < n / 32; ++w) b.warp_order.push_back(w);
        for (unsigned i = 0; i < n; ++i) {
            Fiber &f = b.fibers[i];
            f.blk = &b;
            f.stack = stack_for(r * n + i);
            f.tid = {i % g.block.x, (i / g.block.x) % g.block.y, i / (g.block.x * g.block.y)};
            f.lane = i % 32;
            f.warp = i / 32;
            getcontext(&f.start);  // (system calls: once per launch, not per block)
            f.start.uc_stack.ss_sp = f.stack;
            f.start.uc_stack.ss_size = kStack;
            f.start.uc_link = nullptr;
            makecontext(&f.start, fiber_main, 0);
        }
    }
    Grid *saved = grid_state();
    grid_state() = &g;
    std::size_t next = 0;
    for (auto &b : g.blocks) start_block(g, b, order[next++]);
    std::vector<unsigned> ready;
    for (;;) {
        ready.clear();
        bool any_active = false;
        for (unsigned r = 0; r < resident; ++r) {
            Block &b = g.blocks[r];
            if (!b.active) continue;
            any_active = true;
            if (b.runnable) ready.push_back(r);
        }
        if (!any_active) break;
        if (ready.empty()) {  // every live thread waits: at a barrier none can release
            grid_state() = saved;
            throw std::runtime_error("emulator: deadlock (a barrier some live thread never reaches)" + seed_note());
        }
        Block &b = g.blocks[ready[g.rng.below(static_cast<unsigned>(ready.size()))]];
        step(g, b);
        release(g, b);
        if (b.done == n) {
            b.active = false;
            if (next < total) start_block(g, b, order[next++]);
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
    Fiber *f = grid_state()->current;
    Block &b = *f->blk;
    const std::size_t base = (f->shuffles++ % 2) * b.fibers.size() + f->warp * 32;
    std::memcpy(&b.slots[base + f->lane], &v, 4);
    yield(Wait::warp);
    T r;
    std::memcpy(&r, &b.slots[base + ((f->lane ^ static_cast<unsigned>(offset)) & 31u)], 4);
    return r;
}

// mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32, d += a * b, warp-collective: every lane
// stages its A (4) and B (2) registers, the warp meets, and each lane computes its four D
// elements from the registers of the lanes that hold them (PTX ISA fragment layouts:
// A (row r, k) in lane (r % 8) * 4 + (k % 16) / 4, register (r >= 8) + 2 (k >= 16), byte k % 4;
// B (k, col n) in lane n * 4 + (k % 16) / 4, register k >= 16, byte k % 4;
// D register i of lane l: row l / 4 + 8 (i >= 2), col 2 (l % 4) + i % 2).
inline void mma_m16n8k32_u8s8(int (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    Fiber *f = grid_state()->current;
    uint32_t *warp = &f->blk->mma[f->warp * 32 * 6];
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
#define blockIdx (bitnet_emu::grid_state()->current->blk->idx)
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
