/* Reading a ref_layer.py-format dump: manifest.txt (`name dtype d0 d1 ...`), raw little-endian
 * tensors <name>.<dtype>, meta.json. Every problem is one line naming the file and what was
 * expected, exit 2: the dump is user input. */
#include "layer.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char* const l_matrix_names[NMAT] = {
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "per_layer_input_gate.weight",
    "per_layer_projection.weight",
    "router.proj.weight",
};
const char* const l_bnd_names[NBND] = { "xn", "q", "qn", "k", "v", "kn", "vn", "attn", "o", "h1",
    "xn2", "gate", "up", "act", "down", "h2", "pg", "pact", "pp", "out", "rs", "rw", "xn3", "moe" };

enum { MAX_DIMS = 4 };
typedef struct {
    char name[128], dtype[8];
    int ndims;
    long dims[MAX_DIMS];
} entry;

typedef struct {
    entry* e;
    int n;
} manifest;

static void read_manifest(const char* dir, manifest* m)
{
    char path[4200], line[1024];
    snprintf(path, sizeof(path), "%s/manifest.txt", dir);
    FILE* f = fopen(path, "r");
    if (!f)
        sl_usage_error("%s: cannot open (expected a dump directory with manifest.txt and "
                       "meta.json, as `orchestrate layer-dump` writes)",
            path);
    int cap = 64, lineno = 0;
    m->e = calloc((size_t)cap, sizeof(entry));
    m->n = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char* p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            continue;
        if (m->n == cap)
            m->e = realloc(m->e, sizeof(entry) * (size_t)(cap *= 2));
        entry* e = &m->e[m->n];
        int used = 0;
        if (sscanf(p, "%127s %7s %n", e->name, e->dtype, &used) < 2)
            sl_usage_error("%s line %d: expected `name dtype d0 d1 ...`", path, lineno);
        if (strcmp(e->dtype, "bf16") && strcmp(e->dtype, "f32"))
            sl_usage_error("%s line %d: dtype '%s' of %s: expected bf16 or f32", path, lineno,
                e->dtype, e->name);
        p += used;
        e->ndims = 0;
        for (;;) {
            char* end;
            const long d = strtol(p, &end, 10);
            if (end == p)
                break;
            if (d < 1 || e->ndims == MAX_DIMS)
                sl_usage_error("%s line %d: bad shape of %s", path, lineno, e->name);
            e->dims[e->ndims++] = d;
            p = end;
        }
        while (isspace((unsigned char)*p))
            p++;
        if (*p || e->ndims == 0)
            sl_usage_error(
                "%s line %d: bad shape of %s (expected positive integers)", path, lineno, e->name);
        m->n++;
    }
    fclose(f);
}

/* Loads tensor `name` with exactly the shape given (ndims dims); the file must hold exactly
 * those bytes. Returns a 64-byte aligned buffer. */
static void* load(const char* dir, const manifest* m, const char* name, const char* dtype,
    int ndims, const long* dims)
{
    const entry* e = NULL;
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->e[i].name, name))
            e = &m->e[i];
    if (!e)
        sl_usage_error("%s/manifest.txt: tensor %s missing", dir, name);
    char want[128] = "", got[128] = "";
    for (int i = 0; i < ndims; i++)
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%ld", i ? " " : "", dims[i]);
    for (int i = 0; i < e->ndims; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%ld", i ? " " : "", e->dims[i]);
    if (strcmp(e->dtype, dtype) || strcmp(want, got))
        sl_usage_error("%s/manifest.txt: %s is %s [%s], expected %s [%s] (from meta.json)", dir,
            name, e->dtype, got, dtype, want);
    size_t count = 1;
    for (int i = 0; i < ndims; i++)
        count *= (size_t)dims[i];
    const size_t esz = strcmp(dtype, "bf16") ? 4 : 2, bytes = count * esz;
    char path[4400];
    snprintf(path, sizeof(path), "%s/%s.%s", dir, name, dtype);
    struct stat st;
    if (stat(path, &st))
        sl_usage_error("%s: missing (listed in manifest.txt)", path);
    if ((size_t)st.st_size != bytes)
        sl_usage_error("%s: %lld bytes, expected %zu (%s [%s] %s)%s", path, (long long)st.st_size,
            bytes, name, want, dtype, (size_t)st.st_size < bytes ? ": truncated" : "");
    FILE* f = fopen(path, "rb");
    if (!f)
        sl_usage_error("%s: cannot open", path);
    void* buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (fread(buf, 1, bytes, f) != bytes)
        sl_usage_error("%s: short read, expected %zu bytes", path, bytes);
    fclose(f);
    return buf;
}

static float* widen(uint16_t* h, size_t n)
{
    float* f = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        f[i] = sl_bf16_to_f32(h[i]);
    free(h);
    return f;
}

/* ---- meta.json: a flat lookup of the keys ref_layer.py writes (json.dump output) ---- */
static char* slurp(const char* path)
{
    FILE* f = fopen(path, "rb");
    if (!f)
        sl_usage_error("%s: cannot open (every dump row has a meta.json)", path);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n)
        sl_usage_error("%s: short read", path);
    s[n] = 0;
    fclose(f);
    return s;
}

/* the value after "key": within [from, ...), or NULL */
static const char* find_key(const char* from, const char* key)
{
    char pat[80];
    snprintf(pat, sizeof(pat), "\"%s\"", key);
    for (const char* p = strstr(from, pat); p; p = strstr(p + 1, pat)) {
        const char* q = p + strlen(pat);
        while (isspace((unsigned char)*q))
            q++;
        if (*q == ':') {
            q++;
            while (isspace((unsigned char)*q))
                q++;
            return q;
        }
    }
    return NULL;
}

/* numeric key; null/absent -> *present = false (when allowed) */
static double meta_num(
    const char* path, const char* js, const char* key, bool optional, bool* present)
{
    const char* v = find_key(js, key);
    if (present)
        *present = v && strncmp(v, "null", 4);
    if (!v || !strncmp(v, "null", 4)) {
        if (optional)
            return 0;
        sl_usage_error("%s: key %s missing (expected a number)", path, key);
    }
    char* end;
    const double x = strtod(v, &end);
    if (end == v)
        sl_usage_error("%s: key %s is not a number", path, key);
    return x;
}

static int meta_int(const char* path, const char* js, const char* key, int min)
{
    const double x = meta_num(path, js, key, false, NULL);
    if (x != (double)(long)x || x < min || x > (1 << 24))
        sl_usage_error("%s: %s = %g, expected an integer >= %d", path, key, x, min);
    return (int)x;
}

static void meta_str(
    const char* path, const char* js, const char* key, char* out, size_t len, const char* dflt)
{
    const char* v = find_key(js, key);
    if (!v || *v != '"') {
        if (dflt) {
            snprintf(out, len, "%s", dflt);
            return;
        }
        sl_usage_error("%s: key %s missing (expected a string)", path, key);
    }
    size_t i = 0;
    for (v++; *v && *v != '"' && i + 1 < len; v++)
        out[i++] = *v;
    out[i] = 0;
}

/* row 0's meta.json: the layer's shapes and kind */
static void meta_shapes(l_dump* d, const char* path, const char* js, int hidden)
{
    d->hidden = hidden;
    d->heads = meta_int(path, js, "heads", 1);
    d->kv_heads = meta_int(path, js, "kv_heads", 1);
    d->head_dim = meta_int(path, js, "head_dim", 2);
    d->inter = meta_int(path, js, "inter", 1);
    d->ple = meta_int(path, js, "ple", 0);
    d->cache_len = meta_int(path, js, "cache_len", 0);
    d->eps = meta_num(path, js, "eps", false, NULL);
    bool has_window;
    d->window = (int)meta_num(path, js, "window", true, &has_window);
    d->attn_scale = meta_num(path, js, "attn_scale", true, NULL);
    if (!find_key(js, "attn_scale"))
        d->attn_scale = 1.0; /* ref_layer.py's dumps: Gemma-4 scores are unscaled */
    meta_str(path, js, "layer_type", d->layer_type, sizeof(d->layer_type), NULL);
    meta_str(path, js, "shape", d->shape, sizeof(d->shape), "");
    d->sliding = !strcmp(d->layer_type, "sliding_attention");
    if (!d->sliding && strcmp(d->layer_type, "full_attention"))
        sl_usage_error("%s: layer_type '%s', expected sliding_attention or full_attention", path,
            d->layer_type);
    const char* moe = find_key(js, "moe");
    d->moe = moe && !strncmp(moe, "true", 4);
    const char* kv_eq = find_key(js, "kv_eq");
    d->kv_eq = kv_eq && !strncmp(kv_eq, "true", 4);
    if (d->moe) {
        d->experts = meta_int(path, js, "experts", 1);
        d->top_k = meta_int(path, js, "top_k", 1);
        d->moe_inter = meta_int(path, js, "moe_inter", 1);
        if (d->top_k > d->experts || d->top_k > L_MAX_TOPK)
            sl_usage_error("%s: top_k = %d: expected at most experts (%d) and %d", path, d->top_k,
                d->experts, L_MAX_TOPK);
    }
    const char* tp = find_key(js, "tp");
    d->tp = tp ? meta_int(path, js, "tp", 1) : 1;
    d->rank = d->tp > 1 ? meta_int(path, js, "rank", 0) : 0;
    if (d->tp > 1 && d->moe)
        sl_usage_error("%s: tp %d with moe: a MoE layer splits into head and expert sockets, "
                       "not tensor-parallel ranks",
            path, d->tp);
    for (int b = 0; b < NBND; b++) /* PLE's boundaries with a PLE, the MoE block's in one */
        d->has[b] = b >= B_RS ? d->moe : (b == B_PG || b == B_PACT || b == B_PP) ? d->ple > 0 : 1;
    if (d->heads % d->kv_heads)
        sl_usage_error("%s: heads %d not a multiple of kv_heads %d", path, d->heads, d->kv_heads);
    if (d->head_dim % 2)
        sl_usage_error("%s: head_dim %d must be even (RoPE halves)", path, d->head_dim);
}

/* rows 1..: the same layer as row 0 */
static void meta_same_shapes(const l_dump* d, const char* path, const char* js, int hidden)
{
    if (hidden != d->hidden || meta_int(path, js, "heads", 1) != d->heads
        || meta_int(path, js, "kv_heads", 1) != d->kv_heads
        || meta_int(path, js, "head_dim", 2) != d->head_dim
        || meta_int(path, js, "inter", 1) != d->inter || meta_int(path, js, "ple", 0) != d->ple
        || meta_int(path, js, "cache_len", 0) != d->cache_len)
        sl_usage_error("%s: shapes differ from row 0's (%s/meta.json); every batch row is the "
                       "same layer",
            path, d->row[0].dir);
}

/* a row's bars: the BF16 reference's errors per boundary, their spread, the routing KL */
static void meta_bars(const l_dump* d, l_row* r, const char* path, const char* js)
{
    const char* bars = find_key(js, "bf16_ref_err");
    if (!bars || *bars != '{')
        sl_usage_error("%s: key bf16_ref_err missing (expected {boundary: {rel_rms: ...}})", path);
    for (int b = 0; b < NBND; b++) {
        if (!d->has[b])
            continue;
        const char* obj = find_key(bars, l_bnd_names[b]);
        if (!obj || *obj != '{')
            sl_usage_error("%s: bf16_ref_err.%s missing", path, l_bnd_names[b]);
        char key[64];
        snprintf(key, sizeof(key), "bf16_ref_err.%s.rel_rms", l_bnd_names[b]);
        const char* v = find_key(obj, "rel_rms");
        char* end;
        r->bar[b] = v ? strtod(v, &end) : -1;
        if (!v || end == v || r->bar[b] < 0)
            sl_usage_error("%s: %s missing or negative", path, key);
    }
    /* optional (socketlab.layer.spread): the largest rel RMS of other valid BF16 realizations;
     * the gate holds the stage to 1.5 x max(bar, this) */
    const char* spread = find_key(js, "bf16_ref_spread");
    const char* worst = spread ? find_key(spread, "rel_rms_max") : NULL;
    if (spread && (*spread != '{' || !worst || *worst != '{'))
        sl_usage_error("%s: bf16_ref_spread: expected {\"rel_rms_max\": {boundary: number}}", path);
    for (int b = 0; b < NBND; b++) {
        r->spread[b] = 0;
        if (!worst || !d->has[b])
            continue;
        const char* v = find_key(worst, l_bnd_names[b]);
        char* end;
        r->spread[b] = v ? strtod(v, &end) : -1;
        if (!v || end == v || r->spread[b] < 0)
            sl_usage_error(
                "%s: bf16_ref_spread.rel_rms_max.%s missing or negative", path, l_bnd_names[b]);
    }
    if (d->moe) { /* the BF16 reference's routing KL (meta routing.kl_bf16): the bar of ours */
        const char* routing = find_key(js, "routing");
        r->routing_kl_bf16 = routing ? meta_num(path, routing, "kl_bf16", true, NULL) : 0;
    }
}

/* the layer's matrices with their shapes per matrix (rows, cols) */
static void layer_shapes(const l_dump* d, long shapes[NMAT][2], int present[NMAT])
{
    const long H = d->hidden, NH = d->heads, KVH = d->kv_heads, HD = d->head_dim, I = d->inter,
               P = d->ple, E = d->experts;
    const long s[NMAT][2] = { { NH * HD, H }, { KVH * HD, H }, { KVH * HD, H }, { H, NH * HD },
        { I, H }, { I, H }, { H, I }, { P, H }, { H, P }, { E, H } };
    /* a matrix the layer lacks has 0 rows and no tensor */
    const int p[NMAT] = { 1, 1, !d->kv_eq, 1, 1, 1, 1, P > 0, P > 0, d->moe };
    memcpy(shapes, s, sizeof(s));
    memcpy(present, p, sizeof(p));
}

/* row 0's directory: the layer's weights (matrices, norms, experts, the scalar) */
static void load_weights(l_dump* d, const l_row* r, const manifest* mp)
{
    const long H = d->hidden, HD = d->head_dim, P = d->ple, E = d->experts, EI = d->moe_inter;
    long shapes[NMAT][2];
    int present[NMAT];
    layer_shapes(d, shapes, present);
    char name[160];
    for (int k = 0; k < NMAT; k++) {
        d->rows[k] = present[k] ? (int)shapes[k][0] : 0;
        d->cols[k] = (int)shapes[k][1];
        if (!present[k])
            continue;
        snprintf(name, sizeof(name), "w.%s", l_matrix_names[k]);
        d->w[k] = load(r->dir, mp, name, "bf16", 2, shapes[k]);
    }
    const char* norms[12] = { "input_layernorm.weight", "post_attention_layernorm.weight",
        "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight",
        "post_per_layer_input_norm.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
        "pre_feedforward_layernorm_2.weight", "post_feedforward_layernorm_1.weight",
        "post_feedforward_layernorm_2.weight", "router.scale", "router.per_expert_scale" };
    float** dst[12] = { &d->w_in, &d->w_pa, &d->w_preffn, &d->w_postffn, &d->w_ppn, &d->w_qn,
        &d->w_kn, &d->w_pf2, &d->w_pff1, &d->w_pff2, &d->w_rscale, &d->w_pes };
    const long len[12] = { H, H, H, H, H, HD, HD, H, H, H, H, E };
    const int norm_present[12]
        = { 1, 1, 1, 1, P > 0, 1, 1, d->moe, d->moe, d->moe, d->moe, d->moe };
    for (int k = 0; k < 12; k++) {
        if (!norm_present[k])
            continue;
        snprintf(name, sizeof(name), "w.%s", norms[k]);
        *dst[k] = widen(load(r->dir, mp, name, "bf16", 1, &len[k]), (size_t)len[k]);
    }
    if (d->moe) {
        const long gu[3] = { E, 2 * EI, H }, dn[3] = { E, H, EI };
        d->w_gu = load(r->dir, mp, "w.experts.gate_up_proj", "bf16", 3, gu);
        d->w_dn = load(r->dir, mp, "w.experts.down_proj", "bf16", 3, dn);
    }
    const long one = 1;
    float* s = load(r->dir, mp, "layer_scalar", "f32", 1, &one);
    d->layer_scalar = s[0];
    free(s);
}

/* a row's own tensors: input, per-layer input, TP rests, routing, RoPE, KV cache, references */
static void load_row_tensors(const l_dump* d, l_row* r, const manifest* mp)
{
    const long H = d->hidden, NH = d->heads, KVH = d->kv_heads, HD = d->head_dim, I = d->inter,
               P = d->ple, CL = d->cache_len;
    const long E = d->experts, K = d->top_k;
    char name[160];
    r->x_in = load(r->dir, mp, "x_in", "f32", 1, &H);
    r->pli = P ? load(r->dir, mp, "per_layer_input", "f32", 1, &P) : NULL;
    r->o_rest = d->tp > 1 ? load(r->dir, mp, "o_rest", "f32", 1, &H) : NULL;
    r->down_rest = d->tp > 1 ? load(r->dir, mp, "down_rest", "f32", 1, &H) : NULL;
    if (d->moe) { /* the pinned experts, as ref_layer.py writes them (f32) */
        float* idx = load(r->dir, mp, "router_idx", "f32", 1, &K);
        for (int j = 0; j < K; j++) {
            if (!(idx[j] >= 0 && idx[j] < E && idx[j] == (int)idx[j]))
                sl_usage_error("%s/router_idx.f32: element %d is %g, expected an expert index "
                               "0..%ld",
                    r->dir, j, idx[j], E - 1);
            r->router_idx[j] = (int)idx[j];
        }
        free(idx);
    }
    r->cos = load(r->dir, mp, "cos", "f32", 1, &HD);
    r->sin = load(r->dir, mp, "sin", "f32", 1, &HD);
    const long kv[3] = { KVH, CL, HD };
    if (CL > 0) {
        r->kcache = load(r->dir, mp, "kcache", "bf16", 3, kv);
        r->vcache = load(r->dir, mp, "vcache", "bf16", 3, kv);
    } else {
        r->kcache = r->vcache = NULL;
    }
    const long blen[NBND] = { H, NH * HD, NH * HD, KVH * HD, KVH * HD, KVH * HD, KVH * HD, NH * HD,
        H, H, H, I, I, I, H, H, P, P, H, H, E, K, H, H };
    for (int b = 0; b < NBND; b++) {
        if (!d->has[b])
            continue;
        snprintf(name, sizeof(name), "ref.%s", l_bnd_names[b]);
        r->ref[b] = load(r->dir, mp, name, "f32", 1, &blen[b]);
    }
}

static void load_row(l_dump* d, l_row* r, int index)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/meta.json", r->dir);
    char* js = slurp(path);
    /* the row must share row 0's shapes: its tensors are checked against them below */
    const int hidden = meta_int(path, js, "hidden", 1);
    if (index == 0)
        meta_shapes(d, path, js, hidden);
    else
        meta_same_shapes(d, path, js, hidden);
    meta_bars(d, r, path, js);
    free(js);

    manifest m;
    read_manifest(r->dir, &m);
    if (index == 0)
        load_weights(d, r, &m);
    load_row_tensors(d, r, &m);
    free(m.e);
}

void l_dump_load(l_dump* d, const char* dir, int batch)
{
    memset(d, 0, sizeof(*d));
    d->batch = batch;
    for (int i = 0; i < batch; i++) {
        l_row* r = &d->row[i];
        if (i == 0)
            snprintf(r->dir, sizeof(r->dir), "%s", dir);
        else
            snprintf(r->dir, sizeof(r->dir), "%s/row%d", dir, i);
        struct stat st;
        if (i == 0 && (stat(r->dir, &st) || !S_ISDIR(st.st_mode)))
            sl_usage_error("%s: no such dump directory (expected manifest.txt, meta.json and the "
                           "tensors, as `orchestrate layer-dump` writes)",
                r->dir);
        if (stat(r->dir, &st) || !S_ISDIR(st.st_mode))
            sl_usage_error("%s: missing: --batch %d needs rows 1..%d in %s/row<i> (generate the "
                           "dump with --batch %d)",
                r->dir, batch, batch - 1, dir, batch);
        load_row(d, r, i);
    }
}
