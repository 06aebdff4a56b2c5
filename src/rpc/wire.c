/* The embedding traffic's vectors in a compact form (embedding.wire): fp32
 * as they are; fp16 after scaling by a power of two, written first as a
 * float32, so that the largest magnitude lands near 2^15 (Persia's way:
 * gradients far below fp16's normal range keep their bits); bf16 by
 * round-to-nearest-even, fp32's range with 8 bits of mantissa. Both ends
 * compute and accumulate in fp32. */
#include "shadowsync/rpc.h"

#include <math.h>
#include <string.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

size_t wire_bytes(int form, size_t n)
{
    return form == WIRE_FP16 ? 4 + 2 * n : form == WIRE_BF16 ? 2 * n : 4 * n;
}

static float fp16_scale(const float *v, size_t n)
{
    float amax = 0;
    size_t i = 0;
#ifdef __F16C__ /* (AVX with it) */
    __m256 m = _mm256_setzero_ps(), abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (; i + 8 <= n; i += 8) /* max(x, m): m where x is a NaN */
        m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + i), abs), m);
    float lane[8];
    _mm256_storeu_ps(lane, m);
    for (int k = 0; k < 8; k++)
        amax = fmaxf(amax, lane[k]);
#endif
    for (; i < n; i++)
        amax = fmaxf(amax, fabsf(v[i])); /* (a NaN is passed over) */
    if (isinf(amax)) { /* the largest finite one: an infinity stays one */
        amax = 0;
        for (size_t i = 0; i < n; i++)
            if (isfinite(v[i]))
                amax = fmaxf(amax, fabsf(v[i]));
    }
    if (amax == 0)
        return 1;
    int e;
    frexpf(amax, &e); /* amax = f * 2^e, f in [0.5, 1) */
    return ldexpf(1, 15 - e); /* amax * scale < 2^15: below fp16's 65504 */
}

static void to_fp16(const float *v, size_t n, float s, uint16_t *h)
{
    size_t i = 0;
#ifdef __F16C__
    __m256 k = _mm256_set1_ps(s);
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(v + i), k),
                                         _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) {
        _Float16 x = (_Float16)(v[i] * s);
        memcpy(h + i, &x, 2);
    }
}

static void from_fp16(const uint16_t *h, size_t n, float inv, float *v)
{
    size_t i = 0;
#ifdef __F16C__
    __m256 k = _mm256_set1_ps(inv);
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(v + i, _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(
                                                  (const __m128i *)(h + i))), k));
#endif
    for (; i < n; i++) {
        _Float16 x;
        memcpy(&x, h + i, 2);
        v[i] = (float)x * inv;
    }
}

void wire_encode(int form, const float *v, size_t n, void *out)
{
    if (form == WIRE_FP16) {
        float s = fp16_scale(v, n);
        memcpy(out, &s, 4);
        to_fp16(v, n, s, (uint16_t *)((char *)out + 4));
    } else if (form == WIRE_BF16) {
        uint16_t *h = out;
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            h[i] = isnan(v[i]) ? (uint16_t)((u >> 16) | 0x40) /* quiet, whatever the low bits */
                               : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
        }
    } else {
        memcpy(out, v, n * 4);
    }
}

int wire_decode(int form, const void *in, size_t bytes, float *out, size_t n)
{
    if (bytes != wire_bytes(form, n))
        return -1;
    if (form == WIRE_FP16) {
        float s;
        memcpy(&s, in, 4);
        if (!(s > 0) || !isfinite(s))
            return -1;
        from_fp16((const uint16_t *)((const char *)in + 4), n, 1 / s, out); /* 1/s: exact */
    } else if (form == WIRE_BF16) {
        const uint16_t *h = in;
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)h[i] << 16;
            memcpy(&out[i], &u, 4);
        }
    } else {
        memcpy(out, in, n * 4);
    }
    return 0;
}
