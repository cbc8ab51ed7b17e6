// See threadpool.h.
#include "threadpool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BITNET_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define BITNET_PAUSE() __asm__ __volatile__("yield")
#else
#define BITNET_PAUSE() ((void)0)
#endif

namespace bitnet {

int default_threads() {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    unsigned n = std::thread::hardware_concurrency();
    return n ? static_cast<int>(n) : 1;
}

namespace {

// How long a worker spins for the next job before it sleeps: BITNET_CPU_SPIN_US
// (read once), default 200 µs. A decode step's ~120 jobs follow each other
// within microseconds, so spinning wins on a machine of one's own; where the
// cores are shared with other busy processes, a spinning worker burns the time
// slice the thread it waits for needs, and 0 (sleep at once) can be faster.
std::chrono::microseconds spin_time() {
    static const std::chrono::microseconds us = [] {
        const char *env = std::getenv("BITNET_CPU_SPIN_US");
        char *end = nullptr;
        const long v = env && *env ? std::strtol(env, &end, 10) : -1;
        return std::chrono::microseconds(v >= 0 && end && *end == '\0' ? std::min(v, 1000000L) : 200L);
    }();
    return us;
}

// The pinning plan (set_thread_affinity): a generation, bumped by every change,
// and the CPU list. A thread re-pins itself when it sees a newer generation.
std::mutex affinity_mu;
std::vector<int> affinity_cpus;
std::atomic<uint64_t> affinity_gen{0};

// The CPU of slot `slot` in the current plan, or -1 (no plan).
int affinity_cpu(int slot) {
    std::lock_guard<std::mutex> lk(affinity_mu);
    if (affinity_cpus.empty()) return -1;
    return affinity_cpus[static_cast<size_t>(slot) % affinity_cpus.size()];
}

#if defined(__linux__)
void pin(pthread_t thread, int cpu) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(thread, sizeof(set), &set);  // a refusal leaves it where it was
}
#endif

// Pin the calling thread to slot `slot` of the plan if the plan changed since it
// last looked (`seen`, its own copy).
void follow_affinity(int slot, uint64_t &seen) {
    const uint64_t gen = affinity_gen.load(std::memory_order_acquire);
    if (gen == seen) return;
    seen = gen;
#if defined(__linux__)
    pin(pthread_self(), affinity_cpu(slot));
#else
    (void)slot;
#endif
}

thread_local uint64_t caller_affinity_seen = 0;

class Pool {
  public:
    ~Pool() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stop_ = true;
            job_.store(((job_.load() >> 8) + 1) << 8);
        }
        cv_.notify_all();
        for (auto &t : workers_) t.join();
    }

    void run(int64_t n, int64_t grain, int threads, RangeFn fn, void *ctx) {
        std::lock_guard<std::mutex> submit(submit_mu_);  // one job at a time
        ensure_workers(threads - 1);
        const uint64_t gen = (job_.load() >> 8) + 1;
        const uint64_t tag = (gen & 0xffffffffu) << 32;
        // Chunks are claimed from the ticket (generation << 32 | next chunk): a
        // worker that wakes up late sees another generation and claims nothing,
        // so the caller only ever waits for chunks in progress, never for a
        // worker the OS has not scheduled yet. Close the last job's ticket
        // before touching the job's fields: a late worker holding that ticket
        // (all its chunks claimed) could otherwise read the new chunk count,
        // find room, win its compare-exchange on the old ticket, and run a
        // chunk of this job twice (done_ then overshoots and run() never returns).
        ticket_.store(tag | kClosed, std::memory_order_seq_cst);
        fn_ = fn;
        ctx_ = ctx;
        n_ = n;
        grain_ = grain;
        nchunks_.store((n + grain - 1) / grain, std::memory_order_release);
        done_.store(0, std::memory_order_relaxed);
        ticket_.store(tag, std::memory_order_release);
        {
            // the job word: generation in the high bits, worker count in the low byte
            std::lock_guard<std::mutex> lk(mu_);
            job_.store((gen << 8) | static_cast<uint64_t>(threads - 1), std::memory_order_release);
        }
        cv_.notify_all();
        work(gen);
        const int64_t nchunks = nchunks_.load(std::memory_order_relaxed);
        for (int spins = 1; done_.load(std::memory_order_acquire) != nchunks; ++spins) {
            BITNET_PAUSE();
            if (spins % 1024 == 0) std::this_thread::yield();
        }
    }

  private:
    void ensure_workers(int count) {
        while (static_cast<int>(workers_.size()) < count) {
            int idx = static_cast<int>(workers_.size());
            uint64_t seen = job_.load() >> 8;  // read here: the thread may start after the next job
            // pinned here, before its first chunk (a new thread inherits the caller's CPU)
            const uint64_t gen = affinity_gen.load(std::memory_order_acquire);
            workers_.emplace_back([this, idx, seen, gen] { loop(idx, seen, gen); });
#if defined(__linux__)
            if (gen) pin(workers_.back().native_handle(), affinity_cpu(idx + 1));
#endif
        }
    }

    void work(uint64_t gen) {
        const uint64_t tag = (gen & 0xffffffffu) << 32;
        uint64_t t = ticket_.load(std::memory_order_acquire);
        for (;;) {
            if ((t & ~0xffffffffull) != tag) return;  // another job's ticket
            int64_t c = static_cast<int64_t>(t & 0xffffffffu);
            // acquire: a count stored after this ticket was closed makes the CAS below see it closed
            if (c >= nchunks_.load(std::memory_order_acquire)) return;  // all claimed, or closed
            if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel,
                                               std::memory_order_acquire))
                continue;  // t was reloaded
            // the job cannot complete before this chunk is done: its fields are stable
            int64_t b = c * grain_;
            fn_(ctx_, b, std::min(n_, b + grain_));
            done_.fetch_add(1, std::memory_order_acq_rel);
            t = ticket_.load(std::memory_order_acquire);
        }
    }

    void loop(int idx, uint64_t seen, uint64_t affinity_seen) {
        for (;;) {
            follow_affinity(idx + 1, affinity_seen);
            // spin, then sleep, until a new job
            const auto spin = spin_time();
            auto t0 = std::chrono::steady_clock::now();
            int spins = 0;
            uint64_t word;
            while (((word = job_.load(std::memory_order_acquire)) >> 8) == seen) {
                BITNET_PAUSE();
                if (++spins % 1024 == 0) std::this_thread::yield();
                if (spins % 256 == 0 && std::chrono::steady_clock::now() - t0 > spin) {
                    std::unique_lock<std::mutex> lk(mu_);
                    cv_.wait(lk, [&] { return (job_.load() >> 8) != seen; });
                }
            }
            seen = word >> 8;
            if (stop_) return;
            if (idx < static_cast<int>(word & 0xff)) work(seen);
        }
    }

    std::vector<std::thread> workers_;
    std::mutex submit_mu_, mu_;
    std::condition_variable cv_;
    std::atomic<uint64_t> job_{0};
    std::atomic<uint64_t> ticket_{0};
    std::atomic<int64_t> done_{0};
    std::atomic<int64_t> nchunks_{0};
    static constexpr uint64_t kClosed = 0xffffffffu;  // a ticket's chunk field: no chunk to claim
    std::atomic<bool> stop_{false};
    RangeFn fn_ = nullptr;
    void *ctx_ = nullptr;
    int64_t n_ = 0, grain_ = 1;
};

Pool &pool() {
    static Pool *p = new Pool();  // never destroyed: workers may outlive interpreter teardown
    return *p;
}

}  // namespace

bool set_thread_affinity(const std::vector<int> &cpus) {
#if defined(__linux__)
    {
        std::lock_guard<std::mutex> lk(affinity_mu);
        affinity_cpus = cpus;
    }
    affinity_gen.fetch_add(1, std::memory_order_acq_rel);
    return true;
#else
    return cpus.empty();
#endif
}

std::vector<int> thread_affinity() {
    std::lock_guard<std::mutex> lk(affinity_mu);
    return affinity_cpus;
}

void parallel_for(int64_t n, int64_t grain, int threads, RangeFn fn, void *ctx) {
    if (n <= 0) return;
    follow_affinity(0, caller_affinity_seen);  // the caller is slot 0, whatever the thread count
    if (grain < 1) grain = 1;
    if (threads <= 0) threads = default_threads();
    constexpr int64_t kMaxChunks = 0xfffffffe;  // a chunk index fits the ticket's 32 bits
    if ((n + grain - 1) / grain > kMaxChunks) grain = (n + kMaxChunks - 1) / kMaxChunks;
    int64_t chunks = (n + grain - 1) / grain;
    if (threads > chunks) threads = static_cast<int>(chunks);
    if (threads > 255) threads = 255;
    if (threads <= 1) {
        fn(ctx, 0, n);
        return;
    }
    pool().run(n, grain, threads, fn, ctx);
}

}  // namespace bitnet
