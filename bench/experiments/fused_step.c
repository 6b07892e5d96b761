/* The decoder step of a bundle's shape as one C call: the sizing probe of bench/experiments/fused_step.py.

   What a fused kernel per step would cost on this CPU, against onnxruntime's ~150 nodes: the same arithmetic as
   the int8 step graph, for any number of rows (pre-norm layers: LayerNorm, Q|K|V product, self-attention over the cache with the
   new column written in place, output product, residual; LayerNorm, cross query product, attention over the source's
   keys and values, output product, residual; LayerNorm, FFN with ReLU, residual; final LayerNorm, output product
   over `vocab_rows` rows, log-softmax, arg-max). Every product is u8 activations (one scale, zero point 128, as the
   exporter's static quantization) times s8 weights with a scale per output column, accumulated in int32, like
   onnxruntime's QuantizeLinear + MatMulIntegerToFloat. Weights are random: this measures time, not translations.

   Products use AMX tiles from `amx_min_rows` rows (8; fs_set_amx_rows) where the CPU has them and Linux grants
   them, AVX-512 VNNI (vpdpbusd; four rows share each load of a 16-column block) below that or without AMX, and
   plain loops the compiler vectorizes as it can on CPUs without VNNI; no threads. Built with -ffast-math (the
   exponentials of the softmaxes vectorized, as CTranslate2's and onnxruntime's are). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
#include <immintrin.h>
#define FS_VNNI 1
#else
#define FS_VNNI 0
#endif
#if FS_VNNI && defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define FS_AMX 1
#else
#define FS_AMX 0
#endif

typedef struct {
    int k, n;        /* input and output widths; n padded to a multiple of 16, k to a multiple of 4 */
    int8_t *w;       /* packed [n / 16][k / 4][16][4]: 16 columns, 4 consecutive k each (vpdpbusd's layout) */
    int32_t *colsum; /* sum over k of each column's weights: removes the activations' zero point */
    float *scale;    /* per output column */
    float *bias;
    float x_scale;   /* the activations' quantization scale (fixed, as calibrated) */
} qlinear;

typedef struct {
    int d, heads, ff, layers, vocab_rows, max_len, src_len, cur_src, max_rows; /* src_len: the most; cur_src: now */
    float *embedding, *positions;              /* [vocab][d], [max_len][d] */
    float *ln_gamma, *ln_beta;                 /* [layers * 3 + 1][d] */
    qlinear *qkv, *self_out, *cross_q, *cross_out, *ff1, *ff2, out;
    float *self_k, *self_v;                    /* [rows][layers][heads][max_len][d_head] */
    float *cross_k, *cross_v;                  /* [rows][layers][heads][src_len][d_head] */
    float *x, *h, *t3, *att, *scores, *logits; /* work buffers, a row each */
    uint8_t *xq;
    int wide, *tokens;
} model;

int fs_has_vnni(void) { return FS_VNNI; }

/* products of at least this many rows use AMX tiles when the CPU and kernel grant them (fs_set_amx_rows: 0 = never) */
static int amx_min_rows = 8;
void fs_set_amx_rows(int rows) { amx_min_rows = rows; }

#if FS_AMX
static int amx_granted(void) { /* Linux hands AMX's tile data to a process that asks (ARCH_REQ_XCOMP_PERM, 18) */
    static int granted = -1;
    if (granted < 0) granted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    return granted;
}
int fs_has_amx(void) { return amx_granted(); }

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;
#else
int fs_has_amx(void) { return 0; }
#endif

static uint32_t rng_state;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static void pack(qlinear *q, const int8_t *w_kn, int k, int n, const float *scale, const float *bias, float x_scale) {
    int np = (n + 15) / 16 * 16, kp = (k + 3) / 4 * 4;
    q->k = kp; q->n = np; q->x_scale = x_scale;
    q->w = aligned_alloc(64, (size_t)np * kp);
    q->colsum = calloc(np, sizeof(int32_t));
    q->scale = calloc(np, sizeof(float));
    q->bias = calloc(np, sizeof(float));
    memset(q->w, 0, (size_t)np * kp);
    for (int j = 0; j < n; j++) {
        q->scale[j] = scale[j];
        q->bias[j] = bias ? bias[j] : 0.0f;
        for (int i = 0; i < k; i++) {
            int8_t v = w_kn[(size_t)i * n + j];
            q->w[(((size_t)(j / 16) * (kp / 4) + i / 4) * 16 + j % 16) * 4 + i % 4] = v;
            q->colsum[j] += v;
        }
    }
}

static void random_linear(qlinear *q, int k, int n) {
    int8_t *w = malloc((size_t)k * n);
    float *scale = malloc(n * sizeof(float)), *bias = malloc(n * sizeof(float));
    for (size_t i = 0; i < (size_t)k * n; i++) w[i] = (int8_t)(frand() * 127.0f);
    for (int j = 0; j < n; j++) { scale[j] = 0.02f / 127.0f / sqrtf((float)k) * 8.0f; bias[j] = 0.01f * frand(); }
    pack(q, w, k, n, scale, bias, 8.0f / 127.0f);
    free(w); free(scale); free(bias);
}

#if FS_AMX
/* the product with AMX tiles: 16 rows x 16 columns of int32 per accumulator tile (two, sharing each activation
   tile), 64 values of k per step; the packed weights' 16-column blocks are already the B tiles' layout (16 groups of
   4 k values x 16 columns = 1 KiB per 64 k). `xq` holds rows rounded up to 16, the extra rows zero. */
static void qgemm_amx(const qlinear *q, const uint8_t *xq, float *Y, int sy, int rows) {
    const int k = q->k, n = q->n, blocks = n / 16;
    tile_config cfg = {0};
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
            for (int half = 0; half <= two; half++) {
                const int c0 = (b + half) * 16;
                __m512i shift = _mm512_slli_epi32(_mm512_loadu_si512(q->colsum + c0), 7);
                __m512 s = _mm512_mul_ps(_mm512_loadu_ps(q->scale + c0), _mm512_set1_ps(q->x_scale));
                __m512 bias = _mm512_loadu_ps(q->bias + c0);
                for (int i = 0; i < 16 && r0 + i < rows; i++) {
                    __m512i v = _mm512_sub_epi32(_mm512_load_si512(acc[half] + i * 16), shift);
                    _mm512_storeu_ps(Y + (size_t)(r0 + i) * sy + c0, _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), s, bias));
                }
            }
        }
    }
    _tile_release();
}
#endif

/* Y[r][0:n] = dequant(quant(X[r]) . W) + bias for `rows` rows of X (row stride sx) into Y (row stride sy): the u8 x
   s8 product; a block of 16 columns' weights (k x 16 bytes) stays in L1 while every row passes over it */
static void qgemm(const qlinear *q, const float *X, int sx, float *Y, int sy, int rows, uint8_t *xq) {
    const int k = q->k, n = q->n;
    const float inv = 1.0f / q->x_scale;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < k; i++) {
            float v = nearbyintf(X[(size_t)r * sx + i] * inv) + 128.0f;
            xq[(size_t)r * k + i] = (uint8_t)(v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v));
        }
#if FS_AMX
    if (amx_min_rows > 0 && rows >= amx_min_rows && k % 64 == 0 && amx_granted()) {
        memset(xq + (size_t)rows * k, 0, (size_t)((rows + 15) / 16 * 16 - rows) * k);
        qgemm_amx(q, xq, Y, sy, rows);
        return;
    }
#endif
#if FS_VNNI
    for (int b = 0; b < n / 16; b++) {
        const int8_t *wb = q->w + (size_t)b * k * 16;
        __m512i shift = _mm512_slli_epi32(_mm512_loadu_si512(q->colsum + b * 16), 7);
        __m512 s = _mm512_mul_ps(_mm512_loadu_ps(q->scale + b * 16), _mm512_set1_ps(q->x_scale));
        __m512 bias = _mm512_loadu_ps(q->bias + b * 16);
        int r = 0;
        for (; r + 4 <= rows; r += 4) { /* four rows share each load of the weights */
            const int32_t *x0 = (const int32_t *)(xq + (size_t)r * k), *x1 = x0 + k / 4, *x2 = x1 + k / 4, *x3 = x2 + k / 4;
            __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
            for (int kk = 0; kk < k / 4; kk++) {
                __m512i w = _mm512_load_si512(wb + (size_t)kk * 64);
                a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(x0[kk]), w);
                a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(x1[kk]), w);
                a2 = _mm512_dpbusd_epi32(a2, _mm512_set1_epi32(x2[kk]), w);
                a3 = _mm512_dpbusd_epi32(a3, _mm512_set1_epi32(x3[kk]), w);
            }
            __m512i acc[4] = {a0, a1, a2, a3};
            for (int i = 0; i < 4; i++)
                _mm512_storeu_ps(Y + (size_t)(r + i) * sy + b * 16,
                                 _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i], shift)), s, bias));
        }
        for (; r < rows; r++) {
            const int32_t *x4 = (const int32_t *)(xq + (size_t)r * k);
            __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
            int kk = 0;
            for (; kk + 1 < k / 4; kk += 2) {
                a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(x4[kk]), _mm512_load_si512(wb + (size_t)kk * 64));
                a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(x4[kk + 1]), _mm512_load_si512(wb + (size_t)(kk + 1) * 64));
            }
            for (; kk < k / 4; kk++)
                a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(x4[kk]), _mm512_load_si512(wb + (size_t)kk * 64));
            __m512i acc = _mm512_sub_epi32(_mm512_add_epi32(a0, a1), shift);
            _mm512_storeu_ps(Y + (size_t)r * sy + b * 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), s, bias));
        }
    }
#else
    for (int b = 0; b < n / 16; b++) {
        const int8_t *wb = q->w + (size_t)b * k * 16;
        for (int r = 0; r < rows; r++) {
            const uint8_t *x = xq + (size_t)r * k;
            int32_t acc[16] = {0};
            for (int kk = 0; kk < k / 4; kk++)
                for (int c = 0; c < 16; c++)
                    for (int i = 0; i < 4; i++) acc[c] += (int32_t)x[kk * 4 + i] * wb[((size_t)kk * 16 + c) * 4 + i];
            for (int c = 0; c < 16; c++) {
                int j = b * 16 + c;
                Y[(size_t)r * sy + j] = (float)(acc[c] - 128 * q->colsum[j]) * q->scale[j] * q->x_scale + q->bias[j];
            }
        }
    }
#endif
}

static void layer_norm(const float *x, const float *g, const float *b, float *y, int d) {
    float mean = 0.0f, var = 0.0f;
    for (int i = 0; i < d; i++) mean += x[i];
    mean /= (float)d;
    for (int i = 0; i < d; i++) var += (x[i] - mean) * (x[i] - mean);
    float r = 1.0f / sqrtf(var / (float)d + 1e-5f);
    for (int i = 0; i < d; i++) y[i] = (x[i] - mean) * r * g[i] + b[i];
}

/* softmax(q . K^T / sqrt(dh)) V for one head over `len` keys */
static void attend(const float *q, const float *k, const float *v, int len, int dh, float *out, float *scores) {
    float scale = 1.0f / sqrtf((float)dh), top = -INFINITY, sum = 0.0f;
    for (int t = 0; t < len; t++) {
        float s = 0.0f;
        for (int i = 0; i < dh; i++) s += q[i] * k[(size_t)t * dh + i];
        scores[t] = s * scale;
        if (scores[t] > top) top = scores[t];
    }
    for (int t = 0; t < len; t++) { scores[t] = expf(scores[t] - top); sum += scores[t]; }
    for (int i = 0; i < dh; i++) out[i] = 0.0f;
    for (int t = 0; t < len; t++) {
        float p = scores[t] / sum;
        for (int i = 0; i < dh; i++) out[i] += p * v[(size_t)t * dh + i];
    }
}

void *fs_create(int d, int heads, int ff, int layers, int vocab, int vocab_rows, int max_len, int src_len,
                int max_rows, unsigned seed) {
    rng_state = seed;
    model *m = calloc(1, sizeof(model));
    m->d = d; m->heads = heads; m->ff = ff; m->layers = layers; m->vocab_rows = vocab_rows;
    m->max_len = max_len; m->src_len = src_len; m->cur_src = src_len; m->max_rows = max_rows;
    m->embedding = malloc((size_t)vocab * d * sizeof(float));
    for (size_t i = 0; i < (size_t)vocab * d; i++) m->embedding[i] = 0.05f * frand();
    m->positions = malloc((size_t)max_len * d * sizeof(float));
    for (int p = 0; p < max_len; p++)
        for (int i = 0; i < d; i++) {
            double angle = p / pow(10000.0, (double)(i / 2 * 2) / d);
            m->positions[(size_t)p * d + i] = (float)(i % 2 ? cos(angle) : sin(angle));
        }
    m->ln_gamma = malloc((size_t)(layers * 3 + 1) * d * sizeof(float));
    m->ln_beta = malloc((size_t)(layers * 3 + 1) * d * sizeof(float));
    for (int i = 0; i < (layers * 3 + 1) * d; i++) { m->ln_gamma[i] = 1.0f + 0.1f * frand(); m->ln_beta[i] = 0.1f * frand(); }
    m->qkv = calloc(layers, sizeof(qlinear)); m->self_out = calloc(layers, sizeof(qlinear));
    m->cross_q = calloc(layers, sizeof(qlinear)); m->cross_out = calloc(layers, sizeof(qlinear));
    m->ff1 = calloc(layers, sizeof(qlinear)); m->ff2 = calloc(layers, sizeof(qlinear));
    for (int l = 0; l < layers; l++) {
        random_linear(&m->qkv[l], d, 3 * d); random_linear(&m->self_out[l], d, d);
        random_linear(&m->cross_q[l], d, d); random_linear(&m->cross_out[l], d, d);
        random_linear(&m->ff1[l], d, ff); random_linear(&m->ff2[l], ff, d);
    }
    random_linear(&m->out, d, vocab_rows);
    size_t self = (size_t)max_rows * layers * d * max_len, cross = (size_t)max_rows * layers * d * src_len;
    m->self_k = calloc(self, sizeof(float)); m->self_v = calloc(self, sizeof(float));
    m->cross_k = malloc(cross * sizeof(float)); m->cross_v = malloc(cross * sizeof(float));
    for (size_t i = 0; i < cross; i++) { m->cross_k[i] = frand(); m->cross_v[i] = frand(); }
    m->wide = (ff > 3 * d ? ff : 3 * d);
    m->x = malloc((size_t)max_rows * d * sizeof(float)); m->h = malloc((size_t)max_rows * d * sizeof(float));
    m->t3 = malloc((size_t)max_rows * m->wide * sizeof(float)); m->att = malloc((size_t)max_rows * d * sizeof(float));
    m->scores = malloc((max_len > src_len ? max_len : src_len) * sizeof(float));
    m->logits = malloc((size_t)max_rows * m->out.n * sizeof(float));
    m->xq = aligned_alloc(64, ((size_t)(max_rows + 15) / 16 * 16 * (m->wide + 64) + 63) / 64 * 64);
    m->tokens = malloc(max_rows * sizeof(int));
    return m;
}

/* one greedy step of the first `rows` rows (each its own cache and source) at position `pos` (the caches hold
   positions 0..pos-1); m->tokens in, the arg-max rows out */
static void step(model *m, int rows, int pos) {
    const int d = m->d, dh = d / m->heads, L = m->layers, H = m->heads, W = m->wide;
    const float root = sqrtf((float)d);
    for (int r = 0; r < rows; r++) {
        const float *e = m->embedding + (size_t)m->tokens[r] * d, *pe = m->positions + (size_t)pos * d;
        for (int i = 0; i < d; i++) m->x[(size_t)r * d + i] = e[i] * root + pe[i];
    }
    for (int l = 0; l < L; l++) {
        const float *g = m->ln_gamma + (size_t)l * 3 * d, *b = m->ln_beta + (size_t)l * 3 * d;
        for (int r = 0; r < rows; r++) layer_norm(m->x + (size_t)r * d, g, b, m->h + (size_t)r * d, d);
        qgemm(&m->qkv[l], m->h, d, m->t3, W, rows, m->xq);
        for (int r = 0; r < rows; r++)
            for (int hd = 0; hd < H; hd++) {
                const float *qkv = m->t3 + (size_t)r * W;
                size_t base = ((((size_t)r * L + l) * H) + hd) * m->max_len * dh;
                memcpy(m->self_k + base + (size_t)pos * dh, qkv + d + hd * dh, dh * sizeof(float));
                memcpy(m->self_v + base + (size_t)pos * dh, qkv + 2 * d + hd * dh, dh * sizeof(float));
                attend(qkv + hd * dh, m->self_k + base, m->self_v + base, pos + 1, dh, m->att + (size_t)r * d + hd * dh,
                       m->scores);
            }
        qgemm(&m->self_out[l], m->att, d, m->h, d, rows, m->xq);
        for (size_t i = 0; i < (size_t)rows * d; i++) m->x[i] += m->h[i];
        for (int r = 0; r < rows; r++) layer_norm(m->x + (size_t)r * d, g + d, b + d, m->h + (size_t)r * d, d);
        qgemm(&m->cross_q[l], m->h, d, m->t3, W, rows, m->xq);
        for (int r = 0; r < rows; r++)
            for (int hd = 0; hd < H; hd++) {
                size_t base = ((((size_t)r * L + l) * H) + hd) * m->src_len * dh;
                attend(m->t3 + (size_t)r * W + hd * dh, m->cross_k + base, m->cross_v + base, m->cur_src, dh,
                       m->att + (size_t)r * d + hd * dh, m->scores);
            }
        qgemm(&m->cross_out[l], m->att, d, m->h, d, rows, m->xq);
        for (size_t i = 0; i < (size_t)rows * d; i++) m->x[i] += m->h[i];
        for (int r = 0; r < rows; r++) layer_norm(m->x + (size_t)r * d, g + 2 * d, b + 2 * d, m->h + (size_t)r * d, d);
        qgemm(&m->ff1[l], m->h, d, m->t3, W, rows, m->xq);
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < m->ff; i++) {
                float *v = m->t3 + (size_t)r * W + i;
                *v = *v > 0.0f ? *v : 0.0f;
            }
        qgemm(&m->ff2[l], m->t3, W, m->h, d, rows, m->xq);
        for (size_t i = 0; i < (size_t)rows * d; i++) m->x[i] += m->h[i];
    }
    const float *gf = m->ln_gamma + (size_t)L * 3 * d, *bf = m->ln_beta + (size_t)L * 3 * d;
    for (int r = 0; r < rows; r++) layer_norm(m->x + (size_t)r * d, gf, bf, m->h + (size_t)r * d, d);
    qgemm(&m->out, m->h, d, m->logits, m->out.n, rows, m->xq);
    for (int r = 0; r < rows; r++) { /* log-softmax's normaliser and the arg-max, as the graph's LogSoftmax + TopK */
        const float *z = m->logits + (size_t)r * m->out.n;
        int best = 0;
        float top = z[0], sum = 0.0f;
        for (int j = 1; j < m->vocab_rows; j++)
            if (z[j] > top) { top = z[j]; best = j; }
        for (int j = 0; j < m->vocab_rows; j++) sum += expf(z[j] - top);
        m->tokens[r] = 4 + (best + (sum > 0.0f)) % 1000; /* the next input (random weights: keep ids in range) */
    }
}

/* a greedy search's steps: step t runs the first rows_per_step[t] rows at position t (the engine's greedy search
   drops finished rows, so the counts fall); the sources have `src_len` tokens */
int fs_run(void *handle, int src_len, const int *rows_per_step, int n_steps) {
    model *m = handle;
    m->cur_src = src_len < m->src_len ? src_len : m->src_len;
    if (n_steps > m->max_len) n_steps = m->max_len;
    for (int r = 0; r < m->max_rows; r++) m->tokens[r] = 1;
    for (int t = 0; t < n_steps; t++) step(m, rows_per_step[t] < m->max_rows ? rows_per_step[t] : m->max_rows, t);
    return m->tokens[0];
}

/* the product alone, for the test: Y = dequant(quant(X) . W) + bias for `rows` rows of X [rows][k], W [k][n] */
void fs_qgemm(const float *x, const int8_t *w_kn, int k, int n, int rows, const float *scale, const float *bias,
              float x_scale, float *y) {
    qlinear q;
    pack(&q, w_kn, k, n, scale, bias, x_scale);
    uint8_t *xq = aligned_alloc(64, ((size_t)(rows + 15) / 16 * 16 * q.k + 63) / 64 * 64 + 64);
    float *xp = calloc((size_t)rows * q.k, sizeof(float)), *yp = malloc((size_t)rows * q.n * sizeof(float));
    for (int r = 0; r < rows; r++) memcpy(xp + (size_t)r * q.k, x + (size_t)r * k, k * sizeof(float));
    qgemm(&q, xp, q.k, yp, q.n, rows, xq);
    for (int r = 0; r < rows; r++) memcpy(y + (size_t)r * n, yp + (size_t)r * q.n, n * sizeof(float));
    free(xq); free(xp); free(yp); free(q.w); free(q.colsum); free(q.scale); free(q.bias);
}

void fs_free(void *handle) {
    model *m = handle;
    qlinear *all[] = {m->qkv, m->self_out, m->cross_q, m->cross_out, m->ff1, m->ff2};
    for (int a = 0; a < 6; a++) {
        for (int l = 0; l < m->layers; l++) { free(all[a][l].w); free(all[a][l].colsum); free(all[a][l].scale); free(all[a][l].bias); }
        free(all[a]);
    }
    free(m->out.w); free(m->out.colsum); free(m->out.scale); free(m->out.bias);
    free(m->embedding); free(m->positions); free(m->ln_gamma); free(m->ln_beta);
    free(m->self_k); free(m->self_v); free(m->cross_k); free(m->cross_v);
    free(m->x); free(m->h); free(m->t3); free(m->att); free(m->scores); free(m->logits); free(m->xq); free(m->tokens);
    free(m);
}
