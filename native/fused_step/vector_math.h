/* sum_j exp(z[j] - top) over a row of logits: the log-softmax's normaliser, the fused step's one wide exponential
   (16,000 per row over the whole vocabulary, where libm's scalar expf cost more than the row's product).

   AVX-512 where the CPU has it: exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts),
   exp(r) by Cephes expf's degree-7 polynomial (relative error ~1e-7 on |r| <= ln 2 / 2), 2^n applied by vscalefps
   (0 below the float range); 16 lanes summed in their own accumulators. With AVX2 (and FMA) only, the same polynomial
   on 8 lanes, 2^n built in the exponent bits, the argument clamped at -87 (exp(-87) ~ 1.6e-38: a row's sum holds
   exp(0) = 1, so what the clamp changes is far below a float's last bit). Elsewhere libm's expf. The sums differ from
   onnxruntime's own vectorised LogSoftmax, and between the CPU families, in the last bits, as any two summation orders
   do; on one CPU the order is fixed, whatever the batch. */
#ifndef MTSERVE_VECTOR_MATH_H
#define MTSERVE_VECTOR_MATH_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static float vm_exp_sum_avx512(const float *z, int n, float top) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f), c1 = _mm512_set1_ps(0.693359375f),
                 c2 = _mm512_set1_ps(-2.12194440e-4f), lowest = _mm512_set1_ps(-103.0f), t = _mm512_set1_ps(top),
                 one = _mm512_set1_ps(1.0f);
    const __m512 p0 = _mm512_set1_ps(1.9875691500e-4f), p1 = _mm512_set1_ps(1.3981999507e-3f),
                 p2 = _mm512_set1_ps(8.3334519073e-3f), p3 = _mm512_set1_ps(4.1665795894e-2f),
                 p4 = _mm512_set1_ps(1.6666665459e-1f), p5 = _mm512_set1_ps(5.0000001201e-1f);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        const __mmask16 live = n - j >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(live, z + j), t);
        x = _mm512_max_ps(x, lowest);
        __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(k, c1)), _mm512_mul_ps(k, c2));
        __m512 p = _mm512_fmadd_ps(p0, r, p1);
        p = _mm512_fmadd_ps(p, r, p2);
        p = _mm512_fmadd_ps(p, r, p3);
        p = _mm512_fmadd_ps(p, r, p4);
        p = _mm512_fmadd_ps(p, r, p5);
        p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, one));
        sum = _mm512_mask_add_ps(sum, live, sum, _mm512_scalef_ps(p, k));
    }
    return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx512f"))) static float vm_max_avx512(const float *z, int n) {
    __m512 top = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 live = n - j >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        top = _mm512_mask_max_ps(top, live, top, _mm512_maskz_loadu_ps(live, z + j));
    }
    return _mm512_reduce_max_ps(top);
}

__attribute__((target("avx512f"))) static void vm_shift_avx512(const float *z, int n, float a, float b, float *out) {
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 live = n - j >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        _mm512_mask_storeu_ps(out + j, live, _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, z + j), va), vb));
    }
}

/* the first index from `from` on (in steps of 16) whose value exceeds `bar`, or n */
__attribute__((target("avx512f"))) static int vm_next_above_avx512(const float *x, int from, int n, float bar) {
    const __m512 b = _mm512_set1_ps(bar);
    for (int j = from; j < n; j += 16) {
        const __mmask16 live = n - j >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        const __mmask16 above = _mm512_mask_cmp_ps_mask(live, _mm512_maskz_loadu_ps(live, x + j), b, _CMP_GT_OQ);
        if (above) return j + __builtin_ctz(above);
    }
    return n;
}


__attribute__((target("avx512f"))) static float vm_dot_avx512(const float *a, const float *b, int n) {
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 live = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        sum = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(live, a + i), _mm512_maskz_loadu_ps(live, b + i), sum);
    }
    return _mm512_reduce_add_ps(sum);
}

/* --- the same on 8 lanes, for CPUs with AVX2 and FMA but no AVX-512 ---------------------------------------------- */

/* lanes j .. j + 7 that are below n, as vmaskmovps's mask */
__attribute__((target("avx2"))) static inline __m256i vm_live8(int j, int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

__attribute__((target("avx2"))) static inline float vm_sum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* exp(x - top) of 8 lanes, lanes not `live` 0 */
__attribute__((target("avx2,fma"))) static inline __m256 vm_exp8(__m256 z, __m256 t, __m256i live) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f), c1 = _mm256_set1_ps(0.693359375f),
                 c2 = _mm256_set1_ps(-2.12194440e-4f), lowest = _mm256_set1_ps(-87.0f), one = _mm256_set1_ps(1.0f);
    const __m256 p0 = _mm256_set1_ps(1.9875691500e-4f), p1 = _mm256_set1_ps(1.3981999507e-3f),
                 p2 = _mm256_set1_ps(8.3334519073e-3f), p3 = _mm256_set1_ps(4.1665795894e-2f),
                 p4 = _mm256_set1_ps(1.6666665459e-1f), p5 = _mm256_set1_ps(5.0000001201e-1f);
    __m256 x = _mm256_max_ps(_mm256_sub_ps(z, t), lowest);
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(k, c1)), _mm256_mul_ps(k, c2));
    __m256 p = _mm256_fmadd_ps(p0, r, p1);
    p = _mm256_fmadd_ps(p, r, p2);
    p = _mm256_fmadd_ps(p, r, p3);
    p = _mm256_fmadd_ps(p, r, p4);
    p = _mm256_fmadd_ps(p, r, p5);
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, one));
    const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
    return _mm256_and_ps(_mm256_mul_ps(p, scale), _mm256_castsi256_ps(live));
}

/* The loops below read whole 8-lane vectors and mask only the last, partial one (vmaskmovps costs several times a
   plain load on AMD's cores): the same lanes, the same sums as masking every vector. */
__attribute__((target("avx2,fma"))) static float vm_exp_sum_avx2(const float *z, int n, float top) {
    const __m256 t = _mm256_set1_ps(top);
    const __m256i all = _mm256_set1_epi32(-1);
    __m256 sum = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) sum = _mm256_add_ps(sum, vm_exp8(_mm256_loadu_ps(z + j), t, all));
    if (j < n) {
        const __m256i live = vm_live8(j, n);
        sum = _mm256_add_ps(sum, vm_exp8(_mm256_maskload_ps(z + j, live), t, live));
    }
    return vm_sum8(sum);
}

__attribute__((target("avx2"))) static float vm_max_avx2(const float *z, int n) {
    __m256 top = _mm256_set1_ps(-INFINITY), top1 = top;
    int j = 0;
    for (; j + 16 <= n; j += 16) { /* two chains: max is exact in any order */
        top = _mm256_max_ps(top, _mm256_loadu_ps(z + j));
        top1 = _mm256_max_ps(top1, _mm256_loadu_ps(z + j + 8));
    }
    top = _mm256_max_ps(top, top1);
    for (; j < n; j += 8) {
        const __m256i live = vm_live8(j, n);
        top = _mm256_blendv_ps(top, _mm256_max_ps(top, _mm256_maskload_ps(z + j, live)), _mm256_castsi256_ps(live));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

__attribute__((target("avx2"))) static void vm_shift_avx2(const float *z, int n, float a, float b, float *out) {
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    int j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(z + j), va), vb));
    if (j < n) {
        const __m256i live = vm_live8(j, n);
        _mm256_maskstore_ps(out + j, live, _mm256_sub_ps(_mm256_sub_ps(_mm256_maskload_ps(z + j, live), va), vb));
    }
}

/* the first index from `from` on (in steps of 8) whose value exceeds `bar`, or n */
__attribute__((target("avx2"))) static int vm_next_above_avx2(const float *x, int from, int n, float bar) {
    const __m256 b = _mm256_set1_ps(bar);
    int j = from;
    for (; j + 8 <= n; j += 8) {
        const int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), b, _CMP_GT_OQ));
        if (bits) return j + __builtin_ctz(bits);
    }
    if (j < n) {
        const __m256i live = vm_live8(j, n);
        const __m256 above = _mm256_and_ps(_mm256_cmp_ps(_mm256_maskload_ps(x + j, live), b, _CMP_GT_OQ),
                                           _mm256_castsi256_ps(live));
        const int bits = _mm256_movemask_ps(above);
        if (bits) return j + __builtin_ctz(bits);
    }
    return n;
}

__attribute__((target("avx2,fma"))) static float vm_dot_avx2(const float *a, const float *b, int n) {
    __m256 sum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) sum = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), sum);
    if (i < n) {
        const __m256i live = vm_live8(i, n);
        sum = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, live), _mm256_maskload_ps(b + i, live), sum);
    }
    return vm_sum8(sum);
}

/* out[j] = own[j] ? z[j] - a - b : -inf (own: 0/1 bytes) */
__attribute__((target("avx2"))) static void vm_shift_owned_avx2(const float *z, const uint8_t *own, int n, float a,
                                                               float b, float *out) {
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b), none = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        int64_t bytes;
        memcpy(&bytes, own + j, 8);
        const __m256i mine = _mm256_cmpgt_epi32(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes)), _mm256_setzero_si256());
        const __m256 v = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(z + j), va), vb);
        _mm256_storeu_ps(out + j, _mm256_blendv_ps(none, v, _mm256_castsi256_ps(mine)));
    }
    for (; j < n; j++) out[j] = own[j] ? z[j] - a - b : -INFINITY;
}
#endif

/* 2: AVX-512, 1: AVX2 and FMA, 0: plain C; MT_FUSED_STEP_KERNEL as int8_products.h reads it (plain: 0; avx2 and
   avxvnni: at most 1, the code of CPUs without AVX-512) */
static int vm_level(void) {
#if defined(__x86_64__)
    static int level = -1;
    if (level < 0) {
        const char *force = getenv("MT_FUSED_STEP_KERNEL");
        force = force ? force : "";
        const int narrow = strcmp(force, "avx2") == 0 || strcmp(force, "avxvnni") == 0;
        __builtin_cpu_init();
        if (strcmp(force, "plain") == 0) level = 0;
        else if (!narrow && __builtin_cpu_supports("avx512f")) level = 2;
        else level = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
    }
    return level;
#else
    return 0;
#endif
}
static int vm_avx512(void) { return vm_level() == 2; }
static int vm_avx2(void) { return vm_level() == 1; }

/* sum_i a[i] b[i] (attention scores: d_head values) */
static float vm_dot(const float *a, const float *b, int n) {
#if defined(__x86_64__)
    if (vm_avx512()) return vm_dot_avx512(a, b, n);
    if (vm_avx2()) return vm_dot_avx2(a, b, n);
#endif
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += a[i] * b[i];
    return sum;
}

/* max_j z[j] */
static float vm_max(const float *z, int n) {
#if defined(__x86_64__)
    if (vm_avx512()) return vm_max_avx512(z, n);
    if (vm_avx2()) return vm_max_avx2(z, n);
#endif
    float top = -INFINITY;
    for (int j = 0; j < n; j++) top = z[j] > top ? z[j] : top;
    return top;
}

/* out[j] = z[j] - a - b (LogSoftmax's x - max - log(sum), in that order) */
static void vm_shift(const float *z, int n, float a, float b, float *out) {
#if defined(__x86_64__)
    if (vm_avx512()) { vm_shift_avx512(z, n, a, b, out); return; }
    if (vm_avx2()) { vm_shift_avx2(z, n, a, b, out); return; }
#endif
    for (int j = 0; j < n; j++) out[j] = z[j] - a - b;
}

/* out[j] = own[j] ? z[j] - a - b : -inf, own[j] 0 or 1 (a source's own columns of a vocabulary subset) */
static void vm_shift_owned(const float *z, const uint8_t *own, int n, float a, float b, float *out) {
#if defined(__x86_64__)
    if (vm_level() > 0) { vm_shift_owned_avx2(z, own, n, a, b, out); return; }
#endif
    for (int j = 0; j < n; j++) out[j] = own[j] ? z[j] - a - b : -INFINITY;
}

/* the values z[j] with own[j] (0 or 1) in order into out; returns how many (no branch on own: it has no pattern) */
static int vm_gather_owned(const float *z, const uint8_t *own, int n, float *out) {
    int m = 0;
    for (int j = 0; j < n; j++) { out[m] = z[j]; m += own[j]; }
    return m;
}

/* the k best of n values, best first, ties to the lower index (as TopK): one pass keeping a sorted list, the values
   that cannot enter it skipped 16 (8 with AVX2) at a time */
static void vm_top_k(const float *x, int n, int k, float *values, int64_t *index) {
    int have = 0;
    for (int j = 0; j < n; j++) {
#if defined(__x86_64__)
        if (have == k && vm_level() > 0) {
            j = vm_avx512() ? vm_next_above_avx512(x, j, n, values[k - 1]) : vm_next_above_avx2(x, j, n, values[k - 1]);
            if (j >= n) break;
        }
#endif
        if (have == k && !(x[j] > values[k - 1])) continue;
        int at = have < k ? have++ : k - 1;
        while (at > 0 && x[j] > values[at - 1]) { values[at] = values[at - 1]; index[at] = index[at - 1]; at--; }
        values[at] = x[j]; index[at] = j;
    }
}

static float vm_exp_sum(const float *z, int n, float top) {
#if defined(__x86_64__)
    if (vm_avx512()) return vm_exp_sum_avx512(z, n, top);
    if (vm_avx2()) return vm_exp_sum_avx2(z, n, top);
#endif
    float sum = 0.0f;
    for (int j = 0; j < n; j++) sum += expf(z[j] - top);
    return sum;
}

#endif
