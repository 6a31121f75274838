/* How the stage's output vectors reach every worker, and its barriers.
 *   direct  readers read the one shared vector in place (homed where main touched it);
 *   rep     each producer copies its slice (a 64-byte aligned segment) into one replica per NUMA
 *           node, homed there by a worker of that node; readers gather from their node's copy;
 *   repcld  rep + CLDEMOTE of the written lines (readers hit L3 instead of the producer's L2);
 *   repnt   rep with non-temporal stores (readers fetch from memory, no snoop of the producer);
 *   fid     flag-in-data: every 64-byte line is [tag | 56 payload bytes | tag], per step parity,
 *           readers poll until the tags match, so the gather is the synchronisation. */
#include "layer.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

const char* const l_xchg_names[] = { "direct", "rep", "repcld", "repnt", "fid", NULL };
const char* const l_barrier_names[] = { "diss", "hier", NULL };

/* Vectors, replicas and barrier flags all come from sl_zalloc_lines: line pairs of their own
 * (the adjacent-line prefetcher fetches 128 B), so a vector's first or last line is never shared
 * with another allocation two cores write; first touch homes the pages on the caller's node. */

static bool fid_nt; /* 64-byte non-temporal line stores (AVX-512) or ordered plain stores */

const char* l_fid_store(void) { return fid_nt ? "nt64" : "plain"; }

void l_vec_init(
    l_vec* v, int mode, int esz, int n, int batch, int workers, const int* off, const int* len)
{
    memset(v, 0, sizeof(*v));
    v->mode = mode;
    v->esz = esz;
    v->n = n;
    v->batch = batch;
    v->workers = workers;
    size_t at = 0;
    int lines = 0;
    const int epl = 56 / esz;
    for (int w = 0; w < workers; w++) {
        v->off[w] = off[w];
        v->len[w] = len[w];
        v->seg[w] = at;
        at += ((size_t)batch * len[w] * esz + 63) / 64 * 64;
        v->line0[w] = lines;
        lines += (batch * len[w] + epl - 1) / epl;
    }
    v->bytes = at;
    v->lines = lines;
    v->direct = sl_zalloc_lines((size_t)batch * n * esz);
    const char* why;
    fid_nt = sl_have_avx512(&why);
}

void l_vec_alloc_node(l_vec* v, int node)
{
    if (v->mode == X_FID) {
        v->fid[node][0] = sl_zalloc_lines((size_t)v->lines * 64);
        v->fid[node][1] = sl_zalloc_lines((size_t)v->lines * 64);
    } else if (v->mode != X_DIRECT) {
        v->rep[node] = sl_zalloc_lines(v->bytes);
    }
}

static inline void cldemote(const void* p)
{
    /* CLDEMOTE m8 (NP 0F 1C /0) spelled as bytes: a NOP where the CPU lacks it, and no
     * assembler support needed */
    __asm__ volatile(".byte 0x0f, 0x1c, 0x07" ::"D"(p) : "memory");
}

static SL_TARGET_AVX512 void store_line_nt(void* dst, const void* line)
{
    _mm512_stream_si512((__m512i*)dst, _mm512_load_si512(line));
}

static void copy_nt(uint8_t* dst, const uint8_t* src, size_t n)
{
    /* whole 16-byte pieces to the padded end of the segment; src is padded by the caller */
    for (size_t i = 0; i < n; i += 16)
        _mm_stream_si128((__m128i*)(dst + i), _mm_loadu_si128((const __m128i*)(src + i)));
}

void l_vec_publish(l_vec* v, int w, const void* src, uint32_t tag)
{
    const size_t row = (size_t)v->len[w] * v->esz, n = row * v->batch;
    if (!v->len[w])
        return;
    const uint8_t* s8 = src;
    switch (v->mode) {
    case X_DIRECT:
        for (int b = 0; b < v->batch; b++)
            memcpy(v->direct + ((size_t)b * v->n + v->off[w]) * v->esz, s8 + b * row, row);
        break;
    case X_REP:
    case X_REPCLD:
        for (int k = 0; k < L_MAX_NODES && v->rep[k]; k++) {
            uint8_t* d = v->rep[k] + v->seg[w];
            memcpy(d, s8, n);
            if (v->mode == X_REPCLD)
                for (size_t i = 0; i < n; i += 64)
                    cldemote(d + i);
        }
        break;
    case X_REPNT:
        for (int k = 0; k < L_MAX_NODES && v->rep[k]; k++)
            copy_nt(v->rep[k] + v->seg[w], s8, (n + 63) / 64 * 64);
        _mm_sfence();
        break;
    case X_FID: {
        const int epl = 56 / v->esz, total = v->batch * v->len[w], par = tag & 1;
        for (int e = 0, li = v->line0[w]; e < total; e += epl, li++) {
            _Alignas(64) uint8_t line[64] = { 0 };
            const int c = total - e < epl ? total - e : epl;
            memcpy(line, &tag, 4);
            memcpy(line + 60, &tag, 4);
            memcpy(line + 4, s8 + (size_t)e * v->esz, (size_t)c * v->esz);
            for (int k = 0; k < L_MAX_NODES && v->fid[k][0]; k++) {
                uint8_t* d = v->fid[k][par] + (size_t)li * 64;
                if (fid_nt) {
                    store_line_nt(d, line);
                } else {
                    /* x86 stores become visible in program order: payload first, then the tail
                     * tag with release; a reader that sees the tag sees the payload */
                    memcpy(d, line, 60);
                    __atomic_store_n((uint32_t*)(d + 60), tag, __ATOMIC_RELEASE);
                }
            }
        }
        if (fid_nt)
            _mm_sfence();
        break;
    }
    }
}

const void* l_vec_gather(l_vec* v, int node, void* local, uint32_t tag)
{
    uint8_t* d8 = local;
    const int esz = v->esz;
    switch (v->mode) {
    case X_DIRECT:
        return v->direct;
    case X_REP:
    case X_REPCLD:
    case X_REPNT: {
        const uint8_t* base = v->rep[node];
        /* every line requested up front: the copies then find them in flight */
        for (size_t i = 0; i < v->bytes; i += 64)
            _mm_prefetch((const char*)base + i, _MM_HINT_T0);
        for (int w = 0; w < v->workers; w++) {
            const size_t row = (size_t)v->len[w] * esz;
            for (int b = 0; b < v->batch; b++)
                memcpy(d8 + ((size_t)b * v->n + v->off[w]) * esz, base + v->seg[w] + b * row, row);
        }
        return local;
    }
    case X_FID: {
        const int epl = 56 / esz, par = tag & 1;
        const uint8_t* base = v->fid[node][par];
        for (int w = 0; w < v->workers; w++) {
            const int total = v->batch * v->len[w], len = v->len[w];
            for (int e = 0, li = v->line0[w]; e < total; e += epl, li++) {
                const uint8_t* src = base + (size_t)li * 64;
                _Alignas(64) uint8_t line[64];
                for (;;) {
                    const uint32_t t1
                        = __atomic_load_n((const uint32_t*)(src + 60), __ATOMIC_ACQUIRE);
                    memcpy(line, src, 64);
                    uint32_t t0;
                    memcpy(&t0, line, 4);
                    if (t0 == tag && t1 == tag)
                        break;
                    sl_spin_relax();
                }
                /* the line's elements in runs that stay within one batch row: one copy per
                 * run (per element, this loop cost 3x the original's whole fid exchange) */
                const int c = total - e < epl ? total - e : epl;
                for (int j = 0; j < c;) {
                    const int el = e + j, b = el / len, i = el % len;
                    const int run = len - i < c - j ? len - i : c - j;
                    memcpy(d8 + ((size_t)b * v->n + v->off[w] + i) * esz, line + 4 + j * esz,
                        (size_t)run * esz);
                    j += run;
                }
            }
        }
        return local;
    }
    }
    return NULL;
}

size_t l_vec_gather_bytes(const l_vec* v)
{
    switch (v->mode) {
    case X_DIRECT:
        return (size_t)v->batch * v->n * v->esz;
    case X_FID:
        return (size_t)v->lines * 64;
    default:
        return v->bytes;
    }
}

/* ---- barriers ---- */
void l_barrier_init(l_barrier* b, int kind, int n, const int* node_of)
{
    memset(b, 0, sizeof(*b));
    b->kind = kind;
    b->n = n;
    b->diss = sl_zalloc_lines(sizeof(*b->diss) * (size_t)n);
    b->arrive = sl_zalloc_lines(sizeof(l_line) * L_MAX_NODES);
    b->done = sl_zalloc_lines(sizeof(l_line) * L_MAX_NODES);
    b->gate = sl_zalloc_lines(sizeof(l_line) * L_MAX_NODES);
    for (int k = 0; k < L_MAX_NODES; k++)
        b->node_first[k] = -1;
    for (int w = 0; w < n; w++) {
        const int k = node_of[w];
        b->node_of[w] = k;
        if (b->node_first[k] < 0)
            b->node_first[k] = w;
        b->node_count[k]++;
        if (k + 1 > b->nnodes)
            b->nnodes = k + 1;
    }
}

void l_barrier_wait(l_barrier* b, int id, uint64_t e)
{
    if (b->kind == BAR_HIER) {
        /* node-local arrival counter -> node leaders meet -> node-local gate */
        const int k = b->node_of[id];
        __atomic_fetch_add(&b->arrive[k].v, 1, __ATOMIC_ACQ_REL);
        if (id == b->node_first[k]) {
            sl_spin_until(&b->arrive[k].v, (uint64_t)b->node_count[k] * e);
            __atomic_store_n(&b->done[k].v, e, __ATOMIC_RELEASE);
            for (int m = 0; m < b->nnodes; m++)
                sl_spin_until(&b->done[m].v, e);
            __atomic_store_n(&b->gate[k].v, e, __ATOMIC_RELEASE);
        } else {
            sl_spin_until(&b->gate[k].v, e);
        }
        return;
    }
    for (int r = 0, d = 1; d < b->n; r++, d <<= 1) {
        __atomic_store_n(&b->diss[(id + d) % b->n][r].v, e, __ATOMIC_RELEASE);
        sl_spin_until(&b->diss[id][r].v, e);
    }
}
