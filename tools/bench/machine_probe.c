/* The machine's ceilings, measured without our kernels: built on the fly by
 * tools/bench/machine_probe.py (cc -O2 -pthread), one JSON line on stdout.
 *
 *   machine_probe read MIB THREADS REPS   read bandwidth: THREADS threads stream
 *       a MIB MiB buffer in 1 MiB chunks (256-bit loads where the CPU has AVX2),
 *       REPS times (at most 63) after a warm-up pass; GB/s of every rep
 *   machine_probe int8 THREADS MS [LOOP]  int8 multiply-accumulate peak: each
 *       thread runs independent chains of an int8 dot product for about MS
 *       milliseconds; G MAC/s (one MAC = one u8 x s8 product added)
 *   machine_probe fma THREADS MS  float32 peak the same way, on 256-bit
 *       `vfmadd231ps` (what the AVX2 attention and float kernels use); GFLOP/s
 *       (an FMA is two)
 *
 * LOOP auto (the default) is the instruction our prefill GEMM uses on this CPU:
 * AVX-512 VNNI `vpdpbusd` (64 MACs, `avx512-vnni`), else AVX-VNNI `vpdpbusd` on
 * 256 bits (32, `avx-vnni`), else AVX2 `pmaddubsw` + `paddw` (32 MACs into i16
 * pairs, as the AVX2 GEMM accumulates: `pmaddubsw`). Naming a loop measures
 * that one (the AVX2 table's ceiling on an AVX-512 CPU); one the CPU lacks gives
 * an "error" line. Threads are not pinned; the caller may pin the process.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ barrier */
static pthread_barrier_t start_line, finish_line;

/* ------------------------------------------------------------------ read */
/* The buffer is read in 1 MiB chunks claimed from an atomic counter (as our
 * thread pool hands out rows), so a thread the OS deschedules on a shared
 * machine does not leave its slice for the others to wait on. */
#define READ_CHUNK ((size_t)1 << 20)

struct ReadArg {
    const uint8_t *p;
    size_t n;
    int reps, avx2;
    uint64_t sum;
};
static _Atomic size_t next_chunk[64];  /* one counter per rep (reps <= 63 + warm-up) */

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, a0);
    uint64_t s = out[0] ^ out[1] ^ out[2] ^ out[3];
    for (; i < n; ++i) s ^= p[i];
    return s;
}
#endif

static uint64_t read_plain(const uint8_t *p, size_t n) {
    uint64_t s0 = 0, s1 = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint64_t a, b;
        memcpy(&a, p + i, 8);
        memcpy(&b, p + i + 8, 8);
        s0 ^= a;
        s1 ^= b;
    }
    for (; i < n; ++i) s0 ^= p[i];
    return s0 ^ s1;
}

static void *read_thread(void *v) {
    struct ReadArg *a = v;
    const size_t chunks = (a->n + READ_CHUNK - 1) / READ_CHUNK;
    for (int r = 0; r < a->reps; ++r) {
        pthread_barrier_wait(&start_line);
        for (size_t c; (c = next_chunk[r]++) < chunks;) {
            const uint8_t *p = a->p + c * READ_CHUNK;
            const size_t n = c + 1 < chunks ? READ_CHUNK : a->n - c * READ_CHUNK;
#if defined(__x86_64__)
            a->sum += a->avx2 ? read_avx2(p, n) : read_plain(p, n);
#else
            a->sum += read_plain(p, n);
#endif
        }
        pthread_barrier_wait(&finish_line);
    }
    return NULL;
}

static int probe_read(size_t mib, int threads, int reps) {
    const size_t n = mib << 20;
    if (reps > 63) reps = 63;
    uint8_t *buf = aligned_alloc(4096, n);
    if (!buf) return fprintf(stderr, "out of memory\n"), 1;
    for (size_t i = 0; i < n; ++i) buf[i] = (uint8_t)(i * 131u);
    int avx2 = 0;
#if defined(__x86_64__)
    avx2 = __builtin_cpu_supports("avx2");
#endif
    struct ReadArg *args = calloc((size_t)threads, sizeof *args);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    pthread_barrier_init(&start_line, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&finish_line, NULL, (unsigned)threads + 1);
    for (int t = 0; t < threads; ++t) {
        args[t] = (struct ReadArg){buf, n, reps + 1, avx2, 0};
        pthread_create(&tids[t], NULL, read_thread, &args[t]);
    }
    printf("{\"probe\": \"read\", \"bytes\": %zu, \"threads\": %d, \"simd\": \"%s\", \"gbps\": [", n, threads,
           avx2 ? "avx2" : "scalar");
    for (int r = 0; r < reps + 1; ++r) {  /* the first pass warms up (page tables, caches) */
        pthread_barrier_wait(&start_line);
        const double t0 = now();
        pthread_barrier_wait(&finish_line);
        const double dt = now() - t0;
        if (r) printf("%s%.3f", r > 1 ? ", " : "", (double)n / dt / 1e9);
    }
    uint64_t s = 0;
    for (int t = 0; t < threads; ++t) {
        pthread_join(tids[t], NULL);
        s ^= args[t].sum;
    }
    printf("], \"checksum\": %llu}\n", (unsigned long long)(s & 0xffff));
    return 0;
}

/* ------------------------------------------------------- int8 and float32 peaks */
struct PeakArg {
    int64_t iters;
    int kind;  /* 0 pmaddubsw, 1 avx-vnni, 2 avx512-vnni, 3 fma (float32) */
};

/* The loops are inline assembly: the compiler would otherwise hoist the
 * loop-invariant products, merge identical chains or spill the accumulators.
 * The products of one instruction never feed the next one's inputs, so only
 * the accumulators carry dependencies (8 or 10 of them, more than the
 * instruction's latency x its issue rate on current cores). */
#if defined(__x86_64__)
#define ACC8(OP) OP(8) OP(9) OP(10) OP(11) OP(12) OP(13) OP(14) OP(15)
#define ACC10(OP) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7) OP(8) OP(9) OP(10) OP(11)

static void peak_avx2(int64_t iters) {
#define ZERO(r) "vpxor %%ymm" #r ", %%ymm" #r ", %%ymm" #r "\n\t"
#define STEP(r) "vpmaddubsw %%ymm1, %%ymm0, %%ymm2\n\tvpaddw %%ymm2, %%ymm" #r ", %%ymm" #r "\n\t"
    __asm__ volatile("vpcmpeqb %%ymm0, %%ymm0, %%ymm0\n\tvpabsb %%ymm0, %%ymm1\n\t" ACC8(ZERO)
                     "1:\n\t" ACC8(STEP) "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                     : "+r"(iters)
                     :
                     : "cc", "xmm0", "xmm1", "xmm2", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
                       "xmm14", "xmm15");
#undef ZERO
#undef STEP
}

static void peak_avxvnni(int64_t iters) {
#define ZERO(r) "vpxor %%ymm" #r ", %%ymm" #r ", %%ymm" #r "\n\t"
#define STEP(r) "%{vex%} vpdpbusd %%ymm1, %%ymm0, %%ymm" #r "\n\t"
    __asm__ volatile("vpcmpeqb %%ymm0, %%ymm0, %%ymm0\n\tvpabsb %%ymm0, %%ymm1\n\t" ACC10(ZERO)
                     "1:\n\t" ACC10(STEP) "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                     : "+r"(iters)
                     :
                     : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                       "xmm10", "xmm11");
#undef ZERO
#undef STEP
}

static void peak_avx512vnni(int64_t iters) {
#define ZERO(r) "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"
#define STEP(r) "vpdpbusd %%zmm1, %%zmm0, %%zmm" #r "\n\t"
    __asm__ volatile("vpternlogd $0xff, %%zmm0, %%zmm0, %%zmm0\n\tvpabsb %%zmm0, %%zmm1\n\t" ACC10(ZERO)
                     "1:\n\t" ACC10(STEP) "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                     : "+r"(iters)
                     :
                     : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                       "xmm10", "xmm11");
#undef ZERO
#undef STEP
}

static void peak_fma(int64_t iters) {
#define ZERO(r) "vxorps %%ymm" #r ", %%ymm" #r ", %%ymm" #r "\n\t"
#define STEP(r) "vfmadd231ps %%ymm1, %%ymm0, %%ymm" #r "\n\t"
    __asm__ volatile("vxorps %%ymm0, %%ymm0, %%ymm0\n\tvxorps %%ymm1, %%ymm1, %%ymm1\n\t" ACC10(ZERO)
                     "1:\n\t" ACC10(STEP) "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                     : "+r"(iters)
                     :
                     : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                       "xmm10", "xmm11");
#undef ZERO
#undef STEP
}
#endif

static const char *const kind_names[] = {"avx2 pmaddubsw+paddw", "avx-vnni vpdpbusd ymm", "avx512-vnni vpdpbusd zmm",
                                         "fma vfmadd231ps ymm"};
static const int kind_macs[] = {32, 32, 64, 8};   /* MACs (float32: FMAs) per instruction */
static const int kind_chains[] = {8, 10, 10, 10}; /* instructions per loop iteration */

static void peak_run(int kind, int64_t iters) {
#if defined(__x86_64__)
    if (kind == 3) peak_fma(iters);
    else if (kind == 2) peak_avx512vnni(iters);
    else if (kind == 1) peak_avxvnni(iters);
    else peak_avx2(iters);
#else
    (void)kind;
    (void)iters;
#endif
}

static void *peak_thread(void *v) {
    struct PeakArg *a = v;
    pthread_barrier_wait(&start_line);
    peak_run(a->kind, a->iters);
    pthread_barrier_wait(&finish_line);
    return NULL;
}

/* want: "auto" (the widest this CPU has) or one of kind_keys */
static const char *const kind_keys[] = {"pmaddubsw", "avx-vnni", "avx512-vnni"};

static double peak_macs(int kind, int threads, double ms);

static int probe_int8(int threads, double ms, const char *want) {
    int has[3] = {0, 0, 0}, kind = -1;
#if defined(__x86_64__)
    has[0] = __builtin_cpu_supports("avx2");
    has[1] = __builtin_cpu_supports("avxvnni");
    has[2] = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
#endif
    if (!strcmp(want, "auto")) {
        for (int k = 0; k < 3; ++k)
            if (has[k]) kind = k;
        if (kind < 0) return printf("{\"probe\": \"int8\", \"error\": \"no AVX2 / VNNI on this CPU\"}\n"), 0;
    } else {
        for (int k = 0; k < 3; ++k)
            if (!strcmp(want, kind_keys[k])) kind = k;
        if (kind < 0) return fprintf(stderr, "unknown int8 loop %s\n", want), 2;
        if (!has[kind]) return printf("{\"probe\": \"int8\", \"error\": \"this CPU has no %s\"}\n", want), 0;
    }
    printf("{\"probe\": \"int8\", \"threads\": %d, \"instruction\": \"%s\", \"gmacs\": %.3f}\n", threads,
           kind_names[kind], peak_macs(kind, threads, ms) / 1e9);
    return 0;
}

/* MACs a second of `kind` on `threads` threads, each running about ms milliseconds */
static double peak_macs(int kind, int threads, double ms) {
    /* calibrate on one thread: iterations for ~ms milliseconds */
    int64_t iters = 1 << 16;
    for (;;) {
        const double t0 = now();
        peak_run(kind, iters);
        const double dt = now() - t0;
        if (dt > 0.02) {
            iters = (int64_t)((double)iters * ms / 1e3 / dt) + 1;
            break;
        }
        iters *= 4;
    }
    struct PeakArg *args = calloc((size_t)threads, sizeof *args);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    pthread_barrier_init(&start_line, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&finish_line, NULL, (unsigned)threads + 1);
    for (int t = 0; t < threads; ++t) {
        args[t] = (struct PeakArg){iters, kind};
        pthread_create(&tids[t], NULL, peak_thread, &args[t]);
    }
    pthread_barrier_wait(&start_line);
    const double t0 = now();
    pthread_barrier_wait(&finish_line);
    const double dt = now() - t0;
    for (int t = 0; t < threads; ++t) pthread_join(tids[t], NULL);
    free(args);
    free(tids);
    return (double)iters * kind_chains[kind] * kind_macs[kind] * threads / dt;
}

static int probe_fma(int threads, double ms) {
    int has = 0;
#if defined(__x86_64__)
    has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    if (!has) return printf("{\"probe\": \"fma\", \"error\": \"no AVX2 FMA on this CPU\"}\n"), 0;
    printf("{\"probe\": \"fma\", \"threads\": %d, \"instruction\": \"%s\", \"gflops\": %.3f}\n", threads,
           kind_names[3], 2 * peak_macs(3, threads, ms) / 1e9);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "read"))
        return probe_read((size_t)atol(argv[2]), atoi(argv[3]) > 0 ? atoi(argv[3]) : 1,
                          atoi(argv[4]) > 0 ? atoi(argv[4]) : 1);
    if ((argc == 4 || argc == 5) && !strcmp(argv[1], "int8"))
        return probe_int8(atoi(argv[2]) > 0 ? atoi(argv[2]) : 1, atof(argv[3]) > 0 ? atof(argv[3]) : 200,
                          argc == 5 ? argv[4] : "auto");
    if (argc == 4 && !strcmp(argv[1], "fma"))
        return probe_fma(atoi(argv[2]) > 0 ? atoi(argv[2]) : 1, atof(argv[3]) > 0 ? atof(argv[3]) : 200);
    fprintf(stderr,
            "usage: %s read MIB THREADS REPS | int8 THREADS MS [auto|pmaddubsw|avx-vnni|avx512-vnni] | fma THREADS MS\n",
            argv[0]);
    return 2;
}
