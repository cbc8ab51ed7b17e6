// Times an I2_S dot kernel with bitnet.cpp's signature,
//   void ggml_vec_dot_i2_i8_s_Nx1(int n, float *s, size_t bs, const void *vx, size_t bx,
//                                 const void *vy, size_t by, int nrc)
// (one weight row of n ternary codes against nrc int8 activation columns, by
// bytes apart; the raw integer dot of column c goes to s[c * bs]), on R rows x
// K columns x T tokens, rows split evenly over the threads. The kernel comes from
// KERNEL_INC (see bitnetcpp_gemm.py), which defines it, QK_I2_S and PARALLEL_SIZE
// (the tokens it takes at a time).
//
// I2_S layout (bitnet.cpp, x86): a row is K / 128 blocks of 32 bytes; byte j of
// a block holds the codes (0, 1, 2 for -1, 0, 1) of its columns j, 32 + j,
// 64 + j and 96 + j in bits 6-7, 4-5, 2-3 and 0-1.
//
// usage: harness R K T THREADS REPS  ->  one JSON line: best microseconds, G MAC/s,
// and how many of the first 64 rows have a dot that differs from a scalar
// reference (activations in [-15, 15], so the kernel's 16-bit partial sums
// cannot overflow).
#include KERNEL_INC

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

namespace {

int64_t reference_dot(const uint8_t *row, const int8_t *x, int K) {
    int64_t acc = 0;
    for (int b = 0; b < K / 128; ++b)
        for (int j = 0; j < 32; ++j) {
            const uint8_t byte = row[b * 32 + j];
            for (int g = 0; g < 4; ++g) acc += ((byte >> (6 - 2 * g)) & 3) * x[b * 128 + 32 * g + j];
        }
    return acc;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s ROWS COLS TOKENS THREADS REPS\n", argv[0]);
        return 2;
    }
    const int R = std::atoi(argv[1]), K = std::atoi(argv[2]), T = std::atoi(argv[3]);
    const int threads = std::atoi(argv[4]), reps = std::atoi(argv[5]);
    if (R < 1 || K < 128 || K % 128 || T < PARALLEL_SIZE || T % PARALLEL_SIZE || threads < 1 || reps < 1) {
        std::fprintf(stderr, "need ROWS >= 1, COLS a multiple of 128, TOKENS a multiple of %d, THREADS, REPS >= 1\n",
                     PARALLEL_SIZE);
        return 2;
    }
    std::mt19937 rng(7);
    std::vector<uint8_t> w(static_cast<size_t>(R) * K / 4);
    for (auto &b : w) {
        uint8_t v = 0;
        for (int g = 0; g < 4; ++g) v = static_cast<uint8_t>(v << 2 | rng() % 3);
        b = v;
    }
    std::vector<int8_t> x(static_cast<size_t>(T) * K);
    for (auto &v : x) v = static_cast<int8_t>(static_cast<int>(rng() % 31) - 15);
    std::vector<float> s(static_cast<size_t>(R) * T);
    auto run = [&](int t) {
        const int r0 = static_cast<int>(int64_t{R} * t / threads), r1 = static_cast<int>(int64_t{R} * (t + 1) / threads);
        for (int r = r0; r < r1; ++r)
            ggml_vec_dot_i2_i8_s_Nx1(K, s.data() + r, R, w.data() + static_cast<size_t>(r) * K / 4, K, x.data(), K, T);
    };
    // the threads live across the calls, each call between two barriers (as a
    // thread pool runs a matmul): the time is the slowest thread's
    std::barrier start(threads), finish(threads);
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
        pool.emplace_back([&, t] {
            for (int i = 0; i <= reps; ++i) {
                start.arrive_and_wait();
                run(t);
                finish.arrive_and_wait();
            }
        });
    double best = 1e30;
    for (int i = 0; i <= reps; ++i) {  // call 0 warms up
        start.arrive_and_wait();
        const auto t0 = std::chrono::steady_clock::now();
        run(0);
        finish.arrive_and_wait();
        if (i) best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    for (auto &th : pool) th.join();
    int wrong = 0;
    for (int r = 0; r < std::min(R, 64); ++r)
        for (int t = 0; t < T; ++t)
            if (static_cast<int64_t>(s[static_cast<size_t>(t) * R + r]) !=
                reference_dot(w.data() + static_cast<size_t>(r) * K / 4, x.data() + static_cast<size_t>(t) * K, K)) {
                ++wrong;
                break;
            }
    std::printf("{\"us\": %.3f, \"gmacs\": %.3f, \"wrong_rows\": %d}\n", best * 1e6,
                static_cast<double>(R) * K * T / best / 1e9, wrong);
    return 0;
}
