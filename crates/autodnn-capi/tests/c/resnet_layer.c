/*
 * ResNet-50's res2a_branch2b (64 -> 64 channels, 3x3, pad 1, stride 1, batch 1) at 14x14
 * through the C API, checked against naive loops: every forward algorithm the heuristic
 * lists, on NCHW, NHWC and row-padded (explicit strides) tensors; the measured selection and
 * AUTODNN_ALGO_AUTO; bfloat16 x and w with a bfloat16 or float y; the math types (strict and allow_bf16, on the handle and the
 * convolution descriptor); the fused bias, residual and ReLU; every backward-data and
 * backward-filter algorithm; the bias gradient; and column-major GEMM.
 *
 * The data are small integers, so every sum is exact in float: algorithms that sum like the
 * definition (tolerance 0 in their record) must match bit for bit, the others (Winograd, FFT)
 * within their documented bound.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodnn.h"

#define CHECK(call)                                                                        \
    do {                                                                                   \
        autodnnStatus_t s_ = (call);                                                       \
        if (s_ != AUTODNN_STATUS_SUCCESS) {                                                \
            char m_[512];                                                                  \
            autodnnGetLastErrorString(m_, sizeof m_);                                      \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,             \
                    autodnnGetErrorString(s_), m_);                                        \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define REQUIRE(cond)                                                                      \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond);             \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

enum { N = 1, C = 64, K = 64, H = 14, W = 14, R = 3, S = 3, PAD = 1, OH = 14, OW = 14 };

static int checks;

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    REQUIRE(p != NULL);
    return p;
}

/* Integers in [-2, 2] from a fixed sequence. */
static void fill(float *p, size_t n, unsigned seed) {
    unsigned v = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        v = v * 1103515245u + 12345u;
        p[i] = (float)((int)((v >> 16) % 5u) - 2);
    }
}

static void fill_value(float *p, size_t n, float v) {
    for (size_t i = 0; i < n; i++) p[i] = v;
}

/* Strides of a 4-D array, in elements, in (N, C, H, W) or (K, C, R, S) order. */
typedef struct {
    size_t s[4];
} strides_t;

static size_t at(strides_t t, int a, int b, int c, int d) {
    return (size_t)a * t.s[0] + (size_t)b * t.s[1] + (size_t)c * t.s[2] + (size_t)d * t.s[3];
}

static strides_t nchw(int c, int h, int w) {
    strides_t t = {{(size_t)c * h * w, (size_t)h * w, (size_t)w, 1}};
    return t;
}

static strides_t nhwc(int c, int h, int w) {
    strides_t t = {{(size_t)h * w * c, 1, (size_t)w * c, (size_t)c}};
    return t;
}

/* y[n, k, oh, ow] = sum over c, r, s of x[n, c, oh + r - PAD, ow + s - PAD] * w[k, c, r, s]. */
static void ref_forward(const float *x, strides_t xs, const float *w, strides_t ws,
                        double *y /* N K OH OW, packed */) {
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double acc = 0;
                    for (int c = 0; c < C; c++)
                        for (int r = 0; r < R; r++)
                            for (int s = 0; s < S; s++) {
                                int ih = oh + r - PAD, iw = ow + s - PAD;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                acc += (double)x[at(xs, n, c, ih, iw)] * w[at(ws, k, c, r, s)];
                            }
                    y[((size_t)(n * K + k) * OH + oh) * OW + ow] = acc;
                }
}

/* dx[n, c, ih, iw] = sum over k, r, s of dy[n, k, oh, ow] * w[k, c, r, s], ih = oh + r - PAD. */
static void ref_backward_data(const float *dy, const float *w, double *dx) {
    memset(dx, 0, sizeof(double) * N * C * H * W);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++)
                    for (int c = 0; c < C; c++)
                        for (int r = 0; r < R; r++)
                            for (int s = 0; s < S; s++) {
                                int ih = oh + r - PAD, iw = ow + s - PAD;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                dx[((size_t)(n * C + c) * H + ih) * W + iw] +=
                                    (double)dy[((size_t)(n * K + k) * OH + oh) * OW + ow] *
                                    w[((size_t)(k * C + c) * R + r) * S + s];
                            }
}

/* dw[k, c, r, s] = sum over n, oh, ow of x[n, c, oh + r - PAD, ow + s - PAD] * dy[n, k, oh, ow]. */
static void ref_backward_filter(const float *x, const float *dy, double *dw) {
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
                for (int s = 0; s < S; s++) {
                    double acc = 0;
                    for (int n = 0; n < N; n++)
                        for (int oh = 0; oh < OH; oh++)
                            for (int ow = 0; ow < OW; ow++) {
                                int ih = oh + r - PAD, iw = ow + s - PAD;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                acc += (double)x[((size_t)(n * C + c) * H + ih) * W + iw] *
                                       dy[((size_t)(n * K + k) * OH + oh) * OW + ow];
                            }
                    dw[((size_t)(k * C + c) * R + r) * S + s] = acc;
                }
}

/*
 * Compares got (laid out by gs over dims d0..d3) with want (packed in the same logical order):
 * exactly when tol is 0, else max|got - want| <= tol * max|want|.
 */
static void compare(const char *what, const char *algo, const float *got, strides_t gs,
                    const double *want, const int d[4], float tol) {
    double max_err = 0, max_ref = 0;
    size_t i = 0;
    for (int a = 0; a < d[0]; a++)
        for (int b = 0; b < d[1]; b++)
            for (int c = 0; c < d[2]; c++)
                for (int e = 0; e < d[3]; e++, i++) {
                    double g = got[at(gs, a, b, c, e)];
                    double err = fabs(g - want[i]);
                    if (!(err <= max_err)) max_err = err; /* NaN propagates */
                    if (fabs(want[i]) > max_ref) max_ref = fabs(want[i]);
                }
    int ok = tol == 0 ? max_err == 0 : max_err <= (double)tol * max_ref;
    if (!ok) {
        fprintf(stderr, "%s with %s: max error %g (max |ref| %g, tolerance %g)\n", what, algo,
                max_err, max_ref, (double)tol);
        exit(1);
    }
    checks++;
}

static const char *algo_name(autodnnConvolutionDirection_t dir, int algo) {
    const char *name = NULL;
    CHECK(autodnnGetAlgorithmName(dir, algo, &name));
    return name;
}

/* Runs every forward algorithm the heuristic lists on one layout of x, w and y. */
static void forward_every_algorithm(autodnnHandle_t h, autodnnConvolutionDescriptor_t conv,
                                    const char *layout, autodnnTensorDescriptor_t xd,
                                    strides_t xs, autodnnFilterDescriptor_t wd, strides_t ws,
                                    autodnnTensorDescriptor_t yd, strides_t ys, size_t y_span) {
    size_t x_span = at(xs, N - 1, C - 1, H - 1, W - 1) + 1;
    float *x = xmalloc(sizeof(float) * x_span);
    float *w = xmalloc(sizeof(float) * K * C * R * S);
    float *y = xmalloc(sizeof(float) * y_span);
    double *want = xmalloc(sizeof(double) * N * K * OH * OW);
    fill_value(x, x_span, NAN); /* padding between rows must never be read */
    /* Logical values are the same whatever the layout. */
    float *xv = xmalloc(sizeof(float) * N * C * H * W);
    float *wv = xmalloc(sizeof(float) * K * C * R * S);
    fill(xv, (size_t)N * C * H * W, 1);
    fill(wv, (size_t)K * C * R * S, 2);
    strides_t xp = nchw(C, H, W), wp = nchw(C, R, S);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < H; i++)
                for (int j = 0; j < W; j++) x[at(xs, n, c, i, j)] = xv[at(xp, n, c, i, j)];
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
                for (int s = 0; s < S; s++) w[at(ws, k, c, r, s)] = wv[at(wp, k, c, r, s)];
    ref_forward(xv, xp, wv, wp, want);

    int count = 0, returned = 0, ran = 0;
    CHECK(autodnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
    autodnnConvolutionFwdAlgoPerf_t *perf = xmalloc(sizeof(*perf) * (size_t)count);
    CHECK(autodnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, conv, yd, count, &returned, perf));
    REQUIRE(returned >= 1 && returned <= count);
    const int dims[4] = {N, K, OH, OW};
    for (int i = 0; i < returned; i++) {
        if (perf[i].status != AUTODNN_STATUS_SUCCESS) continue;
        REQUIRE(perf[i].time == -1.0f);
        size_t bytes = 0;
        CHECK(autodnnGetConvolutionForwardWorkspaceSize(h, xd, wd, conv, yd, perf[i].algo, &bytes));
        REQUIRE(bytes == perf[i].memory);
        void *workspace = xmalloc(bytes);
        const float one = 1, zero = 0;
        fill_value(y, y_span, NAN); /* beta = 0: y is not read */
        CHECK(autodnnConvolutionForward(h, &one, xd, x, wd, w, conv, perf[i].algo, workspace,
                                        bytes, &zero, yd, y));
        char what[64];
        snprintf(what, sizeof what, "forward (%s)", layout);
        compare(what, algo_name(AUTODNN_CONVOLUTION_FWD, perf[i].algo), y, ys, want, dims,
                perf[i].tolerance);
        free(workspace);
        ran++;
    }
    REQUIRE(ran >= 2);
    printf("forward %-10s %d algorithms checked\n", layout, ran);
    free(perf);
    free(x);
    free(w);
    free(xv);
    free(wv);
    free(y);
    free(want);
}

static void test_gemm(autodnnHandle_t h) {
    enum { M = 5, NN = 4, KK = 3 };
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? KK : M) + 2, ldb = (tb ? NN : KK) + 1, ldc = M + 3;
            float a[(M + 2) * 6], b[(NN + 1) * 6], c[(M + 3) * NN];
            fill(a, sizeof a / sizeof a[0], 3);
            fill(b, sizeof b / sizeof b[0], 4);
            fill_value(c, sizeof c / sizeof c[0], 1);
            const float alpha = 2, beta = -1;
            CHECK(autodnnSgemm(h, ta ? AUTODNN_OP_T : AUTODNN_OP_N, tb ? AUTODNN_OP_T : AUTODNN_OP_N,
                               M, NN, KK, &alpha, a, lda, b, ldb, &beta, c, ldc));
            for (int j = 0; j < NN; j++)
                for (int i = 0; i < M; i++) {
                    double acc = 0;
                    for (int l = 0; l < KK; l++) {
                        double av = ta ? a[l + i * lda] : a[i + l * lda];
                        double bv = tb ? b[j + l * ldb] : b[l + j * ldb];
                        acc += av * bv;
                    }
                    REQUIRE(c[i + j * ldc] == (float)(2 * acc - 1));
                }
            checks++;
        }
    /* Three products, B shared (stride 0). */
    enum { BATCH = 3 };
    float a[BATCH * 6], b[6], c[BATCH * 4];
    fill(a, sizeof a / sizeof a[0], 5);
    fill(b, sizeof b / sizeof b[0], 6);
    const float one = 1, zero = 0;
    /* C (2 x 2) = A (2 x 3) B (3 x 2), column-major, packed. */
    CHECK(autodnnSgemmStridedBatched(h, AUTODNN_OP_N, AUTODNN_OP_N, 2, 2, 3, &one, a, 2, 6, b, 3,
                                     0, &zero, c, 2, 4, BATCH));
    for (int p = 0; p < BATCH; p++)
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < 2; i++) {
                double acc = 0;
                for (int l = 0; l < 3; l++) acc += (double)a[p * 6 + i + l * 2] * b[l + j * 3];
                REQUIRE(c[p * 4 + i + j * 2] == (float)acc);
            }
    checks++;
    printf("gemm checked\n");
}

/* bfloat16 bits of a float, rounded to nearest even (no NaN here), and back. */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bfloat16 x and w (exact: small integers), y bfloat16 or float: every forward algorithm of
 * the heuristic's list, against the loops' result rounded once to y's type (bit for bit for
 * the algorithms exact on integers, else within their bound plus that rounding). */
static void forward_bf16(autodnnHandle_t h, autodnnConvolutionDescriptor_t conv,
                         autodnnDataType_t ytype) {
    const size_t xn = (size_t)N * C * H * W, wn = (size_t)K * C * R * S, yn = (size_t)N * K * OH * OW;
    float *xv = xmalloc(sizeof(float) * xn), *wv = xmalloc(sizeof(float) * wn);
    double *want = xmalloc(sizeof(double) * yn), *rounded = xmalloc(sizeof(double) * yn);
    uint16_t *x = xmalloc(sizeof(uint16_t) * xn), *w = xmalloc(sizeof(uint16_t) * wn);
    uint16_t *y16 = xmalloc(sizeof(uint16_t) * yn);
    float *y32 = xmalloc(sizeof(float) * yn), *got = xmalloc(sizeof(float) * yn);
    fill(xv, xn, 11);
    fill(wv, wn, 12);
    for (size_t i = 0; i < xn; i++) x[i] = to_bf16(xv[i]);
    for (size_t i = 0; i < wn; i++) w[i] = to_bf16(wv[i]);
    ref_forward(xv, nchw(C, H, W), wv, nchw(C, R, S), want);
    for (size_t i = 0; i < yn; i++)
        rounded[i] = ytype == AUTODNN_DATA_BFLOAT16 ? from_bf16(to_bf16((float)want[i])) : want[i];

    autodnnTensorDescriptor_t xd, yd;
    autodnnFilterDescriptor_t wd;
    CHECK(autodnnCreateTensorDescriptor(&xd));
    CHECK(autodnnCreateTensorDescriptor(&yd));
    CHECK(autodnnCreateFilterDescriptor(&wd));
    CHECK(autodnnSetTensor4dDescriptor(xd, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_BFLOAT16, N, C, H, W));
    CHECK(autodnnSetFilter4dDescriptor(wd, AUTODNN_DATA_BFLOAT16, AUTODNN_TENSOR_NCHW, K, C, R, S));
    CHECK(autodnnSetTensor4dDescriptor(yd, AUTODNN_TENSOR_NCHW, ytype, N, K, OH, OW));
    int count = 0, returned = 0, ran = 0;
    CHECK(autodnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
    autodnnConvolutionFwdAlgoPerf_t *perf = xmalloc(sizeof(*perf) * (size_t)count);
    CHECK(autodnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, conv, yd, count, &returned, perf));
    const int dims[4] = {N, K, OH, OW};
    const float one = 1, zero = 0;
    void *y = ytype == AUTODNN_DATA_BFLOAT16 ? (void *)y16 : (void *)y32;
    for (int i = 0; i < returned; i++) {
        if (perf[i].status != AUTODNN_STATUS_SUCCESS) continue;
        size_t bytes = 0;
        CHECK(autodnnGetConvolutionForwardWorkspaceSize(h, xd, wd, conv, yd, perf[i].algo, &bytes));
        REQUIRE(bytes == perf[i].memory);
        const char *name = algo_name(AUTODNN_CONVOLUTION_FWD, perf[i].algo);
        /* direct reads bf16 in place; the others widen x and w into the workspace. */
        if (strcmp(name, "direct") == 0)
            REQUIRE(bytes == 0);
        else
            REQUIRE(bytes >= sizeof(float) * (xn + wn));
        void *workspace = xmalloc(bytes);
        memset(y16, 0xFF, sizeof(uint16_t) * yn); /* NaN: beta = 0 does not read y */
        fill_value(y32, yn, NAN);
        CHECK(autodnnConvolutionForward(h, &one, xd, x, wd, w, conv, perf[i].algo, workspace,
                                        bytes, &zero, yd, y));
        for (size_t j = 0; j < yn; j++)
            got[j] = ytype == AUTODNN_DATA_BFLOAT16 ? from_bf16(y16[j]) : y32[j];
        if (perf[i].tolerance == 0) {
            compare("forward bf16", name, got, nchw(K, OH, OW), rounded, dims, 0);
        } else {
            float tol = perf[i].tolerance + (ytype == AUTODNN_DATA_BFLOAT16 ? 1.0f / 256 : 0);
            compare("forward bf16", name, got, nchw(K, OH, OW), want, dims, tol);
        }
        free(workspace);
        ran++;
    }
    REQUIRE(ran >= 4);
    /* The handle's own choice, and the measured one. */
    CHECK(autodnnFindConvolutionForwardAlgorithm(h, xd, wd, conv, yd, count, &returned, perf));
    REQUIRE(returned >= 1 && perf[0].status == AUTODNN_STATUS_SUCCESS);
    CHECK(autodnnConvolutionForward(h, &one, xd, x, wd, w, conv, AUTODNN_ALGO_AUTO, NULL, 0,
                                    &zero, yd, y));
    printf("forward bf16 -> %s: %d algorithms checked\n",
           ytype == AUTODNN_DATA_BFLOAT16 ? "bf16" : "float", ran);
    CHECK(autodnnDestroyTensorDescriptor(xd));
    CHECK(autodnnDestroyTensorDescriptor(yd));
    CHECK(autodnnDestroyFilterDescriptor(wd));
    free(perf);
    free(xv);
    free(wv);
    free(want);
    free(rounded);
    free(x);
    free(w);
    free(y16);
    free(y32);
    free(got);
}

int main(void) {
    REQUIRE(autodnnGetVersion() ==
            (size_t)(AUTODNN_MAJOR * 10000 + AUTODNN_MINOR * 100 + AUTODNN_PATCHLEVEL));

    autodnnHandle_t h;
    CHECK(autodnnCreateWithThreads(&h, 2));
    int threads = 0;
    CHECK(autodnnGetThreads(h, &threads));
    REQUIRE(threads == 2);

    autodnnConvolutionDescriptor_t conv;
    CHECK(autodnnCreateConvolutionDescriptor(&conv));
    CHECK(autodnnSetConvolution2dDescriptor(conv, PAD, PAD, 1, 1, 1, 1, AUTODNN_CROSS_CORRELATION,
                                            AUTODNN_DATA_FLOAT));
    CHECK(autodnnSetConvolutionGroupCount(conv, 1));

    autodnnTensorDescriptor_t xd, yd;
    autodnnFilterDescriptor_t wd;
    CHECK(autodnnCreateTensorDescriptor(&xd));
    CHECK(autodnnCreateTensorDescriptor(&yd));
    CHECK(autodnnCreateFilterDescriptor(&wd));

    /* NCHW. */
    CHECK(autodnnSetTensor4dDescriptor(xd, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, N, C, H, W));
    CHECK(autodnnSetFilter4dDescriptor(wd, AUTODNN_DATA_FLOAT, AUTODNN_TENSOR_NCHW, K, C, R, S));
    int on, oc, oh, ow;
    CHECK(autodnnGetConvolution2dForwardOutputDim(conv, xd, wd, &on, &oc, &oh, &ow));
    REQUIRE(on == N && oc == K && oh == OH && ow == OW);
    CHECK(autodnnSetTensor4dDescriptor(yd, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, on, oc, oh, ow));
    forward_every_algorithm(h, conv, "nchw", xd, nchw(C, H, W), wd, nchw(C, R, S), yd,
                            nchw(K, OH, OW), (size_t)N * K * OH * OW);

    /* NHWC tensors, K R S C filter. */
    CHECK(autodnnSetTensor4dDescriptor(xd, AUTODNN_TENSOR_NHWC, AUTODNN_DATA_FLOAT, N, C, H, W));
    CHECK(autodnnSetFilter4dDescriptor(wd, AUTODNN_DATA_FLOAT, AUTODNN_TENSOR_NHWC, K, C, R, S));
    CHECK(autodnnSetTensor4dDescriptor(yd, AUTODNN_TENSOR_NHWC, AUTODNN_DATA_FLOAT, N, K, OH, OW));
    strides_t krsc = {{(size_t)R * S * C, 1, (size_t)S * C, (size_t)C}};
    forward_every_algorithm(h, conv, "nhwc", xd, nhwc(C, H, W), wd, krsc, yd, nhwc(K, OH, OW),
                            (size_t)N * K * OH * OW);

    /* Rows padded to 17 elements in x and 16 in y (explicit strides). */
    strides_t xs = {{(size_t)C * H * 17, (size_t)H * 17, 17, 1}};
    strides_t ys = {{(size_t)K * OH * 16, (size_t)OH * 16, 16, 1}};
    CHECK(autodnnSetTensor4dDescriptorEx(xd, AUTODNN_DATA_FLOAT, N, C, H, W, (int)xs.s[0],
                                         (int)xs.s[1], (int)xs.s[2], (int)xs.s[3]));
    CHECK(autodnnSetFilter4dDescriptor(wd, AUTODNN_DATA_FLOAT, AUTODNN_TENSOR_NCHW, K, C, R, S));
    CHECK(autodnnSetTensor4dDescriptorEx(yd, AUTODNN_DATA_FLOAT, N, K, OH, OW, (int)ys.s[0],
                                         (int)ys.s[1], (int)ys.s[2], (int)ys.s[3]));
    forward_every_algorithm(h, conv, "nchw+pad", xd, xs, wd, nchw(C, R, S), yd, ys,
                            at(ys, N - 1, K - 1, OH - 1, OW - 1) + 1);

    /* Math types: the descriptor's starts as the handle's, which starts strict. Under
     * AUTODNN_ALLOW_BF16_MATH with the bf16 units forced, f32 operands round to bf16 where
     * the CPU has the units; these integers are exact in bf16, so every algorithm must still
     * match the loops. */
    {
        autodnnMathType_t mt = -1;
        CHECK(autodnnGetConvolutionMathType(conv, &mt));
        REQUIRE(mt == AUTODNN_DEFAULT_MATH);
        CHECK(autodnnGetMathType(h, &mt));
        REQUIRE(mt == AUTODNN_STRICT_MATH);
        autodnnBf16Units_t units = -1;
        CHECK(autodnnGetBf16Units(h, &units));
        REQUIRE(units == AUTODNN_BF16_UNITS_AUTO);
        CHECK(autodnnSetBf16Units(h, AUTODNN_BF16_UNITS_ALWAYS));
        CHECK(autodnnGetBf16Units(h, &units));
        REQUIRE(units == AUTODNN_BF16_UNITS_ALWAYS);
        CHECK(autodnnSetConvolutionMathType(conv, AUTODNN_ALLOW_BF16_MATH));
        CHECK(autodnnGetConvolutionMathType(conv, &mt));
        REQUIRE(mt == AUTODNN_ALLOW_BF16_MATH);
        forward_every_algorithm(h, conv, "nchw+pad allow_bf16", xd, xs, wd, nchw(C, R, S), yd,
                                ys, at(ys, N - 1, K - 1, OH - 1, OW - 1) + 1);
        /* The handle's type, through a descriptor left at the default. */
        CHECK(autodnnSetConvolutionMathType(conv, AUTODNN_DEFAULT_MATH));
        CHECK(autodnnSetMathType(h, AUTODNN_ALLOW_BF16_MATH));
        CHECK(autodnnGetMathType(h, &mt));
        REQUIRE(mt == AUTODNN_ALLOW_BF16_MATH);
        forward_every_algorithm(h, conv, "nchw+pad handle allow_bf16", xd, xs, wd, nchw(C, R, S),
                                yd, ys, at(ys, N - 1, K - 1, OH - 1, OW - 1) + 1);
        /* A descriptor's strict overrides the handle's. */
        CHECK(autodnnSetConvolutionMathType(conv, AUTODNN_STRICT_MATH));
        forward_every_algorithm(h, conv, "nchw+pad strict", xd, xs, wd, nchw(C, R, S), yd, ys,
                                at(ys, N - 1, K - 1, OH - 1, OW - 1) + 1);
        CHECK(autodnnSetConvolutionMathType(conv, AUTODNN_DEFAULT_MATH));
        CHECK(autodnnSetMathType(h, AUTODNN_DEFAULT_MATH));
        CHECK(autodnnGetMathType(h, &mt));
        REQUIRE(mt == AUTODNN_STRICT_MATH);
        CHECK(autodnnSetBf16Units(h, AUTODNN_BF16_UNITS_AUTO));
    }

    /* bfloat16 tensors, y bfloat16 or float. */
    forward_bf16(h, conv, AUTODNN_DATA_BFLOAT16);
    forward_bf16(h, conv, AUTODNN_DATA_FLOAT);

    /* Back to packed NCHW for the rest. */
    CHECK(autodnnSetTensor4dDescriptor(xd, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, N, C, H, W));
    CHECK(autodnnSetTensor4dDescriptor(yd, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, N, K, OH, OW));
    const size_t xn = (size_t)N * C * H * W, wn = (size_t)K * C * R * S, yn = (size_t)N * K * OH * OW;
    float *x = xmalloc(sizeof(float) * xn), *w = xmalloc(sizeof(float) * wn);
    float *y = xmalloc(sizeof(float) * yn), *z = xmalloc(sizeof(float) * yn);
    double *ref = xmalloc(sizeof(double) * yn), *want = xmalloc(sizeof(double) * yn);
    fill(x, xn, 1);
    fill(w, wn, 2);
    fill(z, yn, 7);
    ref_forward(x, nchw(C, H, W), w, nchw(C, R, S), ref);
    const int ydims[4] = {N, K, OH, OW};
    const float one = 1, zero = 0;

    /* alpha and beta with a named algorithm: y = 2 conv(x, w) - y. */
    int direct;
    CHECK(autodnnGetAlgorithmIndex(AUTODNN_CONVOLUTION_FWD, "direct", &direct));
    REQUIRE(strcmp(algo_name(AUTODNN_CONVOLUTION_FWD, direct), "direct") == 0);
    {
        const float two = 2, minus_one = -1;
        memcpy(y, z, sizeof(float) * yn);
        CHECK(autodnnConvolutionForward(h, &two, xd, x, wd, w, conv, direct, NULL, 0, &minus_one,
                                        yd, y));
        for (size_t i = 0; i < yn; i++) want[i] = 2 * ref[i] - z[i];
        compare("forward alpha 2 beta -1", "direct", y, nchw(K, OH, OW), want, ydims, 0);
    }

    /* Measured selection, then the handle's own choice. */
    int count = 0, returned = 0;
    CHECK(autodnnGetAlgorithmCount(AUTODNN_CONVOLUTION_FWD, &count));
    autodnnConvolutionFwdAlgoPerf_t *perf = xmalloc(sizeof(*perf) * (size_t)count);
    CHECK(autodnnFindConvolutionForwardAlgorithm(h, xd, wd, conv, yd, count, &returned, perf));
    REQUIRE(returned >= 2);
    REQUIRE(perf[0].status == AUTODNN_STATUS_SUCCESS && perf[0].time >= 0);
    float worst = 0;
    for (int i = 0; i < returned; i++)
        if (perf[i].tolerance > worst) worst = perf[i].tolerance;
    printf("find: fastest %s, %.3f ms\n", algo_name(AUTODNN_CONVOLUTION_FWD, perf[0].algo),
           (double)perf[0].time);
    size_t auto_bytes = 1;
    CHECK(autodnnGetConvolutionForwardWorkspaceSize(h, xd, wd, conv, yd, AUTODNN_ALGO_AUTO,
                                                    &auto_bytes));
    REQUIRE(auto_bytes == 0);
    fill_value(y, yn, NAN);
    CHECK(autodnnConvolutionForward(h, &one, xd, x, wd, w, conv, AUTODNN_ALGO_AUTO, NULL, 0, &zero,
                                    yd, y));
    for (size_t i = 0; i < yn; i++) want[i] = ref[i];
    compare("forward", "AUTODNN_ALGO_AUTO", y, nchw(K, OH, OW), want, ydims, worst);
    free(perf);

    /* y = relu(2 conv(x, w) - z + bias): z separate, then z in place in y. */
    {
        autodnnTensorDescriptor_t bd;
        autodnnActivationDescriptor_t act;
        CHECK(autodnnCreateTensorDescriptor(&bd));
        CHECK(autodnnSetTensor4dDescriptor(bd, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 1, K, 1, 1));
        CHECK(autodnnCreateActivationDescriptor(&act));
        CHECK(autodnnSetActivationDescriptor(act, AUTODNN_ACTIVATION_RELU, 0.0));
        float bias[K];
        for (int k = 0; k < K; k++) bias[k] = (float)(k % 5 - 2);
        for (size_t i = 0; i < yn; i++) {
            double v = 2 * ref[i] - z[i] + bias[(i / (OH * OW)) % K];
            want[i] = v > 0 ? v : 0;
        }
        const float two = 2, minus_one = -1;
        fill_value(y, yn, NAN);
        CHECK(autodnnConvolutionBiasActivationForward(h, &two, xd, x, wd, w, conv, direct, NULL, 0,
                                                      &minus_one, yd, z, bd, bias, act, yd, y));
        compare("bias + residual + relu", "direct", y, nchw(K, OH, OW), want, ydims, 0);
        memcpy(y, z, sizeof(float) * yn);
        CHECK(autodnnConvolutionBiasActivationForward(h, &two, xd, x, wd, w, conv, direct, NULL, 0,
                                                      &minus_one, yd, y, bd, bias, act, yd, y));
        compare("bias + residual in y + relu", "direct", y, nchw(K, OH, OW), want, ydims, 0);
        CHECK(autodnnDestroyActivationDescriptor(act));
        CHECK(autodnnDestroyTensorDescriptor(bd));
    }

    /* Backward data with every algorithm listed. */
    float *dy = xmalloc(sizeof(float) * yn), *dx = xmalloc(sizeof(float) * xn);
    float *dw = xmalloc(sizeof(float) * wn);
    double *dx_ref = xmalloc(sizeof(double) * xn), *dw_ref = xmalloc(sizeof(double) * wn);
    fill(dy, yn, 9);
    ref_backward_data(dy, w, dx_ref);
    ref_backward_filter(x, dy, dw_ref);
    {
        int n_algo = 0, got = 0, ran = 0;
        CHECK(autodnnGetAlgorithmCount(AUTODNN_CONVOLUTION_BWD_DATA, &n_algo));
        autodnnConvolutionBwdDataAlgoPerf_t *bp = xmalloc(sizeof(*bp) * (size_t)n_algo);
        CHECK(autodnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, conv, xd, n_algo, &got, bp));
        const int dims[4] = {N, C, H, W};
        for (int i = 0; i < got; i++) {
            if (bp[i].status != AUTODNN_STATUS_SUCCESS) continue;
            size_t bytes = 0;
            CHECK(autodnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, conv, xd, bp[i].algo,
                                                                 &bytes));
            REQUIRE(bytes == bp[i].memory);
            void *ws = bytes ? xmalloc(bytes) : NULL;
            fill_value(dx, xn, NAN);
            CHECK(autodnnConvolutionBackwardData(h, &one, wd, w, yd, dy, conv, bp[i].algo, ws, bytes,
                                                 &zero, xd, dx));
            compare("backward data", algo_name(AUTODNN_CONVOLUTION_BWD_DATA, bp[i].algo), dx,
                    nchw(C, H, W), dx_ref, dims, bp[i].tolerance);
            free(ws);
            ran++;
        }
        REQUIRE(ran >= 2);
        printf("backward data: %d algorithms checked\n", ran);
        CHECK(autodnnFindConvolutionBackwardDataAlgorithm(h, wd, yd, conv, xd, n_algo, &got, bp));
        REQUIRE(got >= 1 && bp[0].status == AUTODNN_STATUS_SUCCESS);
        free(bp);
    }

    /* Backward filter with every algorithm listed, then accumulating (beta 1) with AUTO. */
    {
        int n_algo = 0, got = 0, ran = 0;
        CHECK(autodnnGetAlgorithmCount(AUTODNN_CONVOLUTION_BWD_FILTER, &n_algo));
        autodnnConvolutionBwdFilterAlgoPerf_t *fp = xmalloc(sizeof(*fp) * (size_t)n_algo);
        CHECK(autodnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, conv, wd, n_algo, &got, fp));
        const int dims[4] = {K, C, R, S};
        float worst_w = 0;
        for (int i = 0; i < got; i++) {
            if (fp[i].status != AUTODNN_STATUS_SUCCESS) continue;
            if (fp[i].tolerance > worst_w) worst_w = fp[i].tolerance;
            size_t bytes = 0;
            CHECK(autodnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, conv, wd, fp[i].algo,
                                                                   &bytes));
            REQUIRE(bytes == fp[i].memory);
            void *ws = bytes ? xmalloc(bytes) : NULL;
            fill_value(dw, wn, NAN);
            CHECK(autodnnConvolutionBackwardFilter(h, &one, xd, x, yd, dy, conv, fp[i].algo, ws,
                                                   bytes, &zero, wd, dw));
            compare("backward filter", algo_name(AUTODNN_CONVOLUTION_BWD_FILTER, fp[i].algo), dw,
                    nchw(C, R, S), dw_ref, dims, fp[i].tolerance);
            free(ws);
            ran++;
        }
        REQUIRE(ran >= 1);
        printf("backward filter: %d algorithms checked\n", ran);
        CHECK(autodnnFindConvolutionBackwardFilterAlgorithm(h, xd, yd, conv, wd, n_algo, &got, fp));
        REQUIRE(got >= 1 && fp[0].status == AUTODNN_STATUS_SUCCESS);
        fill_value(dw, wn, 1);
        CHECK(autodnnConvolutionBackwardFilter(h, &one, xd, x, yd, dy, conv, AUTODNN_ALGO_AUTO,
                                               NULL, 0, &one, wd, dw));
        double *acc = xmalloc(sizeof(double) * wn);
        for (size_t i = 0; i < wn; i++) acc[i] = dw_ref[i] + 1;
        compare("backward filter beta 1", "AUTODNN_ALGO_AUTO", dw, nchw(C, R, S), acc, dims,
                worst_w);
        free(acc);
        free(fp);
    }

    /* Bias gradient: db[k] = sum of dy over n, h, w. */
    {
        autodnnTensorDescriptor_t dbd;
        CHECK(autodnnCreateTensorDescriptor(&dbd));
        CHECK(autodnnSetTensor4dDescriptor(dbd, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 1, K, 1, 1));
        float db[K];
        double db_ref[K];
        for (int k = 0; k < K; k++) {
            db_ref[k] = 0;
            for (int i = 0; i < OH * OW; i++) db_ref[k] += dy[(size_t)k * OH * OW + i];
        }
        fill_value(db, K, NAN);
        CHECK(autodnnConvolutionBackwardBias(h, &one, yd, dy, &zero, dbd, db));
        const int dims[4] = {1, K, 1, 1};
        compare("backward bias", "-", db, nchw(K, 1, 1), db_ref, dims, 0);
        CHECK(autodnnDestroyTensorDescriptor(dbd));
    }

    test_gemm(h);

    free(x);
    free(w);
    free(y);
    free(z);
    free(ref);
    free(want);
    free(dy);
    free(dx);
    free(dw);
    free(dx_ref);
    free(dw_ref);
    CHECK(autodnnDestroyTensorDescriptor(xd));
    CHECK(autodnnDestroyTensorDescriptor(yd));
    CHECK(autodnnDestroyFilterDescriptor(wd));
    CHECK(autodnnDestroyConvolutionDescriptor(conv));
    CHECK(autodnnDestroy(h));
    printf("resnet_layer: %d checks passed\n", checks);
    return 0;
}
