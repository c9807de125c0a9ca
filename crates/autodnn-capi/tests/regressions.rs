//! Findings of the C API's fuzz harness (`autodnn-fuzz`'s `capi`, inputs under
//! `fuzz/regressions/capi/`), each pinned by a test named after it.

use std::ffi::c_int;
use std::ptr::null_mut;

use autodnn::*;

/// A NULL `sizeInBytes` is `AUTODNN_STATUS_BAD_PARAM` whatever the algorithm makes of the
/// problem: it was `AUTODNN_STATUS_NOT_SUPPORTED` for an algorithm declining the problem
/// (the output pointer was checked only after the algorithm's acceptance).
#[test]
fn workspace_size_null_output_of_a_declining_algorithm() {
    // SAFETY: live handle and descriptors; the NULL outputs are refused before any write.
    unsafe {
        let mut h = null_mut();
        assert_eq!(autodnnCreateWithThreads(&mut h, 1), AUTODNN_STATUS_SUCCESS);
        let (mut x, mut w, mut c, mut y) = (null_mut(), null_mut(), null_mut(), null_mut());
        autodnnCreateTensorDescriptor(&mut x);
        autodnnCreateFilterDescriptor(&mut w);
        autodnnCreateConvolutionDescriptor(&mut c);
        autodnnCreateTensorDescriptor(&mut y);
        // Two input channels in one group: depthwise declines.
        let ok = AUTODNN_STATUS_SUCCESS;
        assert_eq!(
            autodnnSetTensor4dDescriptor(x, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 1, 2, 4, 4),
            ok
        );
        assert_eq!(
            autodnnSetFilter4dDescriptor(w, AUTODNN_DATA_FLOAT, AUTODNN_TENSOR_NCHW, 3, 2, 3, 3),
            ok
        );
        assert_eq!(
            autodnnSetConvolution2dDescriptor(
                c,
                1,
                1,
                1,
                1,
                1,
                1,
                AUTODNN_CROSS_CORRELATION,
                AUTODNN_DATA_FLOAT
            ),
            ok
        );
        assert_eq!(
            autodnnSetTensor4dDescriptor(y, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 1, 3, 4, 4),
            ok
        );
        let index = |dir, name: &std::ffi::CStr| {
            let mut i: c_int = -1;
            assert_eq!(autodnnGetAlgorithmIndex(dir, name.as_ptr(), &mut i), ok);
            i
        };
        let fwd = index(AUTODNN_CONVOLUTION_FWD, c"depthwise");
        let data = index(AUTODNN_CONVOLUTION_BWD_DATA, c"depthwise");
        let filter = index(AUTODNN_CONVOLUTION_BWD_FILTER, c"depthwise");
        // With an output, the algorithm declines.
        let mut size = 0usize;
        assert_eq!(
            autodnnGetConvolutionForwardWorkspaceSize(h, x, w, c, y, fwd, &mut size),
            AUTODNN_STATUS_NOT_SUPPORTED
        );
        // Without one, the NULL is the fault.
        assert_eq!(
            autodnnGetConvolutionForwardWorkspaceSize(h, x, w, c, y, fwd, null_mut()),
            AUTODNN_STATUS_BAD_PARAM
        );
        assert_eq!(
            autodnnGetConvolutionBackwardDataWorkspaceSize(h, w, y, c, x, data, null_mut()),
            AUTODNN_STATUS_BAD_PARAM
        );
        assert_eq!(
            autodnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, c, w, filter, null_mut()),
            AUTODNN_STATUS_BAD_PARAM
        );
        let mut msg = [0 as std::ffi::c_char; 256];
        autodnnGetLastErrorString(msg.as_mut_ptr(), msg.len());
        let msg = std::ffi::CStr::from_ptr(msg.as_ptr()).to_string_lossy();
        assert!(msg.contains("sizeInBytes"), "{msg}");
        autodnnDestroyTensorDescriptor(x);
        autodnnDestroyFilterDescriptor(w);
        autodnnDestroyConvolutionDescriptor(c);
        autodnnDestroyTensorDescriptor(y);
        assert_eq!(autodnnDestroy(h), ok);
    }
}
