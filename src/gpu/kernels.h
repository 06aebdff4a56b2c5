/* The device trainer's kernels as element bodies: each computes ONE output
 * element from its index, and is compiled twice, as __host__ __device__
 * code by nvcc (gpu.cu launches them over a grid) and as plain C by gcc
 * (sim.c runs them in loops), so the CPU simulation checks the very index
 * arithmetic the GPU runs. Layouts are those of src/core/model.c. */
#ifndef SHADOWSYNC_GPU_KERNELS_H
#define SHADOWSYNC_GPU_KERNELS_H

#include <math.h>
#include <stddef.h>

#ifdef __CUDACC__
#define KB static __host__ __device__ __forceinline__
#else
#define KB static inline
#endif

KB void kb_log1p_relu(const float *x, float *y, size_t i) { y[i] = log1pf(fmaxf(x[i], 0.0f)); }

/* y[i] (row-major [n x out]) += b[column], then ReLU when relu. */
KB void kb_bias_act(float *y, const float *b, int out, int relu, size_t i)
{
    float v = y[i] + b[i % out];
    y[i] = relu && v < 0.0f ? 0.0f : v; /* a NaN passes, as on the CPU */
}

KB void kb_relu_bwd(float *dy, const float *y, size_t i) { dy[i] = y[i] > 0.0f ? dy[i] : 0.0f; }

/* prob = sigmoid(z), the example's BCE, and dy = (prob - y) / n. */
KB void kb_loss(const float *z, const float *label, float *prob, float *loss, float *dy, int n,
                int i)
{
    float zi = z[i], y = label[i], p = 1.0f / (1.0f + expf(-zi));
    prob[i] = p;
    loss[i] = fmaxf(zi, 0.0f) - zi * y + log1pf(expf(-fabsf(zi)));
    dy[i] = (p - y) / n;
}

/* Vector j of example i: j = 0 the bottom MLP's output, 1..T the tables'. */
KB const float *kb_vec(const float *bot, const float *emb, int i, int j, int T, int d)
{
    return j == 0 ? bot + (size_t)i * d : emb + ((size_t)i * T + (j - 1)) * d;
}

/* The pair (a, b), a > b, at position p of the row-major lower triangle
 * (p = a(a-1)/2 + b); the float root is corrected both ways. */
KB void kb_pair(int p, int *a, int *b)
{
    int r = (int)((1.0f + sqrtf(1.0f + 8.0f * p)) * 0.5f);
    while (r * (r - 1) / 2 > p)
        r--;
    while ((r + 1) * r / 2 <= p)
        r++;
    *a = r;
    *b = p - r * (r - 1) / 2;
}

/* Element k < d + (T+1)T/2 of example i's top input: [v0, dots va.vb for
 * a > b in row-major lower-triangle order], as interact_fwd of model.c. */
KB void kb_interact_fwd(const float *bot, const float *emb, float *top_in, int T, int d, int w,
                        int i, int k)
{
    float *out = top_in + (size_t)i * w;
    if (k < d) {
        out[k] = bot[(size_t)i * d + k];
        return;
    }
    int a, b;
    kb_pair(k - d, &a, &b);
    const float *va = kb_vec(bot, emb, i, a, T, d), *vb = kb_vec(bot, emb, i, b, T, d);
    float s = 0.0f;
    for (int c = 0; c < d; c++)
        s += va[c] * vb[c];
    out[k] = s;
}

/* Element idx = a*d + c of example i's vector gradients: dv_a = [a == 0:
 * the copied part] + sum over b != a of S_ab v_b, as interact_bwd of
 * model.c, into d_bot (a = 0) and d_emb (a = 1..T). */
KB void kb_interact_bwd(const float *g_all, const float *bot, const float *emb, float *d_bot,
                        float *d_emb, int T, int d, int w, int i, int idx)
{
    const float *g = g_all + (size_t)i * w;
    int a = idx / d, c = idx % d;
    float acc = a == 0 ? g[c] : 0.0f;
    for (int b = 0; b <= T; b++) {
        if (b == a)
            continue;
        int hi = a > b ? a : b, lo = a > b ? b : a;
        acc += g[d + hi * (hi - 1) / 2 + lo] * kb_vec(bot, emb, i, b, T, d)[c];
    }
    if (a == 0)
        d_bot[(size_t)i * d + c] = acc;
    else
        d_emb[((size_t)i * T + (a - 1)) * d + c] = acc;
}

KB void kb_adagrad(float *w, float *state, const float *g, float lr, float eps, size_t i)
{
    float s = state[i] + g[i] * g[i];
    state[i] = s;
    w[i] -= lr * g[i] / (sqrtf(s) + eps);
}

KB void kb_add(float *w, const float *delta, size_t i) { w[i] += delta[i]; }

KB void kb_fill(float *x, float v, size_t i) { x[i] = v; }

#endif
