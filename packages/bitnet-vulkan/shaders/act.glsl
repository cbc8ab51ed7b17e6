// The feed-forward activations (elementwise.comp, norm_quant.comp, norm_gemv.comp).
float silu(float v) { return v / (1.0 + exp(-v)); }
float relu2(float v) { float r = max(v, 0.0); return r * r; }
