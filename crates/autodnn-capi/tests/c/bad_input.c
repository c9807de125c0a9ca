/*
 * Null pointers, bad values, unset, destroyed and mismatched descriptors, short workspaces,
 * overlapping buffers and unsupported requests: each must come back as its status (and a
 * message naming the field), never a crash.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodnn.h"

static int checks;

static void expect(autodnnStatus_t got, autodnnStatus_t want, const char *field, const char *call,
                   int line) {
    char msg[512];
    autodnnGetLastErrorString(msg, sizeof msg);
    if (got != want) {
        fprintf(stderr, "line %d: %s: got %s, want %s (%s)\n", line, call,
                autodnnGetErrorString(got), autodnnGetErrorString(want), msg);
        exit(1);
    }
    if (want == AUTODNN_STATUS_SUCCESS && msg[0] != '\0') {
        fprintf(stderr, "line %d: %s succeeded but left the message \"%s\"\n", line, call, msg);
        exit(1);
    }
    if (field != NULL && strstr(msg, field) == NULL) {
        fprintf(stderr, "line %d: %s: the message \"%s\" does not name %s\n", line, call, msg,
                field);
        exit(1);
    }
    checks++;
}

/* EXPECT(call, status, field): field is a string the message must contain, or NULL. */
#define EXPECT(call, status, field) expect((call), (status), (field), #call, __LINE__)
#define OK(call) EXPECT(call, AUTODNN_STATUS_SUCCESS, NULL)
#define BAD AUTODNN_STATUS_BAD_PARAM

int main(void) {
    /* Status names. */
    if (strcmp(autodnnGetErrorString(AUTODNN_STATUS_BAD_PARAM), "AUTODNN_STATUS_BAD_PARAM") != 0 ||
        strcmp(autodnnGetErrorString(AUTODNN_STATUS_NOT_SUPPORTED), "AUTODNN_STATUS_NOT_SUPPORTED") != 0 ||
        strcmp(autodnnGetErrorString(1234), "AUTODNN_STATUS_UNKNOWN") != 0) {
        fprintf(stderr, "autodnnGetErrorString gives the wrong names\n");
        return 1;
    }
    autodnnGetLastErrorString(NULL, 10); /* ignored */

    /* Handles. */
    autodnnHandle_t h = NULL;
    EXPECT(autodnnCreate(NULL), BAD, "handle");
    EXPECT(autodnnCreateWithThreads(&h, 0), BAD, "threads");
    EXPECT(autodnnCreateWithThreads(&h, -2), BAD, "threads");
    OK(autodnnCreateWithThreads(&h, 1));
    EXPECT(autodnnSetThreads(NULL, 2), BAD, "handle");
    EXPECT(autodnnSetThreads(h, 0), BAD, "threads");
    EXPECT(autodnnGetThreads(h, NULL), BAD, "threads");
    OK(autodnnDestroy(NULL));
    EXPECT(autodnnSetMathType(NULL, AUTODNN_STRICT_MATH), BAD, "handle");
    EXPECT(autodnnSetMathType(h, 3), BAD, "mathType");
    EXPECT(autodnnSetMathType(h, -1), BAD, "mathType");
    EXPECT(autodnnGetMathType(h, NULL), BAD, "mathType");
    EXPECT(autodnnSetBf16Units(h, 3), BAD, "units");
    EXPECT(autodnnSetBf16Units(NULL, AUTODNN_BF16_UNITS_AUTO), BAD, "handle");
    EXPECT(autodnnGetBf16Units(h, NULL), BAD, "units");

    /* Tensor descriptors. */
    autodnnTensorDescriptor_t x, y, y_bad, half_x, half_y, unset, gone;
    EXPECT(autodnnCreateTensorDescriptor(NULL), BAD, "tensorDesc");
    OK(autodnnCreateTensorDescriptor(&x));
    OK(autodnnCreateTensorDescriptor(&y));
    OK(autodnnCreateTensorDescriptor(&y_bad));
    OK(autodnnCreateTensorDescriptor(&half_x));
    OK(autodnnCreateTensorDescriptor(&half_y));
    OK(autodnnCreateTensorDescriptor(&unset));
    OK(autodnnCreateTensorDescriptor(&gone));
    OK(autodnnDestroyTensorDescriptor(gone));
    EXPECT(autodnnDestroyTensorDescriptor(gone), BAD, "tensorDesc"); /* twice */
    EXPECT(autodnnSetTensor4dDescriptor(NULL, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 1, 8, 10, 10),
           BAD, "tensorDesc");
    EXPECT(autodnnSetTensor4dDescriptor(x, 7, AUTODNN_DATA_FLOAT, 1, 8, 10, 10), BAD, "format");
    EXPECT(autodnnSetTensor4dDescriptor(x, AUTODNN_TENSOR_NCHW, 42, 1, 8, 10, 10), BAD, "dataType");
    EXPECT(autodnnSetTensor4dDescriptor(x, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, -1, 8, 10, 10),
           BAD, "tensor.n");
    EXPECT(autodnnSetTensor4dDescriptor(x, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 1, 0, 10, 10),
           BAD, "tensor.c");
    /* Overlapping strides: channels one element apart in 10 x 10 images. */
    EXPECT(autodnnSetTensor4dDescriptorEx(x, AUTODNN_DATA_FLOAT, 1, 8, 10, 10, 800, 1, 10, 1), BAD,
           "tensor.stride");
    OK(autodnnSetTensor4dDescriptor(x, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 1, 8, 10, 10));
    OK(autodnnSetTensor4dDescriptor(y, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 1, 16, 10, 10));
    OK(autodnnSetTensor4dDescriptor(y_bad, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 1, 16, 9, 10));
    OK(autodnnSetTensor4dDescriptor(half_x, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_HALF, 1, 8, 10, 10));
    OK(autodnnSetTensor4dDescriptor(half_y, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_HALF, 1, 16, 10, 10));

    /* Filters. */
    autodnnFilterDescriptor_t w, w1, half_w, w_unset;
    OK(autodnnCreateFilterDescriptor(&w));
    OK(autodnnCreateFilterDescriptor(&w1));
    OK(autodnnCreateFilterDescriptor(&half_w));
    OK(autodnnCreateFilterDescriptor(&w_unset));
    EXPECT(autodnnSetFilter4dDescriptor(w, AUTODNN_DATA_FLOAT, 3, 16, 8, 3, 3), BAD, "format");
    EXPECT(autodnnSetFilter4dDescriptor(w, AUTODNN_DATA_FLOAT, AUTODNN_TENSOR_NCHW, 16, 8, 0, 3),
           BAD, "w.r");
    OK(autodnnSetFilter4dDescriptor(w, AUTODNN_DATA_FLOAT, AUTODNN_TENSOR_NCHW, 16, 8, 3, 3));
    OK(autodnnSetFilter4dDescriptor(w1, AUTODNN_DATA_FLOAT, AUTODNN_TENSOR_NCHW, 16, 8, 1, 1));
    OK(autodnnSetFilter4dDescriptor(half_w, AUTODNN_DATA_HALF, AUTODNN_TENSOR_NCHW, 16, 8, 3, 3));

    /* Convolutions. */
    autodnnConvolutionDescriptor_t conv, conv1, conv_unset;
    OK(autodnnCreateConvolutionDescriptor(&conv));
    OK(autodnnCreateConvolutionDescriptor(&conv1));
    OK(autodnnCreateConvolutionDescriptor(&conv_unset));
    EXPECT(autodnnSetConvolution2dDescriptor(conv, -1, 1, 1, 1, 1, 1, AUTODNN_CROSS_CORRELATION,
                                             AUTODNN_DATA_FLOAT),
           BAD, "conv.pad_top");
    EXPECT(autodnnSetConvolution2dDescriptor(conv, 1, 1, 0, 1, 1, 1, AUTODNN_CROSS_CORRELATION,
                                             AUTODNN_DATA_FLOAT),
           BAD, "conv.stride_h");
    EXPECT(autodnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, -1, AUTODNN_CROSS_CORRELATION,
                                             AUTODNN_DATA_FLOAT),
           BAD, "conv.dilation_w");
    EXPECT(autodnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, 3, AUTODNN_DATA_FLOAT), BAD,
           "mode");
    EXPECT(autodnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, AUTODNN_CROSS_CORRELATION,
                                             AUTODNN_DATA_HALF),
           BAD, "computeType");
    EXPECT(autodnnSetConvolutionGroupCount(conv, 0), BAD, "conv.groups");
    EXPECT(autodnnSetConvolutionMathType(conv, 7), BAD, "mathType");
    EXPECT(autodnnSetConvolutionMathType(NULL, AUTODNN_STRICT_MATH), BAD, "convDesc");
    EXPECT(autodnnGetConvolutionMathType(conv, NULL), BAD, "mathType");
    OK(autodnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, AUTODNN_CROSS_CORRELATION,
                                         AUTODNN_DATA_FLOAT));
    OK(autodnnSetConvolution2dDescriptor(conv1, 0, 0, 1, 1, 1, 1, AUTODNN_CROSS_CORRELATION,
                                         AUTODNN_DATA_FLOAT));

    int n, c, hh, ww;
    EXPECT(autodnnGetConvolution2dForwardOutputDim(conv_unset, x, w, &n, &c, &hh, &ww),
           AUTODNN_STATUS_NOT_INITIALIZED, "convDesc");
    EXPECT(autodnnGetConvolution2dForwardOutputDim(conv, unset, w, &n, &c, &hh, &ww),
           AUTODNN_STATUS_NOT_INITIALIZED, "inputTensorDesc");
    EXPECT(autodnnGetConvolution2dForwardOutputDim(conv, x, w_unset, &n, &c, &hh, &ww),
           AUTODNN_STATUS_NOT_INITIALIZED, "filterDesc");
    EXPECT(autodnnGetConvolution2dForwardOutputDim(conv, x, w, NULL, &c, &hh, &ww), BAD, NULL);
    EXPECT(autodnnGetConvolution2dForwardOutputDim(conv, gone, w, &n, &c, &hh, &ww), BAD,
           "inputTensorDesc");
    /* A filter descriptor where a tensor descriptor belongs. */
    EXPECT(autodnnGetConvolution2dForwardOutputDim(conv, (autodnnTensorDescriptor_t)(void *)w, w,
                                                   &n, &c, &hh, &ww),
           BAD, "inputTensorDesc");
    OK(autodnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &hh, &ww));

    /* Buffers. */
    float *xb = calloc(8 * 100 + 1, sizeof(float));
    float *wb = calloc(16 * 8 * 9, sizeof(float));
    float *yb = calloc(16 * 100, sizeof(float));
    if (!xb || !wb || !yb) return 1;
    const float one = 1, zero = 0;
    int direct, depthwise, gemm;
    EXPECT(autodnnGetAlgorithmIndex(AUTODNN_CONVOLUTION_FWD, "no-such-algorithm", &direct), BAD,
           "no-such-algorithm");
    EXPECT(autodnnGetAlgorithmIndex(AUTODNN_CONVOLUTION_FWD, NULL, &direct), BAD, "name");
    EXPECT(autodnnGetAlgorithmIndex(9, "direct", &direct), BAD, "direction");
    OK(autodnnGetAlgorithmIndex(AUTODNN_CONVOLUTION_FWD, "direct", &direct));
    OK(autodnnGetAlgorithmIndex(AUTODNN_CONVOLUTION_FWD, "depthwise", &depthwise));
    OK(autodnnGetAlgorithmIndex(AUTODNN_CONVOLUTION_FWD, "gemm", &gemm));
    int count;
    const char *name;
    OK(autodnnGetAlgorithmCount(AUTODNN_CONVOLUTION_FWD, &count));
    EXPECT(autodnnGetAlgorithmName(AUTODNN_CONVOLUTION_FWD, count, &name), BAD, "algo");
    EXPECT(autodnnGetAlgorithmName(AUTODNN_CONVOLUTION_FWD, 0, NULL), BAD, "name");
    EXPECT(autodnnGetConvolutionForwardAlgorithmMaxCount(NULL, &count), BAD, "handle");
    EXPECT(autodnnGetConvolutionBackwardDataAlgorithmMaxCount(h, NULL), BAD, "count");

#define FWD(hd, alpha, xd, xp, wd, wp, cd, algo, ws, bytes, beta, yd, yp)                  \
    autodnnConvolutionForward(hd, alpha, xd, xp, wd, wp, cd, algo, ws, bytes, beta, yd, yp)
    OK(FWD(h, &one, x, xb, w, wb, conv, direct, NULL, 0, &zero, y, yb));
    EXPECT(FWD(NULL, &one, x, xb, w, wb, conv, direct, NULL, 0, &zero, y, yb), BAD, "handle");
    EXPECT(FWD(h, NULL, x, xb, w, wb, conv, direct, NULL, 0, &zero, y, yb), BAD, "alpha");
    EXPECT(FWD(h, &one, x, xb, w, wb, conv, direct, NULL, 0, NULL, y, yb), BAD, "beta");
    EXPECT(FWD(h, &one, x, NULL, w, wb, conv, direct, NULL, 0, &zero, y, yb), BAD, "x");
    EXPECT(FWD(h, &one, x, xb, w, NULL, conv, direct, NULL, 0, &zero, y, yb), BAD, "w");
    EXPECT(FWD(h, &one, x, xb, w, wb, conv, direct, NULL, 0, &zero, y, NULL), BAD, "y");
    EXPECT(FWD(h, &one, NULL, xb, w, wb, conv, direct, NULL, 0, &zero, y, yb), BAD, "xDesc");
    EXPECT(FWD(h, &one, unset, xb, w, wb, conv, direct, NULL, 0, &zero, y, yb),
           AUTODNN_STATUS_NOT_INITIALIZED, "xDesc");
    EXPECT(FWD(h, &one, x, xb, w, wb, NULL, direct, NULL, 0, &zero, y, yb), BAD, "convDesc");
    EXPECT(FWD(h, &one, x, xb, w, wb, conv, direct, NULL, 0, &zero, y_bad, yb), BAD, "y.h");
    EXPECT(FWD(h, &one, x, xb, w, wb, conv, 9999, NULL, 0, &zero, y, yb), BAD, "algo");
    EXPECT(FWD(h, &one, x, xb, w, wb, conv, -5, NULL, 0, &zero, y, yb), BAD, "algo");
    /* A misaligned x, and y over x. */
    EXPECT(FWD(h, &one, x, (char *)xb + 1, w, wb, conv, direct, NULL, 0, &zero, y, yb), BAD,
           "aligned");
    EXPECT(FWD(h, &one, x, xb, w, wb, conv, direct, NULL, 0, &zero, y, xb), BAD, "overlaps x");
    /* f16 tensors: the forward computes them (resnet_layer.c checks the values); the backward
     * operations do not. A float filter with a half x is a mismatch. */
    OK(FWD(h, &one, half_x, xb, half_w, wb, conv, direct, NULL, 0, &zero, half_y, yb));
    EXPECT(autodnnConvolutionBackwardData(h, &one, half_w, wb, half_y, yb, conv, AUTODNN_ALGO_AUTO,
                                          NULL, 0, &zero, half_x, xb),
           AUTODNN_STATUS_NOT_SUPPORTED, "f16");
    EXPECT(FWD(h, &one, half_x, xb, w, wb, conv, direct, NULL, 0, &zero, y, yb), BAD, "dtype");
    EXPECT(FWD(h, &one, half_x, (char *)xb + 1, half_w, wb, conv, direct, NULL, 0, &zero, half_y,
               yb),
           BAD, "aligned");
    /* depthwise does not take a dense convolution. */
    size_t bytes = 0;
    EXPECT(autodnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, depthwise, &bytes),
           AUTODNN_STATUS_NOT_SUPPORTED, "depthwise");
    EXPECT(FWD(h, &one, x, xb, w, wb, conv, depthwise, NULL, 0, &zero, y, yb),
           AUTODNN_STATUS_NOT_SUPPORTED, "depthwise");
    EXPECT(autodnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, gemm, NULL), BAD,
           "sizeInBytes");
    OK(autodnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, gemm, &bytes));
    if (bytes == 0) {
        fprintf(stderr, "gemm needs a workspace on a 3x3 convolution\n");
        return 1;
    }
    char small[8];
    EXPECT(FWD(h, &one, x, xb, w, wb, conv, gemm, small, sizeof small, &zero, y, yb), BAD,
           "workspace too small");
    EXPECT(FWD(h, &one, x, xb, w, wb, conv, gemm, NULL, 64, &zero, y, yb), BAD, "workSpace");
    OK(FWD(h, &one, x, xb, w, wb, conv, gemm, NULL, 0, &zero, y, yb)); /* the handle's own */
    /* The 1x1 problem has its own output shape: y fits, the 3x3 filter does not. */
    EXPECT(FWD(h, &one, x, xb, w, wb, conv1, direct, NULL, 0, &zero, y, yb), BAD, "y.h");
    OK(FWD(h, &one, x, xb, w1, wb, conv1, direct, NULL, 0, &zero, y, yb));

    /* Algorithm lists. */
    autodnnConvolutionFwdAlgoPerf_t perf[64];
    int returned = -1;
    EXPECT(autodnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, -1, &returned, perf), BAD,
           "requestedAlgoCount");
    EXPECT(autodnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, 4, NULL, perf), BAD,
           "returnedAlgoCount");
    EXPECT(autodnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, 4, &returned, NULL), BAD,
           "perfResults");
    OK(autodnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, 0, &returned, NULL));
    if (returned != 0) return 1;
    OK(autodnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, 1, &returned, perf));
    if (returned != 1) return 1;
    OK(autodnnFindConvolutionForwardAlgorithm(h, half_x, half_w, conv, half_y, 4, &returned,
                                              perf));
    if (returned < 1 || perf[0].status != AUTODNN_STATUS_SUCCESS) return 1;

    /* The fused call. */
    autodnnTensorDescriptor_t bias_bad;
    autodnnActivationDescriptor_t act, act_unset;
    OK(autodnnCreateTensorDescriptor(&bias_bad));
    OK(autodnnSetTensor4dDescriptor(bias_bad, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 1, 8, 1, 1));
    OK(autodnnCreateActivationDescriptor(&act));
    OK(autodnnCreateActivationDescriptor(&act_unset));
    EXPECT(autodnnSetActivationDescriptor(act, 4, 0.0), BAD, "mode");
    EXPECT(autodnnSetActivationDescriptor(NULL, AUTODNN_ACTIVATION_RELU, 0.0), BAD,
           "activationDesc");
    OK(autodnnSetActivationDescriptor(act, AUTODNN_ACTIVATION_RELU, 0.0));
    float bias[16] = {0};
#define FUSED(alpha2, zd, zp, bd, bp, ad)                                                     \
    autodnnConvolutionBiasActivationForward(h, &one, x, xb, w, wb, conv, direct, NULL, 0, alpha2, \
                                            zd, zp, bd, bp, ad, y, yb)
    OK(FUSED(&zero, NULL, NULL, NULL, NULL, NULL));
    OK(FUSED(&one, y, yb, NULL, NULL, act)); /* z in place */
    EXPECT(FUSED(NULL, NULL, NULL, NULL, NULL, NULL), BAD, "alpha2");
    EXPECT(FUSED(&one, y, NULL, NULL, NULL, NULL), BAD, "z");
    EXPECT(FUSED(&one, y_bad, yb, NULL, NULL, NULL), BAD, "zDesc");
    EXPECT(FUSED(&zero, NULL, NULL, bias_bad, bias, NULL), BAD, "biasDesc");
    EXPECT(FUSED(&zero, NULL, NULL, NULL, bias, NULL), BAD, "biasDesc");
    EXPECT(FUSED(&zero, NULL, NULL, NULL, NULL, act_unset), AUTODNN_STATUS_NOT_INITIALIZED,
           "activationDesc");

    /* Backward calls, with backward data's own index of `direct` (indices are per registry). */
    int direct_bwd;
    OK(autodnnGetAlgorithmIndex(AUTODNN_CONVOLUTION_BWD_DATA, "direct", &direct_bwd));
    EXPECT(autodnnConvolutionBackwardData(h, &one, w, wb, y, yb, conv, direct_bwd, NULL, 0, &zero,
                                          x, NULL),
           BAD, "dx");
    EXPECT(autodnnConvolutionBackwardData(h, &one, w, wb, y_bad, yb, conv, direct_bwd, NULL, 0,
                                          &zero, x, xb),
           BAD, "dy.h");
    EXPECT(autodnnConvolutionBackwardData(h, &one, w, wb, y, yb, conv, 9999, NULL, 0, &zero, x, xb),
           BAD, "algo");
    OK(autodnnConvolutionBackwardData(h, &one, w, wb, y, yb, conv, AUTODNN_ALGO_AUTO, NULL, 0,
                                      &zero, x, xb));
    EXPECT(autodnnConvolutionBackwardFilter(h, &one, x, xb, y, yb, conv, AUTODNN_ALGO_AUTO, NULL,
                                            0, &zero, w, NULL),
           BAD, "dw");
    EXPECT(autodnnConvolutionBackwardFilter(h, &one, x, xb, y, yb, conv, AUTODNN_ALGO_AUTO, NULL,
                                            0, &zero, half_w, wb),
           BAD, "dw.dtype");
    EXPECT(autodnnConvolutionBackwardFilter(h, &one, x, xb, y, yb, conv, AUTODNN_ALGO_AUTO, NULL,
                                            0, &zero, w, yb),
           BAD, "overlaps dy");
    EXPECT(autodnnConvolutionBackwardBias(h, &one, y, yb, &zero, bias_bad, bias), BAD, "dbDesc");
    EXPECT(autodnnConvolutionBackwardBias(h, &one, y, yb, &zero, NULL, bias), BAD, "dbDesc");
    EXPECT(autodnnGetConvolutionBackwardDataAlgorithm_v7(h, w, y, conv, x, 4, NULL, perf), BAD,
           "returnedAlgoCount");
    EXPECT(autodnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, conv, w, -7, &bytes), BAD,
           "algo");

    /* GEMM. */
    float a[16] = {0}, b[16] = {0}, cm[16] = {0};
    EXPECT(autodnnSgemm(NULL, AUTODNN_OP_N, AUTODNN_OP_N, 2, 2, 2, &one, a, 2, b, 2, &zero, cm, 2),
           BAD, "handle");
    EXPECT(autodnnSgemm(h, 5, AUTODNN_OP_N, 2, 2, 2, &one, a, 2, b, 2, &zero, cm, 2), BAD, "transa");
    EXPECT(autodnnSgemm(h, AUTODNN_OP_N, AUTODNN_OP_N, -1, 2, 2, &one, a, 2, b, 2, &zero, cm, 2),
           BAD, "m");
    EXPECT(autodnnSgemm(h, AUTODNN_OP_N, AUTODNN_OP_N, 4, 2, 2, &one, a, 3, b, 2, &zero, cm, 4), BAD,
           "lda");
    EXPECT(autodnnSgemm(h, AUTODNN_OP_N, AUTODNN_OP_N, 2, 2, 2, &one, a, 2, NULL, 2, &zero, cm, 2),
           BAD, "B");
    EXPECT(autodnnSgemm(h, AUTODNN_OP_N, AUTODNN_OP_N, 2, 2, 2, &one, a, 2, b, 2, &zero, a, 2), BAD,
           "overlaps A");
    OK(autodnnSgemm(h, AUTODNN_OP_N, AUTODNN_OP_N, 0, 2, 2, &one, NULL, 1, b, 2, &zero, NULL, 1));
    EXPECT(autodnnSgemmStridedBatched(h, AUTODNN_OP_N, AUTODNN_OP_N, 2, 2, 2, &one, a, 2, 4, b, 2, 0,
                                      &zero, cm, 2, 2, 3),
           BAD, "stride_c");
    EXPECT(autodnnSgemmStridedBatched(h, AUTODNN_OP_N, AUTODNN_OP_N, 2, 2, 2, &one, a, 2, -4, b, 2,
                                      0, &zero, cm, 2, 4, 3),
           BAD, "strideA");
    EXPECT(autodnnSgemmStridedBatched(h, AUTODNN_OP_N, AUTODNN_OP_N, 2, 2, 2, &one, a, 2, 4, b, 2, 0,
                                      &zero, cm, 2, 4, -1),
           BAD, "batchCount");

    OK(autodnnDestroyTensorDescriptor(x));
    OK(autodnnDestroyTensorDescriptor(y));
    OK(autodnnDestroyTensorDescriptor(y_bad));
    OK(autodnnDestroyTensorDescriptor(half_x));
    OK(autodnnDestroyTensorDescriptor(half_y));
    OK(autodnnDestroyTensorDescriptor(unset));
    OK(autodnnDestroyTensorDescriptor(bias_bad));
    OK(autodnnDestroyFilterDescriptor(w));
    OK(autodnnDestroyFilterDescriptor(w1));
    OK(autodnnDestroyFilterDescriptor(half_w));
    OK(autodnnDestroyFilterDescriptor(w_unset));
    EXPECT(autodnnDestroyFilterDescriptor((autodnnFilterDescriptor_t)(void *)conv), BAD,
           "filterDesc");
    OK(autodnnDestroyConvolutionDescriptor(conv));
    OK(autodnnDestroyConvolutionDescriptor(conv1));
    OK(autodnnDestroyConvolutionDescriptor(conv_unset));
    OK(autodnnDestroyActivationDescriptor(act));
    OK(autodnnDestroyActivationDescriptor(act_unset));
    OK(autodnnDestroy(h));
    free(xb);
    free(wb);
    free(yb);
    printf("bad_input: %d statuses checked\n", checks);
    return 0;
}
