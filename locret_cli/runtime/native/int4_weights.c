/* int4 weights (runtime/int4_linear.py): quantized once when the model loads, and widened to bf16 for each prefill
 * chunk's product.
 *
 * The weights are held as torch packs them for its CPU int4 product (`_convert_weight_to_int4pack_for_cpu` with two
 * inner k-tiles), which a decode step calls directly: output rows in blocks of `block` (64 where torch's kernels use
 * AVX-512, 32 where they use AVX2); in a block, one `block`-byte line per pair of inputs k = 2j, 2j + 1, whose first
 * half holds input 2j and second half input 2j + 1, each byte's low nibble for the block's first half of output rows
 * and its high nibble for its second half. A weight is (q - 8) × scale + zero, with one
 * scale and zero per output row and group of `group` inputs, stored (in / group, out, 2) in bf16.
 *
 * A chunk of many rows multiplies faster by a dense product than by torch's int4 one, so the weight is widened
 * into a buffer first. It is written transposed, (in, out): then each packed line widens to two runs of `block` / 2
 * contiguous outputs, eight at a time with AVX2 (the scalar loop, which the compiler did not vectorize, took five
 * times as long), and the product takes the buffer as the transposed weight. Each value is computed in fp32 and
 * rounded to bf16 once, to nearest even. Threads (OpenMP, torch's runtime once torch is loaded) take pairs of inputs.
 *
 * widen_int4: packed (out / block, in / 2, block) uint8; scales_zeros (in / group, out, 2) bf16; wt (in, out) bf16,
 * or with `wide` fp32 holding the same bf16 values (for a model computing in fp32: no second copy to widen them).
 * Returns 0, or 1 where out is not a multiple of block, in not a multiple of group, or block or group not even.
 *
 * quantize_int4: w (groups, 32) fp32, each row one group of 32 inputs; q (groups, 32) int32 in 0..15; step and low
 * (groups,) fp32, with w ≈ low + q × step; returns how many groups kept a grid. A group whose values lie on an evenly spaced grid (each within `slack` of
 * a step of it) whose range is 15, 14, 13 or 12 of its steps keeps that grid, its step and low fitted by least
 * squares: a 4-bit GGUF's blocks, dequantized, are held as they were. Any other group spans its range in 15 steps.
 * runtime/int4_linear.py's `_quantized_block` computes the same with torch's ops.
 */
#include <math.h>
#include <stdint.h>

#define GROUP 32

static inline float widen_bf16(uint16_t b) {
    union { uint32_t u; float f; } c = {(uint32_t)b << 16};
    return c.f;
}

static inline uint16_t round_bf16(float f) { /* to nearest even; the weights hold no NaN */
    union { float f; uint32_t u; } c = {f};
    return (uint16_t)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* Eight values at once: nibbles q (8 int32) and their rows' (scale, zero) bf16 pairs at sz; each value's fp32 bits,
 * rounded to bf16 (the low 16 bits zero). The product (q - 8) × scale is exact in fp32 (a 4-bit integer by an 8-bit
 * significand), so the sum rounds as the scalar path's does, and the rounding takes the same integer steps. */
static inline __m256i eight(__m256i q, const uint16_t *sz) {
    const __m256i pairs = _mm256_loadu_si256((const __m256i *)sz), top16 = _mm256_set1_epi32((int)0xffff0000u);
    __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
    __m256 zero = _mm256_castsi256_ps(_mm256_and_si256(pairs, top16));
    __m256 sum = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(8))), scale),
                               zero);
    __m256i bits = _mm256_castps_si256(sum);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    return _mm256_and_si256(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), top16);
}

/* The eight values at `dst`: as fp32 (`wide`), or as bf16. */
static inline void store_eight(__m256i bits, void *dst, int wide) {
    if (wide) {
        _mm256_storeu_si256((__m256i *)dst, bits);
    } else {
        __m256i packed = _mm256_packus_epi32(_mm256_srli_epi32(bits, 16), _mm256_setzero_si256());
        _mm_storeu_si128((__m128i *)dst, _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0xD8)));
    }
}
#endif

int widen_int4(const uint8_t *packed, int64_t out, int64_t in, const uint16_t *scales_zeros, int64_t group,
               int64_t block, void *wt, int wide) {
    if (block % 2 || out % block || group % 2 || in % group)
        return 1;
    const int64_t blocks = out / block, pairs = in / 2, half = block / 2, size = wide ? 4 : 2;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < pairs; j++) {
        for (int k = 0; k < 2; k++) {
            const uint16_t *sz = scales_zeros + ((2 * j + k) / group) * out * 2;
            char *row = (char *)wt + (2 * j + k) * out * size;
            for (int64_t b = 0; b < blocks; b++) {
                const uint8_t *line = packed + (b * pairs + j) * block + half * k;
                const uint16_t *low = sz + b * 2 * block, *high = low + block;
                char *first = row + b * block * size;
                int64_t c = 0;
#if defined(__AVX2__) && defined(__FMA__)
                for (; c + 8 <= half; c += 8) {
                    __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(line + c)));
                    store_eight(eight(_mm256_and_si256(q, _mm256_set1_epi32(15)), low + 2 * c), first + c * size,
                                wide);
                    store_eight(eight(_mm256_srli_epi32(q, 4), high + 2 * c), first + (c + half) * size, wide);
                }
#endif
                for (; c < half; c++) {
                    uint16_t v[2] = {round_bf16((float)((line[c] & 15) - 8) * widen_bf16(low[2 * c])
                                                + widen_bf16(low[2 * c + 1])),
                                     round_bf16((float)((line[c] >> 4) - 8) * widen_bf16(high[2 * c])
                                                + widen_bf16(high[2 * c + 1]))};
                    for (int n = 0; n < 2; n++) {
                        int64_t at = c + n * half;
                        if (wide)
                            ((float *)first)[at] = widen_bf16(v[n]);
                        else
                            ((uint16_t *)first)[at] = v[n];
                    }
                }
            }
        }
    }
    return 0;
}

static int on_grid(const float *v, float low, float spread, float slack, float *k) {
    static const int spans[] = {15, 14, 13, 12};
    for (int s = 0; s < 4; s++) {
        float step = spread / (float)spans[s];
        int fits = 1;
        for (int i = 0; i < GROUP && fits; i++) {
            float offset = (v[i] - low) / step;
            k[i] = nearbyintf(offset);
            fits = fabsf(offset - k[i]) <= slack;
        }
        if (fits)
            return 1;
    }
    return 0;
}

int64_t quantize_int4(const float *w, int64_t groups, float slack, int32_t *q, float *step, float *low) {
    int64_t kept = 0;
#pragma omp parallel for schedule(static) reduction(+ : kept)
    for (int64_t g = 0; g < groups; g++) {
        const float *v = w + g * GROUP;
        float lo = v[0], hi = v[0], k[GROUP];
        for (int i = 1; i < GROUP; i++) {
            lo = v[i] < lo ? v[i] : lo;
            hi = v[i] > hi ? v[i] : hi;
        }
        float spread = hi - lo > 1.17549435e-38f ? hi - lo : 1.17549435e-38f;
        if (on_grid(v, lo, spread, slack, k)) {
            kept++;
            float mean_k = 0.0f, mean_v = 0.0f, across = 0.0f, square = 0.0f;
            for (int i = 0; i < GROUP; i++)
                mean_k += k[i], mean_v += v[i];
            mean_k /= GROUP, mean_v /= GROUP;
            for (int i = 0; i < GROUP; i++)
                across += (k[i] - mean_k) * v[i], square += (k[i] - mean_k) * (k[i] - mean_k);
            step[g] = across / (square > 1e-12f ? square : 1e-12f);
            low[g] = mean_v - step[g] * mean_k;
        } else {
            step[g] = spread / 15.0f, low[g] = lo;
            for (int i = 0; i < GROUP; i++)
                k[i] = nearbyintf((v[i] - lo) / step[g]);
        }
        for (int i = 0; i < GROUP; i++)
            q[g * GROUP + i] = k[i] < 0.0f ? 0 : k[i] > 15.0f ? 15 : (int32_t)k[i];
    }
    return kept;
}
