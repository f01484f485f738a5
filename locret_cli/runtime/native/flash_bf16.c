/* Attention of bf16 queries over bf16 keys and values, for CPUs with AVX-512 BF16: a chunk (`flash_bf16`) or one
 * query per head (`one_query_bf16`).
 *
 * The same result as torch's CPU flash kernel (output and log-sum-exp), computed the same way: products of bf16
 * pairs summed in fp32 (vdpbf16ps), an online softmax in fp32, the probabilities rounded to bf16 for the product
 * with the values, the output summed in fp32 and rounded to bf16 once.
 *
 * Keys are packed per head in blocks of 16 keys, so that one register holds one pair of dimensions of 16 keys;
 * values in pairs of keys, so that one register holds 16 dimensions of two keys. A tile of ROWS query rows then
 * runs over blocks of BLOCK keys: scores, softmax update, product with the values, each product taking 32 keys (or
 * 32 dimensions) of all ROWS rows at once, so that a loaded register serves 2 * ROWS products. Threads (OpenMP,
 * torch's own runtime once torch is loaded) take (head, tile) pairs.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 8
#define BLOCK 128
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

static inline __m512 exp2_ps(__m512 y) {
    y = _mm512_max_ps(y, _mm512_set1_ps(-127.0f));
    __m512 n = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(y, n);
    __m512 p = _mm512_set1_ps(1.5403530e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* keys (N, D) with row stride -> packed[N16 / 16][D / 2][16][2], zero past N */
static void pack_keys(const uint16_t *k, int64_t stride, int n, int n_pad, int d, uint16_t *packed) {
    for (int b = 0; b < n_pad / 16; b++)
        for (int t = 0; t < d / 2; t++)
            for (int j = 0; j < 16; j++) {
                int key = b * 16 + j;
                uint16_t *to = packed + (((int64_t)b * (d / 2) + t) * 16 + j) * 2;
                to[0] = key < n ? k[key * stride + 2 * t] : 0;
                to[1] = key < n ? k[key * stride + 2 * t + 1] : 0;
            }
}

/* values (N, D) with row stride -> packed[N_pad / 2][D][2], zero past N */
static void pack_values(const uint16_t *v, int64_t stride, int n, int n_pad, int d, uint16_t *packed) {
    for (int s = 0; s < n_pad / 2; s++)
        for (int c = 0; c < d; c++) {
            uint16_t *to = packed + ((int64_t)s * d + c) * 2;
            to[0] = 2 * s < n ? v[(2 * s) * stride + c] : 0;
            to[1] = 2 * s + 1 < n ? v[(2 * s + 1) * stride + c] : 0;
        }
}

/* ROWS query rows (rows of them real) over the packed keys and values; row r sees the keys before visible + r
 * (all of them when visible >= n). */
static void tile(const uint16_t *q, int64_t q_stride, int rows, const uint16_t *kp, const uint16_t *vp, int n,
                 int visible, int d, float scale, uint16_t *out, int64_t out_stride, float *lse) {
    float scores[ROWS][BLOCK] __attribute__((aligned(64)));
    uint16_t probs[ROWS][BLOCK] __attribute__((aligned(64)));
    float acc[ROWS][256] __attribute__((aligned(64)));
    float m[ROWS], l[ROWS], alpha[ROWS];
    const uint32_t *qrow[ROWS];
    for (int r = 0; r < ROWS; r++) {
        qrow[r] = (const uint32_t *)(q + (int64_t)(r < rows ? r : 0) * q_stride);
        m[r] = -INFINITY;
        l[r] = 0.0f;
        memset(acc[r], 0, sizeof(float) * d);
    }
    const float c = scale * LOG2E;
    int last = visible + rows - 1 < n ? visible + rows - 1 : n;  /* keys any row of the tile sees */
    for (int start = 0; start < last; start += BLOCK) {
        for (int sub = 0; sub < BLOCK / 16; sub += 2) {
            __m512 s0[ROWS], s1[ROWS];
            for (int r = 0; r < ROWS; r++) s0[r] = s1[r] = _mm512_setzero_ps();
            const uint16_t *kb0 = kp + (int64_t)((start / 16) + sub) * (d / 2) * 32;
            const uint16_t *kb1 = kb0 + (int64_t)(d / 2) * 32;
            for (int t = 0; t < d / 2; t++) {
                __m512bh k0 = (__m512bh)_mm512_load_si512((const void *)(kb0 + t * 32));
                __m512bh k1 = (__m512bh)_mm512_load_si512((const void *)(kb1 + t * 32));
                for (int r = 0; r < ROWS; r++) {
                    __m512bh qb = (__m512bh)_mm512_set1_epi32((int)qrow[r][t]);
                    s0[r] = _mm512_dpbf16_ps(s0[r], qb, k0);
                    s1[r] = _mm512_dpbf16_ps(s1[r], qb, k1);
                }
            }
            for (int r = 0; r < ROWS; r++) {
                int seen = visible + r < n ? visible + r : n;
                int valid0 = seen - (start + sub * 16), valid1 = valid0 - 16;
                __mmask16 keep0 = valid0 >= 16 ? 0xFFFF : (valid0 <= 0 ? 0 : (__mmask16)((1u << valid0) - 1));
                __mmask16 keep1 = valid1 >= 16 ? 0xFFFF : (valid1 <= 0 ? 0 : (__mmask16)((1u << valid1) - 1));
                _mm512_store_ps(scores[r] + sub * 16, _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), keep0, s0[r], _mm512_set1_ps(c)));
                _mm512_store_ps(scores[r] + sub * 16 + 16, _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), keep1, s1[r], _mm512_set1_ps(c)));
            }
        }
        for (int r = 0; r < ROWS; r++) {
            __m512 x[BLOCK / 16];
            __m512 top = _mm512_set1_ps(-INFINITY);
            for (int i = 0; i < BLOCK / 16; i++) {
                x[i] = _mm512_load_ps(scores[r] + i * 16);
                top = _mm512_max_ps(top, x[i]);
            }
            float m_new = fmaxf(m[r], _mm512_reduce_max_ps(top));
            __m512 mv = _mm512_set1_ps(m_new);
            __m512 sum = _mm512_setzero_ps();
            for (int i = 0; i < BLOCK / 16; i += 2) {
                __m512 p0 = exp2_ps(_mm512_sub_ps(x[i], mv)), p1 = exp2_ps(_mm512_sub_ps(x[i + 1], mv));
                __m512bh both = _mm512_cvtne2ps_pbh(p1, p0);
                _mm512_store_si512((void *)(probs[r] + i * 16), (__m512i)both);
                sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
            }
            alpha[r] = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - m_new);
            l[r] = l[r] * alpha[r] + _mm512_reduce_add_ps(sum);
            m[r] = m_new;
        }
        const uint32_t *pp[ROWS];
        for (int r = 0; r < ROWS; r++) pp[r] = (const uint32_t *)probs[r];
        const uint16_t *vb = vp + (int64_t)(start / 2) * d * 2;
        for (int slice = 0; slice < d / 16; slice += 2) {
            __m512 o0[ROWS], o1[ROWS];
            for (int r = 0; r < ROWS; r++) {
                o0[r] = _mm512_mul_ps(_mm512_load_ps(acc[r] + slice * 16), _mm512_set1_ps(alpha[r]));
                o1[r] = _mm512_mul_ps(_mm512_load_ps(acc[r] + slice * 16 + 16), _mm512_set1_ps(alpha[r]));
            }
            for (int s = 0; s < BLOCK / 2; s++) {
                const uint16_t *at = vb + ((int64_t)s * d + slice * 16) * 2;
                __m512bh v0 = (__m512bh)_mm512_load_si512((const void *)at);
                __m512bh v1 = (__m512bh)_mm512_load_si512((const void *)(at + 32));
                for (int r = 0; r < ROWS; r++) {
                    __m512bh pb = (__m512bh)_mm512_set1_epi32((int)pp[r][s]);
                    o0[r] = _mm512_dpbf16_ps(o0[r], pb, v0);
                    o1[r] = _mm512_dpbf16_ps(o1[r], pb, v1);
                }
            }
            for (int r = 0; r < ROWS; r++) {
                _mm512_store_ps(acc[r] + slice * 16, o0[r]);
                _mm512_store_ps(acc[r] + slice * 16 + 16, o1[r]);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        float inverse = 1.0f / l[r];
        for (int slice = 0; slice < d / 16; slice += 2) {
            __m512 a = _mm512_mul_ps(_mm512_load_ps(acc[r] + slice * 16), _mm512_set1_ps(inverse));
            __m512 b = _mm512_mul_ps(_mm512_load_ps(acc[r] + slice * 16 + 16), _mm512_set1_ps(inverse));
            _mm512_storeu_si512((void *)(out + r * out_stride + slice * 16), (__m512i)_mm512_cvtne2ps_pbh(b, a));
        }
        if (lse != NULL) lse[r] = (m[r] + log2f(l[r])) * LN2;
    }
}

/* q (H, M, D); k and v (H / group, N, D): query head h reads key head h / group; out (H, M, D). Each has a head
 * stride and a row stride (the last dimension contiguous). lse (H, M), contiguous, may be NULL. Causal: query row i
 * sees the keys up to N - M + i (the queries are the last M entries); otherwise every key. D a multiple of 32, at
 * most 256. Returns 0; -1 if out of memory, -2 for shapes it does not take. */
int flash_bf16(const uint16_t *q, int64_t q_head, int64_t q_row, const uint16_t *k, int64_t k_head, int64_t k_row,
               const uint16_t *v, int64_t v_head, int64_t v_row, int heads, int group, int m, int n, int d,
               float scale, int causal, uint16_t *out, int64_t out_head, int64_t out_row, float *lse) {
    if (d % 32 != 0 || d > 256 || group < 1 || heads % group != 0) return -2;
    int n_pad = (n + BLOCK - 1) / BLOCK * BLOCK;
    int64_t per_head = (int64_t)n_pad * d;
    int kv_heads = heads / group;
    uint16_t *kp = aligned_alloc(64, (size_t)kv_heads * per_head * 2 * sizeof(uint16_t));
    if (kp == NULL) return -1;
    uint16_t *vp = kp + kv_heads * per_head;
#pragma omp parallel for schedule(static)
    for (int h = 0; h < 2 * kv_heads; h++) {
        if (h < kv_heads) pack_keys(k + h * k_head, k_row, n, n_pad, d, kp + h * per_head);
        else pack_values(v + (h - kv_heads) * v_head, v_row, n, n_pad, d, vp + (h - kv_heads) * per_head);
    }
    int tiles = (m + ROWS - 1) / ROWS;
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t job = 0; job < (int64_t)heads * tiles; job++) {
        int h = job / tiles, first = (job % tiles) * ROWS;
        int rows = m - first < ROWS ? m - first : ROWS;
        int visible = causal ? n - m + first + 1 : n;
        tile(q + h * q_head + first * q_row, q_row, rows, kp + (h / group) * per_head, vp + (h / group) * per_head, n,
             visible, d, scale, out + h * out_head + first * out_row, out_row,
             lse == NULL ? NULL : lse + (int64_t)h * m + first);
    }
    free(kp);
    return 0;
}

#define SPLIT 512   /* keys per work item of one query */
#define GROUP 16    /* most query heads per KV head */

/* The sums of the 16 vectors v[0..15], lane i of the result v[i]'s, added in the order `_mm512_reduce_add_ps` adds
 * one vector's lanes (i with i + 8, then i + 4, i + 2, i + 1), so that each sum is the same number: a transpose by
 * shuffles, one level of adds for each of its steps. */
static inline __m512 sums16(const __m512 *v) {
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; i++) /* v[2i]'s lanes i + (i + 8) in places 0-7, v[2i + 1]'s in 8-15 */
        a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++) /* 128-bit lane k: v[4i + k]'s four partial sums, i + (i + 4) */
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++) /* lane k: v[8i + k]'s two partial sums, then v[8i + 4 + k]'s, i + (i + 2) */
        c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
    /* lane k: the sums of v[k], v[4 + k], v[8 + k], v[12 + k], i + (i + 1); then each to its place */
    __m512 d = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), d);
}

/* acc[r][slice] += sum over keys j, in order, of p[r][j] × v[j][slice], for one slice of 16 dimensions, each row's
 * sum kept in a register. */
static void values_slice(const float (*p)[SPLIT], int group, const uint16_t *v, int64_t v_row, int length,
                         float *acc, int d) {
    __m512 a[GROUP];
    for (int r = 0; r < group; r++) a[r] = _mm512_setzero_ps();
    for (int j = 0; j < length; j++) {
        __m512 value = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(v + (int64_t)j * v_row))), 16));
        for (int r = 0; r < group; r++) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r][j]), value, a[r]);
    }
    for (int r = 0; r < group; r++) _mm512_storeu_ps(acc + r * d, a[r]);
}

/* The query rows of one KV head (group of them, one query each) over keys [first, last): the split's max, sum of
 * exponentials (base 2, scaled) and unnormalised output, for `one_query_bf16` to merge. Keys and values are read as
 * stored; the probabilities are not rounded to bf16 (the values are widened to fp32 instead). Scores are taken 16
 * keys at a time, each key's products summed across lanes together (`sums16`); the values' products keep each row's
 * sums in registers, 16 dimensions at a time. */
static void one_query_split(const uint16_t *q, int64_t q_head, int group, const uint16_t *k, int64_t k_row,
                            const uint16_t *v, int64_t v_row, int first, int last, int d, float c, float *m_out,
                            float *l_out, float *acc_out) {
    float scores[GROUP][SPLIT] __attribute__((aligned(64)));
    __m512 parts[GROUP][16];
    __m512bh qv[GROUP][8];
    int length = last - first, pairs = d / 32;
    for (int r = 0; r < group; r++)
        for (int t = 0; t < pairs; t++)
            qv[r][t] = (__m512bh)_mm512_loadu_si512((const void *)(q + r * q_head + t * 32));
    int j = 0;
    for (; j + 16 <= length; j += 16) {
        for (int i = 0; i < 16; i++) {
            const uint16_t *row = k + (int64_t)(first + j + i) * k_row;
            __m512bh kv[8];
            for (int t = 0; t < pairs; t++) kv[t] = (__m512bh)_mm512_loadu_si512((const void *)(row + t * 32));
            for (int r = 0; r < group; r++) {
                __m512 s = _mm512_setzero_ps();
                for (int t = 0; t < pairs; t++) s = _mm512_dpbf16_ps(s, qv[r][t], kv[t]);
                parts[r][i] = s;
            }
        }
        for (int r = 0; r < group; r++)
            _mm512_store_ps(scores[r] + j, _mm512_mul_ps(sums16(parts[r]), _mm512_set1_ps(c)));
    }
    for (; j < length; j++) {
        const uint16_t *row = k + (int64_t)(first + j) * k_row;
        __m512bh kv[8];
        for (int t = 0; t < pairs; t++) kv[t] = (__m512bh)_mm512_loadu_si512((const void *)(row + t * 32));
        for (int r = 0; r < group; r++) {
            __m512 s = _mm512_setzero_ps();
            for (int t = 0; t < pairs; t++) s = _mm512_dpbf16_ps(s, qv[r][t], kv[t]);
            scores[r][j] = _mm512_reduce_add_ps(s) * c;
        }
    }
    for (int r = 0; r < group; r++) {
        float top = -INFINITY;
        for (j = 0; j < length; j++) top = fmaxf(top, scores[r][j]);
        __m512 sum = _mm512_setzero_ps(), mv = _mm512_set1_ps(top);
        for (j = 0; j + 16 <= length; j += 16) {
            __m512 p = exp2_ps(_mm512_sub_ps(_mm512_loadu_ps(scores[r] + j), mv));
            _mm512_storeu_ps(scores[r] + j, p);
            sum = _mm512_add_ps(sum, p);
        }
        float tail = 0.0f;
        for (; j < length; j++) {
            scores[r][j] = exp2f(scores[r][j] - top);
            tail += scores[r][j];
        }
        m_out[r] = top;
        l_out[r] = _mm512_reduce_add_ps(sum) + tail;
    }
    const uint16_t *values = v + (int64_t)first * v_row;
    for (int slice = 0; slice < d / 16; slice++)
        values_slice((const float (*)[SPLIT])scores, group, values + slice * 16, v_row, length, acc_out + slice * 16,
                     d);
}

/* One query per head (a decode step): q (H, D) with a head stride, over every key of k and v (H / group, N, D);
 * out (H, D) with a head stride. The keys are split among threads and the splits merged by their maxima. Returns 0;
 * -1 if out of memory, -2 for shapes it does not take. */
int one_query_bf16(const uint16_t *q, int64_t q_head, const uint16_t *k, int64_t k_head, int64_t k_row,
                   const uint16_t *v, int64_t v_head, int64_t v_row, int heads, int group, int n, int d, float scale,
                   uint16_t *out, int64_t out_head) {
    if (d % 32 != 0 || d > 256 || group < 1 || group > GROUP || heads % group != 0 || n < 1) return -2;
    int kv_heads = heads / group, splits = (n + SPLIT - 1) / SPLIT;
    float *m = malloc(sizeof(float) * (size_t)heads * splits * (2 + d));
    if (m == NULL) return -1;
    float *l = m + (size_t)heads * splits, *acc = l + (size_t)heads * splits;
    const float c = scale * LOG2E;
#pragma omp parallel for schedule(dynamic, 1)
    for (int job = 0; job < kv_heads * splits; job++) {
        int h = job / splits, s = job % splits, first = s * SPLIT, last = first + SPLIT < n ? first + SPLIT : n;
        int64_t at = (int64_t)h * splits * group + (int64_t)s * group;
        one_query_split(q + (int64_t)h * group * q_head, q_head, group, k + h * k_head, k_row, v + h * v_head, v_row,
                        first, last, d, c, m + at, l + at, acc + at * d);
    }
    for (int h = 0; h < kv_heads; h++)
        for (int r = 0; r < group; r++) {
            float top = -INFINITY, total = 0.0f;
            for (int s = 0; s < splits; s++) top = fmaxf(top, m[(int64_t)h * splits * group + s * group + r]);
            float merged[256];
            memset(merged, 0, sizeof(float) * d);
            for (int s = 0; s < splits; s++) {
                int64_t at = (int64_t)h * splits * group + (int64_t)s * group + r;
                float weight = exp2f(m[at] - top);
                total += l[at] * weight;
                for (int i = 0; i < d; i++) merged[i] += acc[at * d + i] * weight;
            }
            uint16_t *to = out + (int64_t)(h * group + r) * out_head;
            for (int i = 0; i < d; i += 32) {
                __m512 a = _mm512_mul_ps(_mm512_loadu_ps(merged + i), _mm512_set1_ps(1.0f / total));
                __m512 b = _mm512_mul_ps(_mm512_loadu_ps(merged + i + 16), _mm512_set1_ps(1.0f / total));
                _mm512_storeu_si512((void *)(to + i), (__m512i)_mm512_cvtne2ps_pbh(b, a));
            }
        }
    free(m);
    return 0;
}
