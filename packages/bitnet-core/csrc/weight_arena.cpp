// See weight_arena.h. Weights are allocated a matrix at a time (a 1536x1536
// ternary matrix is 600 KB), and a huge page is 2 MiB: one mapping per matrix
// would either waste most of each huge page or get none. So matrices are
// bump-allocated from shared segments of at least kSegment bytes, each unmapped
// when the last matrix in it is freed, its freed bytes never reused before
// then: a model's weights are loaded and dropped together.
#include "weight_arena.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace bitnet {

namespace {
constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kSegment = size_t{32} << 20;
constexpr size_t kAlign = 64;
constexpr size_t kCollapseStep = 2 * kHuge;
}  // namespace

struct Segment {
    uint8_t *base = nullptr;
    size_t size = 0, used = 0;
    size_t live = 0;  // buffers not yet freed
    bool promoting = false;  // promote_weight_arena is advising it (outside the lock)
    bool orphaned = false;   // its last buffer went meanwhile: the promoter unmaps it
};

namespace {
std::mutex arena_mu;
Segment *current = nullptr;
std::vector<Segment *> live_segments;  // mapped, not yet promoted to huge pages
std::atomic<bool> promotion_stopped{false};
ArenaStats stats;

void unmap(Segment *s) {
#if defined(__linux__)
    munmap(s->base, s->size);
#endif
    live_segments.erase(std::remove(live_segments.begin(), live_segments.end(), s), live_segments.end());
    stats.segment_bytes -= s->size;
    stats.segments -= 1;
    delete s;
}

#if defined(__linux__)
// size bytes (a multiple of kHuge) at a kHuge-aligned address, advised as huge pages
Segment *map_segment(size_t size) {
    const size_t span = size + kHuge;
    void *p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    auto *raw = static_cast<uint8_t *>(p);
    uint8_t *base = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) / kHuge * kHuge);
    if (base > raw) munmap(raw, static_cast<size_t>(base - raw));
    if (base + size < raw + span) munmap(base + size, static_cast<size_t>(raw + span - (base + size)));
    if (!deferred_huge_pages()) madvise(base, size, MADV_HUGEPAGE);  // else promote_weight_arena
    auto *s = new Segment;
    s->base = base;
    s->size = size;
    stats.segment_bytes += size;
    stats.segments += 1;
    if (deferred_huge_pages()) live_segments.push_back(s);
    return s;
}
#endif
}  // namespace

void BufferDeleter::operator()(uint8_t *p) const {
    if (!segment) {
        std::free(p);
        return;
    }
    std::lock_guard<std::mutex> lk(arena_mu);
    stats.live_bytes -= size;
    if (--segment->live) return;
    if (segment == current) current = nullptr;  // the last buffer of the open one: unmapped too
    if (segment->promoting) {
        segment->orphaned = true;  // still being advised: promote_weight_arena unmaps it
        return;
    }
    unmap(segment);
}

Buffer aligned_buffer(size_t n) {
    size_t size = (n + kAlign - 1) / kAlign * kAlign;
    void *p = std::aligned_alloc(kAlign, size ? size : kAlign);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, size ? size : kAlign);
    return Buffer(static_cast<uint8_t *>(p));
}

Buffer weight_buffer(size_t n) {
#if defined(__linux__)
    if (!huge_page_weights()) return aligned_buffer(n);
    const size_t size = std::max(kAlign, (n + kAlign - 1) / kAlign * kAlign);
    std::lock_guard<std::mutex> lk(arena_mu);
    if (!current || current->size - current->used < size) {
        Segment *s = map_segment(std::max(kSegment, (size + kHuge - 1) / kHuge * kHuge));
        if (!s) throw std::bad_alloc();
        current = s;  // the old one (if any) holds live buffers: unmapped with its last
    }
    uint8_t *p = current->base + current->used;
    current->used += size;
    current->live += 1;
    stats.live_bytes += size;
    // never handed out before (segments are not reused): still the mapping's zeros
    return Buffer(p, BufferDeleter{current, size});
#else
    return aligned_buffer(n);
#endif
}

bool deferred_huge_pages() {
    static const bool on = [] {
        const char *env = std::getenv("BITNET_CPU_HUGE_PAGES");
        return !(env && std::string(env) == "eager");
    }();
    return on;
}

size_t promote_weight_arena() {
    size_t done = 0;
#if defined(__linux__)
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1
#endif
    // one segment at a time, advised outside the lock (a collapse takes a while): a
    // segment let go meanwhile is unmapped here, after its advice
    for (;;) {
        Segment *s = nullptr;
        size_t used = 0;
        {
            std::lock_guard<std::mutex> lk(arena_mu);
            if (live_segments.empty() || promotion_stopped.load()) break;
            s = live_segments.back();
            live_segments.pop_back();
            s->promoting = true;
            // the bytes written so far, whole huge pages (the open segment's tail is untouched)
            used = std::min(s->size, (s->used + kHuge - 1) / kHuge * kHuge);
        }
        madvise(s->base, s->size, MADV_HUGEPAGE);  // later faults in it: huge pages
        // a few huge pages a call, so that stop_weight_promotion takes effect at once
        for (size_t off = 0; off < used && !promotion_stopped.load(); off += kCollapseStep) {
            const size_t n = std::min(kCollapseStep, used - off);
            if (madvise(s->base + off, n, MADV_COLLAPSE) == 0) done += n;
        }
        std::lock_guard<std::mutex> lk(arena_mu);
        s->promoting = false;
        if (s->orphaned) unmap(s);
    }
#endif
    return done;
}

void stop_weight_promotion() { promotion_stopped.store(true); }

bool huge_page_weights() {
#if defined(__linux__)
    static const bool on = [] {
        const char *env = std::getenv("BITNET_CPU_HUGE_PAGES");
        return !(env && std::string(env) == "0");
    }();
    return on;
#else
    return false;
#endif
}

ArenaStats weight_arena_stats() {
    std::lock_guard<std::mutex> lk(arena_mu);
    return stats;
}

}  // namespace bitnet
