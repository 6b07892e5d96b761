/* mtserve.fused.FusedDecoderStep: a bundle's int8 whole-batch decoder step (decoder_step_batch.onnx, interface 3,
   with vocab_ids) as one onnxruntime custom operator, instead of the graph's ~150 nodes.

   The node (written by core/fused_step_graph.py from the step graph) takes the step graph's own inputs, then the
   weights the graph's nodes read, in this order (L layers):
     tokens (rows, 1) i64, src_mask (sources, src) bool, top_k (1) i64, positions (rows, 1) i64,
     self_mask (rows, past + 1) bool, query_rows (sources, group) i64, row_slots (rows) i64,
     cross_keys_i, cross_values_i (sources, heads, src, d_head) f32 for each layer i,
     past_keys_i, past_values_i (rows, heads, past, d_head) f32 for each layer i,
     vocab_ids (subset) i64 (empty: the whole vocabulary),
     embedding (vocab, d) f32, embedding scale (1) f32, position table (max_positions, d) f32,
     per layer: 6 norms' and products' groups (WEIGHTS_PER_LAYER tensors, the order of `layer_inputs` below),
     final norm gamma, beta; output product weight (d, vocab) i8, its scales (vocab), activation scale, zero point;
   and gives the graph's outputs: log_probs (rows, vocab or subset), top_log_probs, top_ids (rows, k),
   present_keys_i, present_values_i (rows, heads, past + 1, d_head): the past with the new key/value appended.
   Attributes: layers, heads, epsilon.

   The arithmetic is the graph's (pre-norm layers: LayerNorm, Q|K|V product + bias, self-attention over the rows'
   past where self_mask allows, output product, residual; LayerNorm, cross query product, attention over the row's
   source (row_slots[r] / group) where src_mask allows; LayerNorm, FFN with ReLU; final LayerNorm, output product,
   log-softmax, top-k), with the products of int8_products.h: the integer sums are exact, the float parts (norms,
   softmaxes) may differ from onnxruntime's kernels in the last bits. tests/engine/test_fused_step.py holds it to the
   graph. Weights are packed on the first run (a mutex guards it); a vocabulary subset's columns are packed once and
   kept while the next runs ask for the same ids (a search asks for one subset at every step). */
#include <pthread.h>
#include <stdio.h>

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
    int64_t layers, heads;
    float eps;
    pthread_mutex_t lock;
    int packed, d, ff, vocab, max_positions;
    const float *embedding, *positions, *nfg, *nfb;
    float emb_scale;
    layer *layer;
    qlinear out; /* the whole vocabulary; a subset's columns are packed from it */
    subset *cached;
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
} tensor;

static OrtStatus *input(OrtKernelContext *ctx, size_t i, tensor *t) {
    const OrtValue *value = NULL;
    CHECK(g_api->KernelContext_GetInput(ctx, i, &value));
    if (!value) FAIL(ORT_INVALID_ARGUMENT, "FusedDecoderStep: input %zu is missing", i);
    OrtTensorTypeAndShapeInfo *info = NULL;
    CHECK(g_api->GetTensorTypeAndShape(value, &info));
    OrtStatus *status = g_api->GetDimensionsCount(info, &t->rank);
    if (!status && t->rank > 4) status = g_api->CreateStatus(ORT_INVALID_ARGUMENT, "FusedDecoderStep: rank > 4");
    if (!status) status = g_api->GetDimensions(info, t->dims, t->rank);
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

static size_t weights_start(const kernel *k) { return HEAD_INPUTS + 4 * (size_t)k->layers + 1; }

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
        FAIL(ORT_INVALID_ARGUMENT, "FusedDecoderStep: product at input %zu has inconsistent shapes", at);
    if (!ip_pack(q, w.data, (int)w.dims[0], (int)w.dims[1], ws.data, with_bias ? b.data : NULL, *(float *)xs.data,
                 *(uint8_t *)xz.data))
        FAIL(ORT_FAIL, "FusedDecoderStep: out of memory packing weights");
    return NULL;
}

static OrtStatus *pack_weights(kernel *k, OrtKernelContext *ctx) {
    size_t at = weights_start(k);
    tensor emb, scale, pos;
    CHECK(input(ctx, at, &emb));
    CHECK(input(ctx, at + 1, &scale));
    CHECK(input(ctx, at + 2, &pos));
    if (emb.rank != 2 || pos.rank != 2 || pos.dims[1] != emb.dims[1])
        FAIL(ORT_INVALID_ARGUMENT, "FusedDecoderStep: embedding and position tables disagree");
    k->embedding = emb.data; k->emb_scale = *(float *)scale.data; k->positions = pos.data;
    k->vocab = (int)emb.dims[0]; k->d = (int)emb.dims[1]; k->max_positions = (int)pos.dims[0];
    at += 3;
    k->layer = calloc(k->layers, sizeof(layer));
    if (!k->layer) FAIL(ORT_FAIL, "FusedDecoderStep: out of memory");
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
            FAIL(ORT_INVALID_ARGUMENT, "FusedDecoderStep: layer %d's products do not fit d = %d", (int)l, k->d);
        k->ff = L->ff1.n_real;
    }
    tensor nfg, nfb, ow, os, oxs, oxz;
    CHECK(input(ctx, at, &nfg));
    CHECK(input(ctx, at + 1, &nfb));
    CHECK(input(ctx, at + 2, &ow));
    CHECK(input(ctx, at + 3, &os));
    CHECK(input(ctx, at + 4, &oxs));
    CHECK(input(ctx, at + 5, &oxz));
    if (ow.rank != 2 || ow.dims[0] != k->d || ow.dims[1] != k->vocab || os.count != k->vocab)
        FAIL(ORT_INVALID_ARGUMENT, "FusedDecoderStep: the output product is not (d, vocab)");
    k->nfg = nfg.data; k->nfb = nfb.data;
    if (!ip_pack(&k->out, ow.data, k->d, k->vocab, os.data, NULL, *(float *)oxs.data, *(uint8_t *)oxz.data))
        FAIL(ORT_FAIL, "FusedDecoderStep: out of memory packing weights");
    return NULL;
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

/* softmax(q . k_t * scale over the allowed t) . v for one head; keys/values (len, dh) */
static void attend(const float *q, const float *k, const float *v, const uint8_t *allowed, int len, int dh,
                   float *out, float *scores) {
    const float scale = 1.0f / sqrtf((float)dh);
    float top = -INFINITY, sum = 0.0f;
    for (int t = 0; t < len; t++) {
        if (!allowed[t]) continue;
        scores[t] = vm_dot(q, k + (size_t)t * dh, dh) * scale;
        if (scores[t] > top) top = scores[t];
    }
    for (int t = 0; t < len; t++)
        if (allowed[t]) { scores[t] = expf(scores[t] - top); sum += scores[t]; }
    for (int i = 0; i < dh; i++) out[i] = 0.0f;
    for (int t = 0; t < len; t++) {
        if (!allowed[t]) continue;
        const float p = scores[t] / sum;
        for (int i = 0; i < dh; i++) out[i] += p * v[(size_t)t * dh + i];
    }
}

static OrtStatus *compute(void *handle, OrtKernelContext *ctx) {
    kernel *K = handle;
    size_t count = 0;
    CHECK(g_api->KernelContext_GetInputCount(ctx, &count));
    const int64_t L = K->layers, H = K->heads;
    if (count != weights_start(K) + 3 + WEIGHTS_PER_LAYER * (size_t)L + 6)
        FAIL(ORT_INVALID_ARGUMENT, "FusedDecoderStep: %zu inputs for %d layers", count, (int)L);
    pthread_mutex_lock(&K->lock);
    OrtStatus *packing = K->packed ? NULL : pack_weights(K, ctx);
    if (!packing) K->packed = 1;
    pthread_mutex_unlock(&K->lock);
    if (packing) return packing;
    const int d = K->d, dh = d / (int)H, W = (3 * d > K->ff ? 3 * d : K->ff);

    tensor tokens, src_mask, topk, positions, self_mask, query_rows, row_slots, vocab_ids;
    CHECK(input(ctx, 0, &tokens));
    CHECK(input(ctx, 1, &src_mask));
    CHECK(input(ctx, 2, &topk));
    CHECK(input(ctx, 3, &positions));
    CHECK(input(ctx, 4, &self_mask));
    CHECK(input(ctx, 5, &query_rows));
    CHECK(input(ctx, 6, &row_slots));
    CHECK(input(ctx, HEAD_INPUTS + 4 * L, &vocab_ids));
    const int64_t rows = tokens.count, group = query_rows.rank == 2 ? query_rows.dims[1] : 1;
    const int64_t sources = src_mask.dims[0], src = src_mask.dims[1];
    tensor past0;
    CHECK(input(ctx, HEAD_INPUTS + 2 * L, &past0));
    const int64_t past = past0.dims[2];
    if (positions.count != rows || row_slots.count != rows || self_mask.rank != 2 || self_mask.dims[0] != rows ||
        self_mask.dims[1] != past + 1 || group < 1)
        FAIL(ORT_INVALID_ARGUMENT, "FusedDecoderStep: rows, positions, self_mask and row_slots disagree");
    for (int64_t r = 0; r < rows; r++) {
        const int64_t *tok = tokens.data, *pos = positions.data, *slot = row_slots.data;
        if (tok[r] < 0 || tok[r] >= K->vocab || pos[r] < 0 || pos[r] >= K->max_positions || slot[r] < 0 ||
            slot[r] / group >= sources)
            FAIL(ORT_INVALID_ARGUMENT, "FusedDecoderStep: row %d's token, position or slot is out of range", (int)r);
    }
    const int64_t *ids = vocab_ids.data;
    for (int64_t j = 0; j < vocab_ids.count; j++)
        if (ids[j] < 0 || ids[j] >= K->vocab) FAIL(ORT_INVALID_ARGUMENT, "FusedDecoderStep: vocab_ids out of range");
    const int64_t width = vocab_ids.count ? vocab_ids.count : K->vocab;
    int64_t k = *(int64_t *)topk.data;
    k = k < 0 ? 0 : (k > width ? width : k);

    float *cross_k[64], *cross_v[64], *past_k[64], *past_v[64], *present_k[64], *present_v[64];
    if (L > 64) FAIL(ORT_INVALID_ARGUMENT, "FusedDecoderStep: more than 64 layers");
    for (int64_t l = 0; l < L; l++) {
        tensor ck, cv, pk, pv;
        CHECK(input(ctx, HEAD_INPUTS + 2 * l, &ck));
        CHECK(input(ctx, HEAD_INPUTS + 2 * l + 1, &cv));
        CHECK(input(ctx, HEAD_INPUTS + 2 * L + 2 * l, &pk));
        CHECK(input(ctx, HEAD_INPUTS + 2 * L + 2 * l + 1, &pv));
        if (ck.rank != 4 || ck.dims[0] != sources || ck.dims[1] != H || ck.dims[2] != src || ck.dims[3] != dh ||
            cv.count != ck.count || pk.rank != 4 || pk.dims[0] != rows || pk.dims[1] != H || pk.dims[2] != past ||
            pk.dims[3] != dh || pv.count != pk.count)
            FAIL(ORT_INVALID_ARGUMENT, "FusedDecoderStep: layer %d's cross or past keys/values have other shapes",
                 (int)l);
        cross_k[l] = ck.data; cross_v[l] = cv.data; past_k[l] = pk.data; past_v[l] = pv.data;
        const int64_t dims[4] = {rows, H, past + 1, dh};
        CHECK(output(ctx, 3 + 2 * l, dims, 4, (void **)&present_k[l]));
        CHECK(output(ctx, 4 + 2 * l, dims, 4, (void **)&present_v[l]));
    }
    float *log_probs, *top_values;
    int64_t *top_ids;
    const int64_t lp_dims[2] = {rows, width}, top_dims[2] = {rows, k};
    CHECK(output(ctx, 0, lp_dims, 2, (void **)&log_probs));
    CHECK(output(ctx, 1, top_dims, 2, (void **)&top_values));
    CHECK(output(ctx, 2, top_dims, 2, (void **)&top_ids));

    subset *sub = NULL;
    if (vocab_ids.count) {
        sub = subset_of(K, ids, vocab_ids.count);
        if (!sub) FAIL(ORT_FAIL, "FusedDecoderStep: out of memory packing the vocabulary subset");
    }
    const qlinear *out_q = sub ? &sub->q : &K->out;
    const int64_t len = past + 1 > src ? past + 1 : src;
    float *x = malloc(rows * d * sizeof(float)), *h = malloc(rows * d * sizeof(float));
    float *t = malloc(rows * W * sizeof(float)), *att = malloc(rows * d * sizeof(float));
    float *logits = malloc(rows * out_q->n * sizeof(float)), *scores = malloc(len * sizeof(float));
    uint8_t *xq = aligned_alloc(64, (ip_xq_bytes((int)rows, W) + 63) / 64 * 64);
    uint8_t *src_allowed = malloc(sources * src), *self_allowed = malloc(rows * (past + 1));
    OrtStatus *status = NULL;
    if (!x || !h || !t || !att || !logits || !scores || !xq || !src_allowed || !self_allowed) {
        status = g_api->CreateStatus(ORT_FAIL, "FusedDecoderStep: out of memory");
        goto done;
    }
    for (int64_t i = 0; i < sources * src; i++) src_allowed[i] = ((const uint8_t *)src_mask.data)[i] != 0;
    for (int64_t i = 0; i < rows * (past + 1); i++) self_allowed[i] = ((const uint8_t *)self_mask.data)[i] != 0;

    for (int64_t r = 0; r < rows; r++) {
        const float *e = K->embedding + ((const int64_t *)tokens.data)[r] * d;
        const float *pe = K->positions + ((const int64_t *)positions.data)[r] * d;
        for (int i = 0; i < d; i++) x[r * d + i] = e[i] * K->emb_scale + pe[i];
    }
    for (int64_t l = 0; l < L; l++) {
        const layer *P = &K->layer[l];
        const size_t step = (size_t)(past + 1) * dh;
        for (int64_t r = 0; r < rows; r++) layer_norm(x + r * d, P->n1g, P->n1b, h + r * d, d, K->eps);
        ip_product(&P->qkv, h, d, d, t, W, (int)rows, xq);
        for (int64_t r = 0; r < rows; r++) {
            float *qkv = t + r * W;
            for (int i = 0; i < 3 * d; i++) qkv[i] += P->qkv_bias[i];
            for (int64_t hd = 0; hd < H; hd++) {
                float *pk = present_k[l] + (r * H + hd) * step, *pv = present_v[l] + (r * H + hd) * step;
                memcpy(pk, past_k[l] + (r * H + hd) * past * dh, past * dh * sizeof(float));
                memcpy(pv, past_v[l] + (r * H + hd) * past * dh, past * dh * sizeof(float));
                memcpy(pk + past * dh, qkv + d + hd * dh, dh * sizeof(float));
                memcpy(pv + past * dh, qkv + 2 * d + hd * dh, dh * sizeof(float));
                attend(qkv + hd * dh, pk, pv, self_allowed + r * (past + 1), (int)past + 1, dh, att + r * d + hd * dh,
                       scores);
            }
        }
        ip_product(&P->self_out, att, d, d, h, d, (int)rows, xq);
        for (int64_t i = 0; i < rows * d; i++) x[i] += h[i];
        for (int64_t r = 0; r < rows; r++) layer_norm(x + r * d, P->n2g, P->n2b, h + r * d, d, K->eps);
        ip_product(&P->cross_q, h, d, d, t, W, (int)rows, xq);
        for (int64_t r = 0; r < rows; r++) {
            const int64_t s = ((const int64_t *)row_slots.data)[r] / group;
            for (int64_t hd = 0; hd < H; hd++) {
                const size_t at = (size_t)((s * H + hd) * src * dh);
                attend(t + r * W + hd * dh, cross_k[l] + at, cross_v[l] + at, src_allowed + s * src, (int)src, dh,
                       att + r * d + hd * dh, scores);
            }
        }
        ip_product(&P->cross_out, att, d, d, h, d, (int)rows, xq);
        for (int64_t i = 0; i < rows * d; i++) x[i] += h[i];
        for (int64_t r = 0; r < rows; r++) layer_norm(x + r * d, P->n3g, P->n3b, h + r * d, d, K->eps);
        ip_product(&P->ff1, h, d, d, t, W, (int)rows, xq);
        for (int64_t r = 0; r < rows; r++)
            for (int i = 0; i < K->ff; i++) t[r * W + i] = t[r * W + i] > 0.0f ? t[r * W + i] : 0.0f;
        ip_product(&P->ff2, t, W, K->ff, h, d, (int)rows, xq);
        for (int64_t i = 0; i < rows * d; i++) x[i] += h[i];
    }
    for (int64_t r = 0; r < rows; r++) layer_norm(x + r * d, K->nfg, K->nfb, h + r * d, d, K->eps);
    ip_product(out_q, h, d, d, logits, out_q->n, (int)rows, xq);
    for (int64_t r = 0; r < rows; r++) { /* LogSoftmax: x - max - log(sum(exp(x - max))) */
        const float *z = logits + r * out_q->n;
        float *lp = log_probs + r * width;
        const float top = vm_max(z, (int)width);
        vm_shift(z, (int)width, top, logf(vm_exp_sum(z, (int)width, top)), lp);
        if (k > 0) {
            vm_top_k(lp, (int)width, (int)k, top_values + r * k, top_ids + r * k);
            if (sub)
                for (int64_t j = 0; j < k; j++) top_ids[r * k + j] = ids[top_ids[r * k + j]];
        }
    }
done:
    release_subset(K, sub);
    free(x); free(h); free(t); free(att); free(logits); free(scores); free(xq); free(src_allowed); free(self_allowed);
    return status;
}

/* --- the operator's schema and kernel life --------------------------------------------------------------------- */

static OrtStatus *create_kernel(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info, void **out) {
    (void)op;
    kernel *k = calloc(1, sizeof(kernel));
    if (!k) return api->CreateStatus(ORT_FAIL, "FusedDecoderStep: out of memory");
    OrtStatus *status = api->KernelInfoGetAttribute_int64(info, "layers", &k->layers);
    if (!status) status = api->KernelInfoGetAttribute_int64(info, "heads", &k->heads);
    if (!status) status = api->KernelInfoGetAttribute_float(info, "epsilon", &k->eps);
    if (!status && (k->layers < 1 || k->layers > 64 || k->heads < 1))
        status = api->CreateStatus(ORT_INVALID_ARGUMENT, "FusedDecoderStep: layers must be 1-64 and heads >= 1");
    if (status) { free(k); return status; }
    pthread_mutex_init(&k->lock, NULL);
    ip_init();
    *out = k;
    return NULL;
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
    if (k->cached) release_subset(k, k->cached);
    pthread_mutex_destroy(&k->lock);
    free(k);
}

static const char *op_name(const OrtCustomOp *op) { (void)op; return "FusedDecoderStep"; }
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
static ONNXTensorElementDataType output_type(const OrtCustomOp *op, size_t i) {
    (void)op;
    return i == 2 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}
static size_t four(const OrtCustomOp *op) { (void)op; return 4; }
static OrtCustomOpInputOutputCharacteristic output_kind(const OrtCustomOp *op, size_t i) {
    (void)op;
    return i < 3 ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_VARIADIC;
}
static OrtMemType default_memory(const OrtCustomOp *op, size_t i) { (void)op; (void)i; return OrtMemTypeDefault; }
static int min_arity(const OrtCustomOp *op) { (void)op; return 1; }
static int heterogeneous(const OrtCustomOp *op) { (void)op; return 0; }
static int homogeneous(const OrtCustomOp *op) { (void)op; return 1; }

static OrtCustomOp fused_op;

/* onnxruntime calls this when a session's options register the library (register_custom_ops_library) */
OrtStatus *ORT_API_CALL RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *base) {
    const OrtApi *api = base->GetApi(API_VERSION);
    if (!api) return NULL; /* an onnxruntime older than 1.16 cannot run the operator; it then fails to load graphs */
    g_api = api;
    memset(&fused_op, 0, sizeof fused_op);
    fused_op.version = API_VERSION;
    fused_op.GetName = op_name;
    fused_op.GetExecutionProviderType = op_provider;
    fused_op.GetInputType = any_type;
    fused_op.GetInputTypeCount = one;
    fused_op.GetOutputType = output_type;
    fused_op.GetOutputTypeCount = four;
    fused_op.KernelDestroy = destroy_kernel;
    fused_op.GetInputCharacteristic = variadic;
    fused_op.GetOutputCharacteristic = output_kind;
    fused_op.GetInputMemoryType = default_memory;
    fused_op.GetVariadicInputMinArity = min_arity;
    fused_op.GetVariadicInputHomogeneity = heterogeneous;
    fused_op.GetVariadicOutputMinArity = min_arity;
    fused_op.GetVariadicOutputHomogeneity = homogeneous;
    fused_op.CreateKernelV2 = create_kernel;
    fused_op.KernelComputeV2 = compute;
    OrtCustomOpDomain *domain = NULL;
    OrtStatus *status = api->CreateCustomOpDomain("mtserve.fused", &domain);
    if (!status) status = api->CustomOpDomain_Add(domain, &fused_op);
    if (!status) status = api->AddCustomOpDomain(options, domain);
    return status;
}

/* for tests and benchmarks: which product kernel runs (0 plain, 1 AVX-512 VNNI), whether AMX tiles are granted, and
   the fewest rows that use them (0: never) */
int mtserve_fused_kernel(void) { ip_init(); return ip_kernel; }
int mtserve_fused_amx(void) { ip_init(); return ip_amx; }
void mtserve_fused_set_amx_rows(int rows) { ip_amx_min_rows = rows; }
