// Memory for weights that every token reads: carved from large anonymous
// mappings advised as transparent huge pages (see weight_arena.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace bitnet {

struct Segment;

// Frees a Buffer: std::free, or gives its bytes back to their arena segment.
struct BufferDeleter {
    Segment *segment = nullptr;
    size_t size = 0;
    void operator()(uint8_t *p) const;
};
using Buffer = std::unique_ptr<uint8_t[], BufferDeleter>;

// n bytes, 64-byte aligned, zeroed (throws std::bad_alloc)
Buffer aligned_buffer(size_t n);

// The same for weights: on Linux, from 2 MiB-aligned segments advised
// MADV_HUGEPAGE, so streaming a model's weights misses the TLB once per 2 MiB
// instead of once per 4 KiB page (decode reads every weight byte per token).
// BITNET_CPU_HUGE_PAGES=0 (read once) gives aligned_buffer's memory instead.
Buffer weight_buffer(size_t n);

// Whether weight_buffer gives huge-page memory (Linux, not switched off). Where it
// does, TQ2_0 weights are copied there from the file's mapping, else used in place.
bool huge_page_weights();

// Bytes of weight memory handed out and not yet freed, and of the segments
// that hold them (tests, diagnostics).
struct ArenaStats {
    size_t live_bytes = 0, segment_bytes = 0, segments = 0;
};
ArenaStats weight_arena_stats();

}  // namespace bitnet
