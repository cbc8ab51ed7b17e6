// Correctly rounded activation scales (shared by quantize_act.comp and norm_quant.comp).
// Vulkan lets `/` be off by 2.5 ulp, but + - * are correctly rounded: take the quotient,
// then among it and its two neighbours the one with the smallest exact residual
// n - q * d (Dekker's error-free product), which is numpy's correctly rounded n / d.
float residual(float n, float d, float q) {
    precise float p = q * d;
    precise float cq = 4097.0 * q;
    precise float qh = cq - (cq - q);
    precise float ql = q - qh;
    precise float cd = 4097.0 * d;
    precise float dh = cd - (cd - d);
    precise float dl = d - dh;
    precise float err = ((qh * dh - p) + qh * dl + ql * dh) + ql * dl;
    precise float r = (n - p) - err;
    return r;
}

float correctly_rounded_quotient(float n, float d) {
    float q = n / d;
    if (d > 1e30 || q <= 0.0) return q;  // no splitting near overflow; these never arise here
    float best = q;
    float best_r = abs(residual(n, d, q));
    float up = uintBitsToFloat(floatBitsToUint(q) + 1u);
    float down = uintBitsToFloat(floatBitsToUint(q) - 1u);
    float r_up = abs(residual(n, d, up));
    float r_down = abs(residual(n, d, down));
    if (r_up < best_r) { best = up; best_r = r_up; }
    if (r_down < best_r) { best = down; }
    return best;
}
