/* Products of a few rows with int8 weights and one scale per output row, for CPUs with AVX2 and FMA:
 * y = scale * (x q^T) + b, what a model loaded with `--load-8bit` (runtime/int8_linear.py) computes for each
 * decode step.
 *
 * That product reads every weight once, so its time is the time to read them: an int8 weight is a quarter of an
 * fp32 one's bytes and half a bf16 one's. Each int8 widens to fp32 exactly; the products are summed in fp32, eight
 * lanes and four accumulators to a row, and the row's sum is multiplied by its scale once, so the result is the
 * product with the dequantized weights (q × scale) to within fp32 rounding. Threads (OpenMP, torch's own runtime
 * once torch is loaded) take blocks of output rows.
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

#define OUTPUTS 4 /* output rows per block a thread takes */

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

int rows_int8w(const float *x, int64_t rows, int64_t in, const int8_t *q, int64_t out, const float *scale,
               const float *bias, float *y) {
#pragma omp parallel for schedule(static)
    for (int64_t first = 0; first < out; first += OUTPUTS) {
        int64_t last = first + OUTPUTS < out ? first + OUTPUTS : out;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = first; o < last; o++)
                y[r * out + o] = scale[o] * dot(x + r * in, q + o * in, in) + (bias ? bias[o] : 0.0f);
    }
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
    float *wide = malloc((size_t)(rows * in) * sizeof(float)); /* x widened once, for `dot` */
    if (!wide)
        return 2;
    for (int64_t i = 0; i < rows * in; i++)
        wide[i] = widen_bf16(x[i]);
#pragma omp parallel for schedule(static)
    for (int64_t first = 0; first < out; first += OUTPUTS) {
        int64_t last = first + OUTPUTS < out ? first + OUTPUTS : out;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = first; o < last; o++)
                y[r * out + o] = round_bf16(widen_bf16(scale[o]) * dot(wide + r * in, q + o * in, in)
                                            + (bias ? widen_bf16(bias[o]) : 0.0f));
    }
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
