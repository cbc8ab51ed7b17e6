"""Hugging Face ``BitNetForCausalLM`` / ``LlamaForCausalLM`` tensor names to GGUF names.

llama.cpp's names for its ``bitnet`` and ``llama`` graphs, and ours for the input
RMSNorm of each BitLinear (``use_rms_norm``: ``q_proj.rms_norm.weight`` ->
``blk.N.attn_q_in_norm.weight``).
"""

from __future__ import annotations

import re

from .. import config as c

_GLOBAL = {
    "model.embed_tokens.weight": c.TOKEN_EMBD,
    "model.norm.weight": c.OUTPUT_NORM,
    "lm_head.weight": c.OUTPUT,
}
_LAYER = {
    "input_layernorm.weight": c.ATTN_NORM,
    "self_attn.q_proj.weight": c.ATTN_Q,
    "self_attn.k_proj.weight": c.ATTN_K,
    "self_attn.v_proj.weight": c.ATTN_V,
    "self_attn.o_proj.weight": c.ATTN_OUT,
    "self_attn.attn_sub_norm.weight": c.ATTN_SUB_NORM,
    "post_attention_layernorm.weight": c.FFN_NORM,
    "mlp.gate_proj.weight": c.FFN_GATE,
    "mlp.up_proj.weight": c.FFN_UP,
    "mlp.down_proj.weight": c.FFN_DOWN,
    "mlp.ffn_sub_norm.weight": c.FFN_SUB_NORM,
    # 1bitLLM's bitnet_b1_58 checkpoints (llama.cpp's gguf-py tensor_mapping.py)
    "self_attn.inner_attn_ln.weight": c.ATTN_SUB_NORM,
    "mlp.ffn_layernorm.weight": c.FFN_SUB_NORM,
}
#: a HF layer's BitLinear modules -> their GGUF tensor names
PROJECTIONS = {
    "self_attn.q_proj": c.ATTN_Q,
    "self_attn.k_proj": c.ATTN_K,
    "self_attn.v_proj": c.ATTN_V,
    "self_attn.o_proj": c.ATTN_OUT,
    "mlp.gate_proj": c.FFN_GATE,
    "mlp.up_proj": c.FFN_UP,
    "mlp.down_proj": c.FFN_DOWN,
}
# transformers' BitLinear / AutoBitLinear with use_rms_norm: ``<proj>.rms_norm.weight``
_LAYER.update({f"{m}.rms_norm.weight": c.linear_norm_name(g) for m, g in PROJECTIONS.items()})
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def gguf_name(hf_name: str) -> str | None:
    """The GGUF name of a HF tensor, or None when it is not part of the model."""
    if hf_name in _GLOBAL:
        return _GLOBAL[hf_name]
    m = _LAYER_RE.match(hf_name)
    if m and m.group(2) in _LAYER:
        return _LAYER[m.group(2)].format(i=int(m.group(1)))
    return None


def hf_layer_names(i: int, gguf_template: str) -> list[str]:
    """The HF names (aliases) of layer ``i``'s tensor ``gguf_template`` (``blk.{i}.attn_q.weight``)."""
    names = [f"model.layers.{i}.{hf}" for hf, g in _LAYER.items() if g == gguf_template]
    if not names:
        raise KeyError(gguf_template)
    return names
