/*
 * autodnn: convolution and matrix multiplication with measured algorithm selection.
 * The C API, in the manner of cuDNN and cuBLAS.
 *
 * Generated from crates/autodnn-capi by cbindgen (tests/header.rs checks that this file
 * matches the code; AUTODNN_BLESS=1 cargo test -p autodnn-capi --test header rewrites it).
 *
 * Conventions:
 * - Every function returns an autodnnStatus_t (autodnnGetVersion, autodnnGetErrorString and
 *   autodnnGetLastErrorString excepted). autodnnGetLastErrorString gives the message of the
 *   calling thread's last call, naming the field at fault.
 * - Handles and descriptors are opaque pointers made by autodnnCreate* and freed by
 *   autodnnDestroy*. A NULL, destroyed or never-set descriptor, or one of another kind, is a
 *   status, not a crash. Calls on one handle from several threads at once are safe;
 *   a descriptor must not be set while another thread uses it.
 * - Tensor data are passed as void pointers whose element type, dimensions and strides come
 *   from their descriptors; this build computes AUTODNN_DATA_FLOAT and answers
 *   AUTODNN_STATUS_NOT_SUPPORTED for the other types. Each buffer must be valid for the
 *   span its descriptor gives (one past the offset of its last element) and aligned for its
 *   element type; an output must not overlap the inputs (this is checked).
 * - Algorithms are indices into the registry of their direction (autodnnGetAlgorithmName,
 *   autodnnGetAlgorithmIndex); AUTODNN_ALGO_AUTO lets the handle select.
 * - Link with -lautodnn (and -lpthread -ldl -lm for the static library).
 */

#ifndef AUTODNN_H
#define AUTODNN_H

#include <stddef.h>

/**
 * Let the handle select: by its policy (timing the candidates on the first call of a shape
 * by default, then from its tuning results), running with its fallback chain and its own
 * workspace (within `autodnnSetWorkspaceLimit`). The caller's workspace is then not used.
 */
#define AUTODNN_ALGO_AUTO -1

/**
 * Major version of the library this header belongs to.
 */
#define AUTODNN_MAJOR 0

/**
 * Minor version.
 */
#define AUTODNN_MINOR 1

/**
 * Patch level.
 */
#define AUTODNN_PATCHLEVEL 0

/**
 * An activation applied last by `autodnnConvolutionBiasActivationForward`.
 */
typedef struct autodnnActivationStruct autodnnActivationStruct;

/**
 * A library context: worker threads, the instruction set, the workspace budget, selection
 * settings and the in-memory tuning results. Calls on one handle from several threads at
 * once are safe (they share its threads).
 */
typedef struct autodnnContext autodnnContext;

/**
 * A 2-D convolution's padding, strides, dilations, mode and group count.
 */
typedef struct autodnnConvolutionStruct autodnnConvolutionStruct;

/**
 * A filter's element type, layout and dimensions (K, C per group, R, S).
 */
typedef struct autodnnFilterStruct autodnnFilterStruct;

/**
 * A 4-D tensor's element type, dimensions (N, C, H, W) and strides.
 */
typedef struct autodnnTensorStruct autodnnTensorStruct;

/**
 * The result of every call (cuDNN's `cudnnStatus_t`; the values are cuDNN's).
 */
typedef int autodnnStatus_t;

/**
 * Which operation's registry an algorithm index refers to.
 */
typedef int autodnnConvolutionDirection_t;

/**
 * A pointer to a library context, made by `autodnnCreate`.
 */
typedef autodnnContext *autodnnHandle_t;

/**
 * A pointer to a tensor descriptor, made by `autodnnCreateTensorDescriptor`.
 */
typedef autodnnTensorStruct *autodnnTensorDescriptor_t;

/**
 * A pointer to a filter descriptor, made by `autodnnCreateFilterDescriptor`.
 */
typedef autodnnFilterStruct *autodnnFilterDescriptor_t;

/**
 * A pointer to a convolution descriptor, made by `autodnnCreateConvolutionDescriptor`.
 */
typedef autodnnConvolutionStruct *autodnnConvolutionDescriptor_t;

/**
 * Whether an algorithm's output bits depend on thread scheduling (cuDNN's
 * `cudnnDeterminism_t`).
 */
typedef int autodnnDeterminism_t;

/**
 * One algorithm of a ranked list (cuDNN's `cudnnConvolutionFwdAlgoPerf_t`).
 */
typedef struct {
  /**
   * Index into the direction's registry (see `autodnnGetAlgorithmName`).
   */
  int algo;
  /**
   * `AUTODNN_STATUS_SUCCESS` when it can run; from the heuristic,
   * `AUTODNN_STATUS_NOT_SUPPORTED` when the handle would not select it (over the workspace
   * limit, or not deterministic when determinism is asked for); from a measurement,
   * `AUTODNN_STATUS_EXECUTION_FAILED` when it failed or its workspace could not be had.
   */
  autodnnStatus_t status;
  /**
   * Median milliseconds measured (for one stopped early as clearly slower than the best,
   * over the runs it got); -1 when not timed (always from the heuristic).
   */
  float time;
  /**
   * Workspace bytes it needs.
   */
  size_t memory;
  /**
   * `AUTODNN_DETERMINISTIC` or `AUTODNN_NON_DETERMINISTIC`.
   */
  autodnnDeterminism_t determinism;
  /**
   * Its documented error bound on integer-valued data in [-4, 4]: the largest
   * max|y - ref| / max|ref| (0: it sums products in f32 like the definition, exact on
   * integer data whose partial sums stay below 2^24; Winograd and FFT are not 0).
   */
  float tolerance;
} autodnnConvolutionAlgoPerf_t;

/**
 * A record of the forward algorithms.
 */
typedef autodnnConvolutionAlgoPerf_t autodnnConvolutionFwdAlgoPerf_t;

/**
 * A forward algorithm: an index into the forward registry (see `autodnnGetAlgorithmName`),
 * or `AUTODNN_ALGO_AUTO`. Indices belong to one build of the library: store names, not
 * indices.
 */
typedef int autodnnConvolutionFwdAlgo_t;

/**
 * A pointer to an activation descriptor, made by `autodnnCreateActivationDescriptor`.
 */
typedef autodnnActivationStruct *autodnnActivationDescriptor_t;

/**
 * A record of the backward-data algorithms.
 */
typedef autodnnConvolutionAlgoPerf_t autodnnConvolutionBwdDataAlgoPerf_t;

/**
 * A backward-data algorithm: an index into the backward-data registry, or
 * `AUTODNN_ALGO_AUTO`.
 */
typedef int autodnnConvolutionBwdDataAlgo_t;

/**
 * A record of the backward-filter algorithms.
 */
typedef autodnnConvolutionAlgoPerf_t autodnnConvolutionBwdFilterAlgoPerf_t;

/**
 * A backward-filter algorithm: an index into the backward-filter registry, or
 * `AUTODNN_ALGO_AUTO`.
 */
typedef int autodnnConvolutionBwdFilterAlgo_t;

/**
 * Memory order of a packed 4-D tensor or filter (cuDNN's `cudnnTensorFormat_t`).
 */
typedef int autodnnTensorFormat_t;

/**
 * Element type of a tensor (cuDNN's `cudnnDataType_t`; the values are cuDNN's).
 */
typedef int autodnnDataType_t;

/**
 * Whether the filter is flipped (cuDNN's `cudnnConvolutionMode_t`).
 */
typedef int autodnnConvolutionMode_t;

/**
 * The precision f32 operands may be computed in (cuDNN's `cudnnMathType_t`, oneDNN's
 * fpmath mode). The handle's mode (`autodnnSetMathType`) serves `autodnnSgemm` and every
 * convolution whose descriptor leaves it at `AUTODNN_DEFAULT_MATH`; a convolution
 * descriptor's own (`autodnnSetConvolutionMathType`) serves the calls given that descriptor.
 */
typedef int autodnnMathType_t;

/**
 * The activation of `autodnnConvolutionBiasActivationForward` (cuDNN's
 * `cudnnActivationMode_t`; the values shared with cuDNN are cuDNN's).
 */
typedef int autodnnActivationMode_t;

/**
 * Whether an operand is used as stored or transposed (cuBLAS's `cublasOperation_t`).
 */
typedef int autodnnOperation_t;

/**
 * How the handle selects an algorithm for `AUTODNN_ALGO_AUTO`.
 */
typedef int autodnnSelectionPolicy_t;

/**
 * Which units compute products of bf16 values (f32 operands under
 * `AUTODNN_ALLOW_BF16_MATH`): on some CPUs the bf16 dot-product units run at half the f32
 * rate.
 */
typedef int autodnnBf16Units_t;

/**
 * The forward convolution (`autodnnConvolutionFwdAlgo_t`).
 */
#define AUTODNN_CONVOLUTION_FWD 0

/**
 * The gradient of the input (`autodnnConvolutionBwdDataAlgo_t`).
 */
#define AUTODNN_CONVOLUTION_BWD_DATA 1

/**
 * The gradient of the filter (`autodnnConvolutionBwdFilterAlgo_t`).
 */
#define AUTODNN_CONVOLUTION_BWD_FILTER 2

/**
 * The bits may vary between runs.
 */
#define AUTODNN_NON_DETERMINISTIC 0

/**
 * The bits are the same on every run.
 */
#define AUTODNN_DETERMINISTIC 1

/**
 * 32-bit IEEE float: every call computes it.
 */
#define AUTODNN_DATA_FLOAT 0

/**
 * 16-bit IEEE float (`uint16_t` bits): the forward convolution takes x and w of this type
 * with y of the same type or float (f32 sums, y rounded once to nearest even); the other
 * calls answer `AUTODNN_STATUS_NOT_SUPPORTED`.
 */
#define AUTODNN_DATA_HALF 2

/**
 * bfloat16 (`uint16_t` bits): as `AUTODNN_DATA_HALF`.
 */
#define AUTODNN_DATA_BFLOAT16 9

/**
 * Tensors N, C, H, W (width fastest); filters K, C, R, S.
 */
#define AUTODNN_TENSOR_NCHW 0

/**
 * Tensors N, H, W, C (channels fastest); filters K, R, S, C.
 */
#define AUTODNN_TENSOR_NHWC 1

/**
 * The mathematical convolution: the filter flipped in both spatial dimensions.
 */
#define AUTODNN_CONVOLUTION 0

/**
 * The filter as is: what deep-learning frameworks compute.
 */
#define AUTODNN_CROSS_CORRELATION 1

/**
 * 1 / (1 + e^-v).
 */
#define AUTODNN_ACTIVATION_SIGMOID 0

/**
 * max(v, 0).
 */
#define AUTODNN_ACTIVATION_RELU 1

/**
 * tanh(v).
 */
#define AUTODNN_ACTIVATION_TANH 2

/**
 * min(max(v, 0), coef): relu6 with coef = 6.
 */
#define AUTODNN_ACTIVATION_CLIPPED_RELU 3

/**
 * v.
 */
#define AUTODNN_ACTIVATION_IDENTITY 5

/**
 * v · sigmoid(v) (SiLU); coef is not used.
 */
#define AUTODNN_ACTIVATION_SWISH 6

/**
 * v · Φ(v), the erf form (not in cuDNN).
 */
#define AUTODNN_ACTIVATION_GELU 7

/**
 * v for v ≥ 0, coef · v below (not in cuDNN).
 */
#define AUTODNN_ACTIVATION_LEAKY_RELU 8

/**
 * op(X) = X.
 */
#define AUTODNN_OP_N 0

/**
 * op(X) = Xᵀ.
 */
#define AUTODNN_OP_T 1

/**
 * op(X) = Xᴴ, which is Xᵀ for real matrices.
 */
#define AUTODNN_OP_C 2

/**
 * The cost model's ranking: never times, never reads the tuning results.
 */
#define AUTODNN_POLICY_HEURISTIC 0

/**
 * The tuning results; on a miss, a race among the candidates, whose result is kept (the
 * default).
 */
#define AUTODNN_POLICY_BENCHMARK 1

/**
 * The tuning results; on a miss, the heuristic (never times).
 */
#define AUTODNN_POLICY_CACHED_ONLY 2

/**
 * Every candidate timed to the end, every time; the result is kept.
 */
#define AUTODNN_POLICY_EXHAUSTIVE 3

/**
 * On a convolution descriptor: the handle's mode (the default). On a handle: strict.
 */
#define AUTODNN_DEFAULT_MATH 0

/**
 * f32 problems compute in f32.
 */
#define AUTODNN_STRICT_MATH 1

/**
 * f32 problems may run with their operands rounded to bf16 (round to nearest even) and f32
 * sums, on bf16 dot-product units where the CPU has them and they are faster
 * (`autodnnSetBf16Units`); cuDNN's `CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION`. The algorithms
 * that run in bf16 are the GEMM-based ones; results stay within their documented bound for
 * the rounded operands.
 */
#define AUTODNN_ALLOW_BF16_MATH 2

/**
 * The bf16 units where they are measured faster than the f32 ones (the default; the
 * measurement takes about a millisecond, once per process).
 */
#define AUTODNN_BF16_UNITS_AUTO 0

/**
 * The bf16 units wherever the CPU has them.
 */
#define AUTODNN_BF16_UNITS_ALWAYS 1

/**
 * Never: f32 operands stay f32 whatever the math type.
 */
#define AUTODNN_BF16_UNITS_NEVER 2

/**
 * The call succeeded.
 */
#define AUTODNN_STATUS_SUCCESS 0

/**
 * A descriptor was created but never set.
 */
#define AUTODNN_STATUS_NOT_INITIALIZED 1

/**
 * Memory (a workspace, a scratch buffer, worker threads) could not be had, or the handle's
 * workspace limit would be exceeded.
 */
#define AUTODNN_STATUS_ALLOC_FAILED 2

/**
 * An argument is wrong: a NULL, misaligned or overlapping buffer, a bad value, mismatched
 * descriptors, a NULL or destroyed handle or descriptor, a workspace too small, an unknown
 * algorithm.
 */
#define AUTODNN_STATUS_BAD_PARAM 3

/**
 * A bug in the library (a caught panic).
 */
#define AUTODNN_STATUS_INTERNAL_ERROR 4

/**
 * Running failed: every algorithm tried failed, or a file could not be read or written.
 */
#define AUTODNN_STATUS_EXECUTION_FAILED 8

/**
 * A valid request that this build does not compute: an element type without kernels, or an
 * algorithm that does not handle the problem.
 */
#define AUTODNN_STATUS_NOT_SUPPORTED 9

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * The number of algorithms registered for `direction` (their indices are 0 to count - 1).
 */
autodnnStatus_t autodnnGetAlgorithmCount(autodnnConvolutionDirection_t direction, int *count);

/**
 * Stores in `*name` the registered name of algorithm `algo` of `direction` (a static
 * string, such as "winograd_4x4" or "direct").
 */
autodnnStatus_t autodnnGetAlgorithmName(autodnnConvolutionDirection_t direction,
                                        int algo,
                                        const char **name);

/**
 * Stores in `*algo` the index of the algorithm of `direction` named `name` (a
 * NUL-terminated string); `AUTODNN_STATUS_BAD_PARAM` when none has that name.
 */
autodnnStatus_t autodnnGetAlgorithmIndex(autodnnConvolutionDirection_t direction,
                                         const char *name,
                                         int *algo);

/**
 * The number of forward algorithms: room enough for every record of
 * `autodnnGetConvolutionForwardAlgorithm_v7` (cuDNN's
 * `cudnnGetConvolutionForwardAlgorithmMaxCount`).
 */
autodnnStatus_t autodnnGetConvolutionForwardAlgorithmMaxCount(autodnnHandle_t handle, int *count);

/**
 * The number of backward-data algorithms (cuDNN's
 * `cudnnGetConvolutionBackwardDataAlgorithmMaxCount`).
 */
autodnnStatus_t autodnnGetConvolutionBackwardDataAlgorithmMaxCount(autodnnHandle_t handle,
                                                                   int *count);

/**
 * The number of backward-filter algorithms (cuDNN's
 * `cudnnGetConvolutionBackwardFilterAlgorithmMaxCount`).
 */
autodnnStatus_t autodnnGetConvolutionBackwardFilterAlgorithmMaxCount(autodnnHandle_t handle,
                                                                     int *count);

/**
 * The forward algorithms that accept the problem, fastest predicted first, without running
 * anything (cuDNN's `cudnnGetConvolutionForwardAlgorithm_v7`): at most `requestedAlgoCount`
 * records in `perfResults`, their number in `*returnedAlgoCount`.
 */
autodnnStatus_t autodnnGetConvolutionForwardAlgorithm_v7(autodnnHandle_t handle,
                                                         autodnnTensorDescriptor_t xDesc,
                                                         autodnnFilterDescriptor_t wDesc,
                                                         autodnnConvolutionDescriptor_t convDesc,
                                                         autodnnTensorDescriptor_t yDesc,
                                                         int requestedAlgoCount,
                                                         int *returnedAlgoCount,
                                                         autodnnConvolutionFwdAlgoPerf_t *perfResults);

/**
 * Times the eligible forward algorithms on the problem (cuDNN's
 * `cudnnFindConvolutionForwardAlgorithm`), on zero-filled buffers the library allocates,
 * and keeps the result in the handle's tuning results for `AUTODNN_ALGO_AUTO`: records
 * fastest first, as `autodnnGetConvolutionForwardAlgorithm_v7`.
 */
autodnnStatus_t autodnnFindConvolutionForwardAlgorithm(autodnnHandle_t handle,
                                                       autodnnTensorDescriptor_t xDesc,
                                                       autodnnFilterDescriptor_t wDesc,
                                                       autodnnConvolutionDescriptor_t convDesc,
                                                       autodnnTensorDescriptor_t yDesc,
                                                       int requestedAlgoCount,
                                                       int *returnedAlgoCount,
                                                       autodnnConvolutionFwdAlgoPerf_t *perfResults);

/**
 * Workspace bytes forward algorithm `algo` needs on the problem (0 for
 * `AUTODNN_ALGO_AUTO`: the handle then supplies its own); `AUTODNN_STATUS_NOT_SUPPORTED`
 * when the algorithm does not accept the problem.
 */
autodnnStatus_t autodnnGetConvolutionForwardWorkspaceSize(autodnnHandle_t handle,
                                                          autodnnTensorDescriptor_t xDesc,
                                                          autodnnFilterDescriptor_t wDesc,
                                                          autodnnConvolutionDescriptor_t convDesc,
                                                          autodnnTensorDescriptor_t yDesc,
                                                          autodnnConvolutionFwdAlgo_t algo,
                                                          size_t *sizeInBytes);

/**
 * y = alpha · conv(x, w) + beta · y (cuDNN's `cudnnConvolutionForward`); y is not read when
 * beta is 0. `algo` is an index from the forward registry or `AUTODNN_ALGO_AUTO`. A NULL
 * workspace of 0 bytes has the handle supply one (within its workspace limit); otherwise it
 * must hold `autodnnGetConvolutionForwardWorkspaceSize` bytes.
 */
autodnnStatus_t autodnnConvolutionForward(autodnnHandle_t handle,
                                          const float *alpha,
                                          autodnnTensorDescriptor_t xDesc,
                                          const void *x,
                                          autodnnFilterDescriptor_t wDesc,
                                          const void *w,
                                          autodnnConvolutionDescriptor_t convDesc,
                                          autodnnConvolutionFwdAlgo_t algo,
                                          void *workSpace,
                                          size_t workSpaceSizeInBytes,
                                          const float *beta,
                                          autodnnTensorDescriptor_t yDesc,
                                          void *y);

/**
 * y = act(alpha1 · conv(x, w) + alpha2 · z + bias) (cuDNN's
 * `cudnnConvolutionBiasActivationForward`), in one pass over y. z is laid out like y
 * (`zDesc` equal to `yDesc`) and may be y itself; it is not read when alpha2 is 0 (z and
 * zDesc may then be NULL). bias holds one value per output channel (`biasDesc` 1 × K × 1 × 1);
 * a NULL bias adds none. A NULL `activationDesc` is the identity. The algorithm and
 * workspace are as in `autodnnConvolutionForward`.
 */
autodnnStatus_t autodnnConvolutionBiasActivationForward(autodnnHandle_t handle,
                                                        const float *alpha1,
                                                        autodnnTensorDescriptor_t xDesc,
                                                        const void *x,
                                                        autodnnFilterDescriptor_t wDesc,
                                                        const void *w,
                                                        autodnnConvolutionDescriptor_t convDesc,
                                                        autodnnConvolutionFwdAlgo_t algo,
                                                        void *workSpace,
                                                        size_t workSpaceSizeInBytes,
                                                        const float *alpha2,
                                                        autodnnTensorDescriptor_t zDesc,
                                                        const void *z,
                                                        autodnnTensorDescriptor_t biasDesc,
                                                        const void *bias,
                                                        autodnnActivationDescriptor_t activationDesc,
                                                        autodnnTensorDescriptor_t yDesc,
                                                        void *y);

/**
 * The backward-data algorithms that accept the problem, fastest predicted first (cuDNN's
 * `cudnnGetConvolutionBackwardDataAlgorithm_v7`).
 */
autodnnStatus_t autodnnGetConvolutionBackwardDataAlgorithm_v7(autodnnHandle_t handle,
                                                              autodnnFilterDescriptor_t wDesc,
                                                              autodnnTensorDescriptor_t dyDesc,
                                                              autodnnConvolutionDescriptor_t convDesc,
                                                              autodnnTensorDescriptor_t dxDesc,
                                                              int requestedAlgoCount,
                                                              int *returnedAlgoCount,
                                                              autodnnConvolutionBwdDataAlgoPerf_t *perfResults);

/**
 * Times the eligible backward-data algorithms on zero-filled buffers (cuDNN's
 * `cudnnFindConvolutionBackwardDataAlgorithm`), keeping the result for
 * `AUTODNN_ALGO_AUTO`.
 */
autodnnStatus_t autodnnFindConvolutionBackwardDataAlgorithm(autodnnHandle_t handle,
                                                            autodnnFilterDescriptor_t wDesc,
                                                            autodnnTensorDescriptor_t dyDesc,
                                                            autodnnConvolutionDescriptor_t convDesc,
                                                            autodnnTensorDescriptor_t dxDesc,
                                                            int requestedAlgoCount,
                                                            int *returnedAlgoCount,
                                                            autodnnConvolutionBwdDataAlgoPerf_t *perfResults);

/**
 * Workspace bytes backward-data algorithm `algo` needs (0 for `AUTODNN_ALGO_AUTO`).
 */
autodnnStatus_t autodnnGetConvolutionBackwardDataWorkspaceSize(autodnnHandle_t handle,
                                                               autodnnFilterDescriptor_t wDesc,
                                                               autodnnTensorDescriptor_t dyDesc,
                                                               autodnnConvolutionDescriptor_t convDesc,
                                                               autodnnTensorDescriptor_t dxDesc,
                                                               autodnnConvolutionBwdDataAlgo_t algo,
                                                               size_t *sizeInBytes);

/**
 * dx = alpha · conv_bwd_data(dy, w) + beta · dx (cuDNN's `cudnnConvolutionBackwardData`);
 * dx is not read when beta is 0. Algorithm and workspace as in `autodnnConvolutionForward`.
 */
autodnnStatus_t autodnnConvolutionBackwardData(autodnnHandle_t handle,
                                               const float *alpha,
                                               autodnnFilterDescriptor_t wDesc,
                                               const void *w,
                                               autodnnTensorDescriptor_t dyDesc,
                                               const void *dy,
                                               autodnnConvolutionDescriptor_t convDesc,
                                               autodnnConvolutionBwdDataAlgo_t algo,
                                               void *workSpace,
                                               size_t workSpaceSizeInBytes,
                                               const float *beta,
                                               autodnnTensorDescriptor_t dxDesc,
                                               void *dx);

/**
 * The backward-filter algorithms that accept the problem, fastest predicted first (cuDNN's
 * `cudnnGetConvolutionBackwardFilterAlgorithm_v7`).
 */
autodnnStatus_t autodnnGetConvolutionBackwardFilterAlgorithm_v7(autodnnHandle_t handle,
                                                                autodnnTensorDescriptor_t xDesc,
                                                                autodnnTensorDescriptor_t dyDesc,
                                                                autodnnConvolutionDescriptor_t convDesc,
                                                                autodnnFilterDescriptor_t dwDesc,
                                                                int requestedAlgoCount,
                                                                int *returnedAlgoCount,
                                                                autodnnConvolutionBwdFilterAlgoPerf_t *perfResults);

/**
 * Times the eligible backward-filter algorithms on zero-filled buffers (cuDNN's
 * `cudnnFindConvolutionBackwardFilterAlgorithm`), keeping the result for
 * `AUTODNN_ALGO_AUTO`.
 */
autodnnStatus_t autodnnFindConvolutionBackwardFilterAlgorithm(autodnnHandle_t handle,
                                                              autodnnTensorDescriptor_t xDesc,
                                                              autodnnTensorDescriptor_t dyDesc,
                                                              autodnnConvolutionDescriptor_t convDesc,
                                                              autodnnFilterDescriptor_t dwDesc,
                                                              int requestedAlgoCount,
                                                              int *returnedAlgoCount,
                                                              autodnnConvolutionBwdFilterAlgoPerf_t *perfResults);

/**
 * Workspace bytes backward-filter algorithm `algo` needs (0 for `AUTODNN_ALGO_AUTO`).
 */
autodnnStatus_t autodnnGetConvolutionBackwardFilterWorkspaceSize(autodnnHandle_t handle,
                                                                 autodnnTensorDescriptor_t xDesc,
                                                                 autodnnTensorDescriptor_t dyDesc,
                                                                 autodnnConvolutionDescriptor_t convDesc,
                                                                 autodnnFilterDescriptor_t gradDesc,
                                                                 autodnnConvolutionBwdFilterAlgo_t algo,
                                                                 size_t *sizeInBytes);

/**
 * dw = alpha · conv_bwd_filter(x, dy) + beta · dw (cuDNN's
 * `cudnnConvolutionBackwardFilter`); dw is not read when beta is 0. Algorithm and workspace
 * as in `autodnnConvolutionForward`.
 */
autodnnStatus_t autodnnConvolutionBackwardFilter(autodnnHandle_t handle,
                                                 const float *alpha,
                                                 autodnnTensorDescriptor_t xDesc,
                                                 const void *x,
                                                 autodnnTensorDescriptor_t dyDesc,
                                                 const void *dy,
                                                 autodnnConvolutionDescriptor_t convDesc,
                                                 autodnnConvolutionBwdFilterAlgo_t algo,
                                                 void *workSpace,
                                                 size_t workSpaceSizeInBytes,
                                                 const float *beta,
                                                 autodnnFilterDescriptor_t dwDesc,
                                                 void *dw);

/**
 * db\[k\] = alpha · Σ over n, h, w of dy\[n, k, h, w\] + beta · db\[k\] (cuDNN's
 * `cudnnConvolutionBackwardBias`); `dbDesc` is a packed 1 × K × 1 × 1 tensor, db is not read
 * when beta is 0.
 */
autodnnStatus_t autodnnConvolutionBackwardBias(autodnnHandle_t handle,
                                               const float *alpha,
                                               autodnnTensorDescriptor_t dyDesc,
                                               const void *dy,
                                               const float *beta,
                                               autodnnTensorDescriptor_t dbDesc,
                                               void *db);

/**
 * Makes an unset tensor descriptor and stores it in `*tensorDesc`.
 */
autodnnStatus_t autodnnCreateTensorDescriptor(autodnnTensorDescriptor_t *tensorDesc);

/**
 * Sets a packed 4-D tensor: dimensions (n, c, h, w) whatever the format.
 */
autodnnStatus_t autodnnSetTensor4dDescriptor(autodnnTensorDescriptor_t tensorDesc,
                                             autodnnTensorFormat_t format,
                                             autodnnDataType_t dataType,
                                             int n,
                                             int c,
                                             int h,
                                             int w);

/**
 * Sets a 4-D tensor with explicit strides, in elements (cuDNN's
 * `cudnnSetTensor4dDescriptorEx`); strides must not make two elements share memory.
 */
autodnnStatus_t autodnnSetTensor4dDescriptorEx(autodnnTensorDescriptor_t tensorDesc,
                                               autodnnDataType_t dataType,
                                               int n,
                                               int c,
                                               int h,
                                               int w,
                                               int nStride,
                                               int cStride,
                                               int hStride,
                                               int wStride);

/**
 * Reads a set tensor descriptor back: element type, dimensions and strides (any output
 * pointer may be NULL).
 */
autodnnStatus_t autodnnGetTensor4dDescriptor(autodnnTensorDescriptor_t tensorDesc,
                                             autodnnDataType_t *dataType,
                                             int *n,
                                             int *c,
                                             int *h,
                                             int *w,
                                             int *nStride,
                                             int *cStride,
                                             int *hStride,
                                             int *wStride);

/**
 * Frees a tensor descriptor (NULL is accepted and ignored).
 */
autodnnStatus_t autodnnDestroyTensorDescriptor(autodnnTensorDescriptor_t tensorDesc);

/**
 * Makes an unset filter descriptor and stores it in `*filterDesc`.
 */
autodnnStatus_t autodnnCreateFilterDescriptor(autodnnFilterDescriptor_t *filterDesc);

/**
 * Sets a packed filter of k output channels, c input channels per group, h rows and w
 * columns; `AUTODNN_TENSOR_NCHW` is the K, C, R, S order, `AUTODNN_TENSOR_NHWC` K, R, S, C.
 */
autodnnStatus_t autodnnSetFilter4dDescriptor(autodnnFilterDescriptor_t filterDesc,
                                             autodnnDataType_t dataType,
                                             autodnnTensorFormat_t format,
                                             int k,
                                             int c,
                                             int h,
                                             int w);

/**
 * Frees a filter descriptor (NULL is accepted and ignored).
 */
autodnnStatus_t autodnnDestroyFilterDescriptor(autodnnFilterDescriptor_t filterDesc);

/**
 * Makes an unset convolution descriptor (one group) and stores it in `*convDesc`.
 */
autodnnStatus_t autodnnCreateConvolutionDescriptor(autodnnConvolutionDescriptor_t *convDesc);

/**
 * Sets a 2-D convolution: zero padding on both sides of each dimension, strides (u, v) and
 * dilations (1: dense). `computeType` must be `AUTODNN_DATA_FLOAT`.
 */
autodnnStatus_t autodnnSetConvolution2dDescriptor(autodnnConvolutionDescriptor_t convDesc,
                                                  int pad_h,
                                                  int pad_w,
                                                  int u,
                                                  int v,
                                                  int dilation_h,
                                                  int dilation_w,
                                                  autodnnConvolutionMode_t mode,
                                                  autodnnDataType_t computeType);

/**
 * Sets the number of groups (cuDNN's `cudnnSetConvolutionGroupCount`): input and output
 * channels split into this many independent parts; the filter's c is the input channels per
 * group. May be called before or after `autodnnSetConvolution2dDescriptor`.
 */
autodnnStatus_t autodnnSetConvolutionGroupCount(autodnnConvolutionDescriptor_t convDesc,
                                                int groupCount);

/**
 * Sets the math type of the calls given this descriptor (cuDNN's
 * `cudnnSetConvolutionMathType`): `AUTODNN_DEFAULT_MATH` (the handle's, the initial value),
 * `AUTODNN_STRICT_MATH` or `AUTODNN_ALLOW_BF16_MATH`. Selection, tuning results and the
 * workspace queries follow it.
 */
autodnnStatus_t autodnnSetConvolutionMathType(autodnnConvolutionDescriptor_t convDesc,
                                              autodnnMathType_t mathType);

/**
 * Stores the descriptor's math type, as set (`AUTODNN_DEFAULT_MATH` unless set), in
 * `*mathType`.
 */
autodnnStatus_t autodnnGetConvolutionMathType(autodnnConvolutionDescriptor_t convDesc,
                                              autodnnMathType_t *mathType);

/**
 * Frees a convolution descriptor (NULL is accepted and ignored).
 */
autodnnStatus_t autodnnDestroyConvolutionDescriptor(autodnnConvolutionDescriptor_t convDesc);

/**
 * The dimensions (n, c, h, w) of the forward convolution's output.
 */
autodnnStatus_t autodnnGetConvolution2dForwardOutputDim(autodnnConvolutionDescriptor_t convDesc,
                                                        autodnnTensorDescriptor_t inputTensorDesc,
                                                        autodnnFilterDescriptor_t filterDesc,
                                                        int *n,
                                                        int *c,
                                                        int *h,
                                                        int *w);

/**
 * Makes an unset activation descriptor and stores it in `*activationDesc`.
 */
autodnnStatus_t autodnnCreateActivationDescriptor(autodnnActivationDescriptor_t *activationDesc);

/**
 * Sets the activation: `coef` is the upper bound of `AUTODNN_ACTIVATION_CLIPPED_RELU` and the
 * slope of `AUTODNN_ACTIVATION_LEAKY_RELU`, unused otherwise.
 */
autodnnStatus_t autodnnSetActivationDescriptor(autodnnActivationDescriptor_t activationDesc,
                                               autodnnActivationMode_t mode,
                                               double coef);

/**
 * Frees an activation descriptor (NULL is accepted and ignored).
 */
autodnnStatus_t autodnnDestroyActivationDescriptor(autodnnActivationDescriptor_t activationDesc);

/**
 * C = alpha · op(A) · op(B) + beta · C in cuBLAS's column-major convention (cuBLAS's
 * `cublasSgemm`): element (i, j) of C is `C[i + j * ldc]`; A is stored m × k (k × m when
 * transa is `AUTODNN_OP_T`) with leading dimension lda, B k × n (n × k) with ldb. C is not
 * read when beta is 0. A row-major caller computes Cᵀ = op(B)ᵀ · op(A)ᵀ: swap A and B, m and
 * n.
 */
autodnnStatus_t autodnnSgemm(autodnnHandle_t handle,
                             autodnnOperation_t transa,
                             autodnnOperation_t transb,
                             int m,
                             int n,
                             int k,
                             const float *alpha,
                             const float *A,
                             int lda,
                             const float *B,
                             int ldb,
                             const float *beta,
                             float *C,
                             int ldc);

/**
 * `batchCount` products of one shape at fixed distances (cuBLAS's
 * `cublasSgemmStridedBatched`): product i uses `A + i * strideA`, `B + i * strideB` and
 * `C + i * strideC`, in elements. strideA and strideB may be 0 (one matrix shared by every
 * product); the outputs must not overlap.
 */
autodnnStatus_t autodnnSgemmStridedBatched(autodnnHandle_t handle,
                                           autodnnOperation_t transa,
                                           autodnnOperation_t transb,
                                           int m,
                                           int n,
                                           int k,
                                           const float *alpha,
                                           const float *A,
                                           int lda,
                                           long long strideA,
                                           const float *B,
                                           int ldb,
                                           long long strideB,
                                           const float *beta,
                                           float *C,
                                           int ldc,
                                           long long strideC,
                                           int batchCount);

/**
 * Makes a handle using every core of the machine and stores it in `*handle`.
 */
autodnnStatus_t autodnnCreate(autodnnHandle_t *handle);

/**
 * Makes a handle with `threads` worker threads (at least 1) and stores it in `*handle`.
 */
autodnnStatus_t autodnnCreateWithThreads(autodnnHandle_t *handle, int threads);

/**
 * Frees a handle (NULL is accepted and ignored). No call may be running on it.
 */
autodnnStatus_t autodnnDestroy(autodnnHandle_t handle);

/**
 * Restarts the handle's worker pool with `threads` threads (at least 1). The settings and
 * the tuning results (and the file they were loaded from) are kept. Calls already running
 * finish on the old threads.
 */
autodnnStatus_t autodnnSetThreads(autodnnHandle_t handle, int threads);

/**
 * Stores the handle's worker-thread count in `*threads`.
 */
autodnnStatus_t autodnnGetThreads(autodnnHandle_t handle, int *threads);

/**
 * Most workspace bytes one call may have the handle allocate (`SIZE_MAX`: no limit, the
 * default). Algorithms needing more are passed over by selection. A workspace the caller
 * passes to a call is not bound by it.
 */
autodnnStatus_t autodnnSetWorkspaceLimit(autodnnHandle_t handle, size_t bytes);

/**
 * Non-zero: selection (`AUTODNN_ALGO_AUTO`, `autodnnFind*`) considers only deterministic
 * algorithms (output bits independent of thread scheduling). 0, the default: all of them.
 */
autodnnStatus_t autodnnSetDeterministic(autodnnHandle_t handle, int deterministic);

/**
 * Sets the selection policy of `AUTODNN_ALGO_AUTO`.
 */
autodnnStatus_t autodnnSetSelectionPolicy(autodnnHandle_t handle, autodnnSelectionPolicy_t policy);

/**
 * Loads the handle's tuning results from the file `path` (NULL: the library's default
 * path, as the `autodnn` command uses), so that shapes measured by an earlier process are
 * not timed again; a missing file is an empty cache. The path is remembered for
 * `autodnnSaveTuningCache`.
 */
autodnnStatus_t autodnnLoadTuningCache(autodnnHandle_t handle, const char *path);

/**
 * Writes the handle's tuning results to the file they were loaded from (else the default
 * path), merged with what other processes wrote there meanwhile.
 */
autodnnStatus_t autodnnSaveTuningCache(autodnnHandle_t handle);

/**
 * Sets the handle's math type (`AUTODNN_DEFAULT_MATH` is strict).
 */
autodnnStatus_t autodnnSetMathType(autodnnHandle_t handle, autodnnMathType_t mathType);

/**
 * Stores the handle's math type (`AUTODNN_STRICT_MATH` or `AUTODNN_ALLOW_BF16_MATH`) in
 * `*mathType`.
 */
autodnnStatus_t autodnnGetMathType(autodnnHandle_t handle, autodnnMathType_t *mathType);

/**
 * Chooses the units that compute products of bf16 values.
 */
autodnnStatus_t autodnnSetBf16Units(autodnnHandle_t handle, autodnnBf16Units_t units);

/**
 * Stores the handle's bf16 units choice in `*units`.
 */
autodnnStatus_t autodnnGetBf16Units(autodnnHandle_t handle, autodnnBf16Units_t *units);

/**
 * The library's version as `MAJOR * 10000 + MINOR * 100 + PATCHLEVEL` (cuDNN's encoding).
 */
size_t autodnnGetVersion(void);

/**
 * The name of a status (`"AUTODNN_STATUS_BAD_PARAM"`), a static string;
 * `"AUTODNN_STATUS_UNKNOWN"` for a value that is not a status.
 */
const char *autodnnGetErrorString(autodnnStatus_t status);

/**
 * Copies the message of this thread's last call (empty when it succeeded), which names the
 * field at fault (`bad y.h = 14: the convolution's output has 12`), into `message`, truncated
 * to `max_size - 1` bytes and NUL-terminated. Nothing is written when `message` is NULL or
 * `max_size` is 0.
 */
void autodnnGetLastErrorString(char *message, size_t max_size);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* AUTODNN_H */
