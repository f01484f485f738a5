/* Products of a few rows with bf16 weights, for CPUs with AVX2 and FMA: y = x W^T + b.
 *
 * A model whose weights stay bf16 while it computes in fp32 (runtime/bf16_weights.py) multiplies one row at a time
 * while it decodes. That product reads every weight once, so its time is the time to read them: this kernel reads
 * the bf16 weights as they are stored (half the bytes of fp32 ones), widens each to fp32 exactly (a bf16 is the top
 * half of an fp32) and sums the products in fp32, so that the result is the fp32 product's to within fp32 rounding.
 * Four output rows a quarter of the weight apart are summed together (sixteen lanes and two accumulators to a row
 * with AVX-512, eight lanes and two with AVX2), so that each thread reads four long streams: one row at a time read
 * the weights at about two thirds of the memory's rate with AVX-512, and took a quarter longer than four streams
 * with AVX2 (research/cpu/rows_streams.py). Rows left over (out not a multiple of 4) are summed one at a time,
 * eight lanes and four accumulators. Threads (OpenMP, torch's own runtime once torch is loaded) take the quarters'
 * rows in blocks.
 *
 * rows_bf16w: x (rows, in) fp32, row-major; w (out, in) bf16, row-major; bias (out,) fp32 or NULL; y (rows, out)
 * fp32.
 * rows_bf16: the same for a model computing in bf16 (runtime/native_rows.py), with no packed copy of its weights:
 * x (rows, in), bias (out,) or NULL and y (rows, out) are bf16; x and bias widen exactly, the products are summed in
 * fp32 as above (x widened into a buffer once per call), and each output is rounded to bf16 once, to nearest even,
 * as torch rounds.
 * Each returns 0, 1 where this build has no AVX2 and FMA (the caller then keeps torch's product), or 2 where the
 * buffer could not be allocated (likewise).
 */
#include <stdint.h>
#include <stdlib.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline __m256 widen8(const uint16_t *p) {
    __m128i half = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

static inline float widen1(uint16_t b) {
    union { uint32_t u; float f; } c = {(uint32_t)b << 16};
    return c.f;
}

static float dot(const float *x, const uint16_t *w, int64_t in) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= in; i += 32) {
        a0 = _mm256_fmadd_ps(widen8(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(widen8(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(widen8(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(widen8(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= in; i += 8)
        a0 = _mm256_fmadd_ps(widen8(w + i), _mm256_loadu_ps(x + i), a0);
    __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    float total = _mm_cvtss_f32(s);
    for (; i < in; i++)
        total += widen1(w[i]) * x[i];
    return total;
}

#if defined(__AVX512F__)
static inline __m512 widen16(const uint16_t *p) {
    __m256i half = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

/* The four rows w, w + stride, w + 2 stride, w + 3 stride dotted with x, into out[0..3]. */
static void dot4(const float *x, const uint16_t *w, int64_t stride, int64_t in, float *out) {
    __m512 a[4][2];
    for (int r = 0; r < 4; r++)
        a[r][0] = a[r][1] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= in; i += 32) {
        __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
        for (int r = 0; r < 4; r++) {
            a[r][0] = _mm512_fmadd_ps(widen16(w + r * stride + i), x0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(widen16(w + r * stride + i + 16), x1, a[r][1]);
        }
    }
    for (int r = 0; r < 4; r++) {
        float total = _mm512_reduce_add_ps(_mm512_add_ps(a[r][0], a[r][1]));
        for (int64_t j = i; j < in; j++)
            total += widen1(w[r * stride + j]) * x[j];
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
static void dot4(const float *x, const uint16_t *w, int64_t stride, int64_t in, float *out) {
    __m256 a[4][2];
    for (int r = 0; r < 4; r++)
        a[r][0] = a[r][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        for (int r = 0; r < 4; r++) {
            a[r][0] = _mm256_fmadd_ps(widen8(w + r * stride + i), x0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(widen8(w + r * stride + i + 8), x1, a[r][1]);
        }
    }
    for (int r = 0; r < 4; r++) {
        float total = sum8(_mm256_add_ps(a[r][0], a[r][1]));
        for (int64_t j = i; j < in; j++)
            total += widen1(w[r * stride + j]) * x[j];
        out[r] = total;
    }
}
#endif

/* sums (rows, out) = x wᵀ in fp32: by `dot4` over the four quarters of the outputs, the rows left over (out not a
 * multiple of 4) by `dot`. */
static void raw_sums(const float *x, int64_t rows, int64_t in, const uint16_t *w, int64_t out, float *sums) {
    int64_t quarter = out / 4;
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < quarter; o++)
        for (int64_t r = 0; r < rows; r++) {
            float four[4];
            dot4(x + r * in, w + o * in, quarter * in, in, four);
            for (int k = 0; k < 4; k++)
                sums[r * out + o + k * quarter] = four[k];
        }
    for (int64_t o = 4 * quarter; o < out; o++)
        for (int64_t r = 0; r < rows; r++)
            sums[r * out + o] = dot(x + r * in, w + o * in, in);
}

int rows_bf16w(const float *x, int64_t rows, int64_t in, const uint16_t *w, int64_t out, const float *bias,
               float *y) {
    raw_sums(x, rows, in, w, out, y);
    if (bias)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < out; o++)
                y[r * out + o] += bias[o];
    return 0;
}

static inline uint16_t round_bf16(float f) {  /* to nearest even; a NaN stays a (quiet) NaN */
    union { float f; uint32_t u; } c = {f};
    if ((c.u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((c.u >> 16) | 0x40u);
    return (uint16_t)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}

int rows_bf16(const uint16_t *x, int64_t rows, int64_t in, const uint16_t *w, int64_t out, const uint16_t *bias,
              uint16_t *y) {
    /* x widened once, then the sums in fp32 */
    float *wide = malloc((size_t)(rows * in + rows * out) * sizeof(float)), *sums = wide + rows * in;
    if (!wide)
        return 2;
    for (int64_t i = 0; i < rows * in; i++)
        wide[i] = widen1(x[i]);
    raw_sums(wide, rows, in, w, out, sums);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++)
            y[r * out + o] = round_bf16(sums[r * out + o] + (bias ? widen1(bias[o]) : 0.0f));
    free(wide);
    return 0;
}

#else

int rows_bf16w(const float *x, int64_t rows, int64_t in, const uint16_t *w, int64_t out, const float *bias,
               float *y) {
    (void)x, (void)rows, (void)in, (void)w, (void)out, (void)bias, (void)y;
    return 1;
}

int rows_bf16(const uint16_t *x, int64_t rows, int64_t in, const uint16_t *w, int64_t out, const uint16_t *bias,
              uint16_t *y) {
    (void)x, (void)rows, (void)in, (void)w, (void)out, (void)bias, (void)y;
    return 1;
}

#endif
