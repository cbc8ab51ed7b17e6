"""The plan of one token's decode layer in four dispatches (``shaders/qkv_attend.comp``,
``shaders/norm_gemv.comp``): shader variants and specialization constants, and whether the
device's limits hold them (``layer_plan`` is None where they do not: the ten dispatches run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: storage buffers qkv_attend binds (the most of the four)
QKV_ATTEND_BUFFERS = 11
MAX_SPLITS = 16  # MAX_SPLITS in qkv_attend.comp (the runner's most splits)


@dataclass(frozen=True)
class LayerPlan:
    """Workgroup sizes of the four dispatches: ``wg`` (norm_quant's, so the norms make its
    sums), ``attn_wg`` (attention_split's: keys a chunk), ``head_dim``, ``int_dot``."""

    wg: int
    attn_wg: int
    head_dim: int
    rows_per_group: int  # GEMV rows a workgroup (a subgroup a row)
    int_dot: bool

    def shader(self, name: str) -> str:
        return name + "_dot" if self.int_dot else name

    def qkv_spec(self, neox: int, f16: int, w_words: int) -> tuple[int, ...]:
        return (self.wg, neox, f16, 4 * w_words, self.attn_wg, self.head_dim)

    def gemv_spec(self, w_words: int, relu2: int) -> tuple[int, ...]:
        return (self.wg, 4 * w_words, relu2)


def shared_bytes(wg: int, attn_wg: int, head_dim: int, w_words: int, qkv: bool) -> int:
    """The shared memory of a dispatch (the arrays qkv_attend.comp / norm_gemv.comp declare)."""
    words = wg + 4 * w_words  # the norm's partial sums, the row's int8 codes
    if qkv:
        words += 7 * head_dim + 2 * attn_wg + 3 * MAX_SPLITS
    return 4 * words


def layer_plan(
    ctx: Any, cfg: Any, wg: int, attn_wg: int, splits: int, qkv: Any, weights: Any
) -> LayerPlan | None:
    """The plan on ``ctx``'s device for ``cfg`` (``qkv``: a stacked q|k|v weight, ``weights``:
    the model's), or None where a limit is below what the shaders need."""
    info = ctx.info
    lim = info.limits
    sg = max(int(info.subgroup_size or 0), 1)
    if splits > MAX_SPLITS or wg % sg or cfg.num_heads % cfg.num_kv_heads:
        return None
    if lim.get("max_storage_buffers_per_stage", QKV_ATTEND_BUFFERS) < QKV_ATTEND_BUFFERS:
        return None
    layer = weights.layers[0]
    words = [layer.o.words_per_row, layer.down.words_per_row]
    need = max(
        [shared_bytes(wg, attn_wg, cfg.head_dim, qkv.words_per_row, True)]
        + [shared_bytes(wg, attn_wg, cfg.head_dim, w, False) for w in words]
    )
    if need > lim.get("max_shared_memory", 16384):
        return None
    return LayerPlan(wg, attn_wg, cfg.head_dim, wg // sg, bool(ctx.use_int_dot))
