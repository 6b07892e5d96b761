/* sum_j exp(z[j] - top) over a row of logits: the log-softmax's normaliser, the fused step's one wide exponential
   (16,000 per row over the whole vocabulary, where libm's scalar expf cost more than the row's product).

   AVX-512 where the CPU has it: exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts),
   exp(r) by Cephes expf's degree-7 polynomial (relative error ~1e-7 on |r| <= ln 2 / 2), 2^n applied by vscalefps
   (0 below the float range); 16 lanes summed in their own accumulators. Elsewhere libm's expf. The sums differ from
   onnxruntime's own vectorised LogSoftmax in the last bits, as any two summation orders do. */
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
#endif

static int vm_avx512(void) {
#if defined(__x86_64__)
    static int has = -1;
    if (has < 0) {
        const char *force = getenv("MT_FUSED_STEP_KERNEL");
        has = __builtin_cpu_supports("avx512f") != 0 && !(force && strcmp(force, "plain") == 0);
    }
    return has;
#else
    return 0;
#endif
}

/* sum_i a[i] b[i] (attention scores: d_head values) */
static float vm_dot(const float *a, const float *b, int n) {
#if defined(__x86_64__)
    if (vm_avx512()) return vm_dot_avx512(a, b, n);
#endif
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += a[i] * b[i];
    return sum;
}

/* max_j z[j] */
static float vm_max(const float *z, int n) {
#if defined(__x86_64__)
    if (vm_avx512()) return vm_max_avx512(z, n);
#endif
    float top = -INFINITY;
    for (int j = 0; j < n; j++) top = z[j] > top ? z[j] : top;
    return top;
}

/* out[j] = z[j] - a - b (LogSoftmax's x - max - log(sum), in that order) */
static void vm_shift(const float *z, int n, float a, float b, float *out) {
#if defined(__x86_64__)
    if (vm_avx512()) { vm_shift_avx512(z, n, a, b, out); return; }
#endif
    for (int j = 0; j < n; j++) out[j] = z[j] - a - b;
}

/* the k best of n values, best first, ties to the lower index (as TopK): one pass keeping a sorted list, the values
   that cannot enter it skipped 16 at a time */
static void vm_top_k(const float *x, int n, int k, float *values, int64_t *index) {
    int have = 0;
    for (int j = 0; j < n; j++) {
#if defined(__x86_64__)
        if (have == k && vm_avx512()) {
            j = vm_next_above_avx512(x, j, n, values[k - 1]);
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
#endif
    float sum = 0.0f;
    for (int j = 0; j < n; j++) sum += expf(z[j] - top);
    return sum;
}

#endif
