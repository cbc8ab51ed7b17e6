// See threadpool.h.
#include "threadpool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
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

constexpr auto kSpin = std::chrono::microseconds(200);

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
        fn_ = fn;
        ctx_ = ctx;
        n_ = n;
        grain_ = grain;
        next_.store(0);
        pending_.store(threads - 1);
        {
            // the job word: generation in the high bits, worker count in the low byte,
            // so a worker never pairs one job's generation with another's size
            std::lock_guard<std::mutex> lk(mu_);
            uint64_t gen = (job_.load() >> 8) + 1;
            job_.store((gen << 8) | static_cast<uint64_t>(threads - 1), std::memory_order_release);
        }
        cv_.notify_all();
        work();
        // wait for the workers; yield now and then in case a worker is not
        // running (more runnable threads than cores)
        for (int spins = 1; pending_.load(std::memory_order_acquire) != 0; ++spins) {
            BITNET_PAUSE();
            if (spins % 1024 == 0) std::this_thread::yield();
        }
    }

  private:
    void ensure_workers(int count) {
        while (static_cast<int>(workers_.size()) < count) {
            int idx = static_cast<int>(workers_.size());
            uint64_t seen = job_.load() >> 8;  // read here: the thread may start after the next job
            workers_.emplace_back([this, idx, seen] { loop(idx, seen); });
        }
    }

    void work() {
        for (;;) {
            int64_t b = next_.fetch_add(grain_, std::memory_order_relaxed);
            if (b >= n_) break;
            fn_(ctx_, b, std::min(n_, b + grain_));
        }
    }

    void loop(int idx, uint64_t seen) {
        for (;;) {
            // spin, then sleep, until a new job
            auto t0 = std::chrono::steady_clock::now();
            int spins = 0;
            uint64_t word;
            while (((word = job_.load(std::memory_order_acquire)) >> 8) == seen) {
                BITNET_PAUSE();
                if (++spins % 1024 == 0) std::this_thread::yield();
                if (spins % 256 == 0 && std::chrono::steady_clock::now() - t0 > kSpin) {
                    std::unique_lock<std::mutex> lk(mu_);
                    cv_.wait(lk, [&] { return (job_.load() >> 8) != seen; });
                }
            }
            seen = word >> 8;
            if (stop_) return;
            if (idx < static_cast<int>(word & 0xff)) {
                work();
                pending_.fetch_sub(1, std::memory_order_acq_rel);
            }
        }
    }

    std::vector<std::thread> workers_;
    std::mutex submit_mu_, mu_;
    std::condition_variable cv_;
    std::atomic<uint64_t> job_{0};
    std::atomic<int64_t> next_{0};
    std::atomic<int> pending_{0};
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

void parallel_for(int64_t n, int64_t grain, int threads, RangeFn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (threads <= 0) threads = default_threads();
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
