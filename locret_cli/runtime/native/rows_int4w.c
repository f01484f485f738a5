/* A decode step's product with 4-bit weights (runtime/int4_linear.py), on torch's own CPU packing: y = x Wᵀ for a
 * few rows x, where W = (q - 8) × scale + zero.
 *
 * Layout (as torch packs it, `_convert_weight_to_int4pack_for_cpu` with two inner k-tiles): output rows in blocks
 * of 64 where torch's kernels use AVX-512, of 32 where they use AVX2; in a block, one line per pair of inputs
 * k = 2j, 2j + 1, its first half for input 2j and its second for 2j + 1, each byte's low nibble for the block's
 * first half of rows and its high nibble for its second half. scales_zeros (in / 32, out, 2) bf16.
 *
 * Each row of x is held as 16-bit integers, group by group: a group's 32 inputs share one scale, its largest
 * magnitude over 32767, so every input keeps at least 15 bits of that magnitude (bf16 keeps 8 of its own). Each
 * output row's nibbles for inputs 2j and 2j + 1 are set side by side as two 16-bit integers, and one instruction
 * multiplies them by the pair of inputs and adds the two products, exact in int32: with AVX-512 VNNI, `vpdpwssd`
 * on 16 rows, the nibbles spread by `vpermb` (a line of 128 weights in about eleven instructions); with AVX2,
 * `vpmaddwd` on 8 rows, the line's halves interleaved by a permute and a byte shuffle (a line of 64 weights in about
 * eighteen). Per group and output row, sum × scale × the group's input scale + (zero - 8 scale) × the group's input
 * sum (in fp32, from x as given) is added in fp32, in the same order on either path, so the two give the same
 * outputs bit for bit. So the result is the product with the dequantized weights to within the inputs' 16-bit
 * rounding and fp32 sums, at about the rate memory gives 4-bit weights. Threads (OpenMP, torch's runtime once torch
 * is loaded) take blocks of output rows.
 *
 * rows_int4 (blocks of 64, AVX-512 BW, VBMI and VNNI) and rows_int4_b32 (blocks of 32, AVX2 and FMA): x (rows, in)
 * bf16; packed (out / block, in / 2, block) uint8; scales_zeros (in / 32, out, 2) bf16; y (rows, out) bf16, each
 * output rounded to nearest even once. rows_int4w and rows_int4w_b32: the same with x and y fp32. Groups of 32
 * inputs. Each returns 0; 1 where this build lacks what its path needs, out is not a multiple of the block or in
 * not of 32 (the caller keeps torch's product); 2 where a buffer could not be allocated (likewise).
 */
#include <stdint.h>
#include <stdlib.h>

#define GROUP 32
#define AHEAD 8 /* groups ahead whose scales are fetched early */
#define LINES_AHEAD 128 /* lines ahead of the one read that are fetched early */

static inline float widen_bf16(uint16_t b) {
    union { uint32_t u; float f; } c = {(uint32_t)b << 16};
    return c.f;
}

static inline uint16_t round_bf16(float f) { /* to nearest even; a NaN stays a (quiet) NaN */
    union { float f; uint32_t u; } c = {f};
    if ((c.u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((c.u >> 16) | 0x40u);
    return (uint16_t)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* x's row as int16 per group (xq), each group's scale (xs) and its sum as given (xsum). */
static void quantize_row(const float *x, int64_t in, int16_t *xq, float *xs, float *xsum) {
    for (int64_t g = 0; g < in / GROUP; g++) {
        const float *v = x + g * GROUP;
        float top = 0.0f, sum = 0.0f;
        for (int i = 0; i < GROUP; i++) {
            float m = v[i] < 0 ? -v[i] : v[i];
            top = m > top ? m : top;
            sum += v[i];
        }
        float scale = top / 32767.0f, inverse = top > 0.0f ? 32767.0f / top : 0.0f;
        for (int i = 0; i < GROUP; i++) {
            float r = v[i] * inverse;
            xq[g * GROUP + i] = (int16_t)(r < 0 ? r - 0.5f : r + 0.5f);
        }
        xs[g] = scale;
        xsum[g] = sum;
    }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VBMI__) && defined(__AVX512VNNI__)
#define HAS_64 1
/* One block of 64 output rows, one row of x: out64 = the block's 64 outputs in fp32. */
static void block_row64(const uint8_t *lines, const uint16_t *scales_zeros, int64_t out, int64_t in,
                      const int16_t *xq, const float *xs, const float *xsum, float *out64) {
    /* byte 4m of a lane takes the nibble of input 2j for row m (byte m of the line), byte 4m + 2 that of input
     * 2j + 1 (byte 32 + m); odd bytes are zeroed, so each 16-bit half holds one nibble. */
    uint8_t index[2][64];
    for (int half = 0; half < 2; half++)
        for (int m = 0; m < 16; m++) {
            index[half][4 * m] = (uint8_t)(16 * half + m);
            index[half][4 * m + 2] = (uint8_t)(32 + 16 * half + m);
            index[half][4 * m + 1] = index[half][4 * m + 3] = 0;
        }
    const __m512i spread0 = _mm512_loadu_si512(index[0]), spread1 = _mm512_loadu_si512(index[1]);
    const __mmask64 even = 0x5555555555555555ull;
    const __m512i low4 = _mm512_set1_epi8(15);
    const int64_t groups = in / GROUP;
    __m512 total[4];
    for (int r = 0; r < 4; r++)
        total[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512i sums[4];
        for (int r = 0; r < 4; r++)
            sums[r] = _mm512_setzero_si512();
        if (g + AHEAD < groups) /* a later group's scales lie a row of the layout away: fetched early */
            for (int c = 0; c < 256; c += 64)
                _mm_prefetch((const char *)(scales_zeros + 2 * (g + AHEAD) * out) + c, _MM_HINT_T0);
        const int32_t *pairs = (const int32_t *)(xq + g * GROUP);
        const uint8_t *line = lines + g * (GROUP / 2) * 64;
        for (int j = 0; j < GROUP / 2; j++, line += 64) {
            _mm_prefetch((const char *)line + LINES_AHEAD * 64, _MM_HINT_T0);
            __m512i bytes = _mm512_loadu_si512(line), pair = _mm512_set1_epi32(pairs[j]);
            __m512i low = _mm512_and_si512(bytes, low4), high = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4);
            sums[0] = _mm512_dpwssd_epi32(sums[0], _mm512_maskz_permutexvar_epi8(even, spread0, low), pair);
            sums[1] = _mm512_dpwssd_epi32(sums[1], _mm512_maskz_permutexvar_epi8(even, spread1, low), pair);
            sums[2] = _mm512_dpwssd_epi32(sums[2], _mm512_maskz_permutexvar_epi8(even, spread0, high), pair);
            sums[3] = _mm512_dpwssd_epi32(sums[3], _mm512_maskz_permutexvar_epi8(even, spread1, high), pair);
        }
        __m512 scale_x = _mm512_set1_ps(xs[g]), sum_x = _mm512_set1_ps(xsum[g]);
        const uint16_t *sz = scales_zeros + 2 * g * out;
        for (int r = 0; r < 4; r++) {
            __m512i both = _mm512_loadu_si512(sz + 32 * r); /* 16 rows' (scale, zero), bf16 pairs */
            __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(both, 16));
            __m512 zero = _mm512_castsi512_ps(_mm512_and_si512(both, _mm512_set1_epi32((int)0xffff0000u)));
            __m512 offset = _mm512_fnmadd_ps(_mm512_set1_ps(8.0f), scale, zero);
            total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r]), _mm512_mul_ps(scale, scale_x), total[r]);
            total[r] = _mm512_fmadd_ps(offset, sum_x, total[r]);
        }
    }
    for (int r = 0; r < 4; r++)
        _mm512_storeu_ps(out64 + 16 * r, total[r]);
}

#endif

/* One block of 32 output rows, one row of x, with AVX2: out32 = the block's 32 outputs in fp32. */
static void block_row32(const uint8_t *lines, const uint16_t *scales_zeros, int64_t out, int64_t in,
                        const int16_t *xq, const float *xs, const float *xsum, float *out32) {
    /* the permute puts bytes 0-7 (input 2j, rows 0-7) and 16-23 (input 2j + 1, rows 0-7) in the low lane and
     * rows 8-15 in the high one; the shuffle sets each row's two bytes side by side. Widened against zero, a lane's
     * low half then holds rows m..m+3 as 16-bit pairs and its high half rows m+4..m+7, so the four sums hold rows
     * (0-3 | 8-11), (4-7 | 12-15) from the low nibbles and (16-19 | 24-27), (20-23 | 28-31) from the high ones. */
    const __m256i interleave = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,
                                                0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    const __m256i low4 = _mm256_set1_epi8(15), nothing = _mm256_setzero_si256();
    const __m256i top16 = _mm256_set1_epi32((int)0xffff0000u);
    static const int first_row[4] = {0, 4, 16, 20}; /* each sum's first row; its high lane starts 8 rows later */
    const int64_t groups = in / GROUP;
    __m256 total[4];
    for (int r = 0; r < 4; r++)
        total[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m256i sums[4];
        for (int r = 0; r < 4; r++)
            sums[r] = _mm256_setzero_si256();
        if (g + AHEAD < groups) /* a later group's scales lie a row of the layout away: fetched early */
            for (int c = 0; c < 128; c += 64)
                _mm_prefetch((const char *)(scales_zeros + 2 * (g + AHEAD) * out) + c, _MM_HINT_T0);
        const int32_t *pairs = (const int32_t *)(xq + g * GROUP);
        const uint8_t *line = lines + g * (GROUP / 2) * 32;
        for (int j = 0; j < GROUP / 2; j++, line += 32) {
            _mm_prefetch((const char *)line + LINES_AHEAD * 32, _MM_HINT_T0);
            __m256i bytes = _mm256_loadu_si256((const __m256i *)line), pair = _mm256_set1_epi32(pairs[j]);
            bytes = _mm256_shuffle_epi8(_mm256_permute4x64_epi64(bytes, 0xD8), interleave);
            __m256i low = _mm256_and_si256(bytes, low4);
            __m256i high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
            sums[0] = _mm256_add_epi32(sums[0], _mm256_madd_epi16(_mm256_unpacklo_epi8(low, nothing), pair));
            sums[1] = _mm256_add_epi32(sums[1], _mm256_madd_epi16(_mm256_unpackhi_epi8(low, nothing), pair));
            sums[2] = _mm256_add_epi32(sums[2], _mm256_madd_epi16(_mm256_unpacklo_epi8(high, nothing), pair));
            sums[3] = _mm256_add_epi32(sums[3], _mm256_madd_epi16(_mm256_unpackhi_epi8(high, nothing), pair));
        }
        __m256 scale_x = _mm256_set1_ps(xs[g]), sum_x = _mm256_set1_ps(xsum[g]);
        const uint16_t *sz = scales_zeros + 2 * g * out;
        for (int r = 0; r < 4; r++) { /* the (scale, zero) bf16 pairs of the sum's rows */
            __m256i both = _mm256_loadu2_m128i((const __m128i *)(sz + 2 * (first_row[r] + 8)),
                                               (const __m128i *)(sz + 2 * first_row[r]));
            __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(both, 16));
            __m256 zero = _mm256_castsi256_ps(_mm256_and_si256(both, top16));
            __m256 offset = _mm256_fnmadd_ps(_mm256_set1_ps(8.0f), scale, zero);
            total[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[r]), _mm256_mul_ps(scale, scale_x), total[r]);
            total[r] = _mm256_fmadd_ps(offset, sum_x, total[r]);
        }
    }
    for (int r = 0; r < 4; r++) {
        _mm_storeu_ps(out32 + first_row[r], _mm256_castps256_ps128(total[r]));
        _mm_storeu_ps(out32 + first_row[r] + 8, _mm256_extractf128_ps(total[r], 1));
    }
}

typedef void (*block_fn)(const uint8_t *, const uint16_t *, int64_t, int64_t, const int16_t *, const float *,
                         const float *, float *);

/* y (rows, out) fp32 = x (rows, in) fp32 times the weight, `block` output rows at a time by `row_block`. */
static int product(const float *x, int64_t rows, int64_t in, const uint8_t *packed, int64_t out,
                   const uint16_t *scales_zeros, float *y, int64_t block, block_fn row_block) {
    if (out % block || in % GROUP)
        return 1;
    int64_t groups = in / GROUP;
    int16_t *xq = malloc((size_t)(rows * in) * sizeof(int16_t));
    float *xs = malloc((size_t)(2 * rows * groups) * sizeof(float));
    if (!xq || !xs) {
        free(xq), free(xs);
        return 2;
    }
    for (int64_t r = 0; r < rows; r++)
        quantize_row(x + r * in, in, xq + r * in, xs + r * groups, xs + (rows + r) * groups);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < out / block; b++)
        for (int64_t r = 0; r < rows; r++)
            row_block(packed + b * (in / 2) * block, scales_zeros + 2 * b * block, out, in, xq + r * in,
                      xs + r * groups, xs + (rows + r) * groups, y + r * out + b * block);
    free(xq), free(xs);
    return 0;
}

/* The same for bf16 rows: x widened once, each output rounded to bf16 once. */
static int product_bf16(const uint16_t *x, int64_t rows, int64_t in, const uint8_t *packed, int64_t out,
                        const uint16_t *scales_zeros, uint16_t *y, int64_t block, block_fn row_block) {
    if (out % block || in % GROUP)
        return 1;
    float *wide = malloc((size_t)(rows * in + rows * out) * sizeof(float)), *sums = wide + rows * in;
    if (!wide)
        return 2;
    for (int64_t i = 0; i < rows * in; i++)
        wide[i] = widen_bf16(x[i]);
    int done = product(wide, rows, in, packed, out, scales_zeros, sums, block, row_block);
    for (int64_t i = 0; done == 0 && i < rows * out; i++)
        y[i] = round_bf16(sums[i]);
    free(wide);
    return done;
}

int rows_int4w(const float *x, int64_t rows, int64_t in, const uint8_t *packed, int64_t out,
               const uint16_t *scales_zeros, float *y) {
#ifdef HAS_64
    return product(x, rows, in, packed, out, scales_zeros, y, 64, block_row64);
#else
    (void)x, (void)rows, (void)in, (void)packed, (void)out, (void)scales_zeros, (void)y;
    return 1;
#endif
}

int rows_int4(const uint16_t *x, int64_t rows, int64_t in, const uint8_t *packed, int64_t out,
              const uint16_t *scales_zeros, uint16_t *y) {
#ifdef HAS_64
    return product_bf16(x, rows, in, packed, out, scales_zeros, y, 64, block_row64);
#else
    (void)x, (void)rows, (void)in, (void)packed, (void)out, (void)scales_zeros, (void)y;
    return 1;
#endif
}

int rows_int4w_b32(const float *x, int64_t rows, int64_t in, const uint8_t *packed, int64_t out,
                   const uint16_t *scales_zeros, float *y) {
    return product(x, rows, in, packed, out, scales_zeros, y, 32, block_row32);
}

int rows_int4_b32(const uint16_t *x, int64_t rows, int64_t in, const uint8_t *packed, int64_t out,
                  const uint16_t *scales_zeros, uint16_t *y) {
    return product_bf16(x, rows, in, packed, out, scales_zeros, y, 32, block_row32);
}

#else

int rows_int4w(const float *x, int64_t rows, int64_t in, const uint8_t *packed, int64_t out,
               const uint16_t *scales_zeros, float *y) {
    (void)x, (void)rows, (void)in, (void)packed, (void)out, (void)scales_zeros, (void)y;
    return 1;
}

int rows_int4(const uint16_t *x, int64_t rows, int64_t in, const uint8_t *packed, int64_t out,
              const uint16_t *scales_zeros, uint16_t *y) {
    (void)x, (void)rows, (void)in, (void)packed, (void)out, (void)scales_zeros, (void)y;
    return 1;
}

int rows_int4w_b32(const float *x, int64_t rows, int64_t in, const uint8_t *packed, int64_t out,
                   const uint16_t *scales_zeros, float *y) {
    (void)x, (void)rows, (void)in, (void)packed, (void)out, (void)scales_zeros, (void)y;
    return 1;
}

int rows_int4_b32(const uint16_t *x, int64_t rows, int64_t in, const uint8_t *packed, int64_t out,
                  const uint16_t *scales_zeros, uint16_t *y) {
    (void)x, (void)rows, (void)in, (void)packed, (void)out, (void)scales_zeros, (void)y;
    return 1;
}

#endif
