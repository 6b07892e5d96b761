/* u8 x s8 products with a scale per output column: what onnxruntime's QuantizeLinear + MatMulIntegerToFloat compute
   (static activation scale and zero point, symmetric int8 weights), for the fused decoder step (fused_step_op.c).

   y[r][j] = float(sum_i (q(x[r][i]) - x_zero) * w[i][j]) * (x_scale * w_scale[j]) (+ bias[j], one fused multiply-add,
   as MLAS's output processor), q(x) = clamp(round_half_even(x / x_scale) + x_zero, 0, 255) as MLAS's QuantizeLinear.
   The integer sums are exact, so every kernel below gives the same bits.

   Kernels, chosen at run time (the library is built for a baseline x86-64 and carries the wider code in functions
   compiled for it): AMX tiles (16 x 16 int32 accumulators, 64 values of k per step) from `amx_min_rows` rows where the
   CPU has them and Linux grants them; AVX-512 VNNI (vpdpbusd, four rows per weight load) below; AVX-VNNI (the same
   instruction on 256-bit registers: Alder Lake and later, Zen 5) where there is no AVX-512; AVX2 (vpmovsxbw +
   vpmaddwd: int16 products summed in pairs into int32, exact, where onnxruntime's vpmaddubsw saturates pairs into
   int16) on the CPUs that have neither; plain loops elsewhere. Weights are packed once into [n / 16][k / 4][16][4]
   bytes: 16 columns, 4 consecutive k each, which is vpdpbusd's operand and AMX's B tile layout at once, and which the
   AVX2 kernel reads 16 bytes (4 columns x 4 k) at a time, widening each to int16 once for 6 or 4 rows. Every kernel
   takes 16 rows at a time over all the column blocks (IP_CHUNK). */
#ifndef MTSERVE_INT8_PRODUCTS_H
#define MTSERVE_INT8_PRODUCTS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define IP_AMX_POSSIBLE 1
#else
#define IP_AMX_POSSIBLE 0
#endif

typedef struct {
    int k, n, n_real;   /* padded input width (multiple of 4; of 64 for AMX), padded and real output widths */
    int8_t *w;          /* packed, see above */
    int32_t *colsum;    /* sum over k of each column's weights: removes the activations' zero point */
    float *multiplier;  /* x_scale * w_scale[j], computed as onnxruntime computes it */
    float *bias;        /* NULL: none */
    float x_scale;
    int x_zero;
} qlinear;

enum { IP_PLAIN = 0, IP_VNNI = 1, IP_AVX2 = 2, IP_AVXVNNI = 3 };
static int ip_kernel = -1;      /* one of the above, set by ip_init */
static int ip_amx = 0;          /* AMX tiles granted */
static int ip_amx_min_rows = 8; /* products of at least this many rows use AMX tiles (0: never) */
static int ip_vnni_tiles = 1;   /* AVX-512 VNNI: 4 x 4 tiles from 4 rows (0: MT_FUSED_STEP_TILES=0, the 4 x 1 ones) */

/* MT_FUSED_STEP_KERNEL=plain: no vector kernels at all (vector_math.h's included); =vnni: no AMX tiles; =avxvnni and
   =avx2: the kernels of CPUs without AVX-512 (vector_math.h's AVX2 code too), where the CPU has them (plain loops where
   it has not). For tests and A/B runs; read once, when the first kernel is created. */
static const char *ip_forced(void) {
    const char *force = getenv("MT_FUSED_STEP_KERNEL");
    return force ? force : "";
}

#if defined(__x86_64__)
/* AVX-VNNI: CPUID leaf 7 subleaf 1, EAX bit 4 (gcc 12's __builtin_cpu_supports does not know it) */
static int ip_has_avxvnni(void) {
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx2") && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
}
#endif

static void ip_init(void) {
    if (ip_kernel >= 0) return;
    const char *tiles = getenv("MT_FUSED_STEP_TILES");
    ip_vnni_tiles = !tiles || strcmp(tiles, "0") != 0;
    ip_kernel = IP_PLAIN;
    const char *force = ip_forced();
    if (strcmp(force, "plain") == 0) return;
#if defined(__x86_64__)
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const int wide = strcmp(force, "avx2") != 0 && strcmp(force, "avxvnni") != 0;
    if (wide && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vnni"))
        ip_kernel = IP_VNNI;
    else if (strcmp(force, "avx2") != 0 && avx2 && ip_has_avxvnni())
        ip_kernel = IP_AVXVNNI;
    else if (avx2)
        ip_kernel = IP_AVX2;
#endif
#if IP_AMX_POSSIBLE
    unsigned a, b, c, d;
    if (ip_kernel == IP_VNNI && strcmp(ip_forced(), "vnni") != 0 && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
        (d >> 24 & 1) && (d >> 25 & 1))
        ip_amx = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#endif
}

/* pack w [k][n] (row major), scales and bias into `q`; returns 0 when memory ran out */
static int ip_pack(qlinear *q, const int8_t *w_kn, int k, int n, const float *w_scale, const float *bias,
                   float x_scale, int x_zero) {
    const int np = (n + 15) / 16 * 16, kp = (k + 63) / 64 * 64;
    memset(q, 0, sizeof *q);
    q->k = kp; q->n = np; q->n_real = n; q->x_scale = x_scale; q->x_zero = x_zero;
    q->w = aligned_alloc(64, (size_t)np * kp);
    q->colsum = calloc(np, sizeof(int32_t));
    q->multiplier = calloc(np, sizeof(float));
    q->bias = bias ? calloc(np, sizeof(float)) : NULL;
    if (!q->w || !q->colsum || !q->multiplier || (bias && !q->bias)) return 0;
    memset(q->w, 0, (size_t)np * kp);
    for (int j = 0; j < n; j++) {
        q->multiplier[j] = x_scale * w_scale[j];
        if (bias) q->bias[j] = bias[j];
        int32_t sum = 0;
        for (int i = 0; i < k; i++) {
            int8_t v = w_kn[(size_t)i * n + j];
            q->w[(((size_t)(j / 16) * (kp / 4) + i / 4) * 16 + j % 16) * 4 + i % 4] = v;
            sum += v;
        }
        q->colsum[j] = sum;
    }
    return 1;
}

/* the columns `ids` of an already packed product `all` (a vocabulary subset of the output product): each column's
   4-byte groups copied from its block, 64 of them for k = 256 */
static int ip_pack_columns(qlinear *q, const qlinear *all, const int64_t *ids, int n) {
    const int np = (n + 15) / 16 * 16, kp = all->k, groups = kp / 4;
    memset(q, 0, sizeof *q);
    q->k = kp; q->n = np; q->n_real = n; q->x_scale = all->x_scale; q->x_zero = all->x_zero;
    q->w = aligned_alloc(64, (size_t)np * kp);
    q->colsum = calloc(np, sizeof(int32_t));
    q->multiplier = calloc(np, sizeof(float));
    q->bias = all->bias ? calloc(np, sizeof(float)) : NULL; /* an output bias (imported Marian models) */
    if (!q->w || !q->colsum || !q->multiplier || (all->bias && !q->bias)) return 0;
    memset(q->w, 0, (size_t)np * kp);
    for (int j = 0; j < n; j++) {
        const int64_t id = ids[j];
        if (q->bias) q->bias[j] = all->bias[id];
        const int32_t *from = (const int32_t *)all->w + (size_t)(id / 16) * groups * 16 + id % 16;
        int32_t *to = (int32_t *)q->w + (size_t)(j / 16) * groups * 16 + j % 16;
        for (int g = 0; g < groups; g++) to[(size_t)g * 16] = from[(size_t)g * 16];
        q->multiplier[j] = all->multiplier[id];
        q->colsum[j] = all->colsum[id];
    }
    return 1;
}

static void ip_free(qlinear *q) {
    free(q->w); free(q->colsum); free(q->multiplier); free(q->bias);
    memset(q, 0, sizeof *q);
}

/* bytes the activations of `rows` rows of width k take in ip_product's `xq` (rows rounded up to AMX's 16; two bytes
   a value, the AVX2 kernel's int16) */
static size_t ip_xq_bytes(int rows, int k) { return 2 * (size_t)(rows + 15) / 16 * 16 * ((k + 63) / 64 * 64) + 64; }

static inline float ip_out(const qlinear *q, int32_t acc, int j) {
    float v = (float)(acc - q->x_zero * q->colsum[j]);
    return q->bias ? fmaf(v, q->multiplier[j], q->bias[j]) : v * q->multiplier[j];
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void ip_store16(const qlinear *q, __m512i acc, int c0,
                                                                              float *y) {
    __m512i shift = _mm512_mullo_epi32(_mm512_loadu_si512(q->colsum + c0), _mm512_set1_epi32(q->x_zero));
    __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, shift)), m = _mm512_loadu_ps(q->multiplier + c0);
    _mm512_storeu_ps(y, q->bias ? _mm512_fmadd_ps(v, m, _mm512_loadu_ps(q->bias + c0)) : _mm512_mul_ps(v, m));
}

/* rows [from, to) one at a time, four 16-column blocks per pass: four independent vpdpbusd chains share each
   broadcast of the row's activations */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void ip_vnni_rows(const qlinear *q, const uint8_t *xq,
                                                                               float *Y, int sy, int from, int to) {
    const int k = q->k, blocks = q->n / 16;
    for (int r = from; r < to; r++) {
        const int32_t *x = (const int32_t *)(xq + (size_t)r * k);
        int b = 0;
        for (; b + 4 <= blocks; b += 4) {
            const int8_t *w0 = q->w + (size_t)b * k * 16;
            const size_t block = (size_t)k * 16;
            __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
            for (int kk = 0; kk < k / 4; kk++) {
                const __m512i v = _mm512_set1_epi32(x[kk]);
                const int8_t *w = w0 + (size_t)kk * 64;
                a0 = _mm512_dpbusd_epi32(a0, v, _mm512_load_si512(w));
                a1 = _mm512_dpbusd_epi32(a1, v, _mm512_load_si512(w + block));
                a2 = _mm512_dpbusd_epi32(a2, v, _mm512_load_si512(w + 2 * block));
                a3 = _mm512_dpbusd_epi32(a3, v, _mm512_load_si512(w + 3 * block));
            }
            ip_store16(q, a0, b * 16, Y + (size_t)r * sy + b * 16);
            ip_store16(q, a1, (b + 1) * 16, Y + (size_t)r * sy + (b + 1) * 16);
            ip_store16(q, a2, (b + 2) * 16, Y + (size_t)r * sy + (b + 2) * 16);
            ip_store16(q, a3, (b + 3) * 16, Y + (size_t)r * sy + (b + 3) * 16);
        }
        for (; b < blocks; b++) {
            const int8_t *wb = q->w + (size_t)b * k * 16;
            __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
            int kk = 0;
            for (; kk + 1 < k / 4; kk += 2) {
                a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(x[kk]), _mm512_load_si512(wb + (size_t)kk * 64));
                a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(x[kk + 1]), _mm512_load_si512(wb + (size_t)(kk + 1) * 64));
            }
            for (; kk < k / 4; kk++)
                a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(x[kk]), _mm512_load_si512(wb + (size_t)kk * 64));
            ip_store16(q, _mm512_add_epi32(a0, a1), b * 16, Y + (size_t)r * sy + b * 16);
        }
    }
}

/* rows [0, rows - rows % 4) of column blocks [b0, b0 + 4): tiles of 4 rows x 4 blocks, 16 accumulators, so that each
   k step's 4 weight loads and 4 broadcasts feed 16 vpdpbusd (the 4 x 1 tile below: 5 loads for 4; 16 independent
   chains instead of 4). Exact sums: the same bits as the 4 x 1 tile (speed-log item 57) */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void ip_vnni_4x4(const qlinear *q, const uint8_t *xq,
                                                                              float *Y, int sy, int rows, int b0) {
    const int k = q->k;
    const size_t block = (size_t)k * 16;
    const int8_t *w0 = q->w + (size_t)b0 * block;
    for (int r = 0; r + 4 <= rows; r += 4) {
        const int32_t *x0 = (const int32_t *)(xq + (size_t)r * k), *x1 = x0 + k / 4, *x2 = x1 + k / 4, *x3 = x2 + k / 4;
        __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00,
                c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00;
        for (int kk = 0; kk < k / 4; kk++) {
            const int8_t *w = w0 + (size_t)kk * 64;
            const __m512i u0 = _mm512_load_si512(w), u1 = _mm512_load_si512(w + block),
                          u2 = _mm512_load_si512(w + 2 * block), u3 = _mm512_load_si512(w + 3 * block);
            __m512i v = _mm512_set1_epi32(x0[kk]);
            c00 = _mm512_dpbusd_epi32(c00, v, u0); c01 = _mm512_dpbusd_epi32(c01, v, u1);
            c02 = _mm512_dpbusd_epi32(c02, v, u2); c03 = _mm512_dpbusd_epi32(c03, v, u3);
            v = _mm512_set1_epi32(x1[kk]);
            c10 = _mm512_dpbusd_epi32(c10, v, u0); c11 = _mm512_dpbusd_epi32(c11, v, u1);
            c12 = _mm512_dpbusd_epi32(c12, v, u2); c13 = _mm512_dpbusd_epi32(c13, v, u3);
            v = _mm512_set1_epi32(x2[kk]);
            c20 = _mm512_dpbusd_epi32(c20, v, u0); c21 = _mm512_dpbusd_epi32(c21, v, u1);
            c22 = _mm512_dpbusd_epi32(c22, v, u2); c23 = _mm512_dpbusd_epi32(c23, v, u3);
            v = _mm512_set1_epi32(x3[kk]);
            c30 = _mm512_dpbusd_epi32(c30, v, u0); c31 = _mm512_dpbusd_epi32(c31, v, u1);
            c32 = _mm512_dpbusd_epi32(c32, v, u2); c33 = _mm512_dpbusd_epi32(c33, v, u3);
        }
        float *y0 = Y + (size_t)r * sy + b0 * 16, *y1 = y0 + sy, *y2 = y1 + sy, *y3 = y2 + sy;
        const int c = b0 * 16;
        ip_store16(q, c00, c, y0); ip_store16(q, c01, c + 16, y0 + 16);
        ip_store16(q, c02, c + 32, y0 + 32); ip_store16(q, c03, c + 48, y0 + 48);
        ip_store16(q, c10, c, y1); ip_store16(q, c11, c + 16, y1 + 16);
        ip_store16(q, c12, c + 32, y1 + 32); ip_store16(q, c13, c + 48, y1 + 48);
        ip_store16(q, c20, c, y2); ip_store16(q, c21, c + 16, y2 + 16);
        ip_store16(q, c22, c + 32, y2 + 32); ip_store16(q, c23, c + 48, y2 + 48);
        ip_store16(q, c30, c, y3); ip_store16(q, c31, c + 16, y3 + 16);
        ip_store16(q, c32, c + 32, y3 + 32); ip_store16(q, c33, c + 48, y3 + 48);
    }
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void ip_vnni(const qlinear *q, const uint8_t *xq,
                                                                          float *Y, int sy, int rows) {
    const int k = q->k, n = q->n;
    const int rest = rows - rows % 4; /* rows left over from the fours: ip_vnni_rows */
    int b = 0;
    if (rows >= 4 && ip_vnni_tiles)
        for (; b + 4 <= n / 16; b += 4) ip_vnni_4x4(q, xq, Y, sy, rows, b);
    for (; b < n / 16; b++) {
        const int8_t *wb = q->w + (size_t)b * k * 16;
        int r = 0;
        for (; r + 4 <= rows; r += 4) { /* four rows share each load of the weights */
            const int32_t *x0 = (const int32_t *)(xq + (size_t)r * k), *x1 = x0 + k / 4, *x2 = x1 + k / 4,
                          *x3 = x2 + k / 4;
            __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
            for (int kk = 0; kk < k / 4; kk++) {
                __m512i w = _mm512_load_si512(wb + (size_t)kk * 64);
                a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(x0[kk]), w);
                a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(x1[kk]), w);
                a2 = _mm512_dpbusd_epi32(a2, _mm512_set1_epi32(x2[kk]), w);
                a3 = _mm512_dpbusd_epi32(a3, _mm512_set1_epi32(x3[kk]), w);
            }
            ip_store16(q, a0, b * 16, Y + (size_t)r * sy + b * 16);
            ip_store16(q, a1, b * 16, Y + (size_t)(r + 1) * sy + b * 16);
            ip_store16(q, a2, b * 16, Y + (size_t)(r + 2) * sy + b * 16);
            ip_store16(q, a3, b * 16, Y + (size_t)(r + 3) * sy + b * 16);
        }
    }
    if (rest < rows) ip_vnni_rows(q, xq, Y, sy, rest, rows);
}
/* q(x) for n values: divide, clamp, round to nearest even (vcvtps2dq in the default rounding mode), add the zero
   point, as MLAS's QuantizeLinear */
__attribute__((target("avx512f,avx512bw"))) static void ip_quantize_avx512(const float *x, int n, float scale, int zero,
                                                                          uint8_t *out) {
    const __m512 s = _mm512_set1_ps(scale), lo = _mm512_set1_ps((float)-zero), hi = _mm512_set1_ps((float)(255 - zero));
    const __m512i z = _mm512_set1_epi32(zero);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 live = n - j >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(live, x + j), s);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        _mm512_mask_cvtusepi32_storeu_epi8(out + j, live, _mm512_add_epi32(_mm512_cvtps_epi32(v), z));
    }
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} ip_tile_config;

/* AMX: two 16 x 16 accumulator tiles share each 16-row activation tile; `xq` holds rows rounded up to 16 */
__attribute__((target("avx512f,avx512bw,avx512vnni,amx-tile,amx-int8"))) static void ip_amx_product(
    const qlinear *q, const uint8_t *xq, float *Y, int sy, int rows) {
    const int k = q->k, blocks = q->n / 16;
    ip_tile_config cfg = {0};
    cfg.palette = 1;
    for (int t = 0; t < 5; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
    _tile_loadconfig(&cfg);
    int32_t acc[2][16 * 16] __attribute__((aligned(64)));
    for (int r0 = 0; r0 < rows; r0 += 16) {
        const uint8_t *a = xq + (size_t)r0 * k;
        for (int b = 0; b < blocks; b += 2) {
            const int two = b + 1 < blocks;
            const int8_t *w0 = q->w + (size_t)b * k * 16, *w1 = w0 + (size_t)k * 16;
            _tile_zero(0);
            _tile_zero(3);
            for (int kc = 0; kc < k; kc += 64) {
                _tile_loadd(1, a + kc, k);
                _tile_loadd(2, w0 + (size_t)kc * 16, 64);
                _tile_dpbusd(0, 1, 2);
                if (two) {
                    _tile_loadd(4, w1 + (size_t)kc * 16, 64);
                    _tile_dpbusd(3, 1, 4);
                }
            }
            _tile_stored(0, acc[0], 64);
            _tile_stored(3, acc[1], 64);
            for (int half = 0; half <= two; half++)
                for (int i = 0; i < 16 && r0 + i < rows; i++)
                    ip_store16(q, _mm512_load_si512(acc[half] + i * 16), (b + half) * 16,
                               Y + (size_t)(r0 + i) * sy + (b + half) * 16);
        }
    }
    _tile_release();
}

/* --- CPUs without AVX-512: 8 columns per 256-bit register ---------------------------------------------------------- */

__attribute__((target("avx2,fma"))) static void ip_store8(const qlinear *q, __m256i acc, int c0, float *y) {
    const __m256i shift = _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)(q->colsum + c0)),
                                             _mm256_set1_epi32(q->x_zero));
    const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc, shift)), m = _mm256_loadu_ps(q->multiplier + c0);
    _mm256_storeu_ps(y, q->bias ? _mm256_fmadd_ps(v, m, _mm256_loadu_ps(q->bias + c0)) : _mm256_mul_ps(v, m));
}

/* AVX-VNNI, one row x the 16 columns of a block: even and odd groups in their own accumulators (four chains) */
__attribute__((target("avx2,fma,avxvnni"))) static void ip_avxvnni_one(const qlinear *q, const int8_t *wb,
                                                                        const int32_t *x, int c0, float *y) {
    __m256i lo0 = _mm256_setzero_si256(), hi0 = lo0, lo1 = lo0, hi1 = lo0;
    int g = 0;
    for (; g + 2 <= q->k / 4; g += 2) {
        const int8_t *w = wb + (size_t)g * 64;
        const __m256i v0 = _mm256_set1_epi32(x[g]), v1 = _mm256_set1_epi32(x[g + 1]);
        lo0 = _mm256_dpbusd_avx_epi32(lo0, v0, _mm256_load_si256((const __m256i *)w));
        hi0 = _mm256_dpbusd_avx_epi32(hi0, v0, _mm256_load_si256((const __m256i *)(w + 32)));
        lo1 = _mm256_dpbusd_avx_epi32(lo1, v1, _mm256_load_si256((const __m256i *)(w + 64)));
        hi1 = _mm256_dpbusd_avx_epi32(hi1, v1, _mm256_load_si256((const __m256i *)(w + 96)));
    }
    for (; g < q->k / 4; g++) { /* k is a multiple of 64: not reached */
        const __m256i v = _mm256_set1_epi32(x[g]);
        lo0 = _mm256_dpbusd_avx_epi32(lo0, v, _mm256_load_si256((const __m256i *)(wb + (size_t)g * 64)));
        hi0 = _mm256_dpbusd_avx_epi32(hi0, v, _mm256_load_si256((const __m256i *)(wb + (size_t)g * 64 + 32)));
    }
    ip_store8(q, _mm256_add_epi32(lo0, lo1), c0, y);
    ip_store8(q, _mm256_add_epi32(hi0, hi1), c0 + 8, y + 8);
}

/* AVX-VNNI: vpdpbusd on 256-bit registers, columns 0-7 and 8-15 of a block in two accumulators per row, four rows
   per weight load; the rows left over from the fours one by one */
__attribute__((target("avx2,fma,avxvnni"))) static void ip_avxvnni(const qlinear *q, const uint8_t *xq, float *Y,
                                                                    int sy, int rows) {
    const int k = q->k, groups = k / 4;
    for (int b = 0; b < q->n / 16; b++) {
        const int8_t *wb = q->w + (size_t)b * k * 16;
        int r = 0;
        for (; r + 4 <= rows; r += 4) {
            const int32_t *x[4];
            for (int i = 0; i < 4; i++) x[i] = (const int32_t *)(xq + (size_t)(r + i) * k);
            __m256i lo[4], hi[4];
            for (int i = 0; i < 4; i++) lo[i] = hi[i] = _mm256_setzero_si256();
            for (int g = 0; g < groups; g++) {
                const __m256i w0 = _mm256_load_si256((const __m256i *)(wb + (size_t)g * 64));
                const __m256i w1 = _mm256_load_si256((const __m256i *)(wb + (size_t)g * 64 + 32));
                for (int i = 0; i < 4; i++) {
                    const __m256i v = _mm256_set1_epi32(x[i][g]);
                    lo[i] = _mm256_dpbusd_avx_epi32(lo[i], v, w0);
                    hi[i] = _mm256_dpbusd_avx_epi32(hi[i], v, w1);
                }
            }
            for (int i = 0; i < 4; i++) {
                ip_store8(q, lo[i], b * 16, Y + (size_t)(r + i) * sy + b * 16);
                ip_store8(q, hi[i], b * 16 + 8, Y + (size_t)(r + i) * sy + b * 16 + 8);
            }
        }
        for (; r < rows; r++)
            ip_avxvnni_one(q, wb, (const int32_t *)(xq + (size_t)r * k), b * 16, Y + (size_t)r * sy + b * 16);
    }
}

/* the four int16 activations of group g of a row (x: the row's int16 values), in all four 64-bit quarters */
__attribute__((target("avx2"))) static inline __m256i ip_quad16(const int16_t *x, int g) {
    int64_t four;
    memcpy(&four, x + (size_t)g * 4, 8);
    return _mm256_set1_epi64x(four);
}

/* columns in (c0, c0, c1, c1, c2, c2, c3, c3) pairs of a and (c4 .. c7) of b -> (c0 .. c7) */
__attribute__((target("avx2"))) static inline __m256i ip_fold_pairs(__m256i a, __m256i b) {
    return _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(a, b), _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
}

/* quarter c (4 columns x 4 k) of the 64-byte group at w, sign-extended to int16 */
__attribute__((target("avx2"))) static inline __m256i ip_quarter16(const int8_t *w, int c) {
    return _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(w + c * 16)));
}

/* int32 lanes as GCC's vector type: `acc += ...` keeps each accumulator in its register, where
   `acc = _mm256_add_epi32(acc, ...)` made GCC 12 copy them every iteration (13% slower, item 55) */
typedef int32_t ip_v8si __attribute__((vector_size(32)));
#define IP_MADD(acc, w, v) acc += (ip_v8si)_mm256_madd_epi16(w, v)

/* AVX2, four rows x 8 columns (the half `half` of a 16-column block): each group's two quarters are widened once
   and used by the four rows, eight accumulators (the register budget of 16 ymm registers; measured the fastest of
   1-6 rows x 4-16 columns on Zen 4, docs/engine-speed-log.md item 55) */
__attribute__((target("avx2,fma"))) static void ip_avx2_four(const qlinear *q, const int8_t *wb, const int16_t *x,
                                                            int half, int c0, float *y, int sy) {
    const int k = q->k;
    const int16_t *x1 = x + k, *x2 = x1 + k, *x3 = x2 + k;
    ip_v8si a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
    const int8_t *w = wb + half * 32;
    for (int g = 0; g < k / 4; g++, w += 64) {
        const __m256i w0 = ip_quarter16(w, 0), w1 = ip_quarter16(w, 1);
        __m256i v = ip_quad16(x, g);
        IP_MADD(a00, w0, v); IP_MADD(a01, w1, v);
        v = ip_quad16(x1, g);
        IP_MADD(a10, w0, v); IP_MADD(a11, w1, v);
        v = ip_quad16(x2, g);
        IP_MADD(a20, w0, v); IP_MADD(a21, w1, v);
        v = ip_quad16(x3, g);
        IP_MADD(a30, w0, v); IP_MADD(a31, w1, v);
    }
    ip_store8(q, ip_fold_pairs((__m256i)a00, (__m256i)a01), c0, y);
    ip_store8(q, ip_fold_pairs((__m256i)a10, (__m256i)a11), c0, y + sy);
    ip_store8(q, ip_fold_pairs((__m256i)a20, (__m256i)a21), c0, y + 2 * (size_t)sy);
    ip_store8(q, ip_fold_pairs((__m256i)a30, (__m256i)a31), c0, y + 3 * (size_t)sy);
}

/* AVX2, six rows x 8 columns: twelve accumulators, each widened quarter used by six rows (4-5% faster than four
   rows at 16-128 rows, item 55) */
__attribute__((target("avx2,fma"))) static void ip_avx2_six(const qlinear *q, const int8_t *wb, const int16_t *x,
                                                           int half, int c0, float *y, int sy) {
    const int k = q->k;
    ip_v8si a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0}, a40 = {0},
            a41 = {0}, a50 = {0}, a51 = {0};
    const int8_t *w = wb + half * 32;
    for (int g = 0; g < k / 4; g++, w += 64) {
        const __m256i w0 = ip_quarter16(w, 0), w1 = ip_quarter16(w, 1);
        __m256i v = ip_quad16(x, g);
        IP_MADD(a00, w0, v); IP_MADD(a01, w1, v);
        v = ip_quad16(x + k, g);
        IP_MADD(a10, w0, v); IP_MADD(a11, w1, v);
        v = ip_quad16(x + 2 * (size_t)k, g);
        IP_MADD(a20, w0, v); IP_MADD(a21, w1, v);
        v = ip_quad16(x + 3 * (size_t)k, g);
        IP_MADD(a30, w0, v); IP_MADD(a31, w1, v);
        v = ip_quad16(x + 4 * (size_t)k, g);
        IP_MADD(a40, w0, v); IP_MADD(a41, w1, v);
        v = ip_quad16(x + 5 * (size_t)k, g);
        IP_MADD(a50, w0, v); IP_MADD(a51, w1, v);
    }
    ip_store8(q, ip_fold_pairs((__m256i)a00, (__m256i)a01), c0, y);
    ip_store8(q, ip_fold_pairs((__m256i)a10, (__m256i)a11), c0, y + sy);
    ip_store8(q, ip_fold_pairs((__m256i)a20, (__m256i)a21), c0, y + 2 * (size_t)sy);
    ip_store8(q, ip_fold_pairs((__m256i)a30, (__m256i)a31), c0, y + 3 * (size_t)sy);
    ip_store8(q, ip_fold_pairs((__m256i)a40, (__m256i)a41), c0, y + 4 * (size_t)sy);
    ip_store8(q, ip_fold_pairs((__m256i)a50, (__m256i)a51), c0, y + 5 * (size_t)sy);
}

/* AVX2, one row x the 16 columns of a block: four accumulators, each quarter widened for the one row */
__attribute__((target("avx2,fma"))) static void ip_avx2_one(const qlinear *q, const int8_t *wb, const int16_t *x,
                                                           int c0, float *y) {
    ip_v8si a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    const int8_t *w = wb;
    for (int g = 0; g < q->k / 4; g++, w += 64) {
        const __m256i v = ip_quad16(x, g);
        IP_MADD(a0, ip_quarter16(w, 0), v); IP_MADD(a1, ip_quarter16(w, 1), v);
        IP_MADD(a2, ip_quarter16(w, 2), v); IP_MADD(a3, ip_quarter16(w, 3), v);
    }
    ip_store8(q, ip_fold_pairs((__m256i)a0, (__m256i)a1), c0, y);
    ip_store8(q, ip_fold_pairs((__m256i)a2, (__m256i)a3), c0 + 8, y + 8);
}
#undef IP_MADD

/* AVX2: each 16-byte quarter of a 64-byte weight group (4 columns x 4 k) sign-extended to int16 (vpmovsxbw) and
   multiplied by a row's 4 activations, already int16 (`x`, ip_quantize_avx2), with vpmaddwd: exact int32 sums of
   pairs, folded into columns once per block. Rows six at a time, then four, the rest one by one. */
__attribute__((target("avx2,fma"))) static void ip_avx2(const qlinear *q, const int16_t *x, float *Y, int sy,
                                                       int rows) {
    const int k = q->k;
    for (int b = 0; b < q->n / 16; b++) {
        const int8_t *wb = q->w + (size_t)b * k * 16;
        int r = 0;
        for (; r + 6 <= rows; r += 6) {
            ip_avx2_six(q, wb, x + (size_t)r * k, 0, b * 16, Y + (size_t)r * sy + b * 16, sy);
            ip_avx2_six(q, wb, x + (size_t)r * k, 1, b * 16 + 8, Y + (size_t)r * sy + b * 16 + 8, sy);
        }
        for (; r + 4 <= rows; r += 4) {
            ip_avx2_four(q, wb, x + (size_t)r * k, 0, b * 16, Y + (size_t)r * sy + b * 16, sy);
            ip_avx2_four(q, wb, x + (size_t)r * k, 1, b * 16 + 8, Y + (size_t)r * sy + b * 16 + 8, sy);
        }
        for (; r < rows; r++) ip_avx2_one(q, wb, x + (size_t)r * k, b * 16, Y + (size_t)r * sy + b * 16);
    }
}

/* q(x) for n values, as MLAS's QuantizeLinear: divide, clamp, round to nearest even (vcvtps2dq in the default
   rounding mode), add the zero point; the same values as the scalar loop. As int16 (`out16`: the AVX2 kernel's
   activations) or bytes (`out8`, AVX-VNNI's). */
__attribute__((target("avx2,fma"))) static void ip_quantize_avx2(const float *x, int n, float scale, int zero,
                                                                int16_t *out16, uint8_t *out8) {
    const __m256 s = _mm256_set1_ps(scale), lo = _mm256_set1_ps((float)-zero), hi = _mm256_set1_ps((float)(255 - zero));
    const __m256i z = _mm256_set1_epi32(zero);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + j), s);
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        const __m256i i = _mm256_add_epi32(_mm256_cvtps_epi32(v), z);
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
        if (out16) _mm_storeu_si128((__m128i *)(out16 + j), w);
        else _mm_storel_epi64((__m128i *)(out8 + j), _mm_packus_epi16(w, w));
    }
    for (; j < n; j++) {
        float v = x[j] / scale;
        v = v < -zero ? (float)-zero : (v > 255 - zero ? (float)(255 - zero) : v);
        const int u = (int)nearbyintf(v) + zero;
        if (out16) out16[j] = (int16_t)u;
        else out8[j] = (uint8_t)u;
    }
}
#endif

static void ip_plain(const qlinear *q, const uint8_t *xq, float *Y, int sy, int rows) {
    const int k = q->k;
    for (int b = 0; b < q->n / 16; b++) {
        const int8_t *wb = q->w + (size_t)b * k * 16;
        for (int r = 0; r < rows; r++) {
            const uint8_t *x = xq + (size_t)r * k;
            int32_t acc[16] = {0};
            for (int kk = 0; kk < k / 4; kk++)
                for (int c = 0; c < 16; c++)
                    for (int i = 0; i < 4; i++) acc[c] += (int32_t)x[kk * 4 + i] * wb[((size_t)kk * 16 + c) * 4 + i];
            for (int c = 0; c < 16; c++) Y[(size_t)r * sy + b * 16 + c] = ip_out(q, acc[c], b * 16 + c);
        }
    }
}

/* rows a kernel takes at a time: all the column blocks for 16 rows, then the next 16. With every row per block, the
   whole vocabulary's product (16,000 columns) at 128 rows stored one 64-byte line in each of 128 rows' pages per
   block, and ran 20% slower on Zen 4 (item 55); 16 rows' activations also stay in L1. */
#define IP_CHUNK 16

/* Y[r][0:q->n] = the product of X's rows r < rows (row stride sx, q->n_real... wide: columns from q->n_real on are
   the padding's, 0 * multiplier) for `rows` rows; xq: ip_xq_bytes(rows, k) bytes of scratch, 64-byte aligned */
static void ip_product(const qlinear *q, const float *X, int sx, int k_real, float *Y, int sy, int rows, uint8_t *xq) {
    const int k = q->k;
    const float lo = (float)(0 - q->x_zero), hi = (float)(255 - q->x_zero);
#if defined(__x86_64__)
    if (ip_kernel == IP_AVX2) { /* int16 activations; the padding's weights are zero: any value works */
        int16_t *x16 = (int16_t *)xq;
        for (int r = 0; r < rows; r++) {
            ip_quantize_avx2(X + (size_t)r * sx, k_real, q->x_scale, q->x_zero, x16 + (size_t)r * k, NULL);
            memset(x16 + (size_t)r * k + k_real, 0, (size_t)(k - k_real) * 2);
        }
        for (int r = 0; r < rows; r += IP_CHUNK)
            ip_avx2(q, x16 + (size_t)r * k, Y + (size_t)r * sy, sy, rows - r < IP_CHUNK ? rows - r : IP_CHUNK);
        return;
    }
#endif
    for (int r = 0; r < rows; r++) {
        uint8_t *out = xq + (size_t)r * k;
        const float *x = X + (size_t)r * sx;
#if defined(__x86_64__)
        if (ip_kernel == IP_VNNI) {
            ip_quantize_avx512(x, k_real, q->x_scale, q->x_zero, out);
        } else if (ip_kernel == IP_AVXVNNI) {
            ip_quantize_avx2(x, k_real, q->x_scale, q->x_zero, NULL, out);
        } else
#endif
            for (int i = 0; i < k_real; i++) { /* MLAS: divide, clamp, round to nearest even, add the zero point */
                float v = x[i] / q->x_scale;
                v = v < lo ? lo : (v > hi ? hi : v);
                out[i] = (uint8_t)((int)nearbyintf(v) + q->x_zero);
            }
        memset(out + k_real, q->x_zero, k - k_real); /* padding rows of w are zero: any value works */
    }
#if defined(__x86_64__)
    if (ip_amx && ip_amx_min_rows > 0 && rows >= ip_amx_min_rows) {
        memset(xq + (size_t)rows * k, 0, (size_t)((rows + 15) / 16 * 16 - rows) * k);
        ip_amx_product(q, xq, Y, sy, rows);
        return;
    }
    for (int r = 0; r < rows; r += IP_CHUNK) {
        const int n = rows - r < IP_CHUNK ? rows - r : IP_CHUNK;
        if (ip_kernel == IP_VNNI) ip_vnni(q, xq + (size_t)r * k, Y + (size_t)r * sy, sy, n);
        else if (ip_kernel == IP_AVXVNNI) ip_avxvnni(q, xq + (size_t)r * k, Y + (size_t)r * sy, sy, n);
        else ip_plain(q, xq + (size_t)r * k, Y + (size_t)r * sy, sy, n);
    }
    return;
#endif
    ip_plain(q, xq, Y, sy, rows);
}

#endif
