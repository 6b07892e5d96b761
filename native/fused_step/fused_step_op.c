/* Two onnxruntime custom operators of the domain mtserve.fused: FusedDecoderStep (below) and FusedSearch (the search
   loop graph's whole Loop over the same step: its header is further down, before `search`).

   mtserve.fused.FusedDecoderStep: a bundle's int8 whole-batch decoder step (decoder_step_batch.onnx, interface 3,
   with vocab_ids) as one onnxruntime custom operator, instead of the graph's ~150 nodes.

   The node (written by engine/fused_step_graph.py from the step graph) takes the step graph's own inputs, then the
   weights the graph's nodes read, in this order (L layers):
     tokens (rows, 1) i64, src_mask (sources, src) bool, top_k (1) i64, positions (rows, 1) i64,
     self_mask (rows, past + 1) bool, query_rows (sources, group) i64, row_slots (rows) i64,
     cross_keys_i, cross_values_i (sources, heads, src, d_head) f32 for each layer i,
     past_keys_i, past_values_i (rows, heads, past, d_head) f32 for each layer i,
     vocab_ids (subset) i64 (empty: the whole vocabulary),
     vocab_sources (sources, subset) bool (empty: every row over the whole subset): the subset's ids each source's
       rows normalize over (its own shortlist within the batch's union), so that a row's log-probabilities are the
       ones it gets alone whatever companions widen the union,
     embedding (vocab, d) f32 or f16 (a float16-stored bundle's own table, export/pack.py: rows are converted as
       they are gathered, exactly as the graph's Cast would), embedding scale (1) f32, position table
       (max_positions, d) f32,
     per layer: 6 norms' and products' groups (WEIGHTS_PER_LAYER tensors, the order of `layer_inputs` below),
     final norm gamma, beta; output product weight (d, vocab) i8, its scales (vocab), activation scale, zero point;
   and gives the graph's outputs: log_probs (rows, vocab or subset), top_log_probs, top_ids (rows, k),
   present_keys_i, present_values_i (rows, heads, past + 1, d_head): the past with the new key/value appended.
   Attributes: layers, heads, epsilon; and, absent (0) in the graphs of our own bundles, those of imported Marian
   (OPUS-MT) decoders (engine/fused_step_layout.py): post_norm 1 (each sublayer's LayerNorm after its residual sum,
   x = LN(x + f(x)); no final norm, whose two inputs are then left out), activation (0 ReLU, 1 swish x * sigmoid(x),
   2 GELU 0.5 x (1 + erf(x / sqrt 2))), output_bias 1 (the output product's bias (vocab) after its activation zero
   point), banned 1 (one more input after the output product's: (vocab) f32 added to the log-probabilities, 0 or
   -inf, before the top-k).

   The arithmetic is the graph's (pre-norm layers: LayerNorm, Q|K|V product + bias, self-attention over the rows'
   past where self_mask allows, output product, residual; LayerNorm, cross query product, attention over the row's
   source (row_slots[r] / group) where src_mask allows; LayerNorm, FFN with ReLU; final LayerNorm, output product,
   log-softmax, top-k), with the products of int8_products.h: the integer sums are exact, the float parts (norms,
   softmaxes) may differ from onnxruntime's kernels in the last bits. tests/engine/test_fused_step.py holds it to the
   graph. Weights are packed on the first run (a mutex guards it); a vocabulary subset's columns are packed once and
   kept while the next runs ask for the same ids (a search asks for one subset at every step). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mremap */
#endif
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>

#include "int8_products.h"
#include "vector_math.h"
#include "onnxruntime_c_api.h"

#define API_VERSION 16 /* onnxruntime 1.16 and later: heterogeneous variadic inputs, CreateKernelV2 */
#define WEIGHTS_PER_LAYER 36
#define HEAD_INPUTS 7 /* tokens .. row_slots */

typedef struct {
    const float *n1g, *n1b, *n2g, *n2b, *n3g, *n3b, *qkv_bias;
    qlinear qkv, self_out, cross_q, cross_out, ff1, ff2;
} layer;

typedef struct subset {
    int refs;
    int64_t n;
    int64_t *ids;
    qlinear q;
} subset;

typedef struct {
    const char *name; /* the operator's, for errors */
    int64_t layers, heads, head_inputs, eos;
    int64_t post_norm, activation, output_bias, has_banned; /* the layout attributes (header), 0 when absent */
    int64_t n_banned, *banned_ids; /* the ids with a nonzero `banned` entry, and those entries */
    float *banned_values;
    float eps;
    pthread_mutex_t lock;
    int packed, d, ff, vocab, max_positions;
    const float *embedding, *positions, *nfg, *nfb;
    const uint16_t *embedding_half; /* the table as float16 (then `embedding` is NULL) */
    float emb_scale;
    layer *layer;
    qlinear out; /* the whole vocabulary; a subset's columns are packed from it */
    subset *cached;
    void *spare_cache; /* the last search's key/value cache mapping, kept for the next (`cache_take`) */
    size_t spare_bytes;
} kernel;

static const OrtApi *g_api;

#define FAIL(code, ...)                                    \
    do {                                                   \
        char message_[256];                                \
        snprintf(message_, sizeof message_, __VA_ARGS__);  \
        return g_api->CreateStatus(code, message_);        \
    } while (0)
#define CHECK(expr)                          \
    do {                                     \
        OrtStatus *status_ = (expr);         \
        if (status_) return status_;         \
    } while (0)

typedef struct {
    void *data;
    int64_t dims[4];
    size_t rank;
    int64_t count;
    ONNXTensorElementDataType type;
} tensor;

static OrtStatus *input(OrtKernelContext *ctx, size_t i, tensor *t) {
    const OrtValue *value = NULL;
    CHECK(g_api->KernelContext_GetInput(ctx, i, &value));
    if (!value) FAIL(ORT_INVALID_ARGUMENT, "mtserve.fused: input %zu is missing", i);
    OrtTensorTypeAndShapeInfo *info = NULL;
    CHECK(g_api->GetTensorTypeAndShape(value, &info));
    OrtStatus *status = g_api->GetDimensionsCount(info, &t->rank);
    if (!status && t->rank > 4) status = g_api->CreateStatus(ORT_INVALID_ARGUMENT, "mtserve.fused: rank > 4");
    if (!status) status = g_api->GetDimensions(info, t->dims, t->rank);
    if (!status) status = g_api->GetTensorElementType(info, &t->type);
    g_api->ReleaseTensorTypeAndShapeInfo(info);
    if (status) return status;
    t->count = 1;
    for (size_t j = 0; j < t->rank; j++) t->count *= t->dims[j];
    return g_api->GetTensorMutableData((OrtValue *)value, &t->data);
}

static OrtStatus *output(OrtKernelContext *ctx, size_t i, const int64_t *dims, size_t rank, void **data) {
    OrtValue *value = NULL;
    CHECK(g_api->KernelContext_GetOutput(ctx, i, dims, rank, &value));
    return g_api->GetTensorMutableData(value, data);
}

/* the inputs before the weights: the operator's own, each layer's cross and past keys/values, vocab_ids,
   vocab_sources */
static size_t weights_start(const kernel *k) { return (size_t)k->head_inputs + 4 * (size_t)k->layers + 2; }

/* the inputs after the layers': the final norm's 2 (pre-norm), the output product's 4 or 5, the banned ids' 1 */
static size_t weights_tail(const kernel *k) { return (k->post_norm ? 0 : 2) + 4 + !!k->output_bias + !!k->has_banned; }

/* vocab_sources (`t`): empty (NULL: every row over all `width` columns) or (sources, width), each source owning at
   least `least` columns; its bytes normalized to 0/1 in `own` (sources * width bytes) */
static OrtStatus *own_columns(const kernel *K, const tensor *t, int64_t sources, int64_t width, int64_t least,
                              uint8_t **own) {
    *own = NULL;
    if (t->count == 0) return NULL;
    if (t->rank != 2 || t->dims[0] != sources || t->dims[1] != width)
        FAIL(ORT_INVALID_ARGUMENT, "%s: vocab_sources is not (sources, vocabulary subset)", K->name);
    uint8_t *out = malloc(sources * width);
    if (!out) FAIL(ORT_FAIL, "%s: out of memory", K->name);
    for (int64_t b = 0; b < sources; b++) {
        int64_t owned = 0;
        for (int64_t j = 0; j < width; j++) owned += out[b * width + j] = ((const uint8_t *)t->data)[b * width + j] != 0;
        if (owned < least) {
            free(out);
            FAIL(ORT_INVALID_ARGUMENT, "%s: source %d owns %d of the subset's ids, fewer than %d", K->name, (int)b,
                 (int)owned, (int)least);
        }
    }
    *own = out;
    return NULL;
}

/* The operator reads a weight once, to pack it; where onnxruntime maps it from the weights file, its pages are then
   handed back to the kernel (MADV_PAGEOUT, Linux 5.4+: file pages are read again if anything touches them; pages
   another mapping shares, or anonymous ones without swap, stay). Only the whole pages inside the tensor. */
static void release_pages(const void *data, size_t bytes) {
#ifdef MADV_PAGEOUT
    const uintptr_t page = 4096, start = ((uintptr_t)data + page - 1) & ~(page - 1);
    const uintptr_t end = ((uintptr_t)data + bytes) & ~(page - 1);
    if (end > start) madvise((void *)start, end - start, MADV_PAGEOUT);
#else
    (void)data; (void)bytes;
#endif
}

/* one product's group of 6 inputs (weight, weight scales, activation scale, activation zero point, bias) -- the qkv
   product has no bias here (self-attention adds it), and takes 5 plus the bias input read separately */
static OrtStatus *pack_product(OrtKernelContext *ctx, size_t at, int with_bias, qlinear *q) {
    tensor w, ws, xs, xz, b;
    CHECK(input(ctx, at, &w));
    CHECK(input(ctx, at + 1, &ws));
    CHECK(input(ctx, at + 2, &xs));
    CHECK(input(ctx, at + 3, &xz));
    if (with_bias) CHECK(input(ctx, at + 4, &b));
    if (w.rank != 2 || ws.count != w.dims[1] || (with_bias && b.count != w.dims[1]))
        FAIL(ORT_INVALID_ARGUMENT, "mtserve.fused: product at input %zu has inconsistent shapes", at);
    if (!ip_pack(q, w.data, (int)w.dims[0], (int)w.dims[1], ws.data, with_bias ? b.data : NULL, *(float *)xs.data,
                 *(uint8_t *)xz.data))
        FAIL(ORT_FAIL, "mtserve.fused: out of memory packing weights");
    release_pages(w.data, (size_t)w.count);
    return NULL;
}

static OrtStatus *pack_weights(kernel *k, OrtKernelContext *ctx) {
    size_t at = weights_start(k);
    tensor emb, scale, pos;
    CHECK(input(ctx, at, &emb));
    CHECK(input(ctx, at + 1, &scale));
    CHECK(input(ctx, at + 2, &pos));
    if (emb.rank != 2 || pos.rank != 2 || pos.dims[1] != emb.dims[1])
        FAIL(ORT_INVALID_ARGUMENT, "mtserve.fused: embedding and position tables disagree");
    if (emb.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT && emb.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16)
        FAIL(ORT_INVALID_ARGUMENT, "mtserve.fused: the embedding is neither float32 nor float16");
    if (emb.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16) k->embedding_half = emb.data;
    else k->embedding = emb.data;
    k->emb_scale = *(float *)scale.data; k->positions = pos.data;
    k->vocab = (int)emb.dims[0]; k->d = (int)emb.dims[1]; k->max_positions = (int)pos.dims[0];
    at += 3;
    k->layer = calloc(k->layers, sizeof(layer));
    if (!k->layer) FAIL(ORT_FAIL, "mtserve.fused: out of memory");
    for (int64_t l = 0; l < k->layers; l++, at += WEIGHTS_PER_LAYER) {
        layer *L = &k->layer[l];
        tensor t[WEIGHTS_PER_LAYER];
        for (int i = 0; i < WEIGHTS_PER_LAYER; i++) CHECK(input(ctx, at + i, &t[i]));
        /* layer_inputs: n1 g b, qkv w ws xs xz bias, self_out w ws xs xz b, n2 g b, cross_q w ws xs xz b,
           cross_out w ws xs xz b, n3 g b, ff1 w ws xs xz b, ff2 w ws xs xz b */
        L->n1g = t[0].data; L->n1b = t[1].data;
        CHECK(pack_product(ctx, at + 2, 0, &L->qkv));
        L->qkv_bias = t[6].data;
        CHECK(pack_product(ctx, at + 7, 1, &L->self_out));
        L->n2g = t[12].data; L->n2b = t[13].data;
        CHECK(pack_product(ctx, at + 14, 1, &L->cross_q));
        CHECK(pack_product(ctx, at + 19, 1, &L->cross_out));
        L->n3g = t[24].data; L->n3b = t[25].data;
        CHECK(pack_product(ctx, at + 26, 1, &L->ff1));
        CHECK(pack_product(ctx, at + 31, 1, &L->ff2));
        if (L->qkv.n_real != 3 * k->d || L->ff1.n_real != L->ff2.k || t[6].count != 3 * k->d)
            FAIL(ORT_INVALID_ARGUMENT, "mtserve.fused: layer %d's products do not fit d = %d", (int)l, k->d);
        k->ff = L->ff1.n_real;
    }
    tensor nfg, nfb, ow, os, oxs, oxz, ob = {0}, banned = {0};
    if (!k->post_norm) { /* post-norm layers end normalized: no final norm */
        CHECK(input(ctx, at, &nfg));
        CHECK(input(ctx, at + 1, &nfb));
        k->nfg = nfg.data; k->nfb = nfb.data;
        at += 2;
    }
    CHECK(input(ctx, at, &ow));
    CHECK(input(ctx, at + 1, &os));
    CHECK(input(ctx, at + 2, &oxs));
    CHECK(input(ctx, at + 3, &oxz));
    at += 4;
    if (k->output_bias) CHECK(input(ctx, at++, &ob));
    if (k->has_banned) CHECK(input(ctx, at, &banned));
    if (ow.rank != 2 || ow.dims[0] != k->d || ow.dims[1] != k->vocab || os.count != k->vocab ||
        (k->output_bias && ob.count != k->vocab) || (k->has_banned && banned.count != k->vocab))
        FAIL(ORT_INVALID_ARGUMENT, "mtserve.fused: the output product (bias, banned ids) is not (d, vocab)");
    if (!ip_pack(&k->out, ow.data, k->d, k->vocab, os.data, k->output_bias ? ob.data : NULL, *(float *)oxs.data,
                 *(uint8_t *)oxz.data))
        FAIL(ORT_FAIL, "mtserve.fused: out of memory packing weights");
    release_pages(ow.data, (size_t)ow.count);
    if (k->has_banned) { /* the ids whose entry is not 0: a row adds only these (x + 0 is x) */
        const float *b = banned.data;
        k->n_banned = 0;
        for (int64_t j = 0; j < banned.count; j++) k->n_banned += b[j] != 0.0f;
        k->banned_ids = malloc((k->n_banned + 1) * sizeof(int64_t));
        k->banned_values = malloc((k->n_banned + 1) * sizeof(float));
        if (!k->banned_ids || !k->banned_values) FAIL(ORT_FAIL, "mtserve.fused: out of memory");
        for (int64_t j = 0, n = 0; j < banned.count; j++)
            if (b[j] != 0.0f) { k->banned_ids[n] = j; k->banned_values[n++] = b[j]; }
    }
    return NULL;
}

#if defined(__x86_64__)
/* swish x * sigmoid(x) of the first n / 8 * 8 values, 8 lanes at a time: e = exp(-|x|) (vm_exp8's polynomial; its
   clamp at exp(-87) is far below what the next product's u8 quantization resolves), sigmoid(x) = 1 / (1 + e) for
   x >= 0, e / (1 + e) below; returns how many it did. A value's result depends on its column only, never on the
   batch. */
__attribute__((target("avx2,fma"))) static int swish8(float *v, int n) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    const __m256i all = _mm256_set1_epi32(-1);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(v + i);
        const __m256 e = vm_exp8(_mm256_or_ps(x, sign), zero, all); /* exp(-|x|) */
        const __m256 below = _mm256_cmp_ps(x, zero, _CMP_LT_OQ);
        const __m256 sigmoid = _mm256_div_ps(_mm256_blendv_ps(one, e, below), _mm256_add_ps(one, e));
        _mm256_storeu_ps(v + i, _mm256_mul_ps(x, sigmoid));
    }
    return i;
}
#endif

/* the FFN's activation over n values in place (the `activation` attribute) */
static void activate(float *v, int n, int64_t activation) {
    if (activation == 1) {
        int i = 0;
#if defined(__x86_64__)
        if (vm_level() > 0) i = swish8(v, n);
#endif
        for (; i < n; i++) {
            const float e = expf(-fabsf(v[i]));
            v[i] = v[i] * ((v[i] < 0.0f ? e : 1.0f) / (1.0f + e));
        }
    } else if (activation == 2)
        for (int i = 0; i < n; i++) v[i] = 0.5f * v[i] * (1.0f + erff(v[i] * 0.70710678118654752f));
    else
        for (int i = 0; i < n; i++) v[i] = v[i] > 0.0f ? v[i] : 0.0f;
}

static void release_subset(kernel *k, subset *s) {
    if (!s) return;
    pthread_mutex_lock(&k->lock);
    int last = --s->refs == 0;
    pthread_mutex_unlock(&k->lock);
    if (last) { ip_free(&s->q); free(s->ids); free(s); }
}

/* the packed output columns of `ids`: the cached ones when they are the same ids, else packed now and cached */
static subset *subset_of(kernel *k, const int64_t *ids, int64_t n) {
    pthread_mutex_lock(&k->lock);
    subset *s = k->cached;
    if (s && s->n == n && memcmp(s->ids, ids, n * sizeof(int64_t)) == 0) {
        s->refs++;
        pthread_mutex_unlock(&k->lock);
        return s;
    }
    pthread_mutex_unlock(&k->lock);
    s = calloc(1, sizeof(subset));
    if (!s) return NULL;
    s->n = n; s->refs = 2; /* the caller's and the cache's */
    s->ids = malloc(n * sizeof(int64_t));
    if (!s->ids || !ip_pack_columns(&s->q, &k->out, ids, (int)n)) {
        ip_free(&s->q); free(s->ids); free(s);
        return NULL;
    }
    memcpy(s->ids, ids, n * sizeof(int64_t));
    pthread_mutex_lock(&k->lock);
    subset *old = k->cached;
    k->cached = s;
    pthread_mutex_unlock(&k->lock);
    release_subset(k, old);
    return s;
}

/* onnxruntime's LayerNormalization on CPU, operation for operation (so that the quantization after it rounds the
   same): float sums of x and x * x in order, sqrt(mean square - mean^2 + eps), (x - mean) / that * g + b */
static void layer_norm(const float *x, const float *g, const float *b, float *y, int d, float eps) {
    float mean = 0.0f, square = 0.0f;
    for (int i = 0; i < d; i++) { mean += x[i]; square += x[i] * x[i]; }
    mean = mean / (float)d;
    const float denominator = sqrtf(square / (float)d - mean * mean + eps);
    for (int i = 0; i < d; i++) y[i] = (x[i] - mean) / denominator * g[i] + b[i];
}

#if defined(__x86_64__)
/* attend's sum over t of (scores[t] / sum) * v_t for d_head 64 on AVX2, the 64 sums in eight registers (the scalar
   loop kept them in memory, a load and a store per value and t): the same products and sums in the same order, so
   the same bits */
__attribute__((target("avx2"))) static void attend_values64(const float *scores, float sum, const float *v,
                                                           const int32_t *from, const size_t *t_base, int64_t row,
                                                           size_t row_stride, size_t t_stride,
                                                           const uint8_t *allowed, int len, float *out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int t = 0; t < len; t++) {
        if (!allowed[t]) continue;
        const __m256 p = _mm256_set1_ps(scores[t] / sum);
        const float *vt = v + (t_base ? t_base[t] : (size_t)t * t_stride) + (size_t)(from ? from[t] : row) * row_stride;
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(p, _mm256_loadu_ps(vt)));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(p, _mm256_loadu_ps(vt + 8)));
        a2 = _mm256_add_ps(a2, _mm256_mul_ps(p, _mm256_loadu_ps(vt + 16)));
        a3 = _mm256_add_ps(a3, _mm256_mul_ps(p, _mm256_loadu_ps(vt + 24)));
        a4 = _mm256_add_ps(a4, _mm256_mul_ps(p, _mm256_loadu_ps(vt + 32)));
        a5 = _mm256_add_ps(a5, _mm256_mul_ps(p, _mm256_loadu_ps(vt + 40)));
        a6 = _mm256_add_ps(a6, _mm256_mul_ps(p, _mm256_loadu_ps(vt + 48)));
        a7 = _mm256_add_ps(a7, _mm256_mul_ps(p, _mm256_loadu_ps(vt + 56)));
    }
    _mm256_storeu_ps(out, a0); _mm256_storeu_ps(out + 8, a1); _mm256_storeu_ps(out + 16, a2);
    _mm256_storeu_ps(out + 24, a3); _mm256_storeu_ps(out + 32, a4); _mm256_storeu_ps(out + 40, a5);
    _mm256_storeu_ps(out + 48, a6); _mm256_storeu_ps(out + 56, a7);
}
#endif

#if defined(__x86_64__)
/* attend's scores q . k_t * scale for d_head 64 on AVX2, and their maximum: q in eight registers, four keys at a time
   (independent chains); each sum as vm_dot_avx2 computes it, so the same bits */
__attribute__((target("avx2,fma"))) static float attend_scores64(const float *q, const float *k, const int32_t *from,
                                                                const size_t *t_base, int64_t row, size_t row_stride,
                                                                size_t t_stride, const uint8_t *allowed, int len,
                                                                float scale, float *scores) {
    const __m256 q0 = _mm256_loadu_ps(q), q1 = _mm256_loadu_ps(q + 8), q2 = _mm256_loadu_ps(q + 16),
                 q3 = _mm256_loadu_ps(q + 24), q4 = _mm256_loadu_ps(q + 32), q5 = _mm256_loadu_ps(q + 40),
                 q6 = _mm256_loadu_ps(q + 48), q7 = _mm256_loadu_ps(q + 56);
    float top = -INFINITY;
    for (int t = 0; t < len;) {
        int ts[4], m = 0;
        for (; t < len && m < 4; t++)
            if (allowed[t]) ts[m++] = t;
        __m256 sum[4];
        for (int i = 0; i < m; i++) {
            const float *kt = k + (t_base ? t_base[ts[i]] : (size_t)ts[i] * t_stride) +
                              (size_t)(from ? from[ts[i]] : row) * row_stride;
            __m256 a = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kt), _mm256_setzero_ps());
            a = _mm256_fmadd_ps(q1, _mm256_loadu_ps(kt + 8), a);
            a = _mm256_fmadd_ps(q2, _mm256_loadu_ps(kt + 16), a);
            a = _mm256_fmadd_ps(q3, _mm256_loadu_ps(kt + 24), a);
            a = _mm256_fmadd_ps(q4, _mm256_loadu_ps(kt + 32), a);
            a = _mm256_fmadd_ps(q5, _mm256_loadu_ps(kt + 40), a);
            a = _mm256_fmadd_ps(q6, _mm256_loadu_ps(kt + 48), a);
            sum[i] = _mm256_fmadd_ps(q7, _mm256_loadu_ps(kt + 56), a);
        }
        for (int i = 0; i < m; i++) {
            scores[ts[i]] = vm_sum8(sum[i]) * scale;
            if (scores[ts[i]] > top) top = scores[ts[i]];
        }
    }
    return top;
}
#endif

#if defined(__x86_64__)
/* the same on AVX-512: q in four registers, each sum as vm_dot_avx512 computes it (the same bits) */
__attribute__((target("avx512f"))) static float attend_scores64_avx512(const float *q, const float *k,
                                                                      const int32_t *from, const size_t *t_base,
                                                                      int64_t row, size_t row_stride,
                                                                      size_t t_stride, const uint8_t *allowed,
                                                                      int len, float scale, float *scores) {
    const __m512 q0 = _mm512_loadu_ps(q), q1 = _mm512_loadu_ps(q + 16), q2 = _mm512_loadu_ps(q + 32),
                 q3 = _mm512_loadu_ps(q + 48);
    float top = -INFINITY;
    for (int t = 0; t < len;) {
        int ts[4], m = 0;
        for (; t < len && m < 4; t++)
            if (allowed[t]) ts[m++] = t;
        __m512 sum[4];
        for (int i = 0; i < m; i++) {
            const float *kt = k + (t_base ? t_base[ts[i]] : (size_t)ts[i] * t_stride) +
                              (size_t)(from ? from[ts[i]] : row) * row_stride;
            __m512 a = _mm512_fmadd_ps(_mm512_loadu_ps(kt), q0, _mm512_setzero_ps());
            a = _mm512_fmadd_ps(_mm512_loadu_ps(kt + 16), q1, a);
            a = _mm512_fmadd_ps(_mm512_loadu_ps(kt + 32), q2, a);
            sum[i] = _mm512_fmadd_ps(_mm512_loadu_ps(kt + 48), q3, a);
        }
        for (int i = 0; i < m; i++) {
            scores[ts[i]] = _mm512_reduce_add_ps(sum[i]) * scale;
            if (scores[ts[i]] > top) top = scores[ts[i]];
        }
    }
    return top;
}
#endif

/* softmax(q . k_t * scale over the allowed t) . v for one head: key/value t (dh floats) of row `row` at
   k + row * row_stride + t * t_stride, or with `from` (not NULL) of row from[t] (the search's cache written in
   place: a beam's past columns stay in the rows of the beams that computed them), and with `t_base` (not NULL)
   column t at t_base[t] instead of t * t_stride (the search's columns, each as wide as the rows it computed) */
static void attend(const float *q, const float *k, const float *v, const int32_t *from, const size_t *t_base,
                   int64_t row, size_t row_stride, size_t t_stride, const uint8_t *allowed, int len, int dh,
                   float *out, float *scores) {
    const float scale = 1.0f / sqrtf((float)dh);
    float top = -INFINITY, sum = 0.0f;
#define AT(t) ((t_base ? t_base[t] : (size_t)(t) * t_stride) + (size_t)(from ? from[t] : row) * row_stride)
#if defined(__x86_64__)
    if (dh == 64 && vm_avx2())
        top = attend_scores64(q, k, from, t_base, row, row_stride, t_stride, allowed, len, scale, scores);
    else if (dh == 64 && vm_avx512())
        top = attend_scores64_avx512(q, k, from, t_base, row, row_stride, t_stride, allowed, len, scale, scores);
    else
#endif
        for (int t = 0; t < len; t++) {
            if (!allowed[t]) continue;
            scores[t] = vm_dot(q, k + AT(t), dh) * scale;
            if (scores[t] > top) top = scores[t];
        }
    for (int t = 0; t < len; t++)
        if (allowed[t]) { scores[t] = expf(scores[t] - top); sum += scores[t]; }
#if defined(__x86_64__)
    if (dh == 64 && vm_level() > 0) {
        attend_values64(scores, sum, v, from, t_base, row, row_stride, t_stride, allowed, len, out);
        return;
    }
#endif
    for (int i = 0; i < dh; i++) out[i] = 0.0f;
    for (int t = 0; t < len; t++) {
        if (!allowed[t]) continue;
        const float p = scores[t] / sum;
        const float *vt = v + AT(t);
        for (int i = 0; i < dh; i++) out[i] += p * vt[i];
    }
#undef AT
}

/* one step's working memory, for at most `rows` rows, `width` output columns and `len` attended positions */
typedef struct {
    float *x, *h, *t, *att, *logits, *scores, *own;
    float *one, *mine, *extra; /* a row's whole-subset logits (split's rare rows), its own log-probs, extra logits */
    uint8_t *xq;
} scratch;

static void scratch_free(scratch *s) {
    free(s->x); free(s->h); free(s->t); free(s->att); free(s->logits); free(s->scores); free(s->own); free(s->xq);
    free(s->one); free(s->mine); free(s->extra);
}

static int scratch_alloc(scratch *s, const kernel *K, int64_t rows, int64_t width, int64_t len) {
    const int64_t d = K->d, W = 3 * d > K->ff ? 3 * d : K->ff;
    s->x = malloc(rows * d * sizeof(float)); s->h = malloc(rows * d * sizeof(float));
    s->t = malloc(rows * W * sizeof(float)); s->att = malloc(rows * d * sizeof(float));
    s->logits = malloc((rows < IP_CHUNK ? rows : IP_CHUNK) * width * sizeof(float));
    s->scores = malloc(len * sizeof(float));
    s->own = malloc(width * sizeof(float));
    s->one = malloc(width * sizeof(float)); s->mine = malloc(width * sizeof(float));
    s->extra = malloc(width * sizeof(float));
    s->xq = aligned_alloc(64, (ip_xq_bytes((int)rows, (int)W) + 63) / 64 * 64);
    if (s->x && s->h && s->t && s->att && s->logits && s->scores && s->own && s->xq && s->one && s->mine && s->extra)
        return 1;
    scratch_free(s);
    return 0;
}

/* what one step reads and writes. The cache of layer l holds key/value column c (dh floats) of (row, head) at
   c * t_stride + row * row_stride + head * head_stride: columns 0..past-1 are the past, this step writes the new
   key/value at column `past` and attends over past + 1 columns. Row r attends to source slots[r] / group where
   src_allowed allows, and to its columns where self_allowed[r * self_stride + c] does. With `rows_at`, computed
   row r is the cache's row rows_at[r] (else row r), and with `from`, that row reads column c from the cache's row
   from[rows_at[r] * cap + c] (else its own). With `t_base` (the search), column c starts at t_base[c] instead of
   c * t_stride and holds only the rows computed at step c: computed row r writes its column at row r of it. */
typedef struct {
    int64_t rows, past, cap, sources, src, group, self_stride, width, k;
    size_t t_stride, row_stride, head_stride;
    const int64_t *tokens, *positions, *slots, *ids; /* ids: the subset's vocabulary ids, NULL: the whole one */
    const int64_t *rows_at;
    const int32_t *from;
    const size_t *t_base;
    const int64_t *banned;   /* computed row r's banned_n[r] token ids at banned + r * banned_stride; NULL: none */
    const int32_t *banned_n;
    int64_t banned_stride;
    const uint8_t *self_allowed, *src_allowed;
    const uint8_t *own_vocab; /* (sources, width): the columns row r's source (slots[r] / group) owns; NULL: all */
    const struct split *split; /* own_vocab's columns as products (the search, lp_stride 0); NULL: the subset's */
    float **cross_k, **cross_v, **cache_k, **cache_v;
    const qlinear *out_q;
    float *log_probs, *top_values; /* (rows, width) at row stride lp_stride (0: one row, reused), (rows, k) */
    int64_t lp_stride;
    int64_t *top_ids;              /* (rows, k) */
} step_args;

/* the column of `id` in the ascending `ids`, or -1 */
static int64_t find(const int64_t *ids, int64_t n, int64_t id) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (ids[mid] < id) lo = mid + 1; else hi = mid;
    }
    return lo < n && ids[lo] == id ? lo : -1;
}

/* The search's own columns as products (issue 56 round 4): a batch's subset has the columns every source owns
   (the frequent list: ~1,000 of the ~2,000-3,000 of a Multi30k batch of 32) and each source's other own columns
   (~50-200). A row's logits are the common product's (16 rows at a time, as the subset's) and its source's extra
   product's, read back in subset order (`at`: >= 0 a common column, else extra column -1 - at): the same integer
   sums and scales as the subset's columns, so the same values, normalized and ranked over the same own columns in
   the same order -- the same bits as vm_gather_owned over the whole subset's product, without the columns the
   source does not own (55-65% of them at batch 32). */
typedef struct split {
    int64_t sources;
    qlinear common;
    qlinear *extra;     /* per source (n 0: none) */
    int32_t **at;       /* per source, its own columns in subset order */
    int64_t **own_ids;  /* per source, their vocabulary ids (ascending) */
    int *m;             /* per source, how many */
} split;

/* MT_FUSED_STEP_SPLIT=0 ranks every row over the whole subset's product (A/B runs; the same answers) */
static int split_wanted(void) {
    const char *v = getenv("MT_FUSED_STEP_SPLIT");
    return !v || strcmp(v, "0") != 0;
}

static void split_free(split *sp) {
    if (!sp) return;
    ip_free(&sp->common);
    for (int64_t b = 0; b < sp->sources; b++) {
        if (sp->extra) ip_free(&sp->extra[b]);
        if (sp->at) free(sp->at[b]);
        if (sp->own_ids) free(sp->own_ids[b]);
    }
    free(sp->extra); free(sp->at); free(sp->own_ids); free(sp->m); free(sp);
}

/* the split of the subset `ids` (width columns) for B sources owning `own` (B x width 0/1); NULL: out of memory */
static split *split_build(const kernel *K, const int64_t *ids, int64_t width, const uint8_t *own, int64_t B) {
    split *sp = calloc(1, sizeof(split));
    int64_t *common_ids = malloc(width * sizeof(int64_t)), *extra_ids = malloc(width * sizeof(int64_t));
    int32_t *common_at = malloc(width * sizeof(int32_t));
    int ok = sp && common_ids && extra_ids && common_at;
    if (ok) {
        sp->sources = B;
        sp->extra = calloc(B, sizeof(qlinear)); sp->at = calloc(B, sizeof(int32_t *));
        sp->own_ids = calloc(B, sizeof(int64_t *)); sp->m = calloc(B, sizeof(int));
        ok = sp->extra && sp->at && sp->own_ids && sp->m;
    }
    int nc = 0;
    for (int64_t j = 0; ok && j < width; j++) {
        int all = 1;
        for (int64_t b = 0; b < B; b++) all &= own[b * width + j];
        common_at[j] = all ? nc : -1;
        if (all) common_ids[nc++] = ids[j];
    }
    ok = ok && (nc == 0 || ip_pack_columns(&sp->common, &K->out, common_ids, nc));
    for (int64_t b = 0; ok && b < B; b++) {
        sp->at[b] = malloc(width * sizeof(int32_t)); sp->own_ids[b] = malloc(width * sizeof(int64_t));
        if (!sp->at[b] || !sp->own_ids[b]) { ok = 0; break; }
        int ne = 0, m = 0;
        for (int64_t j = 0; j < width; j++) {
            if (!own[b * width + j]) continue;
            if (common_at[j] >= 0) sp->at[b][m] = common_at[j];
            else { extra_ids[ne] = ids[j]; sp->at[b][m] = -1 - ne; ne++; }
            sp->own_ids[b][m++] = ids[j];
        }
        sp->m[b] = m;
        if (ne) ok = ip_pack_columns(&sp->extra[b], &K->out, extra_ids, ne);
    }
    free(common_ids); free(extra_ids); free(common_at);
    if (!ok) { split_free(sp); return NULL; }
    return sp;
}

/* row r's log-softmax over its source's own columns, the n-gram block and its top k (ids), from the common product's
   logits `zc` of the row and its extra product (computed here); 0 when fewer than k of its own columns are left
   unbanned (the caller ranks it over the whole subset: the rows whose top k then hold -inf ones) */
static int split_rank(const kernel *K, const step_args *a, scratch *s, int64_t r, const float *zc,
                      const float *in_row) {
    const split *sp = a->split;
    const int64_t b = a->slots[r] / a->group, k = a->k;
    const int m = sp->m[b];
    if (m - (a->banned_n ? a->banned_n[r] : 0) < k) return 0;
    const qlinear *eq = &sp->extra[b];
    if (eq->n) ip_product(eq, in_row, K->d, K->d, s->extra, eq->n, 1, s->xq);
    const int32_t *at = sp->at[b];
    const int64_t *own_ids = sp->own_ids[b];
    for (int j = 0; j < m; j++) s->own[j] = at[j] >= 0 ? zc[at[j]] : s->extra[-1 - at[j]];
    const float top = vm_max(s->own, m), norm = logf(vm_exp_sum(s->own, m, top));
    vm_shift(s->own, m, top, norm, s->mine);
    for (int32_t j = 0; a->banned_n && j < a->banned_n[r]; j++) {
        const int64_t at_id = find(own_ids, m, a->banned[r * a->banned_stride + j]);
        if (at_id >= 0) s->mine[at_id] = -INFINITY;
    }
    if (k > 0) {
        vm_top_k(s->mine, m, (int)k, a->top_values + r * k, a->top_ids + r * k);
        for (int64_t j = 0; j < k; j++) a->top_ids[r * k + j] = own_ids[a->top_ids[r * k + j]];
    }
    return 1;
}

/* an IEEE half as float: exact (every half is a float), as onnxruntime's Cast */
static inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    uint32_t bits;
    float f;
    if (exponent == 0x1f) bits = sign | 0x7f800000u | (mantissa << 13); /* inf, NaN */
    else if (exponent) bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    else { /* zero or subnormal: mantissa * 2^-24, exact in float */
        f = (float)mantissa * 0x1p-24f;
        memcpy(&bits, &f, sizeof bits);
        bits |= sign;
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}

static void step(const kernel *K, const step_args *a, scratch *s) {
    const int64_t L = K->layers, H = K->heads, rows = a->rows, past = a->past;
    const int d = K->d, dh = d / (int)H, W = (3 * d > K->ff ? 3 * d : K->ff);
    float *x = s->x, *h = s->h, *t = s->t, *att = s->att;
    for (int64_t r = 0; r < rows; r++) {
        const float *pe = K->positions + a->positions[r] * d;
        if (K->embedding_half) {
            const uint16_t *e = K->embedding_half + a->tokens[r] * d;
            for (int i = 0; i < d; i++) x[r * d + i] = half_to_float(e[i]) * K->emb_scale + pe[i];
        } else {
            const float *e = K->embedding + a->tokens[r] * d;
            for (int i = 0; i < d; i++) x[r * d + i] = e[i] * K->emb_scale + pe[i];
        }
    }
    /* pre-norm: a sublayer reads LN(x) (in h) and x += its output; post-norm: it reads x and x = LN(x + output) */
    const int post = K->post_norm != 0;
    const float *in = post ? x : h;
    for (int64_t l = 0; l < L; l++) {
        const layer *P = &K->layer[l];
        for (int64_t r = 0; !post && r < rows; r++) layer_norm(x + r * d, P->n1g, P->n1b, h + r * d, d, K->eps);
        ip_product(&P->qkv, in, d, d, t, W, (int)rows, s->xq);
        for (int64_t r = 0; r < rows; r++) {
            float *qkv = t + r * W;
            for (int i = 0; i < 3 * d; i++) qkv[i] += P->qkv_bias[i];
            const int64_t row = a->rows_at ? a->rows_at[r] : r;
            const int32_t *from = a->from ? a->from + row * a->cap : NULL;
            for (int64_t hd = 0; hd < H; hd++) {
                float *ck = a->cache_k[l] + hd * a->head_stride, *cv = a->cache_v[l] + hd * a->head_stride;
                const size_t at = a->t_base ? a->t_base[past] + (size_t)r * a->row_stride
                                            : row * a->row_stride + past * a->t_stride;
                memcpy(ck + at, qkv + d + hd * dh, dh * sizeof(float));
                memcpy(cv + at, qkv + 2 * d + hd * dh, dh * sizeof(float));
                attend(qkv + hd * dh, ck, cv, from, a->t_base, row, a->row_stride, a->t_stride,
                       a->self_allowed + r * a->self_stride, (int)past + 1, dh, att + r * d + hd * dh, s->scores);
            }
        }
        ip_product(&P->self_out, att, d, d, h, d, (int)rows, s->xq);
        for (int64_t i = 0; i < rows * d; i++) x[i] += h[i];
        for (int64_t r = 0; post && r < rows; r++) layer_norm(x + r * d, P->n1g, P->n1b, x + r * d, d, K->eps);
        for (int64_t r = 0; !post && r < rows; r++) layer_norm(x + r * d, P->n2g, P->n2b, h + r * d, d, K->eps);
        ip_product(&P->cross_q, in, d, d, t, W, (int)rows, s->xq);
        for (int64_t r = 0; r < rows; r++) {
            const int64_t src = a->src, source = a->slots[r] / a->group;
            for (int64_t hd = 0; hd < H; hd++) {
                const size_t at = (size_t)((source * H + hd) * src * dh);
                attend(t + r * W + hd * dh, a->cross_k[l] + at, a->cross_v[l] + at, NULL, NULL, 0, 0, dh,
                       a->src_allowed + source * src, (int)src, dh, att + r * d + hd * dh, s->scores);
            }
        }
        ip_product(&P->cross_out, att, d, d, h, d, (int)rows, s->xq);
        for (int64_t i = 0; i < rows * d; i++) x[i] += h[i];
        for (int64_t r = 0; post && r < rows; r++) layer_norm(x + r * d, P->n2g, P->n2b, x + r * d, d, K->eps);
        for (int64_t r = 0; !post && r < rows; r++) layer_norm(x + r * d, P->n3g, P->n3b, h + r * d, d, K->eps);
        ip_product(&P->ff1, in, d, d, t, W, (int)rows, s->xq);
        for (int64_t r = 0; r < rows; r++) activate(t + r * W, K->ff, K->activation);
        ip_product(&P->ff2, t, W, K->ff, h, d, (int)rows, s->xq);
        for (int64_t i = 0; i < rows * d; i++) x[i] += h[i];
        for (int64_t r = 0; post && r < rows; r++) layer_norm(x + r * d, P->n3g, P->n3b, x + r * d, d, K->eps);
    }
    const qlinear *out_q = a->out_q;
    const int64_t width = a->width, k = a->k;
    for (int64_t r = 0; !post && r < rows; r++) layer_norm(x + r * d, K->nfg, K->nfb, h + r * d, d, K->eps);
    /* the output product IP_CHUNK rows at a time, each ranked before the next: the logits of 16 rows (1 MB for the
       whole vocabulary), not of every row (8 MB at beam 4 x 32 sentences, most of the step's peak memory) */
    const qlinear *chunk_q = a->split ? &a->split->common : out_q; /* the split: the common columns in chunks */
    for (int64_t r = 0; r < rows; r++) { /* LogSoftmax: x - max - log(sum(exp(x - max))) */
        if (r % IP_CHUNK == 0 && chunk_q->n)
            ip_product(chunk_q, in + r * d, d, d, s->logits, chunk_q->n,
                       (int)(rows - r < IP_CHUNK ? rows - r : IP_CHUNK), s->xq);
        const float *z = s->logits + (r % IP_CHUNK) * chunk_q->n;
        if (a->split) {
            if (split_rank(K, a, s, r, z, in + r * d)) continue;
            ip_product(out_q, in + r * d, d, d, s->one, out_q->n, 1, s->xq); /* a rare row: over the whole subset */
            z = s->one;
        }
        float *lp = a->log_probs + r * a->lp_stride;
        const uint8_t *own = a->own_vocab ? a->own_vocab + (a->slots[r] / a->group) * width : NULL;
        if (own) { /* over the row's own columns, gathered in order: the sums its source gets alone */
            const int m = vm_gather_owned(z, own, (int)width, s->own);
            const float top = vm_max(s->own, m), norm = logf(vm_exp_sum(s->own, m, top));
            vm_shift_owned(z, own, (int)width, top, norm, lp);
        } else {
            const float top = vm_max(z, (int)width);
            vm_shift(z, (int)width, top, logf(vm_exp_sum(z, (int)width, top)), lp);
        }
        for (int64_t j = 0; j < K->n_banned; j++) { /* the graph's banned ids, added after the log-softmax */
            const int64_t id = K->banned_ids[j], at = a->ids ? find(a->ids, width, id) : id;
            if (at >= 0) lp[at] += K->banned_values[j];
        }
        for (int32_t j = 0; a->banned_n && j < a->banned_n[r]; j++) { /* the n-gram block: out of the ranking */
            const int64_t id = a->banned[r * a->banned_stride + j], at = a->ids ? find(a->ids, width, id) : id;
            if (at >= 0) lp[at] = -INFINITY;
        }
        if (k > 0) {
            vm_top_k(lp, (int)width, (int)k, a->top_values + r * k, a->top_ids + r * k);
            if (a->ids)
                for (int64_t j = 0; j < k; j++) a->top_ids[r * k + j] = a->ids[a->top_ids[r * k + j]];
        }
    }
}

/* the weights packed once per kernel (a mutex guards it), and the vocabulary subset of `vocab_ids` (NULL: none) */
static OrtStatus *prepare(kernel *K, OrtKernelContext *ctx, const tensor *vocab_ids, subset **sub) {
    pthread_mutex_lock(&K->lock);
    OrtStatus *packing = K->packed ? NULL : pack_weights(K, ctx);
    if (!packing) K->packed = 1;
    pthread_mutex_unlock(&K->lock);
    if (packing) return packing;
    const int64_t *ids = vocab_ids->data;
    for (int64_t j = 0; j < vocab_ids->count; j++)
        if (ids[j] < 0 || ids[j] >= K->vocab) FAIL(ORT_INVALID_ARGUMENT, "%s: vocab_ids out of range", K->name);
    *sub = NULL;
    if (vocab_ids->count) {
        *sub = subset_of(K, ids, vocab_ids->count);
        if (!*sub) FAIL(ORT_FAIL, "%s: out of memory packing the vocabulary subset", K->name);
    }
    return NULL;
}

/* the cross keys/values of every layer, (sources, heads, src, d_head), from input `at` on (keys, values per layer) */
static OrtStatus *cross_inputs(const kernel *K, OrtKernelContext *ctx, size_t at, int64_t sources, int64_t src,
                               float **cross_k, float **cross_v) {
    const int64_t H = K->heads;
    for (int64_t l = 0; l < K->layers; l++) {
        tensor ck, cv;
        CHECK(input(ctx, at + 2 * l, &ck));
        CHECK(input(ctx, at + 2 * l + 1, &cv));
        if (ck.rank != 4 || ck.dims[0] != sources || ck.dims[1] != H || ck.dims[2] != src || ck.count != cv.count ||
            ck.dims[3] * H != K->d)
            FAIL(ORT_INVALID_ARGUMENT, "%s: layer %d's cross keys/values have other shapes", K->name, (int)l);
        cross_k[l] = ck.data; cross_v[l] = cv.data;
    }
    return NULL;
}

/* checks the input count, and reads the operator's own inputs (before the caches) into head[], vocab_ids and
   vocab_sources */
static OrtStatus *head_inputs(const kernel *K, OrtKernelContext *ctx, tensor *head, tensor *vocab_ids,
                              tensor *vocab_sources) {
    size_t count = 0;
    CHECK(g_api->KernelContext_GetInputCount(ctx, &count));
    if (count != weights_start(K) + 3 + WEIGHTS_PER_LAYER * (size_t)K->layers + weights_tail(K))
        FAIL(ORT_INVALID_ARGUMENT, "%s: %zu inputs for %d layers", K->name, count, (int)K->layers);
    for (int64_t i = 0; i < K->head_inputs; i++) CHECK(input(ctx, i, &head[i]));
    CHECK(input(ctx, K->head_inputs + 4 * K->layers, vocab_ids));
    return input(ctx, K->head_inputs + 4 * K->layers + 1, vocab_sources);
}

static OrtStatus *compute(void *handle, OrtKernelContext *ctx) {
    kernel *K = handle;
    const int64_t L = K->layers, H = K->heads;
    tensor head[HEAD_INPUTS], vocab_ids, vocab_sources;
    CHECK(head_inputs(K, ctx, head, &vocab_ids, &vocab_sources));
    const tensor tokens = head[0], src_mask = head[1], topk = head[2], positions = head[3], self_mask = head[4];
    const tensor query_rows = head[5], row_slots = head[6];
    subset *sub = NULL;
    CHECK(prepare(K, ctx, &vocab_ids, &sub));
    const int d = K->d, dh = d / (int)H;
    step_args a = {0};
    a.rows = tokens.count;
    a.group = query_rows.rank == 2 ? query_rows.dims[1] : 1;
    a.sources = src_mask.dims[0]; a.src = src_mask.dims[1];
    a.tokens = tokens.data; a.positions = positions.data; a.slots = row_slots.data;
    a.ids = sub ? vocab_ids.data : NULL;
    a.out_q = sub ? &sub->q : &K->out;
    a.width = vocab_ids.count ? vocab_ids.count : K->vocab;
    a.k = *(int64_t *)topk.data;
    a.k = a.k < 0 ? 0 : (a.k > a.width ? a.width : a.k);
    const int64_t rows = a.rows;
    float *cross_k[64], *cross_v[64], *present_k[64], *present_v[64];
    uint8_t *src_allowed = NULL, *self_allowed = NULL, *own = NULL;
    scratch s = {0};
    OrtStatus *status = NULL;
#define STOP(...) do { status = g_api->CreateStatus(__VA_ARGS__); goto done; } while (0)
#define TRY(expr) do { if ((status = (expr))) goto done; } while (0)
    tensor past0;
    TRY(input(ctx, HEAD_INPUTS + 2 * L, &past0));
    const int64_t past = past0.rank == 4 ? past0.dims[2] : -1;
    a.past = past; a.cap = past + 1;
    if (past < 0 || positions.count != rows || row_slots.count != rows || self_mask.rank != 2 ||
        self_mask.dims[0] != rows || self_mask.dims[1] != past + 1 || a.group < 1)
        STOP(ORT_INVALID_ARGUMENT, "FusedDecoderStep: rows, positions, self_mask and row_slots disagree");
    for (int64_t r = 0; r < rows; r++)
        if (a.tokens[r] < 0 || a.tokens[r] >= K->vocab || a.positions[r] < 0 || a.positions[r] >= K->max_positions ||
            a.slots[r] < 0 || a.slots[r] / a.group >= a.sources) {
            char message[128];
            snprintf(message, sizeof message, "FusedDecoderStep: row %d's token, position or slot is out of range",
                     (int)r);
            STOP(ORT_INVALID_ARGUMENT, message);
        }
    TRY(cross_inputs(K, ctx, HEAD_INPUTS, a.sources, a.src, cross_k, cross_v));
    TRY(own_columns(K, &vocab_sources, a.sources, a.width, 1, &own));
    a.own_vocab = own;
    for (int64_t l = 0; l < L; l++) {
        tensor pk, pv;
        TRY(input(ctx, HEAD_INPUTS + 2 * L + 2 * l, &pk));
        TRY(input(ctx, HEAD_INPUTS + 2 * L + 2 * l + 1, &pv));
        if (pk.rank != 4 || pk.dims[0] != rows || pk.dims[1] != H || pk.dims[2] != past || pk.dims[3] != dh ||
            pv.count != pk.count)
            STOP(ORT_INVALID_ARGUMENT, "FusedDecoderStep: a layer's past keys/values have other shapes");
        const int64_t dims[4] = {rows, H, past + 1, dh};
        TRY(output(ctx, 3 + 2 * l, dims, 4, (void **)&present_k[l]));
        TRY(output(ctx, 4 + 2 * l, dims, 4, (void **)&present_v[l]));
        for (int64_t rh = 0; rh < rows * H; rh++) { /* the past, then the step writes the new column */
            memcpy(present_k[l] + rh * (past + 1) * dh, (float *)pk.data + rh * past * dh, past * dh * sizeof(float));
            memcpy(present_v[l] + rh * (past + 1) * dh, (float *)pv.data + rh * past * dh, past * dh * sizeof(float));
        }
    }
    const int64_t lp_dims[2] = {rows, a.width}, top_dims[2] = {rows, a.k};
    TRY(output(ctx, 0, lp_dims, 2, (void **)&a.log_probs));
    TRY(output(ctx, 1, top_dims, 2, (void **)&a.top_values));
    TRY(output(ctx, 2, top_dims, 2, (void **)&a.top_ids));
    src_allowed = malloc(a.sources * a.src + 1);
    self_allowed = malloc(rows * (past + 1) + 1);
    if (!src_allowed || !self_allowed || !scratch_alloc(&s, K, rows, a.out_q->n, past + 1 > a.src ? past + 1 : a.src))
        STOP(ORT_FAIL, "FusedDecoderStep: out of memory");
    for (int64_t i = 0; i < a.sources * a.src; i++) src_allowed[i] = ((const uint8_t *)src_mask.data)[i] != 0;
    for (int64_t i = 0; i < rows * (past + 1); i++) self_allowed[i] = ((const uint8_t *)self_mask.data)[i] != 0;
    a.src_allowed = src_allowed; a.self_allowed = self_allowed; a.self_stride = past + 1;
    a.lp_stride = a.width;
    a.t_stride = dh; a.head_stride = (size_t)(past + 1) * dh; a.row_stride = H * a.head_stride; /* the presents' */
    a.cross_k = cross_k; a.cross_v = cross_v; a.cache_k = present_k; a.cache_v = present_v;
    step(K, &a, &s);
done:
    release_subset(K, sub);
    scratch_free(&s); free(src_allowed); free(self_allowed); free(own);
    return status;
}

/* A search's key/value cache: the mapping the last search gave back (grown with mremap where it is smaller), else a
   new anonymous one. A fresh mapping's pages are zeroed by the kernel as the steps first touch them, 786 KB a step
   at beam 4 x 32 sentences (6-8% of the search's CPU, docs/engine-speed-log.md item 55); a kept one's are already
   there. Its touched pages are the size of one search's cache, which that search held anyway. */
static float *cache_take(kernel *K, size_t bytes, size_t *mapped) {
    pthread_mutex_lock(&K->lock);
    void *m = K->spare_cache;
    size_t have = K->spare_bytes;
    K->spare_cache = NULL; K->spare_bytes = 0;
    pthread_mutex_unlock(&K->lock);
    if (m && have < bytes) {
        void *grown = mremap(m, have, bytes, MREMAP_MAYMOVE);
        if (grown == MAP_FAILED) munmap(m, have);
        m = grown == MAP_FAILED ? NULL : grown;
        have = bytes;
    }
    if (!m) {
        m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        have = bytes;
    }
    *mapped = have;
    return m;
}

/* back for the next search (one kept: a concurrent search's is unmapped) */
static void cache_give_back(kernel *K, void *m, size_t bytes) {
    if (!m) return;
    pthread_mutex_lock(&K->lock);
    if (!K->spare_cache) { K->spare_cache = m; K->spare_bytes = bytes; m = NULL; }
    pthread_mutex_unlock(&K->lock);
    if (m) munmap(m, bytes);
}

/* --- mtserve.fused.FusedSearch: the search loop graph's Loop (core/graphs.py SEARCH_LOOP), for a batch ------- */

/* Inputs: max_steps () i64, tokens (sources * k, 1) i64 (BOS), scores (sources * k, 1) f64, src_mask (sources, src)
   bool, source_limits (sources) i64, no_repeat_ngram_size () i64, cross_keys_i / cross_values_i (sources, heads, src, d_head) per layer,
   past_keys_i / past_values_i (sources * k, heads, 0, d_head) per layer (empty: read for their shapes only),
   vocab_ids, vocab_sources (each source's own ids of the subset, at least 2k of them; empty: all), then the step
   operator's weights. Rows s * k .. s * k + k - 1 are source s's k beams.
   Outputs (steps, sources * k) each: ended (bool), ended_beams, ended_scores (f64), going_beams, going_ids,
   going_scores (f64), and source_steps (sources) i64. Source s runs source_steps[s] steps; its columns of the
   first source_steps[s] rows are export/search_loop.py's scan outputs for it alone, computed as its Loop body
   computes them (the k x 2k candidates' float32 log-probabilities added to their beams' float64 scores, ranked
   largest first, the lower flat index first among equal totals; EOS among the first k ends a hypothesis; the first
   k others go on; beams numbered 0..k-1 within the source), until k hypotheses have ended or min(max_steps,
   source_limits[s]) steps; the rows after that are filler. Each row's arithmetic is its own, so a source's
   answer does not depend on the others in the batch. With no_repeat_ngram_size n > 0, a token that would complete
   an n-gram a row's generated tokens already hold is out of that row's ranking (engine/no_repeat.py's
   block: its log-probability -inf before the top 2k are taken).
   The key/value cache is written in place: at step t the i-th row still searching writes row i of column t and never
   moves it; a beam that goes on from row j inherits row j's list of where its columns are (`from`), so no cache is
   copied between steps. The cache is one anonymous mapping of the longest limit, touched only as far as the steps
   go. Attribute eos (the end token) besides layers, heads, epsilon. */
#define SEARCH_HEAD 6

static OrtStatus *search(void *handle, OrtKernelContext *ctx) {
    kernel *K = handle;
    const int64_t L = K->layers, H = K->heads;
    tensor head[SEARCH_HEAD], vocab_ids, vocab_sources, past0;
    CHECK(head_inputs(K, ctx, head, &vocab_ids, &vocab_sources));
    const tensor max_steps = head[0], tokens = head[1], start_scores = head[2], src_mask = head[3];
    const tensor source_limits = head[4], block = head[5];
    CHECK(input(ctx, SEARCH_HEAD + 2 * L, &past0));
    const int64_t B = src_mask.rank == 2 ? src_mask.dims[0] : 0, rows = tokens.count, k = B ? rows / B : 0;
    const int64_t most = max_steps.count == 1 ? *(int64_t *)max_steps.data : -1;
    const int64_t ngram = block.count == 1 ? *(int64_t *)block.data : -1;
    if (ngram < 0) FAIL(ORT_INVALID_ARGUMENT, "FusedSearch: no_repeat_ngram_size must be one number >= 0");
    if (B < 1 || k < 1 || k * B != rows || start_scores.count != rows || source_limits.count != B || most < 0 ||
        past0.rank != 4 || past0.dims[0] != rows || past0.dims[2] != 0)
        FAIL(ORT_INVALID_ARGUMENT, "FusedSearch: tokens, scores, src_mask, limits, max_steps or the past disagree");
    const int64_t *limits = source_limits.data;
    int64_t longest = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t limit = limits[b] < most ? limits[b] : most;
        if (limit < 0) FAIL(ORT_INVALID_ARGUMENT, "FusedSearch: a negative source limit");
        longest = limit > longest ? limit : longest;
    }
    subset *sub = NULL;
    CHECK(prepare(K, ctx, &vocab_ids, &sub));
    const int d = K->d, dh = d / (int)H;
    if (2 * k > (vocab_ids.count ? vocab_ids.count : K->vocab)) {
        release_subset(K, sub);
        FAIL(ORT_INVALID_ARGUMENT, "FusedSearch: %d beams rank more candidates than the vocabulary has", (int)k);
    }
    const int64_t width = vocab_ids.count ? vocab_ids.count : K->vocab, top = 2 * k, src = src_mask.dims[1];
    /* at most cap steps: a search ends at its limit or fails at the end of the position table */
    const int64_t cap = (longest < K->max_positions ? longest : K->max_positions) + 1;
    step_args a = {0};
    a.cap = cap; a.sources = B; a.src = src; a.group = 1; a.self_stride = 0;
    /* cache columns outermost, each as wide as the rows that step computed (t_base: a source that has ended takes no
       room in the later ones), a row's keys and values of every layer together: the steps so far touch a prefix of
       the mapping, column after column (a row-major layout would touch a partial page per row and head), and a kept
       mapping (cache_take) holds no more touched pages than the longest search needed, whatever its batch */
    a.head_stride = dh; a.row_stride = 2 * (size_t)L * d; a.t_stride = 0;
    a.ids = sub ? vocab_ids.data : NULL;
    a.out_q = sub ? &sub->q : &K->out;
    a.width = width; a.k = top;
    float *cross_k[64], *cross_v[64], *cache_k[64], *cache_v[64];
    const size_t layer_floats = (size_t)rows * H * cap * dh;
    size_t cache_bytes = 0;
    float *cache = cache_take(K, 2 * L * layer_floats * sizeof(float), &cache_bytes);
    int64_t *tok = malloc(rows * sizeof(int64_t)), *pos = malloc(rows * sizeof(int64_t));
    int64_t *slots = malloc(rows * sizeof(int64_t)), *active = malloc(rows * sizeof(int64_t));
    int64_t *top_ids = malloc(rows * top * sizeof(int64_t)), *best_at = malloc(top * sizeof(int64_t));
    int64_t *steps_of = calloc(B, sizeof(int64_t)), *finished = calloc(B, sizeof(int64_t));
    const size_t out_n = (size_t)cap * rows;
    int64_t *o_ended_beams = calloc(out_n, sizeof(int64_t)), *o_going_beams = calloc(out_n, sizeof(int64_t));
    int64_t *o_going_ids = calloc(out_n, sizeof(int64_t));
    double *o_ended_scores = calloc(out_n, sizeof(double)), *o_going_scores = calloc(out_n, sizeof(double));
    uint8_t *o_ended = calloc(out_n, 1);
    double *scores = malloc(rows * sizeof(double)), *best = malloc(top * sizeof(double));
    float *log_probs = malloc(width * sizeof(float)), *top_values = malloc(rows * top * sizeof(float));
    int32_t *from[2] = {malloc(rows * cap * sizeof(int32_t)), malloc(rows * cap * sizeof(int32_t))};
    size_t *t_base = malloc(cap * sizeof(size_t));
    /* the block's bookkeeping: each row's generated tokens (double-buffered as `from`), a step's banned ids */
    int64_t *history[2] = {NULL, NULL}, *banned = NULL;
    int32_t *banned_n = NULL;
    if (ngram) {
        history[0] = malloc(rows * cap * sizeof(int64_t)); history[1] = malloc(rows * cap * sizeof(int64_t));
        banned = malloc(rows * cap * sizeof(int64_t)); banned_n = malloc(rows * sizeof(int32_t));
    }
    uint8_t *ones = malloc(cap), *src_allowed = malloc(B * src + 1), *going = malloc(B), *own = NULL;
    split *sp = NULL;
    scratch s = {0};
    OrtStatus *status = NULL;
    const int ok = cache && tok && pos && slots && active && top_ids && best_at && steps_of &&
                   finished && o_ended_beams && o_going_beams && o_going_ids && o_ended_scores && o_going_scores &&
                   o_ended && scores && best && log_probs && top_values && from[0] && from[1] && t_base && ones &&
                   src_allowed && going && (!ngram || (history[0] && history[1] && banned && banned_n)) &&
                   scratch_alloc(&s, K, rows, a.out_q->n, cap > src ? cap : src);
    if (!ok) {
        STOP(ORT_FAIL, "FusedSearch: out of memory");
    }
    for (int64_t l = 0; l < L; l++) {
        cache_k[l] = cache + 2 * l * (size_t)d;
        cache_v[l] = cache + (2 * l + 1) * (size_t)d;
    }
    TRY(cross_inputs(K, ctx, SEARCH_HEAD, B, src, cross_k, cross_v));
    TRY(own_columns(K, &vocab_sources, B, width, top, &own));
    a.own_vocab = own;
    if (own && sub && split_wanted()) { /* each source's rows over its own columns only (`split`) */
        sp = split_build(K, vocab_ids.data, width, own, B);
        if (!sp) STOP(ORT_FAIL, "FusedSearch: out of memory");
        a.split = sp;
    }
    memcpy(tok, tokens.data, rows * sizeof(int64_t));
    memcpy(scores, start_scores.data, rows * sizeof(double));
    for (int64_t r = 0; r < rows; r++)
        if (tok[r] < 0 || tok[r] >= K->vocab) STOP(ORT_INVALID_ARGUMENT, "FusedSearch: a start token is out of range");
    memset(ones, 1, cap);
    for (int64_t i = 0; i < B * src; i++) src_allowed[i] = ((const uint8_t *)src_mask.data)[i] != 0;
    for (int64_t b = 0; b < B; b++) going[b] = (limits[b] < most ? limits[b] : most) > 0;
    a.positions = pos; a.slots = slots; a.rows_at = active;
    a.self_allowed = ones; a.src_allowed = src_allowed;
    a.cross_k = cross_k; a.cross_v = cross_v; a.cache_k = cache_k; a.cache_v = cache_v;
    a.log_probs = log_probs; a.lp_stride = 0; /* only the top 2k of each row are kept */
    a.top_values = top_values; a.top_ids = top_ids;
    int cur = 0;
    int64_t steps = 0, columns = 0; /* columns: the rows of the last step's column */
    /* a source's k beams start from one token: their first step is one row's (computed once, shared below) */
    int first_shared = k > 1;
    for (int64_t r = 0; r < rows; r++) first_shared &= tok[r] == tok[r - r % k];
    for (int64_t t = 0;; t++) {
        const int64_t each = t == 0 && first_shared ? k : 1; /* computed rows: every `each`-th of a source's */
        int64_t n = 0; /* the rows of the sources still searching, in order */
        for (int64_t r = 0; r < rows; r += each)
            if (going[r / k]) { active[n] = r; tok[n] = tok[r]; pos[n] = t; slots[n] = r / k; n++; }
        if (n == 0) break;
        if (t >= K->max_positions) STOP(ORT_INVALID_ARGUMENT, "FusedSearch: a limit is past the position table");
        for (int64_t i = 0; i < n; i++) /* row i of column t, for the beams that share it too */
            for (int64_t j = 0; j < each; j++) from[cur][(active[i] + j) * cap + t] = (int32_t)i;
        t_base[t] = t ? t_base[t - 1] + (size_t)columns * a.row_stride : 0;
        columns = n;
        a.rows = n; a.past = t; a.tokens = tok; a.from = from[cur]; a.t_base = t_base;
        if (ngram) { /* row i bans the followers of every earlier occurrence of its last n - 1 tokens */
            for (int64_t i = 0; i < n; i++) {
                const int64_t *h = history[cur] + active[i] * cap;
                int32_t count = 0;
                for (int64_t p = 0; p + ngram <= t; p++) {
                    int64_t q = 0;
                    while (q < ngram - 1 && h[p + q] == h[t - ngram + 1 + q]) q++;
                    if (q == ngram - 1) banned[i * cap + count++] = h[p + ngram - 1];
                }
                banned_n[i] = count;
            }
            a.banned = banned; a.banned_n = banned_n; a.banned_stride = cap;
        }
        step(K, &a, &s);
        steps = t + 1;
        if (each > 1) { /* each computed row's top values and ids for its source's k beams, from the last down */
            for (int64_t i = n - 1; i >= 0; i--)
                for (int64_t j = each - 1; j >= 0; j--) {
                    memmove(top_values + (i * each + j) * top, top_values + i * top, top * sizeof(float));
                    memmove(top_ids + (i * each + j) * top, top_ids + i * top, top * sizeof(int64_t));
                    active[i * each + j] = active[i] + j;
                }
            n *= each;
        }
        for (int64_t at = 0; at < n; at += k) { /* one source's k rows */
            const int64_t b = active[at] / k, first = b * k;
            const float *values = top_values + at * top;
            const int64_t *ids = top_ids + at * top;
            /* the k x 2k candidates' totals, the best 2k in order: larger total first, then lower flat index */
            int64_t have = 0;
            for (int64_t j = 0; j < k * top; j++) {
                const double v = (double)values[j] + scores[first + j / top];
                if (have == top && !(v > best[top - 1])) continue;
                int64_t c = have < top ? have++ : top - 1;
                while (c > 0 && v > best[c - 1]) { best[c] = best[c - 1]; best_at[c] = best_at[c - 1]; c--; }
                best[c] = v; best_at[c] = j;
            }
            const size_t row = (size_t)t * rows + first;
            for (int64_t i = 0; i < k; i++) { /* the first k: EOS among them ends a hypothesis */
                const int64_t j = best_at[i];
                o_ended[row + i] = ids[j] == K->eos;
                o_ended_beams[row + i] = j / top;
                o_ended_scores[row + i] = best[i];
                finished[b] += ids[j] == K->eos;
            }
            for (int64_t i = 0, g = 0; i < top && g < k; i++) { /* the first k others go on */
                const int64_t j = best_at[i];
                if (ids[j] == K->eos) continue;
                o_going_beams[row + g] = j / top;
                o_going_ids[row + g] = ids[j];
                o_going_scores[row + g] = best[i];
                g++;
            }
            steps_of[b] = t + 1;
            const int64_t limit = limits[b] < most ? limits[b] : most;
            if (finished[b] >= k || t + 1 >= limit) { going[b] = 0; continue; }
            for (int64_t i = 0; i < k; i++) { /* the beams that go on: their tokens, scores, and where their columns are */
                const int64_t beam = first + o_going_beams[row + i];
                tok[first + i] = o_going_ids[row + i];
                scores[first + i] = o_going_scores[row + i];
                memcpy(from[1 - cur] + (first + i) * cap, from[cur] + beam * cap, (t + 1) * sizeof(int32_t));
                if (ngram) {
                    memcpy(history[1 - cur] + (first + i) * cap, history[cur] + beam * cap, t * sizeof(int64_t));
                    history[1 - cur][(first + i) * cap + t] = tok[first + i];
                }
            }
        }
        cur = 1 - cur; /* tok and scores are back in row order (going sources' rows), `from` in the other buffer */
    }
    {
        const int64_t dims[2] = {steps, rows}, source_dims[1] = {B};
        void *data[7];
        for (int i = 0; i < 6; i++) TRY(output(ctx, i, dims, 2, &data[i]));
        TRY(output(ctx, 6, source_dims, 1, &data[6]));
        const size_t n = (size_t)steps * rows;
        memcpy(data[0], o_ended, n);
        memcpy(data[1], o_ended_beams, n * sizeof(int64_t));
        memcpy(data[2], o_ended_scores, n * sizeof(double));
        memcpy(data[3], o_going_beams, n * sizeof(int64_t));
        memcpy(data[4], o_going_ids, n * sizeof(int64_t));
        memcpy(data[5], o_going_scores, n * sizeof(double));
        memcpy(data[6], steps_of, B * sizeof(int64_t));
    }
done:
    release_subset(K, sub);
    scratch_free(&s);
    cache_give_back(K, cache, cache_bytes);
    free(tok); free(pos); free(slots); free(active); free(top_ids); free(best_at); free(steps_of); free(finished);
    free(o_ended_beams); free(o_going_beams); free(o_going_ids); free(o_ended_scores); free(o_going_scores);
    free(o_ended); free(scores); free(best); free(log_probs); free(top_values); free(from[0]); free(from[1]); free(t_base);
    free(history[0]); free(history[1]); free(banned); free(banned_n);
    free(ones); free(src_allowed); free(going); free(own);
    split_free(sp);
    return status;
}
#undef STOP
#undef TRY

/* --- the operator's schema and kernel life --------------------------------------------------------------------- */

static OrtStatus *create_kernel(const OrtApi *api, const OrtKernelInfo *info, const char *name,
                                int64_t head_inputs, int with_eos, void **out) {
    kernel *k = calloc(1, sizeof(kernel));
    if (!k) return api->CreateStatus(ORT_FAIL, "out of memory");
    k->name = name; k->head_inputs = head_inputs; k->eos = -1;
    OrtStatus *status = api->KernelInfoGetAttribute_int64(info, "layers", &k->layers);
    if (!status) status = api->KernelInfoGetAttribute_int64(info, "heads", &k->heads);
    if (!status) status = api->KernelInfoGetAttribute_float(info, "epsilon", &k->eps);
    if (!status && with_eos) status = api->KernelInfoGetAttribute_int64(info, "eos", &k->eos);
    const char *optional[4] = {"post_norm", "activation", "output_bias", "banned"};
    int64_t *into[4] = {&k->post_norm, &k->activation, &k->output_bias, &k->has_banned};
    for (int i = 0; i < 4 && !status; i++) { /* the layout attributes: absent in our own bundles' nodes, 0 */
        OrtStatus *absent = api->KernelInfoGetAttribute_int64(info, optional[i], into[i]);
        if (absent) { api->ReleaseStatus(absent); *into[i] = 0; }
    }
    if (!status && (k->activation < 0 || k->activation > 2))
        status = api->CreateStatus(ORT_INVALID_ARGUMENT, "activation must be 0 (ReLU), 1 (swish) or 2 (GELU)");
    if (!status && (k->layers < 1 || k->layers > 64 || k->heads < 1))
        status = api->CreateStatus(ORT_INVALID_ARGUMENT, "layers must be 1-64 and heads >= 1");
    if (status) { free(k); return status; }
    pthread_mutex_init(&k->lock, NULL);
    ip_init();
    *out = k;
    return NULL;
}

static OrtStatus *create_step(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info, void **out) {
    (void)op;
    return create_kernel(api, info, "FusedDecoderStep", HEAD_INPUTS, 0, out);
}

static OrtStatus *create_search(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info, void **out) {
    (void)op;
    return create_kernel(api, info, "FusedSearch", SEARCH_HEAD, 1, out);
}

static void destroy_kernel(void *handle) {
    kernel *k = handle;
    if (k->layer) {
        for (int64_t l = 0; l < k->layers; l++) {
            layer *L = &k->layer[l];
            ip_free(&L->qkv); ip_free(&L->self_out); ip_free(&L->cross_q); ip_free(&L->cross_out);
            ip_free(&L->ff1); ip_free(&L->ff2);
        }
        free(k->layer);
    }
    ip_free(&k->out);
    free(k->banned_ids); free(k->banned_values);
    if (k->cached) release_subset(k, k->cached);
    if (k->spare_cache) munmap(k->spare_cache, k->spare_bytes);
    pthread_mutex_destroy(&k->lock);
    free(k);
}

static const char *step_name(const OrtCustomOp *op) { (void)op; return "FusedDecoderStep"; }
static const char *search_name(const OrtCustomOp *op) { (void)op; return "FusedSearch"; }
static const char *op_provider(const OrtCustomOp *op) { (void)op; return "CPUExecutionProvider"; }
static ONNXTensorElementDataType any_type(const OrtCustomOp *op, size_t i) {
    (void)op; (void)i;
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}
static size_t one(const OrtCustomOp *op) { (void)op; return 1; }
static OrtCustomOpInputOutputCharacteristic variadic(const OrtCustomOp *op, size_t i) {
    (void)op; (void)i;
    return INPUT_OUTPUT_VARIADIC;
}
/* outputs typed, so that onnxruntime infers them inside a Loop body: log_probs, top_log_probs, top_ids, then the
   presents (float, variadic) */
static ONNXTensorElementDataType step_output_type(const OrtCustomOp *op, size_t i) {
    (void)op;
    return i == 2 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}
static size_t four(const OrtCustomOp *op) { (void)op; return 4; }
static OrtCustomOpInputOutputCharacteristic step_output_kind(const OrtCustomOp *op, size_t i) {
    (void)op;
    return i < 3 ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_VARIADIC;
}
/* ended, ended_beams, ended_scores, going_beams, going_ids, going_scores, source_steps */
static ONNXTensorElementDataType search_output_type(const OrtCustomOp *op, size_t i) {
    (void)op;
    static const ONNXTensorElementDataType types[7] = {
        ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,
        ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,
        ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64};
    return i < 7 ? types[i] : ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}
static size_t seven(const OrtCustomOp *op) { (void)op; return 7; }
static OrtCustomOpInputOutputCharacteristic required(const OrtCustomOp *op, size_t i) {
    (void)op; (void)i;
    return INPUT_OUTPUT_REQUIRED;
}
static OrtMemType default_memory(const OrtCustomOp *op, size_t i) { (void)op; (void)i; return OrtMemTypeDefault; }
static int min_arity(const OrtCustomOp *op) { (void)op; return 1; }
static int heterogeneous(const OrtCustomOp *op) { (void)op; return 0; }
static int homogeneous(const OrtCustomOp *op) { (void)op; return 1; }

static OrtCustomOp step_op, search_op;

/* an operator's table: what the two share, and what differs (name, outputs, kernel) */
static void describe(OrtCustomOp *op, const char *(*name)(const OrtCustomOp *),
                     ONNXTensorElementDataType (*output_type)(const OrtCustomOp *, size_t),
                     size_t (*output_count)(const OrtCustomOp *),
                     OrtCustomOpInputOutputCharacteristic (*output_kind)(const OrtCustomOp *, size_t),
                     OrtStatus *(*create)(const OrtCustomOp *, const OrtApi *, const OrtKernelInfo *, void **),
                     OrtStatus *(*run)(void *, OrtKernelContext *)) {
    memset(op, 0, sizeof *op);
    op->version = API_VERSION;
    op->GetName = name;
    op->GetOutputType = output_type;
    op->GetOutputTypeCount = output_count;
    op->GetOutputCharacteristic = output_kind;
    op->CreateKernelV2 = create;
    op->KernelComputeV2 = run;
    op->GetExecutionProviderType = op_provider;
    op->GetInputType = any_type;
    op->GetInputTypeCount = one;
    op->KernelDestroy = destroy_kernel;
    op->GetInputCharacteristic = variadic;
    op->GetInputMemoryType = default_memory;
    op->GetVariadicInputMinArity = min_arity;
    op->GetVariadicInputHomogeneity = heterogeneous;
    op->GetVariadicOutputMinArity = min_arity;
    op->GetVariadicOutputHomogeneity = homogeneous;
}

/* onnxruntime calls this when a session's options register the library (register_custom_ops_library) */
OrtStatus *ORT_API_CALL RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *base) {
    const OrtApi *api = base->GetApi(API_VERSION);
    if (!api) return NULL; /* an onnxruntime older than 1.16 cannot run the operators; it then fails to load graphs */
    g_api = api;
    describe(&step_op, step_name, step_output_type, four, step_output_kind, create_step, compute);
    describe(&search_op, search_name, search_output_type, seven, required, create_search, search);
    OrtCustomOpDomain *domain = NULL;
    OrtStatus *status = api->CreateCustomOpDomain("mtserve.fused", &domain);
    if (!status) status = api->CustomOpDomain_Add(domain, &step_op);
    if (!status) status = api->CustomOpDomain_Add(domain, &search_op);
    if (!status) status = api->AddCustomOpDomain(options, domain);
    return status;
}

/* for tests and benchmarks: which product kernel runs (0 plain, 1 AVX-512 VNNI, 2 AVX2, 3 AVX-VNNI), whether AMX tiles
   are granted, and
   the fewest rows that use them (0: never) */
int mtserve_fused_kernel(void) { ip_init(); return ip_kernel; }
int mtserve_fused_amx(void) { ip_init(); return ip_amx; }
void mtserve_fused_set_amx_rows(int rows) { ip_amx_min_rows = rows; }
