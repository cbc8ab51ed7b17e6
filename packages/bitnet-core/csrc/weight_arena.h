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

// Segments are mapped without huge-page advice unless BITNET_CPU_HUGE_PAGES=eager:
// in a VM, clearing never-touched huge pages at first write dominated a 2B model's
// load (60% of it in clear_page). promote_weight_arena() then advises every segment
// not yet promoted and collapses its written pages into huge pages (MADV_COLLAPSE,
// Linux 6.1; elsewhere khugepaged does it over time). It blocks for as long as the
// kernel takes: call it off the critical path. Returns the bytes collapsed.
bool deferred_huge_pages();
size_t promote_weight_arena();
// Makes promote_weight_arena return after its current step, for good (process exit).
void stop_weight_promotion();

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
