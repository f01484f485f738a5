/* A decode step's attention in fp32, for CPUs with AVX2 and FMA: one query per head over every entry of the cache,
 * the heads that share a KV head together (`one_query_f32`).
 *
 * Where a model computes in fp32 (a CPU without fast bf16 products), its cache is fp32 and a decode step reads
 * every key and value once: its time is the time to read them. torch's flash kernel reads them at about a third of
 * the memory's rate for one query. Here each KV head's entries are cut into runs of SPLIT, one task each (threads,
 * OpenMP, torch's own runtime once torch is loaded, take tasks). A task computes its run's scores for the group's
 * query rows, 4 keys by 3 rows at a time (12 sums held in registers, each row's 4 reduced across lanes together),
 * fetching later keys and its values early; then each row's maximum, the exponentials (base 2, the scores scaled by
 * scale × log2 e; a polynomial within a few fp32 ulps of exp2) and their sum; then the values' products, six rows'
 * sums held in registers, 16 dimensions at a time (the run's values stay in the core's cache between those
 * passes). The runs are merged as flash-decoding merges splits. So the output is the softmax-weighted sum of the
 * values in fp32, to within fp32 rounding of torch's.
 *
 * one_query_f32: q (heads, d) with head stride q_head; k and v (kv heads, entries, d) with head and row strides;
 * heads = kv heads × group; out (heads, d) with head stride out_head. Returns 0; 1 where this build lacks AVX2 and
 * FMA, d is not a multiple of 16 or above 256, or the group is above 16 (the caller keeps torch's kernel); 2 where a
 * buffer could not be allocated (likewise).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define SPLIT 512 /* entries a task takes */
#define MAX_GROUP 16
#define PASS 6 /* query rows whose sums one pass over the values holds */
#define AHEAD 16 /* keys ahead of the ones read that are fetched early */
#define LOG2E 1.4426950408889634f

static inline __m256 exp2_ps(__m256 y) {
    y = _mm256_max_ps(y, _mm256_set1_ps(-126.0f));
    __m256 n = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(y, n);
    __m256 p = _mm256_set1_ps(1.5403530e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504109e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022651e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i power = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(power));
}

/* lanes 0-3: the sums of a0's, a1's, a2's and a3's eight lanes */
static inline __m128 sums4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

static inline float sum1(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
}

/* The group's query rows over keys [first, last) of one KV head: each row's maximum score, sum of exponentials and
 * unnormalised output, into m_out, l_out, acc_out (group × d). */
static void run(const float *q, int64_t q_head, int group, const float *k, int64_t k_row, const float *v,
                int64_t v_row, int first, int last, int d, float c, float *m_out, float *l_out, float *acc_out) {
    static __thread float scores[MAX_GROUP + PASS][SPLIT] __attribute__((aligned(32)));
    static const float nothing[256] __attribute__((aligned(32))); /* the query of a row past the group */
    const int length = last - first;
    int j = 0;
    for (; j + 4 <= length; j += 4) { /* 4 keys by 3 query rows: 12 sums in registers, each load serves 3 or 4 */
        const float *k0 = k + (int64_t)(first + j) * k_row, *k1 = k0 + k_row, *k2 = k1 + k_row, *k3 = k2 + k_row;
        if (j + AHEAD + 4 <= length) /* later keys, and these keys' values for the pass below, fetched early */
            for (int i = 0; i < 4; i++)
                for (int t = 0; t < d; t += 16) {
                    _mm_prefetch((const char *)(k0 + (AHEAD + i) * k_row + t), _MM_HINT_T0);
                    _mm_prefetch((const char *)(v + (int64_t)(first + j + i) * v_row + t), _MM_HINT_T1);
                }
        for (int r0 = 0; r0 < group; r0 += 3) {
            const float *q0 = q + r0 * q_head;
            const float *q1 = r0 + 1 < group ? q0 + q_head : nothing, *q2 = r0 + 2 < group ? q0 + 2 * q_head : nothing;
            __m256 a[3][4];
            for (int r = 0; r < 3; r++)
                a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm256_setzero_ps();
            for (int t = 0; t < d; t += 8) {
                __m256 x0 = _mm256_loadu_ps(q0 + t), x1 = _mm256_loadu_ps(q1 + t), x2 = _mm256_loadu_ps(q2 + t);
                const float *keys[4] = {k0 + t, k1 + t, k2 + t, k3 + t};
                for (int i = 0; i < 4; i++) {
                    __m256 key = _mm256_loadu_ps(keys[i]);
                    a[0][i] = _mm256_fmadd_ps(x0, key, a[0][i]);
                    a[1][i] = _mm256_fmadd_ps(x1, key, a[1][i]);
                    a[2][i] = _mm256_fmadd_ps(x2, key, a[2][i]);
                }
            }
            for (int r = 0; r < 3 && r0 + r < group; r++)
                _mm_store_ps(scores[r0 + r] + j, _mm_mul_ps(sums4(a[r][0], a[r][1], a[r][2], a[r][3]), _mm_set1_ps(c)));
        }
    }
    for (; j < length; j++) {
        const float *row = k + (int64_t)(first + j) * k_row;
        for (int r = 0; r < group; r++) {
            __m256 a = _mm256_setzero_ps();
            for (int t = 0; t < d; t += 8)
                a = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * q_head + t), _mm256_loadu_ps(row + t), a);
            scores[r][j] = sum1(a) * c;
        }
    }
    for (int r = 0; r < group; r++) {
        __m256 most = _mm256_set1_ps(-INFINITY);
        for (j = 0; j + 8 <= length; j += 8)
            most = _mm256_max_ps(most, _mm256_load_ps(scores[r] + j));
        float top = -INFINITY, total = 0.0f, lanes[8];
        _mm256_storeu_ps(lanes, most);
        for (int i = 0; i < 8; i++)
            top = lanes[i] > top ? lanes[i] : top;
        for (; j < length; j++)
            top = scores[r][j] > top ? scores[r][j] : top;
        __m256 sum = _mm256_setzero_ps(), shift = _mm256_set1_ps(top);
        for (j = 0; j + 8 <= length; j += 8) {
            __m256 p = exp2_ps(_mm256_sub_ps(_mm256_load_ps(scores[r] + j), shift));
            _mm256_store_ps(scores[r] + j, p);
            sum = _mm256_add_ps(sum, p);
        }
        for (; j < length; j++) {
            scores[r][j] = exp2f(scores[r][j] - top);
            total += scores[r][j];
        }
        m_out[r] = top;
        l_out[r] = total + sum1(sum);
    }
    for (int r = group; r < group + PASS; r++) /* rows past the group weigh nothing in a pass's padding */
        for (j = 0; j < length; j++)
            scores[r][j] = 0.0f;
    for (int r0 = 0; r0 < group; r0 += PASS)
        for (int t = 0; t < d; t += 16) {
            __m256 acc[PASS][2];
            for (int r = 0; r < PASS; r++)
                acc[r][0] = acc[r][1] = _mm256_setzero_ps();
            for (j = 0; j < length; j++) {
                const float *row = v + (int64_t)(first + j) * v_row + t;
                __m256 v0 = _mm256_loadu_ps(row), v1 = _mm256_loadu_ps(row + 8);
                for (int r = 0; r < PASS; r++) {
                    __m256 p = _mm256_broadcast_ss(&scores[r0 + r][j]);
                    acc[r][0] = _mm256_fmadd_ps(p, v0, acc[r][0]);
                    acc[r][1] = _mm256_fmadd_ps(p, v1, acc[r][1]);
                }
            }
            for (int r = 0; r < PASS && r0 + r < group; r++) {
                _mm256_storeu_ps(acc_out + (r0 + r) * d + t, acc[r][0]);
                _mm256_storeu_ps(acc_out + (r0 + r) * d + t + 8, acc[r][1]);
            }
        }
}

int one_query_f32(const float *q, int64_t q_head, const float *k, int64_t k_head, int64_t k_row, const float *v,
                  int64_t v_head, int64_t v_row, int heads, int group, int entries, int d, float scale, float *out,
                  int64_t out_head) {
    if (d % 16 || d > 256 || group < 1 || group > MAX_GROUP || heads % group || entries < 1)
        return 1;
    const int kv_heads = heads / group, splits = (entries + SPLIT - 1) / SPLIT, tasks = kv_heads * splits;
    float *m = malloc((size_t)tasks * group * (2 + d) * sizeof(float));
    if (!m)
        return 2;
    float *l = m + (size_t)tasks * group, *acc = l + (size_t)tasks * group;
    const float c = scale * LOG2E;
#pragma omp parallel for schedule(static)
    for (int task = 0; task < tasks; task++) {
        int h = task / splits, s = task % splits;
        int first = s * SPLIT, last = first + SPLIT < entries ? first + SPLIT : entries;
        run(q + (int64_t)h * group * q_head, q_head, group, k + h * k_head, k_row, v + h * v_head, v_row, first,
            last, d, c, m + (size_t)task * group, l + (size_t)task * group, acc + (size_t)task * group * d);
    }
    for (int h = 0; h < kv_heads; h++)
        for (int r = 0; r < group; r++) {
            float top = -INFINITY, total = 0.0f;
            for (int s = 0; s < splits; s++)
                top = m[(size_t)(h * splits + s) * group + r] > top ? m[(size_t)(h * splits + s) * group + r] : top;
            float *o = out + (int64_t)(h * group + r) * out_head;
            for (int t = 0; t < d; t++)
                o[t] = 0.0f;
            for (int s = 0; s < splits; s++) {
                size_t at = (size_t)(h * splits + s) * group + r;
                float weight = exp2f(m[at] - top);
                total += l[at] * weight;
                for (int t = 0; t < d; t++)
                    o[t] += acc[at * d + t] * weight;
            }
            for (int t = 0; t < d; t++)
                o[t] /= total;
        }
    free(m);
    return 0;
}

#else

int one_query_f32(const float *q, int64_t q_head, const float *k, int64_t k_head, int64_t k_row, const float *v,
                  int64_t v_head, int64_t v_row, int heads, int group, int entries, int d, float scale, float *out,
                  int64_t out_head) {
    (void)q, (void)q_head, (void)k, (void)k_head, (void)k_row, (void)v, (void)v_head, (void)v_row, (void)heads;
    (void)group, (void)entries, (void)d, (void)scale, (void)out, (void)out_head;
    return 1;
}

#endif
