//! Micro-kernels: the only per-ISA code of the engine.
//!
//! Every kernel has one signature, [`UKernel`]: it multiplies an `MR × k` micro-panel of A
//! (vector side) by a packed `k × NR` micro-panel of B (broadcast side) in registers and
//! updates an `m × n` tile of C (`m ≤ MR`, `n ≤ NR`, the edges handled by the kernel itself)
//! as `C = alpha·acc + beta·C`, never reading C when beta is 0. The portable frame
//! ([`super::loops`]) does everything else.
//!
//! A kernel family ([`KernelSet`]) is data: the processor features it needs
//! ([`KernelSet::requires`]), its operand and accumulator types, the packing format of its
//! panels ([`PackFormat`]), the micro-kernel, its block sizes and the epilogue compiled for
//! the same features. [`table`] lists the families of this build by preference, ending at the
//! portable one (which needs nothing); [`kernel_set`] returns the first whose requirements
//! the usable features meet.

pub(crate) mod scalar;

#[cfg(target_arch = "x86_64")]
pub(crate) mod amx;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512bf16;

use std::sync::OnceLock;

use super::blocking::Blocking;
use super::epilogue::{FrameEpilogue, TileView};
use crate::cpu::Features;
use crate::desc::DataType;
use crate::runtime::{Bf16Units, MathMode};

/// The arguments of one micro-kernel call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tile {
    /// Depth.
    pub k: usize,
    /// A micro-panel: element (i, p) at `a + p·lda + i`, i < MR.
    pub a: *const f32,
    /// Depth stride of the A micro-panel (MR when packed).
    pub lda: usize,
    /// B micro-panel: element (p, j) at `b + p·NR + j` (packed), at `b + p + j·ldb` for
    /// the kernels that read B in place ([`KernelSet::b_in_place`]), or at `b + p·ldb + j`
    /// for those that read it in place by rows ([`KernelSet::b_in_place_rows`]).
    pub b: *const f32,
    /// Column stride (or, by rows, depth stride) of B read in place (ignored by the kernels
    /// for packed B).
    pub ldb: usize,
    /// C tile: element (i, j) at `c + i·rs_c + j·cs_c`, i < m, j < n.
    pub c: *mut f32,
    /// Row stride of C.
    pub rs_c: usize,
    /// Column stride of C.
    pub cs_c: usize,
    /// Valid rows (≤ MR).
    pub m: usize,
    /// Valid columns (≤ NR).
    pub n: usize,
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of C (0: C is not read).
    pub beta: f32,
    /// Null, or where a kernel of a family that [`KernelSet::packs_a`] stores the A
    /// micro-panel it reads, packed (element (i, p) at `a_pack + p·MR + i`), so that the
    /// calls after it read the packed copy: A is packed by the first call that uses it
    /// instead of in a pass of its own. Only with `m = MR`.
    pub a_pack: *mut f32,
    /// The epilogue the store applies to the tile in registers, where the family
    /// [`KernelSet::fuses_epilogue`] and the frame asked for it ([`TilePost::OFF`]
    /// otherwise).
    pub post: TilePost,
}

/// An epilogue applied by the micro-kernel's store, before the tile leaves the registers:
/// `C = act(alpha·acc + beta·C + row bias + column bias + residual)`, the same operations
/// in the same order as [`crate::gemm::epilogue::FrameEpilogue::apply_tile`] (which rereads
/// the stored tile: on a 1x1 convolution with a bias, ReLU and a shortcut, that second pass
/// took a third of the call). Pointers are tile-relative; null means absent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TilePost {
    /// Bias of row i at `row_bias + i`.
    pub row_bias: *const f32,
    /// Bias of column j at `col_bias + j`.
    pub col_bias: *const f32,
    /// Residual element (i, j) at `res + i·res_rs + j·res_cs`; the stride along the
    /// store's vectors is 1 (rows with `rs_c = 1`, columns with `cs_c = 1`).
    pub res: *const f32,
    /// Row stride of the residual.
    pub res_rs: usize,
    /// Column stride of the residual.
    pub res_cs: usize,
    /// The activation, or `None` when the store applies no epilogue at all. The frame sets
    /// only those the stores vectorise ([`TilePost::vectorised`]); any other is applied lane
    /// by lane, correct but slower than the frame's own pass.
    pub act: Option<crate::Activation>,
}

impl TilePost {
    /// No epilogue in the store.
    pub(crate) const OFF: TilePost = TilePost {
        row_bias: std::ptr::null(),
        col_bias: std::ptr::null(),
        res: std::ptr::null(),
        res_rs: 0,
        res_cs: 0,
        act: None,
    };

    /// The same epilogue for the columns from `j0` on (a kernel call on part of a tile).
    pub(crate) fn columns_from(self, j0: usize) -> TilePost {
        TilePost {
            col_bias: if self.col_bias.is_null() {
                self.col_bias
            } else {
                self.col_bias.wrapping_add(j0)
            },
            res: if self.res.is_null() {
                self.res
            } else {
                self.res.wrapping_add(j0 * self.res_cs)
            },
            ..self
        }
    }

    /// Whether the activation is one the stores vectorise.
    pub(crate) fn vectorised(act: crate::Activation) -> bool {
        use crate::Activation as A;
        matches!(
            act,
            A::None | A::Relu | A::Clip { .. } | A::LeakyRelu { .. }
        )
    }

    /// Element (i, j) of the tile, `c` as stored (alpha·acc + beta·C), after the epilogue.
    ///
    /// # Safety
    /// (i, j) is inside the tile whose epilogue this is: the biases and the residual are
    /// readable there.
    #[inline(always)]
    pub(crate) unsafe fn apply(&self, c: f32, i: usize, j: usize) -> f32 {
        // SAFETY: the caller's contract: row i's and column j's biases and the residual's
        // element (i, j) are readable where present.
        unsafe {
            let rb = if self.row_bias.is_null() {
                0.0
            } else {
                *self.row_bias.add(i)
            };
            let cb = if self.col_bias.is_null() {
                0.0
            } else {
                *self.col_bias.add(j)
            };
            let r = if self.res.is_null() {
                0.0
            } else {
                *self.res.add(i * self.res_rs + j * self.res_cs)
            };
            self.act.unwrap_or_default().apply(c + rb + cb + r)
        }
    }
}

/// Depth steps ahead at which the f32 micro-kernels prefetch the packed A micro-panel they
/// read. A panel packed ahead of time (prepared weights) comes from memory once per call,
/// where the hardware prefetchers restart at every 4 KiB page: ResNet-50's forward pass at
/// batch 1 took 8 % less time with it (1 and 2 threads), GEMM 1024³ the same.
pub(super) const A_PREFETCH_STEPS: usize = 16;

/// A micro-kernel.
///
/// # Safety
/// The CPU supports the kernel's instruction set; `k ≥ 1`; `a` is readable at every
/// `p·lda + i` for p < k, i < MR; `b` is readable for `k·NR` elements (for a kernel reading
/// B in place: at every `p + j·ldb` for p < k, j < n); `c` is writable (and,
/// when beta ≠ 0, readable) at `i·rs_c + j·cs_c` for i < m ≤ MR, j < n ≤ NR, and no other
/// thread accesses those elements during the call. Where `a_pack` is not null (only for a
/// family that packs A, with m = MR): it is writable for `k·MR` elements that nothing else
/// accesses during the call.
pub(crate) type UKernel = unsafe fn(&Tile);

/// Applies an epilogue to a tile (i0, j0: the tile's first element in the output).
pub(crate) type EpilogueFn = fn(&FrameEpilogue<'_>, &mut TileView<'_>, usize, usize);

/// A vectorised transpose used by packing: `w ≤ max_w` source rows of `strip` contiguous
/// floats each (row r at `src + r·ld`) become `strip` rows of `w` floats (row q at
/// `dst + q·w`).
#[derive(Debug)]
pub(crate) struct Transposer {
    /// Columns per call.
    pub strip: usize,
    /// Most rows per call.
    pub max_w: usize,
    /// The transpose.
    ///
    /// # Safety
    /// The CPU supports the family's instruction set; `w ≤ max_w`; `src` is readable at
    /// `r·ld + q` for r < w, q < strip; `dst` is writable at `q·ldd + r` for q < strip,
    /// r < w (output row q, the source's column q, is `w` floats at `dst + q·ldd`).
    pub run: unsafe fn(src: *const f32, ld: usize, w: usize, dst: *mut f32, ldd: usize),
}

impl Transposer {
    /// [`Transposer::run`] for any number of rows: `rows` source rows of one strip (`ld`
    /// apart) into `strip` rows of `rows` floats (`ldd` apart), in blocks of `max_w` rows.
    ///
    /// # Safety
    /// The contract of [`Transposer::run`] with `rows` in place of `w ≤ max_w`.
    pub(crate) unsafe fn strip_rows(
        &self,
        src: *const f32,
        ld: usize,
        rows: usize,
        dst: *mut f32,
        ldd: usize,
    ) {
        for rb in (0..rows).step_by(self.max_w) {
            let w = self.max_w.min(rows - rb);
            // SAFETY: rows rb .. rb + w (< rows) of the strip and their writes, columns
            // rb .. rb + w of each output row, are within the caller's contract.
            unsafe { (self.run)(src.add(rb * ld), ld, w, dst.add(rb), ldd) }
        }
    }
}

/// How a family's packed A and B panels hold their elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackFormat {
    /// f32 micro-panels: A's `MR` rows and B's `NR` columns contiguous per depth step.
    F32Panels,
    /// bf16 pairs along the depth, as AVX512-BF16 dot products read them: the
    /// panel of the f32 format, its depth steps 2q and 2q + 1 rounded to bf16 and held
    /// together in the 32-bit slot of step q (low half 2q), `ceil(kc / 2)` steps. The frame
    /// packs f32 panels and the family's [`KernelSet::pairs`] converts them in place.
    Bf16Pairs,
    /// The AMX tile formats, in bf16 pairs like [`PackFormat::Bf16Pairs`] (see the AMX-BF16
    /// kernel family): A's panels are pair panels whose pair steps are zero-filled up to
    /// a multiple of 16 (a tile's depth), B's hold each column's pairs contiguously, 16 per
    /// tile row, block after block of 16 pair steps (zero-filled). Both fit the f32 panel's
    /// `kc·w` elements for `kc ≥ 16` ([`KernelSet::min_depth`]).
    AmxTiles,
}

impl PackFormat {
    /// The number prepared weights record for the format (0, 1, 2), and back.
    pub(crate) fn code(self) -> u8 {
        match self {
            PackFormat::F32Panels => 0,
            PackFormat::Bf16Pairs => 1,
            PackFormat::AmxTiles => 2,
        }
    }

    /// The format of [`PackFormat::code`] `c`.
    pub(crate) fn from_code(c: u8) -> Option<PackFormat> {
        [
            PackFormat::F32Panels,
            PackFormat::Bf16Pairs,
            PackFormat::AmxTiles,
        ]
        .into_iter()
        .find(|f| f.code() == c)
    }

    /// Whether the panels hold bf16 values (rounded from f32 unless they were bf16).
    pub(crate) fn is_bf16(self) -> bool {
        self != PackFormat::F32Panels
    }
}

/// Converts a packed panel of `kc` depth steps of `w` elements (f32, or bf16 pairs, as the
/// conversion says) in place into a family's format.
///
/// # Safety
/// The CPU has the family's features; `buf` is readable and writable for `kc·w` floats.
pub(crate) type PairsFn = unsafe fn(buf: *mut f32, w: usize, kc: usize);

/// How a bf16 family's panels are made: from the frame's f32 panels, or from pair panels
/// ([`PackFormat::Bf16Pairs`], as packers of bf16 data write them directly).
#[derive(Debug)]
pub(crate) struct PairsConversion {
    /// An f32 A panel into the family's A format.
    pub a_from_f32: PairsFn,
    /// An f32 B panel into the family's B format.
    pub b_from_f32: PairsFn,
    /// A pair A panel into the family's A format; `None` where they are the same.
    pub a_from_pairs: Option<PairsFn>,
    /// A pair B panel into the family's B format; `None` where they are the same.
    pub b_from_pairs: Option<PairsFn>,
}

/// Per-thread state a family's kernels need around a run of micro-kernel calls (AMX: the
/// tile configuration): `begin` before the first call of a block, `end` after its last, on
/// the same thread, with nothing between them that uses the state.
#[derive(Debug)]
pub(crate) struct TileState {
    /// Sets the state up.
    ///
    /// # Safety
    /// The CPU has the family's features.
    pub begin: unsafe fn(),
    /// Releases it.
    ///
    /// # Safety
    /// As `begin`, which ran before on this thread.
    pub end: unsafe fn(),
}

/// A kernel family: the features it needs, its types and packing, the micro-kernel, its
/// block sizes, the epilogue for the same features.
#[derive(Debug)]
pub(crate) struct KernelSet {
    /// A name for logs and benchmarks, e.g. `avx512-32x14`.
    pub name: &'static str,
    /// The processor features its kernels use; the family is chosen only where all are
    /// usable.
    pub requires: Features,
    /// Element type of the packed operands the micro-kernel reads.
    pub operand: DataType,
    /// Element type of its accumulators.
    pub accumulator: DataType,
    /// How its A and B panels are packed.
    pub packing: PackFormat,
    /// Register tile and cache blocks.
    pub blocking: Blocking,
    /// The micro-kernel.
    pub ukr: UKernel,
    /// Kernels for a last column panel of n < NR columns, `edge[n − 1]` (same contract, B
    /// panels still NR wide; they skip the padding columns' multiply-adds); empty when the
    /// family has none.
    pub edge: &'static [UKernel],
    /// The epilogue, compiled for `isa`.
    pub epilogue: EpilogueFn,
    /// A vectorised transpose for packing, where the family has one.
    pub transposer: Option<&'static Transposer>,
    /// Kernels that read an unpacked B micro-panel of n ≤ NR columns in place, depth
    /// contiguous (element (p, j) at `b + p + j·ldb`), `b_in_place[n − 1]`; empty when the
    /// family has none.
    pub b_in_place: &'static [UKernel],
    /// Kernels that read an unpacked B micro-panel of n ≤ NR columns in place from a B whose
    /// columns are contiguous (element (p, j) at `b + p·ldb + j`: each depth step's NR values
    /// side by side, as in a packed panel, but `ldb` apart instead of NR),
    /// `b_in_place_rows[n − 1]`; empty when the family has none.
    pub b_in_place_rows: &'static [UKernel],
    /// Whether the kernels store the A micro-panel they read where [`Tile::a_pack`] says
    /// (the others ignore it).
    pub packs_a: bool,
    /// Whether the kernels' store applies [`Tile::post`] (the others ignore it, and the
    /// frame applies the epilogue to the stored tile instead).
    pub fuses_epilogue: bool,
    /// For the bf16 formats: how panels are converted into them.
    pub pairs: Option<&'static PairsConversion>,
    /// State the kernels need set up around their calls, where they need any.
    pub tiles: Option<&'static TileState>,
    /// The least depth `k` of a product the family runs (1 for most; AMX's panels are cut
    /// in tiles of 32).
    pub min_depth: usize,
    /// For bf16 families: one thread's peak loop on the family's multiply units, run for
    /// `iters` rounds, returning the flops done (the measured speed-up over f32 that
    /// [`Bf16Units::Auto`] asks for).
    ///
    /// # Safety
    /// The CPU has the family's features.
    pub unit_peak: Option<unsafe fn(iters: u64) -> u64>,
}

/// This build's kernel families, most preferred first; the last, the portable family, needs
/// no feature. Block sizes include the `AUTODNN_GEMM_*` overrides.
pub(crate) fn table() -> &'static [KernelSet] {
    static SETS: OnceLock<Vec<KernelSet>> = OnceLock::new();
    SETS.get_or_init(|| {
        let sets = [
            #[cfg(target_arch = "x86_64")]
            amx::kernel_set(),
            #[cfg(target_arch = "x86_64")]
            avx512bf16::kernel_set(),
            #[cfg(target_arch = "x86_64")]
            avx512::kernel_set(),
            #[cfg(target_arch = "x86_64")]
            avx2::kernel_set(),
            scalar::kernel_set(),
        ];
        sets.into_iter()
            .map(|set| KernelSet {
                blocking: set.blocking.with_env_override(),
                ..set
            })
            .collect()
    })
}

/// The f32 kernel family for the usable `features`: the first in [`table`] whose
/// requirements they meet. Features this CPU lacks are ignored, so the family chosen always
/// runs here.
pub(crate) fn kernel_set(features: Features) -> &'static KernelSet {
    let usable = features.intersection(Features::detected());
    let sets = table();
    // The frame (`super::loops`) packs f32 panels and accumulates in f32.
    let f32_frame = |s: &KernelSet| {
        s.operand == DataType::F32
            && s.accumulator == DataType::F32
            && s.packing == PackFormat::F32Panels
    };
    sets.iter()
        .find(|s| f32_frame(s) && usable.contains_all(s.requires))
        .unwrap_or(&sets[sets.len() - 1])
}

/// The kernel family for a product of depth `k` with operands of `dtype` under `math` and
/// `units`: where the operands may be computed in bf16 (bf16 data always, f32 data under
/// [`MathMode::AllowBf16`]), the first bf16 family in [`table`] that the usable `features`
/// run and that takes depth `k` (AMX tiles before AVX512-BF16), if `units` lets it (for
/// [`Bf16Units::Auto`]: where that family's units are measured faster than the f32 ones,
/// [`unit_speedup`]); else the f32 family of [`kernel_set`] (which computes the same
/// products from the operands converted to f32).
pub(crate) fn kernel_set_for(
    features: Features,
    dtype: DataType,
    math: MathMode,
    units: Bf16Units,
    k: usize,
) -> &'static KernelSet {
    let bf16 = match dtype {
        DataType::Bf16 => true,
        DataType::F32 => math == MathMode::AllowBf16,
        DataType::F16 => false,
    };
    let family = (bf16 && units != Bf16Units::Never)
        .then(|| bf16_family(features, k))
        .flatten()
        .filter(|s| {
            units == Bf16Units::Always
                || unit_speedup(s).is_some_and(|x| x >= super::BF16_UNITS_MIN_SPEEDUP)
        });
    family.unwrap_or_else(|| kernel_set(features))
}

/// The first bf16 family in [`table`] the usable `features` run for products of depth `k`.
pub(crate) fn bf16_family(features: Features, k: usize) -> Option<&'static KernelSet> {
    let usable = features.intersection(Features::detected());
    table().iter().find(|s| {
        s.operand == DataType::Bf16
            && s.accumulator == DataType::F32
            && s.packing.is_bf16()
            && s.pairs.is_some()
            && s.unit_peak.is_some()
            && k >= s.min_depth
            && usable.contains_all(s.requires)
    })
}

/// A bf16 family's units' throughput over the f32 multiply-adds' (one core, in flops),
/// measured once per process and family ([`super::peak`]); `None` for a family without a
/// peak loop or that this CPU does not run.
pub(crate) fn unit_speedup(ks: &KernelSet) -> Option<f64> {
    const MOST: usize = 8;
    static SPEEDUPS: [OnceLock<Option<f64>>; MOST] = [const { OnceLock::new() }; MOST];
    let i = table().iter().position(|s| std::ptr::eq(s, ks))?;
    let peak = ks.unit_peak?;
    if !Features::detected().contains_all(ks.requires) {
        return None;
    }
    let measure = || {
        // SAFETY: the family's features were detected just above.
        super::peak::speedup_over_f32(&|iters| unsafe { peak(iters) })
    };
    match SPEEDUPS.get(i) {
        Some(cell) => *cell.get_or_init(measure),
        None => measure(),
    }
}

/// Updates C from an accumulator tile stored column-major with leading dimension `mr`
/// (element (i, j) at `j·mr + i`), for any strides: `C = alpha·acc + beta·C`. `FUSED` uses
/// one fused multiply-add for the beta term (only where FMA instructions exist), then the
/// tile's epilogue ([`Tile::post`]) where it has one.
///
/// # Safety
/// As for [`UKernel`] regarding `t.c`, `t.m`, `t.n`; `acc` holds `mr · t.n` elements.
#[inline(always)]
pub(crate) unsafe fn update_general<const FUSED: bool>(acc: &[f32], mr: usize, t: &Tile) {
    for j in 0..t.n {
        let col = &acc[j * mr..j * mr + t.m];
        for (i, &v) in col.iter().enumerate() {
            let ab = t.alpha * v;
            // SAFETY: (i, j) with i < m, j < n is an element of the tile (the caller's
            // contract).
            let c = unsafe { &mut *t.c.add(i * t.rs_c + j * t.cs_c) };
            let y = if t.beta == 0.0 {
                ab
            } else if FUSED {
                t.beta.mul_add(*c, ab)
            } else {
                t.beta * *c + ab
            };
            *c = if t.post.act.is_some() {
                // SAFETY: (i, j) is inside the tile, where the epilogue's operands are
                // readable (Tile::post).
                unsafe { t.post.apply(y, i, j) }
            } else {
                y
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::Isa;

    #[test]
    fn the_table_ends_portable_and_selection_respects_requirements() {
        let sets = table();
        assert!(sets.last().unwrap().requires.is_empty());
        for isa in Isa::ALL {
            let usable = isa.usable();
            let ks = kernel_set(usable);
            assert!(usable.contains_all(ks.requires));
            // The first usable f32 entry of the table, never one it lists later.
            let first = sets.iter().position(|s| {
                s.packing == PackFormat::F32Panels && usable.contains_all(s.requires)
            });
            assert_eq!(first.map(|i| sets[i].name), Some(ks.name));
        }
        // Features this CPU lacks never choose a family it cannot run.
        let ks = kernel_set(Features::all());
        assert!(Features::detected().contains_all(ks.requires));
        assert_eq!(kernel_set(Features::empty()).name, "scalar-8x4");
    }

    /// Every family whose store applies the epilogue, through each of its store's paths
    /// (columns contiguous, rows contiguous, neither), whole and ragged tiles, each
    /// vectorised activation and one that is not, and each operand absent in turn: exact on
    /// integers (the sigmoid bit for bit with `Activation::apply`), elements between the
    /// tile's untouched.
    #[test]
    fn stores_apply_the_epilogue_in_every_path() {
        use crate::Activation;
        let detected = Features::detected();
        let int = |s: usize| ((s * 7919 + 13) % 9) as f32 - 4.0;
        let families = table().iter().filter(|s| {
            s.fuses_epilogue
                && s.packing == PackFormat::F32Panels
                && detected.contains_all(s.requires)
        });
        let mut ran = Vec::new();
        for ks in families {
            ran.push(ks.name);
            let (mr, nr, k) = (ks.blocking.mr, ks.blocking.nr, 9);
            let a: Vec<f32> = (0..k * mr).map(int).collect();
            let b: Vec<f32> = (0..k * nr).map(|s| int(s + 101)).collect();
            for (rs, cs) in [(1, mr + 3), (nr + 2, 1), (3, 3 * mr + 1)] {
                for (m, n) in [(mr, nr), (mr - 5, nr - 3)] {
                    let acts = [
                        Activation::None,
                        Activation::Relu,
                        Activation::Clip { lo: -3.0, hi: 5.0 },
                        Activation::LeakyRelu { slope: 0.5 },
                        // Not vectorised: lane by lane, the scalar function's bits.
                        Activation::Sigmoid,
                    ];
                    for (v, act) in acts.into_iter().enumerate() {
                        let span = (m - 1) * rs + (n - 1) * cs + 1;
                        let c0: Vec<f32> = (0..span).map(|s| int(s + 7)).collect();
                        let rb: Vec<f32> = (0..m).map(|s| int(s + 3)).collect();
                        let cb: Vec<f32> = (0..n).map(|s| int(s + 5)).collect();
                        // Contiguous along the store's vectors, as the frame asks.
                        let (rrs, rcs) = match (rs, cs) {
                            (1, _) => (1, m + 2),
                            (_, 1) => (n + 1, 1),
                            _ => (2, 2 * m + 5),
                        };
                        let res: Vec<f32> = (0..(m - 1) * rrs + (n - 1) * rcs + 1)
                            .map(|s| int(s + 11))
                            .collect();
                        let (with_rb, with_cb, with_res) = (v != 1, v != 2, v != 3);
                        let or_null =
                            |on: bool, p: *const f32| if on { p } else { std::ptr::null() };
                        let mut c = c0.clone();
                        let t = Tile {
                            k,
                            a: a.as_ptr(),
                            lda: mr,
                            b: b.as_ptr(),
                            ldb: 0,
                            c: c.as_mut_ptr(),
                            rs_c: rs,
                            cs_c: cs,
                            m,
                            n,
                            alpha: 2.0,
                            beta: if v == 0 { 0.0 } else { 1.0 },
                            a_pack: std::ptr::null_mut(),
                            post: TilePost {
                                row_bias: or_null(with_rb, rb.as_ptr()),
                                col_bias: or_null(with_cb, cb.as_ptr()),
                                res: or_null(with_res, res.as_ptr()),
                                res_rs: rrs,
                                res_cs: rcs,
                                act: Some(act),
                            },
                        };
                        // SAFETY: the family's features are detected; A and B are packed
                        // panels k deep; the tile, the biases and the residual lie in the
                        // vectors above.
                        unsafe { (ks.ukr)(&t) };
                        let mut want = c0.clone();
                        for i in 0..m {
                            for j in 0..n {
                                let dot: f32 = (0..k).map(|p| a[p * mr + i] * b[p * nr + j]).sum();
                                let x = i * rs + j * cs;
                                let mut y = 2.0 * dot + t.beta * c0[x];
                                y += if with_rb { rb[i] } else { 0.0 };
                                y += if with_cb { cb[j] } else { 0.0 };
                                y += if with_res {
                                    res[i * rrs + j * rcs]
                                } else {
                                    0.0
                                };
                                want[x] = act.apply(y);
                            }
                        }
                        assert_eq!(c, want, "{} {act:?} rs {rs} cs {cs} {m}x{n}", ks.name);
                    }
                }
            }
        }
        // The portable family on every machine, and each vector family the CPU has.
        eprintln!("stores with the epilogue checked: {ran:?}");
        assert!(ran.contains(&"scalar-8x4"));
        assert_eq!(
            ran.contains(&"avx512-32x14"),
            detected.contains_all(Features::AVX512F)
        );
    }
}
