//! The five loops around the micro-kernel (BLIS), and how they are shared among threads.
//!
//! In the engine's frame C is `m × n`, A (vector side) `m × k`, B (broadcast side) `k × n`:
//!
//! ```text
//! for jc in 0..n step NC            5th loop: a panel of B columns
//!   for pc in 0..k step KC          4th loop: depth; pack B[pc.., jc..] (KC × NC, shared)
//!     for ic in 0..m step MC        3rd loop: pack A[ic.., pc..] (MC × KC)
//!       for jr in 0..NC step NR     2nd loop: one B micro-panel stays in L1 ...
//!         for ir in 0..MC step MR   1st loop: ... while A micro-panels stream past it
//!           micro-kernel(MR × NR tile), then the epilogue on the last depth block
//! ```
//!
//! **Threads.** With `t` threads, C is cut into `t` blocks of whole micro-panel rows or
//! columns (or, for a row split with a small B read in place, a few blocks per thread that
//! the threads take as they become free), and each thread runs all five loops on its block
//! with its own packing buffers: one fork per call (the calling thread takes blocks too), no
//! barriers, no shared buffers. The cost is that each thread packs the operand the split
//! does not divide (all of B for a row split), less than the
//! synchronisation that sharing it takes on small problems; the split taken is the one whose
//! balance and duplicated packing cost least (an operand read in place or pre-packed costs
//! nothing). At 256³ on 2 threads, with A read in place, splitting columns instead of rows
//! was 15% faster. From `shared_b_min_fmas` up, a row split shares the packed B panels instead
//! (B's packing is then not duplicated), unless B is read in place.
//! Every C element is computed by one thread with the same depth blocks in the same order, so
//! results do not depend on the thread count.
//! Problems under [`THRESHOLDS`]`.parallel_min_fmas` run on the calling thread.
//!
//! **Small problems.** When A is unit-stride along rows, fits one `KC` block and has at most
//! `direct_max_m` rows, its full micro-panels are read in place (only a ragged last panel is
//! copied): packing would cost more than it saves.
//!
//! **A packed on first use.** Larger A of that form is packed by the micro-kernels of
//! the first column panel of each block (`KernelSet::packs_a`), which read it in place and
//! store each depth step's vectors packed as they go; the calls for the other column panels
//! read the packed copy. That replaces the packing pass over A with two vector stores per
//! depth step in the kernels, which have store bandwidth to spare: +1 to 1.5% at 384³ and
//! 512³ on 1 and 2 threads; level at 1024³ and 2048³, where the first panel's reads (a page
//! or more apart at every depth step) cost about what the pass did.
//!
//! **B in place.** When B is f32 and unit-stride along the depth (row-major C = A·B with A
//! row-major, in the engine's frame), the micro-kernels broadcast from its columns where they
//! are, and no B panel is packed at any size: the columns are NR streams that the hardware
//! prefetchers follow, and packing them (a transpose) took 2 to 4% of a 512³ or 1024³
//! product. Columns whose stride is a multiple of the L1 way size
//! ([`THRESHOLDS`]`.b_in_place_alias_bytes`) would all share one L1 set, so each kernel
//! call then takes at most `b_in_place_alias_cols` of them.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::LocalKey;

use super::blocking::THRESHOLDS;
use super::epilogue::{FrameEpilogue, TileView};
use super::kernels::{KernelSet, Tile, TilePost};
use super::pack::{PackA, PackB};
use crate::error::Result;
use crate::runtime::parallel::{try_for_each, try_for_each_chunk, FirstError};

/// The output of the engine: a mutable matrix with validated strides, shared by the threads
/// of one call, each writing its own tiles.
pub(crate) struct OutMatrix<'a> {
    ptr: *mut f32,
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
    _borrow: PhantomData<&'a mut [f32]>,
}

// SAFETY: the frame hands each tile of an OutMatrix to exactly one thread (the thread
// splits below are disjoint ranges of tiles), so sharing the pointer cannot race.
unsafe impl Send for OutMatrix<'_> {}
// SAFETY: as for Send.
unsafe impl Sync for OutMatrix<'_> {}

impl<'a> OutMatrix<'a> {
    /// A `rows × cols` view of `c` with element (i, j) at `i·rs + j·cs`; `None` when an
    /// element lies outside `c` or two elements share an offset.
    pub(crate) fn new(
        c: &'a mut [f32],
        rows: usize,
        cols: usize,
        rs: usize,
        cs: usize,
    ) -> Option<OutMatrix<'a>> {
        let span = super::desc::span(rows, cols, rs, cs)?;
        (span <= c.len() && super::desc::non_overlapping(rows, cols, rs, cs)).then_some(OutMatrix {
            ptr: c.as_mut_ptr(),
            rows,
            cols,
            rs,
            cs,
            _borrow: PhantomData,
        })
    }

    /// Rows.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// The transposed view of the same memory.
    pub(crate) fn t(self) -> OutMatrix<'a> {
        OutMatrix {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// The tile of `m × n` elements at (i0, j0), checked to lie inside the matrix.
    ///
    /// # Safety
    /// While the returned view (or a kernel writing through its pointer) is in use, no other
    /// view of an overlapping tile is used by any thread.
    pub(crate) unsafe fn tile(&self, i0: usize, j0: usize, m: usize, n: usize) -> TileView<'_> {
        assert!(i0 + m <= self.rows && j0 + n <= self.cols);
        TileView {
            // The offset is inside the buffer (validated span) for any non-empty tile.
            ptr: self.ptr.wrapping_add(i0 * self.rs + j0 * self.cs),
            m,
            n,
            rs: self.rs,
            cs: self.cs,
            _tile: PhantomData,
        }
    }
}

/// One product in the engine's frame: `C = epilogue(alpha·A·B + beta·C)`.
pub(crate) struct Gemm<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f32,
    pub beta: f32,
    pub a: &'a dyn PackA,
    pub b: &'a dyn PackB,
    pub epilogue: FrameEpilogue<'a>,
}

/// Runs one product with up to `ctx.threads` threads.
///
/// # Errors
/// [`Error::OutOfMemory`] when a packing buffer cannot be allocated (C is then partly
/// written).
pub(crate) fn run(
    ks: &KernelSet,
    ctx: &crate::runtime::ExecContext<'_>,
    g: &Gemm<'_>,
    c: &OutMatrix<'_>,
) -> Result<()> {
    assert!(c.rows == g.m && c.cols == g.n);
    if g.m == 0 || g.n == 0 {
        return Ok(());
    }
    if g.k == 0 || g.alpha == 0.0 {
        scale(ks, g, c);
        return Ok(());
    }
    // A bf16-pair family reads panels converted after packing.
    if let (Some(a), Some(b)) = (
        super::pairs::Pairs::for_family(ks, g.a),
        super::pairs::Pairs::for_family(ks, g.b),
    ) {
        let g = Gemm {
            a: &a,
            b: &b,
            epilogue: g.epilogue,
            ..*g
        };
        return frame_for(ks, ctx, &g, c);
    }
    frame_for(ks, ctx, g, c)
}

/// [`run`] past the trivial cases and the operands' wrapping: the thread count, then the
/// frame.
fn frame_for(
    ks: &KernelSet,
    ctx: &crate::runtime::ExecContext<'_>,
    g: &Gemm<'_>,
    c: &OutMatrix<'_>,
) -> Result<()> {
    let threads = ctx.threads;
    let fmas = g.m.saturating_mul(g.n).saturating_mul(g.k);
    let (mr, nr) = (ks.blocking.mr, ks.blocking.nr);
    let most = g.m.div_ceil(mr).max(g.n.div_ceil(nr));
    let nt = if fmas < THRESHOLDS.parallel_min_fmas {
        1
    } else {
        threads.min(most).max(1)
    };
    frame(ks, ctx, g, c, nt)
}

/// C = beta·C (zeros for beta = 0, C unread), then the epilogue: the whole result when k = 0
/// or alpha = 0.
fn scale(ks: &KernelSet, g: &Gemm<'_>, c: &OutMatrix<'_>) {
    // SAFETY: the whole matrix as one tile, used by this thread only.
    let mut t = unsafe { c.tile(0, 0, g.m, g.n) };
    for j in 0..g.n {
        for i in 0..g.m {
            // SAFETY: (i, j) is inside the validated matrix, accessed by this thread only.
            let x = unsafe { &mut *t.ptr.add(i * t.rs + j * t.cs) };
            *x = if g.beta == 0.0 { 0.0 } else { g.beta * *x };
        }
    }
    if !g.epilogue.is_identity() {
        (ks.epilogue)(&g.epilogue, &mut t, 0, 0);
    }
}

/// One depth block of one column panel, as the inner loops see it.
struct Step<'s> {
    pc: usize,
    kc: usize,
    jc: usize,
    nc: usize,
    beta: f32,
    last: bool,
    /// The packed B panel (empty when B is read in place).
    b: &'s [f32],
    /// B read in place instead of packed.
    b_in_place: Option<InPlaceB<'s>>,
}

/// B read in place by the micro-kernels: element (p, j) at `data[p + j·ldb]`, or by rows
/// at `data[p·ldb + j]`.
#[derive(Clone, Copy)]
struct InPlaceB<'s> {
    data: &'s [f32],
    ldb: usize,
    /// Most columns per micro-kernel call (fewer than NR when the columns alias in L1).
    cols: usize,
    /// Read by rows (`ldb` is the depth stride, columns are contiguous).
    rows: bool,
}

/// The A block handed to the macro-kernel.
enum ABlock<'s> {
    /// Packed micro-panels, `mr × kc` each.
    Packed(&'s [f32]),
    /// Full micro-panels read in place from A (element (i, p) at `i + p·lda`), and the
    /// ragged last panel packed in `tail`.
    InPlace {
        data: &'s [f32],
        lda: usize,
        tail: &'s [f32],
    },
    /// Micro-panels packed into `buf` (as in `Packed`) by the kernels of the first column
    /// panel, which read the full ones in place from A (as in `InPlace`); the ragged last one
    /// is packed beforehand. Every later call reads `buf`.
    PackOnFirstUse {
        data: &'s [f32],
        lda: usize,
        buf: &'s mut [f32],
    },
}

/// How the rows of A reach the micro-kernels.
#[derive(Debug, Clone, Copy)]
enum ASource<'a> {
    /// Packed in a pass of their own before the kernels run (or taken pre-packed).
    Pack,
    /// Full micro-panels read in place, element (i, p) at `i + p·lda`: `(data, lda)`.
    InPlace(&'a [f32], usize),
    /// Packed by the kernels that first read them, in place (`KernelSet::packs_a`):
    /// `(data, lda)` as for `InPlace`.
    PackOnFirstUse(&'a [f32], usize),
}

thread_local! {
    static BUF_A: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static BUF_B: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` elements of this thread's cached buffer, aligned to 64 bytes (a fresh
/// allocation when the cache is in use, e.g. by a call this thread interleaves with).
///
/// # Errors
/// [`Error::OutOfMemory`] when the buffer cannot grow to `len` (the cached one is kept).
fn with_buf<R>(
    cell: &'static LocalKey<RefCell<Vec<f32>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> Result<R>,
) -> Result<R> {
    fn aligned(v: &mut Vec<f32>, len: usize) -> Result<&mut [f32]> {
        if len == 0 {
            return Ok(&mut []);
        }
        // Counted even when the cached buffer is large enough (see `crate::alloc`).
        crate::alloc::try_reserve(v, len + 16, "GEMM packing buffer")?;
        if v.len() < len + 16 {
            v.resize(len + 16, 0.0);
        }
        let off = v.as_ptr().align_offset(64).min(16);
        Ok(&mut v[off..off + len])
    }
    cell.with(|c| match c.try_borrow_mut() {
        Ok(mut v) => f(aligned(&mut v, len)?),
        Err(_) => f(aligned(&mut Vec::new(), len)?),
    })
}

/// Grows this thread's packing buffers to the largest blocks `ks` packs (their pages
/// written), so that the products that follow on this thread allocate nothing.
///
/// # Errors
/// [`Error::OutOfMemory`] when they cannot grow.
pub(crate) fn warm_buffers(ks: &KernelSet) -> Result<()> {
    let bl = ks.blocking;
    with_buf(&BUF_B, bl.kc * (bl.nc + bl.nr), |_| Ok(()))?;
    with_buf(&BUF_A, bl.kc * (bl.mc + bl.mr), |_| Ok(()))
}

/// Splits `0..len` into `parts` near-equal contiguous ranges; this is range `t`.
fn part(len: usize, parts: usize, t: usize) -> Range<usize> {
    len * t / parts..len * (t + 1) / parts
}

/// The depth block GEMM uses for a product of depth `k` under a family whose largest depth
/// block is `kc`: operands pre-packed for the engine ([`super::PackA::prepacked_a`]) are cut
/// into these.
pub(crate) fn depth_block(k: usize, kc: usize) -> usize {
    even_block(k, kc, 1)
}

/// The block size that splits `len` into as few blocks of at most `max` as possible, of
/// near-equal sizes rounded up to a multiple of `unit` (never above `max` rounded up).
fn even_block(len: usize, max: usize, unit: usize) -> usize {
    let blocks = len.div_ceil(max).max(1);
    len.div_ceil(blocks).div_ceil(unit).max(1) * unit
}

/// How A reaches the micro-kernels; it depends on the problem only, never on the thread
/// count. Where A is f32 and unit-stride along its rows: read in place when it is small (see
/// `direct_max_m`), otherwise packed by the kernels that first read it where the family can
/// (see the module docs). Otherwise packed beforehand.
fn a_source<'a>(ks: &KernelSet, g: &Gemm<'a>) -> ASource<'a> {
    match g.a.in_place() {
        Some((data, lda)) if g.m <= THRESHOLDS.direct_max_m && g.k <= ks.blocking.kc => {
            ASource::InPlace(data, lda)
        }
        Some((data, lda)) if ks.packs_a => ASource::PackOnFirstUse(data, lda),
        _ => ASource::Pack,
    }
}

/// How evenly `len` rows (or columns) in panels of `unit` split over `nt` threads, whole
/// panels each (1 = perfectly): the mean share over the largest, counted in rows, since the
/// kernels of a partial panel's tiles take time in proportion to its rows (49 columns in
/// panels of 14 split 28 and 21: 0.875, not the 1.0 that counting panels gives).
fn balance(len: usize, unit: usize, nt: usize) -> f64 {
    let panels = len.div_ceil(unit.max(1));
    let largest = (panels.div_ceil(nt.max(1)) * unit).min(len).max(1);
    len as f64 / nt.max(1) as f64 / largest as f64
}

/// Splits C among `nt` threads, one block of rows or of columns each (a few each where
/// blocks are taken dynamically), and runs the serial loops on each block.
fn frame(
    ks: &KernelSet,
    ctx: &crate::runtime::ExecContext<'_>,
    g: &Gemm<'_>,
    c: &OutMatrix<'_>,
    nt: usize,
) -> Result<()> {
    let bl = ks.blocking;
    let (mr, nr) = (bl.mr, bl.nr);
    let a_src = a_source(ks, g);
    let b_in_place = b_in_place(ks, g);
    let (mpan, npan) = (g.m.div_ceil(mr), g.n.div_ceil(nr));
    if nt == 1 {
        return serial(ks, g, c, 0..mpan, 0..npan, a_src, b_in_place);
    }
    let fmas = g.m.saturating_mul(g.n).saturating_mul(g.k);
    // Shared panels only where there is a B panel to share.
    let share_b = fmas >= THRESHOLDS.shared_b_min_fmas && b_in_place.is_none();
    let b_free = share_b || b_in_place.is_some();
    let a_in_place = matches!(a_src, ASource::InPlace(..));
    let split_rows = split_rows_cost(g, bl, nt, a_in_place, b_free);
    if split_rows && share_b {
        return shared_b(ks, ctx, g, c, nt, a_src);
    }
    // A row split with B read in place duplicates nothing: where B is small, finer blocks
    // taken by whichever thread is free once done with its own absorb a late start of one
    // of the threads.
    let b_bytes =
        g.k.saturating_mul(g.n)
            .saturating_mul(std::mem::size_of::<f32>());
    let blocks =
        if split_rows && b_in_place.is_some() && b_bytes <= THRESHOLDS.dynamic_split_max_b_bytes {
            mpan.min(nt * THRESHOLDS.dynamic_blocks_per_thread).max(nt)
        } else {
            nt
        };
    // Each thread takes the blocks of its own contiguous range first, in order, then those
    // left in the others' ranges. Taking blocks from one shared counter instead, a thread
    // wrote other rows of C from call to call, and the lines of C moved between the cores'
    // caches: 3% slower at 256³ on 2 threads, 8% in spells when the VM's cores were slow
    // to reach each other's caches.
    let next: Vec<AtomicUsize> = (0..nt)
        .map(|r| AtomicUsize::new(part(blocks, nt, r).start))
        .collect();
    let next = &next;
    let work = move |t: usize| -> Result<()> {
        for r in (t..t + nt).map(|x| x % nt) {
            let end = part(blocks, nt, r).end;
            loop {
                let q = next[r].fetch_add(1, Ordering::Relaxed);
                if q >= end {
                    break;
                }
                let (rp, cp) = if split_rows {
                    (part(mpan, blocks, q), 0..npan)
                } else {
                    (0..mpan, part(npan, blocks, q))
                };
                serial(ks, g, c, rp, cp, a_src, b_in_place)?;
            }
        }
        Ok(())
    };
    // The calling thread takes part (range 0), as in every region of the pool.
    let work = &work;
    let failed = FirstError::default();
    ctx.pool.run(nt, &|t| failed.set(work(t)));
    failed.into_result()
}

/// B as the micro-kernels can read it in place (see [`super::PackB::in_place_b`]), when the
/// family has kernels for that: then no B panel is packed. Columns a multiple of
/// `THRESHOLDS.b_in_place_alias_bytes` apart all map to one L1 set: each kernel call then
/// takes at most `b_in_place_alias_cols` of them.
fn b_in_place<'a>(ks: &KernelSet, g: &Gemm<'a>) -> Option<InPlaceB<'a>> {
    let columns = if ks.b_in_place.is_empty() {
        None
    } else {
        g.b.in_place_b()
    };
    let Some((data, ldb)) = columns else {
        return b_in_place_rows(ks, g);
    };
    let aliased =
        ldb.wrapping_mul(std::mem::size_of::<f32>()) % THRESHOLDS.b_in_place_alias_bytes == 0;
    let cols = if aliased {
        THRESHOLDS.b_in_place_alias_cols
    } else {
        ks.blocking.nr
    };
    Some(InPlaceB {
        data,
        ldb,
        cols: cols.clamp(1, ks.blocking.nr),
        rows: false,
    })
}

/// B read in place by rows, when the family has kernels for that and B's columns are
/// contiguous (see [`super::PackB::in_place_b_rows`]), unless its depth steps lie a multiple
/// of `THRESHOLDS.b_in_place_rows_alias_bytes` apart: they would then crowd a few L1 sets.
fn b_in_place_rows<'a>(ks: &KernelSet, g: &Gemm<'a>) -> Option<InPlaceB<'a>> {
    if ks.b_in_place_rows.is_empty() {
        return None;
    }
    let (data, ldb) = g.b.in_place_b_rows()?;
    let bytes = ldb.wrapping_mul(std::mem::size_of::<f32>());
    if g.k > 1 && bytes % THRESHOLDS.b_in_place_rows_alias_bytes == 0 {
        return None;
    }
    Some(InPlaceB {
        data,
        ldb,
        cols: ks.blocking.nr,
        rows: true,
    })
}

/// Whether a split of C's rows (rather than its columns) among `nt` threads takes less time:
/// each thread's share of the multiply-adds, stretched by how unevenly the `[row, column]`
/// micro-panels divide, plus the packing the split makes every thread do in full (all of B
/// for a row split, all of A, once per column panel, for a column split). That costs nothing
/// for an operand read in place or pre-packed, nor for B when `b_free` (a row split shares
/// its packed panels, or B is read in place). Columns on ties.
fn split_rows_cost(
    g: &Gemm<'_>,
    bl: super::blocking::Blocking,
    nt: usize,
    a_in_place: bool,
    b_free: bool,
) -> bool {
    let kc = even_block(g.k, bl.kc, 1);
    let a_free = a_in_place || g.a.prepacked_a(0, bl.mr.min(g.m), 0, kc, bl.mr).is_some();
    let b_free = b_free || g.b.prepacked_b(0, kc, 0, bl.nr.min(g.n), bl.nr).is_some();
    let (m, n, k) = (g.m as f64, g.n as f64, g.k as f64);
    let fmas = m * n * k / nt as f64;
    let w = THRESHOLDS.pack_fmas_per_element as f64;
    let dup_b = if b_free { 0.0 } else { k * n };
    let col_panels = g.n.div_ceil(nt).div_ceil(bl.nc) as f64;
    let dup_a = if a_free { 0.0 } else { m * k * col_panels };
    let rows = fmas / balance(g.m, bl.mr, nt) + w * dup_b;
    let cols = fmas / balance(g.n, bl.nr, nt) + w * dup_a;
    rows < cols
}

/// The five loops on one block of C: row panels `rp` (of MR rows) × column panels `cp` (of
/// NR columns), packing into this thread's buffers.
fn serial(
    ks: &KernelSet,
    g: &Gemm<'_>,
    c: &OutMatrix<'_>,
    rp: Range<usize>,
    cp: Range<usize>,
    a_src: ASource<'_>,
    b_in_place: Option<InPlaceB<'_>>,
) -> Result<()> {
    let bl = ks.blocking;
    let (mr, nr) = (bl.mr, bl.nr);
    let (i_lo, i_hi) = (rp.start * mr, (rp.end * mr).min(g.m));
    let (j_lo, j_hi) = (cp.start * nr, (cp.end * nr).min(g.n));
    if i_lo >= i_hi || j_lo >= j_hi {
        return Ok(());
    }
    // Even blocks: n = 1024 with NC = 1022 is two panels of 518 and 506, not 1022 and 2.
    let nc_blk = even_block(j_hi - j_lo, bl.nc, nr);
    let kc_blk = even_block(g.k, bl.kc, 1);
    let mc_blk = even_block(i_hi - i_lo, bl.mc, mr);
    let b_len = if b_in_place.is_some() {
        0
    } else {
        kc_blk * nc_blk
    };
    with_buf(&BUF_B, b_len, |bbuf| {
        with_buf(&BUF_A, kc_blk * mc_blk, |abuf| {
            for jc in (j_lo..j_hi).step_by(nc_blk) {
                let nc = nc_blk.min(j_hi - jc);
                let npan = nc.div_ceil(nr);
                for pc in (0..g.k).step_by(kc_blk) {
                    let kc = kc_blk.min(g.k - pc);
                    let len = npan * nr * kc;
                    let bp: &[f32] = if b_in_place.is_some() {
                        &[]
                    } else if let Some(p) = g.b.prepacked_b(pc, kc, jc, nc, nr) {
                        assert_eq!(p.len(), len, "prepacked B panel of the wrong size");
                        p
                    } else {
                        let bp = &mut bbuf[..len];
                        g.b.pack_b(pc, kc, jc, nc, nr, bp)?;
                        bp
                    };
                    let step = Step {
                        pc,
                        kc,
                        jc,
                        nc,
                        beta: if pc == 0 { g.beta } else { 1.0 },
                        last: pc + kc == g.k,
                        b: bp,
                        b_in_place,
                    };
                    for ic in (i_lo..i_hi).step_by(mc_blk) {
                        let mc = mc_blk.min(i_hi - ic);
                        let mut block = a_block(g, &step, ic, mc, mr, a_src, abuf)?;
                        macro_kernel(ks, g, c, &step, ic, mc, &mut block, 0..npan);
                    }
                }
            }
            Ok(())
        })
    })
}

/// The five loops with the threads splitting the rows of C and sharing each B panel, which
/// they pack together (each a contiguous share of its micro-panels): two forks per depth
/// block, worth it on large problems, where packing B once instead of once per thread
/// saves more than the forks cost.
fn shared_b(
    ks: &KernelSet,
    ctx: &crate::runtime::ExecContext<'_>,
    g: &Gemm<'_>,
    c: &OutMatrix<'_>,
    nt: usize,
    a_src: ASource<'_>,
) -> Result<()> {
    let bl = ks.blocking;
    let (mr, nr) = (bl.mr, bl.nr);
    let mpan = g.m.div_ceil(mr);
    let nc_blk = even_block(g.n, bl.nc, nr);
    let kc_blk = even_block(g.k, bl.kc, 1);
    with_buf(&BUF_B, kc_blk * nc_blk, |bbuf| {
        for jc in (0..g.n).step_by(nc_blk) {
            let nc = nc_blk.min(g.n - jc);
            let npan = nc.div_ceil(nr);
            for pc in (0..g.k).step_by(kc_blk) {
                let kc = kc_blk.min(g.k - pc);
                let bp = &mut bbuf[..npan * nr * kc];
                let per = npan.div_ceil(nt);
                try_for_each_chunk(ctx, bp, per * nr * kc, |q, d| {
                    let j0 = q * per * nr;
                    g.b.pack_b(pc, kc, jc + j0, (per * nr).min(nc - j0), nr, d)
                })?;
                let step = Step {
                    pc,
                    kc,
                    jc,
                    nc,
                    beta: if pc == 0 { g.beta } else { 1.0 },
                    last: pc + kc == g.k,
                    b: bp,
                    b_in_place: None,
                };
                let one_row_block = |t: usize| {
                    let rp = part(mpan, nt, t);
                    let (i_lo, i_hi) = (rp.start * mr, (rp.end * mr).min(g.m));
                    if i_lo >= i_hi {
                        return Ok(());
                    }
                    let mc_blk = even_block(i_hi - i_lo, bl.mc, mr);
                    with_buf(&BUF_A, kc * mc_blk, |abuf| {
                        for ic in (i_lo..i_hi).step_by(mc_blk) {
                            let mc = mc_blk.min(i_hi - ic);
                            let mut block = a_block(g, &step, ic, mc, mr, a_src, abuf)?;
                            macro_kernel(ks, g, c, &step, ic, mc, &mut block, 0..npan);
                        }
                        Ok(())
                    })
                };
                try_for_each(ctx, nt, one_row_block)?;
            }
        }
        Ok(())
    })
}

/// Packs rows `i0 .. i0 + mc` of A at this depth block into `buf`, or describes them in
/// place (packing only a ragged last micro-panel), or takes them pre-packed.
fn a_block<'s>(
    g: &Gemm<'s>,
    s: &Step<'_>,
    i0: usize,
    mc: usize,
    mr: usize,
    a_src: ASource<'s>,
    buf: &'s mut [f32],
) -> Result<ABlock<'s>> {
    if let Some(p) = g.a.prepacked_a(i0, mc, s.pc, s.kc, mr) {
        assert_eq!(
            p.len(),
            mc.div_ceil(mr) * mr * s.kc,
            "prepacked A block of the wrong size"
        );
        return Ok(ABlock::Packed(p));
    }
    let full = mc / mr;
    let rest = mc - full * mr;
    Ok(match a_src {
        ASource::InPlace(data, lda) => {
            let tail = &mut buf[..if rest > 0 { mr * s.kc } else { 0 }];
            if rest > 0 {
                g.a.pack_a(i0 + full * mr, rest, s.pc, s.kc, mr, tail)?;
            }
            ABlock::InPlace { data, lda, tail }
        }
        ASource::PackOnFirstUse(data, lda) => {
            let buf = &mut buf[..mc.div_ceil(mr) * mr * s.kc];
            if rest > 0 {
                let tail = &mut buf[full * mr * s.kc..];
                g.a.pack_a(i0 + full * mr, rest, s.pc, s.kc, mr, tail)?;
            }
            ABlock::PackOnFirstUse { data, lda, buf }
        }
        ASource::Pack => {
            let dst = &mut buf[..mc.div_ceil(mr) * mr * s.kc];
            g.a.pack_a(i0, mc, s.pc, s.kc, mr, dst)?;
            ABlock::Packed(dst)
        }
    })
}

/// Asks for the lines of the residual that the epilogue of tile (i, j), m × n, will add,
/// before the tile's micro-kernel runs: the kernel fetches its C tile ahead, but the residual
/// is another array, and its loads stalled the epilogue (the 3 MB shortcut of a 56x56
/// ResNet layer is in L3 at best).
#[inline]
fn prefetch_residual(e: &FrameEpilogue<'_>, i: usize, j: usize, m: usize, n: usize) {
    let Some((d, rs, cs)) = e.residual else {
        return;
    };
    // Each contiguous line of the tile: its first element, every 16th, its last. (A tile with
    // neither stride 1 is left to the epilogue's own loads.)
    let line = |first: usize, len: usize| {
        for k in (0..len).step_by(16).chain(len.checked_sub(1)) {
            if let Some(x) = d.get(first + k) {
                super::pack::prefetch(x);
            }
        }
    };
    if cs == 1 {
        for r in i..i + m {
            line(r * rs + j, n);
        }
    } else if rs == 1 {
        for c in j..j + n {
            line(i + c * cs, m);
        }
    }
}

/// The 2nd and 1st loops: every (B micro-panel in `jpanels`) × (A micro-panel of the
/// block) tile, the micro-kernel, then the epilogue after the last depth block.
#[allow(clippy::too_many_arguments)]
fn macro_kernel(
    ks: &KernelSet,
    g: &Gemm<'_>,
    c: &OutMatrix<'_>,
    s: &Step<'_>,
    i0: usize,
    mc: usize,
    block: &mut ABlock<'_>,
    jpanels: Range<usize>,
) {
    let (mr, nr, kc) = (ks.blocking.mr, ks.blocking.nr, s.kc);
    let apan = mc.div_ceil(mr);
    let epilogue = s.last && !g.epilogue.is_identity();
    // In the kernels' store where the family can (the tile is then written once), else
    // applied to the stored tile below.
    let fused = epilogue && ks.fuses_epilogue && g.epilogue.fuses_in_store(c.rs, c.cs);
    let first = jpanels.start;
    if let Some(state) = ks.tiles {
        // SAFETY: the family was chosen where the CPU has its features (kernel_set_for
        // intersects them with the detected ones); its `end` runs below, on this thread,
        // and nothing in between but this family's kernels and epilogue uses the state.
        unsafe { (state.begin)() };
    }
    for jp in jpanels {
        let j = s.jc + jp * nr;
        let n = nr.min(s.jc + s.nc - j);
        let (bpanel, ldb, cols): (&[f32], usize, usize) = match s.b_in_place {
            Some(b) if b.rows => {
                let start = s.pc * b.ldb + j;
                (&b.data[start..start + (kc - 1) * b.ldb + n], b.ldb, b.cols)
            }
            Some(b) => {
                let start = s.pc + j * b.ldb;
                (&b.data[start..start + (n - 1) * b.ldb + kc], b.ldb, b.cols)
            }
            None => (&s.b[jp * nr * kc..(jp + 1) * nr * kc], 0, nr),
        };
        for q in 0..apan {
            let i = i0 + q * mr;
            let m = mr.min(i0 + mc - i);
            let panel = q * mr * kc..(q + 1) * mr * kc;
            // Where micro-panel q lies in A itself, with A's depth stride `lda`.
            let source = |lda: usize| {
                let start = i + s.pc * lda;
                start..start + (kc - 1) * lda + mr
            };
            let none = std::ptr::null_mut();
            let (a, lda, a_pack): (&[f32], usize, *mut f32) = match block {
                ABlock::Packed(p) => (&p[panel], mr, none),
                ABlock::InPlace { tail, .. } if m < mr => (tail, mr, none),
                ABlock::InPlace { data, lda, .. } => (&data[source(*lda)], *lda, none),
                ABlock::PackOnFirstUse { data, lda, buf } if jp == first && m == mr => {
                    (&data[source(*lda)], *lda, buf[panel].as_mut_ptr())
                }
                ABlock::PackOnFirstUse { buf, .. } => (&buf[panel], mr, none),
            };
            if epilogue {
                prefetch_residual(&g.epilogue, i, j, m, n);
            }
            // SAFETY: this thread owns tile (i, j) of this call: thread splits are disjoint
            // ranges of row panels or of column panels.
            let mut view = unsafe { c.tile(i, j, m, n) };
            let tile = Tile {
                k: kc,
                a: a.as_ptr(),
                lda,
                b: bpanel.as_ptr(),
                ldb,
                c: view.ptr,
                rs_c: c.rs,
                cs_c: c.cs,
                m,
                n,
                alpha: g.alpha,
                beta: s.beta,
                a_pack,
                post: if fused {
                    g.epilogue.tile_post(i, j)
                } else {
                    TilePost::OFF
                },
            };
            if let Some(b) = s.b_in_place {
                // Groups of at most `cols` columns, each its own kernel call.
                let kernels = if b.rows {
                    ks.b_in_place_rows
                } else {
                    ks.b_in_place
                };
                for j0 in (0..n).step_by(cols) {
                    let w = cols.min(n - j0);
                    let mut group = Tile {
                        b: bpanel[if b.rows { j0 } else { j0 * ldb }..].as_ptr(),
                        c: view.ptr.wrapping_add(j0 * c.cs),
                        n: w,
                        post: tile.post.columns_from(j0),
                        ..tile
                    };
                    if j0 > 0 && !a_pack.is_null() {
                        // The first group's call packed this A micro-panel: read the copy.
                        (group.a, group.lda, group.a_pack) = (a_pack, mr, none);
                    }
                    // SAFETY: the kernel set matches the CPU (kernel_set caps its
                    // features by what the CPU has); kc ≥ 1; `a` covers (kc − 1)·lda + mr elements (a slice,
                    // or the packed panel of mr·kc, written by the first group's call);
                    // `a_pack`, when set, is that panel (a slice of this thread's buffer,
                    // m = mr); B's columns j0 .. j0 + w, each kc deep, lie in `bpanel` (a
                    // slice of (n − 1)·ldb + kc elements, or by rows of (kc − 1)·ldb + n);
                    // C's columns j0 .. j0 + w of the tile are inside the validated output
                    // (checked by `tile`) and this thread's alone; `kernels[w − 1]` reads
                    // w ≤ NR columns.
                    unsafe { (kernels[w - 1])(&group) };
                }
            } else {
                // A ragged last column panel takes the family's narrower kernel, if it has
                // one.
                let ukr = match ks.edge.get(n.wrapping_sub(1)) {
                    Some(&edge) if n < nr => edge,
                    _ => ks.ukr,
                };
                // SAFETY: the kernel set matches the CPU (kernel_set caps its features
                // by what the CPU has); kc ≥ 1; `a` covers (kc − 1)·lda + mr elements and `bpanel` kc·nr
                // (both slices, bounds-checked above); `a_pack`, when set, is a packed panel
                // of mr·kc floats in this thread's buffer (a slice; m = mr); the C tile is
                // inside the validated output (checked by `tile`) and this thread's alone;
                // an edge kernel gets n ≤ its width.
                unsafe { ukr(&tile) };
            }
            if epilogue && !fused {
                (ks.epilogue)(&g.epilogue, &mut view, i, j);
            }
        }
    }
    if let Some(state) = ks.tiles {
        // SAFETY: `begin` ran above on this thread.
        unsafe { (state.end)() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::epilogue::FrameEpilogue;
    use crate::gemm::kernels::kernel_set;
    use crate::gemm::pack::StridedMatrix;

    /// B as if pre-packed: `prepacked_b` answers (with nothing the split reads).
    struct Prepacked;
    impl PackB for Prepacked {
        fn pack_b(
            &self,
            _: usize,
            _: usize,
            _: usize,
            _: usize,
            _: usize,
            _: &mut [f32],
        ) -> Result<()> {
            Ok(())
        }
        fn prepacked_b(&self, _: usize, _: usize, _: usize, _: usize, _: usize) -> Option<&[f32]> {
            Some(&[])
        }
    }

    #[test]
    fn balance_counts_the_rows_of_a_partial_panel() {
        // 49 columns in panels of 14 over 2 threads: 28 and 21 columns.
        assert!((balance(49, 14, 2) - 0.875).abs() < 1e-12);
        assert!((balance(64, 32, 2) - 1.0).abs() < 1e-12);
        // 3 panels over 2 threads: 2 and 1.
        assert!((balance(96, 32, 2) - 0.75).abs() < 1e-12);
        assert!((balance(5, 32, 4) - 5.0 / 4.0 / 5.0).abs() < 1e-12);
    }

    #[test]
    fn the_split_avoids_duplicated_packing() {
        let bl = kernel_set(crate::cpu::Isa::Scalar.usable()).blocking;
        let n = 64 * bl.mr.max(bl.nr);
        let data = vec![0f32; n * n];
        let a = StridedMatrix::new(&data, n, n, 1, n).unwrap();
        let b = StridedMatrix::new(&data, n, n, n, 1).unwrap();
        let gemm = |b: &dyn PackB, m: usize, f: &dyn Fn(&Gemm<'_>) -> bool| {
            f(&Gemm {
                m,
                n,
                k: n,
                alpha: 1.0,
                beta: 0.0,
                a: &a,
                b,
                epilogue: FrameEpilogue::default(),
            })
        };
        // Both split evenly: a row split would have every thread pack all of B, a column
        // split all of A, unless A is read in place.
        assert!(!gemm(&b, n, &|g| split_rows_cost(g, bl, 2, true, false)));
        // B pre-packed: a row split duplicates nothing.
        assert!(gemm(&Prepacked, n, &|g| split_rows_cost(
            g, bl, 2, false, false
        )));
        // Shared B panels: a row split duplicates nothing either.
        assert!(gemm(&b, n, &|g| split_rows_cost(g, bl, 2, false, true)));
        // Rows that cannot be divided (one row panel) lose to columns whatever packing costs.
        assert!(!gemm(&Prepacked, bl.mr, &|g| split_rows_cost(
            g, bl, 2, false, false
        )));
    }

    #[test]
    fn b_is_read_in_place_when_depth_contiguous() {
        let ks = kernel_set(crate::cpu::Features::detected());
        let data = vec![0f32; 64 * 2048];
        let a = StridedMatrix::new(&data, 32, 64, 1, 32).unwrap();
        let in_place = |rs: usize, cs: usize| {
            let b = StridedMatrix::new(&data, 64, 20, rs, cs).unwrap();
            let g = Gemm {
                m: 32,
                n: 20,
                k: 64,
                alpha: 1.0,
                beta: 0.0,
                a: &a,
                b: &b,
                epilogue: FrameEpilogue::default(),
            };
            b_in_place(ks, &g).map(|b| (b.ldb, b.cols, b.rows))
        };
        let nr = ks.blocking.nr;
        if ks.b_in_place_rows.is_empty() {
            // The family has no such kernels: contiguous columns are packed.
            assert!(in_place(20, 1).is_none());
        } else {
            // Columns contiguous, depth steps 20 floats apart: read by rows.
            assert_eq!(in_place(20, 1), Some((20, nr, true)));
            assert_eq!(in_place(196, 1), Some((196, nr, true)));
            // Depth steps 256 bytes apart (or a multiple): they would crowd a quarter of the
            // L1 sets or fewer, packed.
            assert!(in_place(64, 1).is_none());
            assert!(in_place(1024, 1).is_none());
        }
        if ks.b_in_place.is_empty() {
            // The family has no such kernels: always packed.
            assert!(in_place(1, 1040).is_none());
            return;
        }
        // Columns 1040 floats apart: whole panels per call.
        assert_eq!(in_place(1, 1040), Some((1040, nr, false)));
        assert_eq!(in_place(1, 64), Some((64, nr, false)));
        // 4 KiB and 8 KiB apart: they alias in L1, fewer columns per call (a family whose
        // tile is at most that wide, AVX2's 6, still takes whole panels).
        let few = THRESHOLDS.b_in_place_alias_cols.min(nr);
        assert_eq!(in_place(1, 1024), Some((1024, few, false)));
        assert_eq!(in_place(1, 2048), Some((2048, few, false)));
    }

    #[test]
    fn a_is_packed_by_the_kernels_where_the_family_can() {
        let data = vec![0f32; 600 * 1100];
        let b = StridedMatrix::new(&data, 64, 20, 1, 64).unwrap();
        let source = |isa: crate::cpu::Isa, m: usize, k: usize, rs: usize, cs: usize| {
            let ks = kernel_set(isa.usable());
            let a = StridedMatrix::new(&data, m, k, rs, cs).unwrap();
            let g = Gemm {
                m,
                n: 20,
                k,
                alpha: 1.0,
                beta: 0.0,
                a: &a,
                b: &b,
                epilogue: FrameEpilogue::default(),
            };
            match a_source(ks, &g) {
                ASource::Pack => "pack",
                ASource::InPlace(_, lda) => {
                    assert_eq!(lda, cs);
                    "in place"
                }
                ASource::PackOnFirstUse(_, lda) => {
                    assert_eq!(lda, cs);
                    "first use"
                }
            }
        };
        let small = THRESHOLDS.direct_max_m;
        for isa in crate::cpu::Isa::ALL {
            let ks = kernel_set(isa.usable());
            let large = if ks.packs_a { "first use" } else { "pack" };
            assert_eq!(source(isa, small, 64, 1, small), "in place");
            assert_eq!(source(isa, small + 1, 64, 1, small + 1), large);
            // Deeper than one depth block: small A is not read in place either.
            let deep = ks.blocking.kc + 1;
            assert_eq!(source(isa, 32, deep, 1, 32), large);
            // Not unit-stride along the rows: always packed beforehand.
            assert_eq!(source(isa, 300, 64, 64, 1), "pack");
        }
        assert!(!kernel_set(crate::cpu::Isa::Scalar.usable()).packs_a);
        if crate::cpu::Isa::best_available() >= crate::cpu::Isa::Avx512 {
            assert!(kernel_set(crate::cpu::Isa::Avx512.usable()).packs_a);
        }
    }
}
