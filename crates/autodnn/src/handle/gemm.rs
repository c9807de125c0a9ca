//! The GEMM entry points of the handle (cuBLAS's `Sgemm`, `SgemmBatched`,
//! `SgemmStridedBatched`): thin wrappers that run the [`crate::gemm`] engine on the
//! handle's threads.

use crate::error::{Error, Result};
use crate::gemm::{batch_span, gemm_in_context, run_batch, tail, Epilogue, GemmDesc, GemmInput};
use crate::Handle;

impl Handle {
    /// C = alpha·op(A)·op(B) + beta·C on the handle's threads.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `c.strides` when C's strides make elements overlap;
    /// [`Error::Overflow`] when a span does not fit in `usize`; [`Error::BufferTooSmall`]
    /// naming `a`, `b` or `c` when a buffer is shorter than its strides reach.
    ///
    /// # Examples
    /// ```
    /// use autodnn::{gemm::GemmDesc, Handle};
    /// let handle = Handle::with_threads(1)?;
    /// // Column-major with padded leading dimensions: C (2×2, ldc 3) = Aᵀ·B.
    /// let d = GemmDesc::new(2, 2, 2)
    ///     .with_transa(true)
    ///     .with_a_strides(1, 3) // A stored 2×2 column-major, lda 3
    ///     .with_b_strides(1, 2)
    ///     .with_c_strides(1, 3);
    /// let a = [1.0, 2.0, 0.0, 3.0, 4.0];
    /// let b = [1.0, 1.0, 1.0, 0.0];
    /// let mut c = [f32::NAN; 5]; // beta = 0: C is not read
    /// handle.gemm(&d, 1.0, &a, &b, 0.0, &mut c)?;
    /// assert_eq!([c[0], c[1], c[3], c[4]], [3.0, 7.0, 1.0, 3.0]);
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    pub fn gemm<T: GemmInput>(
        &self,
        desc: &GemmDesc,
        alpha: f32,
        a: &[T],
        b: &[T],
        beta: f32,
        c: &mut [f32],
    ) -> Result<()> {
        self.gemm_with_epilogue(desc, alpha, a, b, beta, c, &Epilogue::new())
    }

    /// C = act(alpha·op(A)·op(B) + beta·C + bias + residual), the epilogue applied to each
    /// output tile while it is in cache.
    ///
    /// # Errors
    /// As [`Handle::gemm`], and [`Error::BufferTooSmall`] naming `epilogue.bias` or
    /// `epilogue.residual` when they do not cover the output.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_with_epilogue<T: GemmInput>(
        &self,
        desc: &GemmDesc,
        alpha: f32,
        a: &[T],
        b: &[T],
        beta: f32,
        c: &mut [f32],
        epilogue: &Epilogue<'_>,
    ) -> Result<()> {
        gemm_in_context(&self.exec_context(), desc, alpha, a, b, beta, c, epilogue)
    }

    /// One descriptor, many (A, B, C) triples: `c[i] = alpha·op(a[i])·op(b[i]) + beta·c[i]`.
    /// Small products run one per thread across the batch; large ones one after the other,
    /// each on all threads.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `batch` when the three lists differ in length; otherwise
    /// as [`Handle::gemm`] with the field naming the item (`a[3]`).
    ///
    /// # Examples
    /// ```
    /// use autodnn::{gemm::GemmDesc, Handle};
    /// let handle = Handle::with_threads(2)?;
    /// let (a0, a1, b) = ([1.0f32, 2.0], [3.0f32, 4.0], [1.0f32, 1.0]);
    /// let (mut c0, mut c1) = ([0.0f32], [0.0f32]);
    /// handle.gemm_batched(&GemmDesc::new(1, 1, 2), 1.0, &[&a0[..], &a1], &[&b[..], &b],
    ///                     0.0, &mut [&mut c0[..], &mut c1])?;
    /// assert_eq!((c0[0], c1[0]), (3.0, 7.0));
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_batched<T: GemmInput>(
        &self,
        desc: &GemmDesc,
        alpha: f32,
        a: &[&[T]],
        b: &[&[T]],
        beta: f32,
        c: &mut [&mut [f32]],
    ) -> Result<()> {
        if a.len() != b.len() || a.len() != c.len() {
            return Err(Error::bad(
                "batch",
                format!("{} A, {} B, {} C", a.len(), b.len(), c.len()),
                "the lists of A, B and C matrices must have the same length",
            ));
        }
        desc.validate()?;
        let spans = [desc.a_span()?, desc.b_span()?, desc.c_span()?];
        for (i, (x, (y, z))) in a.iter().zip(b.iter().zip(c.iter())).enumerate() {
            for (name, needed, got) in [
                ("a", spans[0], x.len()),
                ("b", spans[1], y.len()),
                ("c", spans[2], z.len()),
            ] {
                if got < needed {
                    return Err(Error::BufferTooSmall {
                        field: format!("{name}[{i}]"),
                        needed,
                        got,
                    });
                }
            }
        }
        let mut items = crate::alloc::try_vec_with_capacity(a.len(), "the batch's products")?;
        items.extend(
            a.iter()
                .zip(b)
                .zip(c.iter_mut())
                .map(|((&a, &b), c)| (a, b, &mut **c)),
        );
        run_batch(&self.exec_context(), desc, alpha, beta, items)
    }

    /// `batch` products of one descriptor at fixed distances: product i uses
    /// `a[i·stride_a ..]`, `b[i·stride_b ..]` and `c[i·stride_c ..]`. Strides of A and B are
    /// free (0 shares one matrix among all products); the outputs must not overlap, so with
    /// more than one product `stride_c` is at least C's span.
    ///
    /// # Errors
    /// As [`Handle::gemm`] with the buffer lengths checked for the whole batch, and
    /// [`Error::BadParam`] naming `stride_c` when outputs would overlap.
    ///
    /// # Examples
    /// ```
    /// use autodnn::{gemm::GemmDesc, Handle};
    /// let handle = Handle::with_threads(2)?;
    /// // Three 2×2 products, B shared (stride 0).
    /// let a: Vec<f32> = (0..12).map(|x| x as f32).collect();
    /// let b = [1.0f32, 0.0, 0.0, 1.0];
    /// let mut c = vec![0.0f32; 12];
    /// handle.gemm_strided_batched(&GemmDesc::new(2, 2, 2), 1.0, &a, 4, &b, 0, 0.0, &mut c, 4, 3)?;
    /// assert_eq!(c, a);
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_strided_batched<T: GemmInput>(
        &self,
        desc: &GemmDesc,
        alpha: f32,
        a: &[T],
        stride_a: usize,
        b: &[T],
        stride_b: usize,
        beta: f32,
        c: &mut [f32],
        stride_c: usize,
        batch: usize,
    ) -> Result<()> {
        desc.validate()?;
        let (sa, sb, sc) = (desc.a_span()?, desc.b_span()?, desc.c_span()?);
        if batch > 1 && sc > 0 && stride_c < sc {
            return Err(Error::bad(
                "stride_c",
                stride_c,
                format!("outputs of {sc} elements would overlap: must be at least {sc}"),
            ));
        }
        for (field, stride, span, got) in [
            ("a", stride_a, sa, a.len()),
            ("b", stride_b, sb, b.len()),
            ("c", stride_c, sc, c.len()),
        ] {
            let needed = batch_span(field, batch, stride, span)?;
            if got < needed {
                return Err(Error::BufferTooSmall {
                    field: field.into(),
                    needed,
                    got,
                });
            }
        }
        if batch == 0 || sc == 0 {
            return Ok(());
        }
        let mut items = crate::alloc::try_vec_with_capacity(batch, "the batch's products")?;
        items.extend(
            c.chunks_mut(stride_c.max(sc))
                .take(batch)
                .enumerate()
                .map(|(i, c)| (tail(a, i, stride_a, sa), tail(b, i, stride_b, sb), c)),
        );
        run_batch(&self.exec_context(), desc, alpha, beta, items)
    }
}
