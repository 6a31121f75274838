/* layer: one decoder layer of a ref_layer.py-format dump as a weight-stationary stage over pinned
 * workers (see main.c's usage text). Shared declarations of the stage's parts. */
#ifndef LAYER_H
#define LAYER_H

#include "sl.h"

#include <stddef.h>
#include <stdint.h>

#define L_MAX_BATCH 16
#define L_MAX_WORKERS 256
#define L_MAX_NODES 16
#define L_MAX_TOPK 32 /* experts a MoE token picks (26B-A4B: 8) */

/* ---- the dump (dump.c) ---- */
/* the GEMV matrices, in the order the step runs them; a layer lacks some (0 rows): v_proj with
 * attention_k_eq_v, the PLE pair without per-layer input, the router in a dense layer. A MoE
 * layer's experts are stacked tensors beside them (l_dump.w_gu / w_dn). */
enum { M_Q, M_K, M_V, M_O, M_GATE, M_UP, M_DOWN, M_PG, M_PP, M_R, NMAT };
/* op boundaries checked against the FP32 reference (ref_layer.py's names; the MoE block's
 * rs rw xn3 moe come after down in its order, last here); l_dump.has says which a layer has */
enum {
    B_XN,
    B_Q,
    B_QN,
    B_K,
    B_V,
    B_KN,
    B_VN,
    B_ATTN,
    B_O,
    B_H1,
    B_XN2,
    B_GATE,
    B_UP,
    B_ACT,
    B_DOWN,
    B_H2,
    B_PG,
    B_PACT,
    B_PP,
    B_OUT,
    B_RS,
    B_RW,
    B_XN3,
    B_MOE,
    NBND
};
extern const char* const l_matrix_names[NMAT]; /* HF state-dict names */
extern const char* const l_bnd_names[NBND];

typedef struct {
    /* per row (the batch's distinct inputs, each with its own KV history and reference) */
    float *x_in, *pli, *cos, *sin;
    uint16_t *kcache, *vcache; /* [kv_heads][cache_len][head_dim] */
    float* ref[NBND];
    double bar[NBND]; /* bf16_ref_err[b].rel_rms */
    double spread[NBND]; /* bf16_ref_spread.rel_rms_max[b]: other valid BF16 realizations' worst
                          * (0 where the dump lacks it: ref_layer.py's, older ours) */
    int router_idx[L_MAX_TOPK]; /* MoE: the experts this row uses (pinned, as ref_layer.py) */
    float *o_rest, *down_rest; /* a TP slice: the other ranks' o and down [hidden] (else NULL) */
    double routing_kl_bf16; /* MoE: the BF16 reference's routing KL from FP32 (meta routing) */
    char dir[4096];
} l_row;

typedef struct {
    int hidden, heads, kv_heads, head_dim, inter, ple, cache_len, window;
    int sliding, kv_eq; /* kv_eq: attention_k_eq_v, V is the raw K projection (no v_proj) */
    int moe, experts, top_k, moe_inter; /* 26B-A4B's MoE block (0: dense) */
    int tp, rank; /* a tensor-parallel slice (ref_layer.py's tp ranks): tp 1 = a whole layer */
    int has[NBND]; /* the boundaries this layer has (and its dump holds references for) */
    double eps, attn_scale;
    float layer_scalar;
    char shape[64], layer_type[32];
    uint16_t* w[NMAT]; /* row-major [rows][cols] bf16, row 0's */
    int rows[NMAT], cols[NMAT];
    float *w_in, *w_pa, *w_preffn, *w_postffn, *w_ppn, *w_qn, *w_kn; /* norm weights, widened */
    /* MoE: experts' gate/up [E][2 EI][H] and down [E][H][EI] bf16; the router's input scale [H]
     * and per-expert scale [E]; pre-FFN-2, post-FFN-1, post-FFN-2 norms [H] (widened) */
    uint16_t *w_gu, *w_dn;
    float *w_rscale, *w_pes, *w_pf2, *w_pff1, *w_pff2;
    int batch;
    l_row row[L_MAX_BATCH];
} l_dump;

/* Reads row 0 from dir and rows 1..batch-1 from dir/row<i>; any problem is one line, exit 2. */
void l_dump_load(l_dump* d, const char* dir, int batch);

/* ---- kernels (kern.c) ---- */
/* avx512: VDPBF16PS on row-major rows; avx512-vnni: on 16-row VNNI blocks (AMX's layout) */
enum { G_SCALAR, G_AVX2, G_AVX512, G_AMX, G_AVX512_VNNI };
extern const char* const l_gemv_names[]; /* "scalar", "avx2", "avx512", "amx", "avx512-vnni" */
/* Bytes of one worker's packed slice of `rows` rows x `cols` cols for the kernel. */
size_t l_slice_bytes(int kernel, int rows, int cols);
/* Packs rows [r0, r0 + rows) of the row-major bf16 W (cols wide) into dst for the kernel:
 * row-major for scalar/avx2/avx512, 16-row VNNI blocks (gemv.h's layout, zero rows past the end)
 * for avx512-vnni/amx. */
void l_pack(int kernel, uint16_t* dst, const uint16_t* w, int r0, int rows, int cols);
/* y[b * ldy + r] = sum_k W[r][k] x[b * cols + k] for r < rows, b < batch; x is bf16.
 * Padded kernels write whole 16-row blocks, so ldy >= rows rounded up to 16. */
void l_gemv(int kernel, const uint16_t* w, int rows, int cols, const uint16_t* x, int batch,
    float* y, int ldy);
/* rows the padded kernels write (>= rows) */
int l_rows_written(int kernel, int rows);
/* 1 for the kernels on 16-row VNNI blocks (avx512-vnni, amx) */
int l_padded(int kernel);
void l_kernel_thread_init(int kernel);
void l_kernel_thread_done(int kernel);
extern int l_amx_emulated; /* 1 in the SL_AMX_EMULATE build */
extern int l_avx512_emulated; /* 1 in the SL_AVX512_EMULATE build (SIMDe) */

/* ---- gelu (gelu.c): out[i] = gelu_tanh(y[i]) * mul[i], the same cost for every input ---- */
enum { L_GELU_AUTO, L_GELU_SCALAR, L_GELU_AVX2, L_GELU_AVX512 };
extern const char* const l_gelu_names[]; /* "auto", "scalar", "avx2", "avx512", NULL */
/* before the workers start: picks the ISA (auto: the widest this CPU has); exit 3 if a forced
 * one is missing. Returns the one picked. */
int l_gelu_init(int which);
void l_gelu_mul(float* out, const float* y, const float* mul, int n);
float l_gelu_scalar(float x);

/* ---- exchange of one output vector (xchg.c) ---- */
enum { X_DIRECT, X_REP, X_REPCLD, X_REPNT, X_FID };
extern const char* const l_xchg_names[];
typedef struct {
    int esz, n, batch, workers, mode;
    int off[L_MAX_WORKERS], len[L_MAX_WORKERS]; /* producer w owns elements [off, off+len) */
    size_t seg[L_MAX_WORKERS], bytes; /* rep: segment byte offsets (64 B aligned, B rows each) */
    int line0[L_MAX_WORKERS], lines; /* fid: first line of producer w, lines in all */
    uint8_t* direct; /* [batch][n] */
    uint8_t* rep[L_MAX_NODES]; /* rep modes */
    uint8_t* fid[L_MAX_NODES][2]; /* fid: per node, per step parity */
} l_vec;
/* partition: producer w's elements; the buffers are allocated by l_vec_alloc_node */
void l_vec_init(
    l_vec* v, int mode, int esz, int n, int batch, int workers, const int* off, const int* len);
/* called by one worker of each node after pinning (first touch homes them there) */
void l_vec_alloc_node(l_vec* v, int node);
/* producer w publishes src ([batch][len] packed) */
void l_vec_publish(l_vec* v, int w, const void* src, uint32_t tag);
/* reader on node gathers the whole [batch][n] vector; returns where it is (direct: in place) */
const void* l_vec_gather(l_vec* v, int node, void* local, uint32_t tag);
/* fid's line store on this host (after l_vec_init): "nt64" = one 64-byte non-temporal store
 * per line (AVX-512, as the original), "plain" = payload then the tail tag with release (no
 * AVX-512: a 64-byte line can't be written by one instruction) */
const char* l_fid_store(void);
/* bytes a reader moves per gather */
size_t l_vec_gather_bytes(const l_vec* v);

/* barriers over the workers: dissemination flags or per-node counters -> leaders -> node gate */
enum { BAR_DISS, BAR_HIER };
extern const char* const l_barrier_names[];
typedef struct {
    _Alignas(SL_PAD) volatile uint64_t v;
    char pad[SL_PAD - 8];
} l_line;
typedef struct {
    int kind, n, nnodes;
    int node_of[L_MAX_WORKERS], node_first[L_MAX_NODES], node_count[L_MAX_NODES];
    l_line (*diss)[16]; /* [worker][round] */
    l_line *arrive, *done, *gate; /* [node] */
} l_barrier;
void l_barrier_init(l_barrier* b, int kind, int n, const int* node_of);
void l_barrier_wait(l_barrier* b, int id, uint64_t epoch); /* epoch counts from 1 */
/* kern.c: one TDPBF16PS on this thread's tile config, if it has loaded one (else nothing): the
 * amx spin's tick (sl_spin_set) */
void l_amx_keep_warm(void);

#endif
