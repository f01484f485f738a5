/* Products of a few rows with int8 weights and one scale per output row, for CPUs with AVX2 and FMA:
 * y = scale * (x q^T) + b, what a model loaded with `--load-8bit` (runtime/int8_linear.py) computes for each
 * decode step.
 *
 * That product reads every weight once, so its time is the time to read them: an int8 weight is a quarter of an
 * fp32 one's bytes and half a bf16 one's. Each int8 widens to fp32 exactly; the products are summed in fp32 and the
 * row's sum is multiplied by its scale once, so the result is the product with the dequantized weights (q × scale)
 * to within fp32 rounding. Four output rows a quarter of the weight apart are summed at once (sixteen lanes and two
 * accumulators to a row with AVX-512, eight lanes and two with AVX2), so that each thread reads four long streams:
 * one row at a time read the weights at about half the memory's rate with AVX-512, and took a third longer than
 * four streams with AVX2 (research/cpu/rows_streams.py).
 * Rows left over (out not a multiple of 4) are summed one at a time. Threads (OpenMP, torch's own runtime once
 * torch is loaded) take the quarters' rows in blocks.
 *
 * rows_int8w: x (rows, in) fp32, row-major; q (out, in) int8, row-major; scale (out,) fp32; bias (out,) fp32 or
 * NULL; y (rows, out) fp32.
 * rows_int8: the same for a model computing in bf16: x, scale, bias and y are bf16; x, scale and bias widen
 * exactly (x into a buffer once per call), and each output is rounded to bf16 once, to nearest even, as torch
 * rounds.
 * Each returns 0, 1 where this build has no AVX2 and FMA (the caller then keeps torch's product), or 2 where the
 * buffer could not be allocated (likewise).
 */
#include <stdint.h>
#include <stdlib.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline __m256 widen8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

static inline float widen_bf16(uint16_t b) {
    union { uint32_t u; float f; } c = {(uint32_t)b << 16};
    return c.f;
}

static float dot(const float *x, const int8_t *q, int64_t in) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= in; i += 32) {
        a0 = _mm256_fmadd_ps(widen8(q + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(widen8(q + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(widen8(q + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(widen8(q + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= in; i += 8)
        a0 = _mm256_fmadd_ps(widen8(q + i), _mm256_loadu_ps(x + i), a0);
    __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    float total = _mm_cvtss_f32(s);
    for (; i < in; i++)
        total += (float)q[i] * x[i];
    return total;
}

#if defined(__AVX512F__)
static inline __m512 widen16(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* The four rows q, q + stride, q + 2 stride, q + 3 stride dotted with x, into out[0..3]: four streams at once. */
static void dot4(const float *x, const int8_t *q, int64_t stride, int64_t in, float *out) {
    __m512 a[4][2];
    for (int r = 0; r < 4; r++)
        a[r][0] = a[r][1] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= in; i += 32) {
        __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
        for (int r = 0; r < 4; r++) {
            a[r][0] = _mm512_fmadd_ps(widen16(q + r * stride + i), x0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(widen16(q + r * stride + i + 16), x1, a[r][1]);
        }
    }
    for (int r = 0; r < 4; r++) {
        float total = _mm512_reduce_add_ps(_mm512_add_ps(a[r][0], a[r][1]));
        for (int64_t j = i; j < in; j++)
            total += (float)q[r * stride + j] * x[j];
        out[r] = total;
    }
}
#else
static inline float sum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
}

/* The same with AVX2: eight lanes and two accumulators to a row (eight accumulators in all, as many as the FMA
 * units keep busy), four streams at once. */
static void dot4(const float *x, const int8_t *q, int64_t stride, int64_t in, float *out) {
    __m256 a[4][2];
    for (int r = 0; r < 4; r++)
        a[r][0] = a[r][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        for (int r = 0; r < 4; r++) {
            a[r][0] = _mm256_fmadd_ps(widen8(q + r * stride + i), x0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(widen8(q + r * stride + i + 8), x1, a[r][1]);
        }
    }
    for (int r = 0; r < 4; r++) {
        float total = sum8(_mm256_add_ps(a[r][0], a[r][1]));
        for (int64_t j = i; j < in; j++)
            total += (float)q[r * stride + j] * x[j];
        out[r] = total;
    }
}
#endif

/* sums (rows, out) = x qᵀ in fp32: by `dot4` over the four quarters of the outputs, the rows left over (out not a
 * multiple of 4) by `dot`. */
static void raw_sums(const float *x, int64_t rows, int64_t in, const int8_t *q, int64_t out, float *sums) {
    int64_t quarter = out / 4;
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < quarter; o++)
        for (int64_t r = 0; r < rows; r++) {
            float four[4];
            dot4(x + r * in, q + o * in, quarter * in, in, four);
            for (int k = 0; k < 4; k++)
                sums[r * out + o + k * quarter] = four[k];
        }
    for (int64_t o = 4 * quarter; o < out; o++)
        for (int64_t r = 0; r < rows; r++)
            sums[r * out + o] = dot(x + r * in, q + o * in, in);
}

int rows_int8w(const float *x, int64_t rows, int64_t in, const int8_t *q, int64_t out, const float *scale,
               const float *bias, float *y) {
    raw_sums(x, rows, in, q, out, y);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++)
            y[r * out + o] = scale[o] * y[r * out + o] + (bias ? bias[o] : 0.0f);
    return 0;
}

static inline uint16_t round_bf16(float f) { /* to nearest even; a NaN stays a (quiet) NaN */
    union { float f; uint32_t u; } c = {f};
    if ((c.u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((c.u >> 16) | 0x40u);
    return (uint16_t)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}

int rows_int8(const uint16_t *x, int64_t rows, int64_t in, const int8_t *q, int64_t out, const uint16_t *scale,
              const uint16_t *bias, uint16_t *y) {
    /* x widened once, then the sums in fp32 */
    float *wide = malloc((size_t)(rows * in + rows * out) * sizeof(float)), *sums = wide + rows * in;
    if (!wide)
        return 2;
    for (int64_t i = 0; i < rows * in; i++)
        wide[i] = widen_bf16(x[i]);
    raw_sums(wide, rows, in, q, out, sums);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++)
            y[r * out + o] = round_bf16(widen_bf16(scale[o]) * sums[r * out + o] + (bias ? widen_bf16(bias[o]) : 0.0f));
    free(wide);
    return 0;
}

#else

int rows_int8w(const float *x, int64_t rows, int64_t in, const int8_t *q, int64_t out, const float *scale,
               const float *bias, float *y) {
    (void)x, (void)rows, (void)in, (void)q, (void)out, (void)scale, (void)bias, (void)y;
    return 1;
}

int rows_int8(const uint16_t *x, int64_t rows, int64_t in, const int8_t *q, int64_t out, const uint16_t *scale,
              const uint16_t *bias, uint16_t *y) {
    (void)x, (void)rows, (void)in, (void)q, (void)out, (void)scale, (void)bias, (void)y;
    return 1;
}

#endif
