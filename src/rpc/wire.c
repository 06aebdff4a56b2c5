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
        amax = lane[k] > amax ? lane[k] : amax;
#endif
    for (; i < n; i++) { /* (a NaN compares false: passed over) */
        float a = fabsf(v[i]);
        amax = a > amax ? a : amax;
    }
    if (isinf(amax)) { /* the largest finite one: an infinity stays one */
        amax = 0;
        for (size_t k = 0; k < n; k++) {
            float a = fabsf(v[k]);
            amax = isfinite(a) && a > amax ? a : amax;
        }
    }
    if (amax == 0)
        return 1;
    int e;
    frexpf(amax, &e); /* amax = f * 2^e, f in [0.5, 1) */
    return ldexpf(1, 15 - e); /* amax * scale < 2^15: below fp16's 65504 */
}

/* IEEE half precision by hand, rounding to nearest even (where the CPU has
 * no F16C, and for the tail past its 8-wide steps; clang has no _Float16
 * on every x86 target). */
static uint16_t half_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, m = u & 0x7fffff;
    int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    if (((u >> 23) & 0xff) == 0xff) /* an infinity, or a NaN (kept quiet) */
        return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) { /* below half's normal range: a subnormal, or 0 */
        if (e < -10)
            return (uint16_t)sign;
        m |= 0x800000;
        int shift = 14 - e;
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        h += rem > mid || (rem == mid && (h & 1));
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;
    h += rem > 0x1000 || (rem == 0x1000 && (h & 1)); /* (a carry makes the next power) */
    return (uint16_t)(sign | h);
}

static float float_of(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) { /* 0 or a subnormal: m x 2^-24 */
        float f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    u = e == 31 ? sign | 0x7f800000 | (m << 13) : sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
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
    for (; i < n; i++)
        h[i] = half_of(v[i] * s);
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
    for (; i < n; i++)
        v[i] = float_of(h[i]) * inv;
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
