/* The decoder step of a bundle's shape as one C call: the sizing probe of bench/experiments/fused_step.py.

   What a fused kernel per step would cost on this CPU, against onnxruntime's ~150 nodes: the same arithmetic as
   the int8 step graph, for any number of rows (pre-norm layers: LayerNorm, Q|K|V product, self-attention over the cache with the
   new column written in place, output product, residual; LayerNorm, cross query product, attention over the source's
   keys and values, output product, residual; LayerNorm, FFN with ReLU, residual; final LayerNorm, output product
   over `vocab_rows` rows, log-softmax, arg-max). Every product is u8 activations (one scale, zero point 128, as the
   exporter's static quantization) times s8 weights with a scale per output column, accumulated in int32, like
   onnxruntime's QuantizeLinear + MatMulIntegerToFloat. Weights are random: this measures time, not translations.

   Products are the fused operator's (native/fused_step/int8_products.h, item 45 of docs/engine-speed-log.md, built
   from this probe): AMX tiles from 8 rows (fs_set_amx_rows) where the CPU has them and Linux grants them, AVX-512
   VNNI below that or without AMX, plain loops on CPUs without VNNI; no threads. Built with -ffast-math (the
   exponentials of the softmaxes vectorized, as CTranslate2's and onnxruntime's are). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the products are the fused operator's own (native/fused_step/int8_products.h: AMX tiles from ip_amx_min_rows
   rows, AVX-512 VNNI below, plain loops elsewhere, chosen at run time) */
#include "int8_products.h"

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

int fs_has_vnni(void) { ip_init(); return ip_kernel == IP_VNNI; }
int fs_has_amx(void) { ip_init(); return ip_amx; }
/* products of at least this many rows use AMX tiles when the CPU and kernel grant them (0 = never) */
void fs_set_amx_rows(int rows) { ip_amx_min_rows = rows; }

static uint32_t rng_state;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static void random_linear(qlinear *q, int k, int n) {
    int8_t *w = malloc((size_t)k * n);
    float *scale = malloc(n * sizeof(float)), *bias = malloc(n * sizeof(float));
    for (size_t i = 0; i < (size_t)k * n; i++) w[i] = (int8_t)(frand() * 127.0f);
    for (int j = 0; j < n; j++) { scale[j] = 0.02f / 127.0f / sqrtf((float)k) * 8.0f; bias[j] = 0.01f * frand(); }
    ip_pack(q, w, k, n, scale, bias, 8.0f / 127.0f, 128);
    free(w); free(scale); free(bias);
}

/* the product of the first `rows` rows of X (row stride sx, q->k values each) into Y (row stride sy) */
static void qgemm(const qlinear *q, const float *X, int sx, float *Y, int sy, int rows, uint8_t *xq) {
    ip_product(q, X, sx, q->k, Y, sy, rows, xq);
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
    ip_init();
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
    ip_init();
    ip_pack(&q, w_kn, k, n, scale, bias, x_scale, 128);
    uint8_t *xq = aligned_alloc(64, (ip_xq_bytes(rows, q.k) + 63) / 64 * 64);
    float *yp = malloc((size_t)rows * q.n * sizeof(float));
    ip_product(&q, x, k, k, yp, q.n, rows, xq);
    for (int r = 0; r < rows; r++) memcpy(y + (size_t)r * n, yp + (size_t)r * q.n, n * sizeof(float));
    free(xq); free(yp); ip_free(&q);
}

void fs_free(void *handle) {
    model *m = handle;
    qlinear *all[] = {m->qkv, m->self_out, m->cross_q, m->cross_out, m->ff1, m->ff2};
    for (int a = 0; a < 6; a++) {
        for (int l = 0; l < m->layers; l++) ip_free(&all[a][l]);
        free(all[a]);
    }
    ip_free(&m->out);
    free(m->embedding); free(m->positions); free(m->ln_gamma); free(m->ln_beta);
    free(m->self_k); free(m->self_v); free(m->cross_k); free(m->cross_v);
    free(m->x); free(m->h); free(m->t3); free(m->att); free(m->scores); free(m->logits); free(m->xq); free(m->tokens);
    free(m);
}
