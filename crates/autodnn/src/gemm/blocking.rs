//! Block sizes and thresholds: the numbers that shape the five loops, as data.
//!
//! After BLIS's analytical model, each block size comes from one level of the memory
//! hierarchy:
//!
//! - `MR × NR`, the register tile, from the vector registers (see each kernel);
//! - `KC`, the depth block, from L2: a B micro-panel (`KC × NR`) takes at most a quarter of
//!   it, capped at [`KC_MAX`]. BLIS sizes it from L1 instead (the B micro-panel resident
//!   there), but the micro-kernels stream both micro-panels from L2 at full speed (a 32 × 14
//!   tile ran at 99% of peak with 8 A and 16 B micro-panels of depth 512 cycling through L2),
//!   and every depth block is one more pass over C: 1024 instead of 512 was 1.6% faster at
//!   1024³ and 3.5% at 2048³ on one thread, 1 to 3% on two;
//! - `MC` so that the packed block of A (`MC × KC`) fills the L2 cache, which holds it while
//!   the `jr` loop sweeps the B panel (half of L2 was 1 to 2% slower at 2048³);
//! - `NC` so that the B panel (`KC × NC`) fits the L3 budget: the panel is streamed from L3
//!   once per A block, so it only has to stay there, and every further panel along `n` packs
//!   each A block again (n = 2048 as three panels of 686 columns spent 5% of its time
//!   packing A, as one panel 2%; as two panels it was 1% slower than as one).
//!
//! The cache geometry assumed is the smallest of today's AVX-512 server cores (AMD Zen 4:
//! 32 KiB L1d, 1 MiB L2, 32 MiB of L3 per 8 cores); Intel Sapphire Rapids (48 KiB, 2 MiB) has
//! more L1 and L2, so the same sizes stay resident there. `AUTODNN_GEMM_BLOCKING=mc,kc,nc`
//! overrides the three outer sizes (for tuning; read once per process).

use std::sync::OnceLock;

/// Cache sizes (bytes) the block sizes are derived from.
#[derive(Debug, Clone, Copy)]
pub struct CacheGeometry {
    /// L1 data cache per core.
    pub l1: usize,
    /// L2 cache per core.
    pub l2: usize,
    /// L3 a B panel may occupy.
    pub l3: usize,
}

/// The geometry the built-in block sizes are chosen for.
pub const ASSUMED_CACHES: CacheGeometry = CacheGeometry {
    l1: 32 << 10,
    l2: 1 << 20,
    // A quarter of a Zen 4 chiplet's 32 MiB, shared by 8 cores: a panel streamed from L3
    // (never reused from a higher level) may take twice a core's even share.
    l3: 8 << 20,
};

/// Deepest depth block: beyond it the passes over C saved no longer matter, and the B
/// micro-panels of narrow tiles would crowd the A block out of L2.
pub const KC_MAX: usize = 1024;

/// Environment variable overriding `mc,kc,nc` of every kernel family.
pub const BLOCKING_ENV: &str = "AUTODNN_GEMM_BLOCKING";

/// The block sizes of one kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocking {
    /// Rows of the register tile (the vector direction: contiguous in packed A and in C).
    pub mr: usize,
    /// Columns of the register tile (broadcast from packed B).
    pub nr: usize,
    /// Rows of A packed at once (a multiple of `mr`).
    pub mc: usize,
    /// Depth packed at once.
    pub kc: usize,
    /// Columns of B packed at once (a multiple of `nr`).
    pub nc: usize,
}

impl Blocking {
    /// Derives `mc`, `kc`, `nc` for an `mr × nr` register tile from a cache geometry: a
    /// B micro-panel takes at most a quarter of L2 (at most [`KC_MAX`] deep), the A block
    /// fills L2, the B panel the L3 budget (rounded up to whole micro-panels, so that a
    /// power-of-two `n` equal to the budget's columns is one panel, not two).
    pub const fn for_tile(mr: usize, nr: usize, caches: CacheGeometry) -> Blocking {
        let f = std::mem::size_of::<f32>();
        let kc = round_down(caches.l2 / 4 / (nr * f), 16);
        let kc = if kc > KC_MAX { KC_MAX } else { kc };
        let mc = round_down(caches.l2 / (kc * f), mr);
        let nc = (caches.l3 / (kc * f)).div_ceil(nr) * nr;
        Blocking { mr, nr, mc, kc, nc }
    }

    /// This blocking with `mc`, `kc`, `nc` replaced by `AUTODNN_GEMM_BLOCKING` when it is
    /// set to three positive integers (rounded to multiples of `mr` and `nr`); unchanged
    /// otherwise.
    pub fn with_env_override(self) -> Blocking {
        match env_override() {
            Some([mc, kc, nc]) => Blocking {
                mc: mc.div_ceil(self.mr) * self.mr,
                kc,
                nc: nc.div_ceil(self.nr) * self.nr,
                ..self
            },
            None => self,
        }
    }
}

const fn round_down(x: usize, to: usize) -> usize {
    let r = x / to * to;
    if r == 0 {
        to
    } else {
        r
    }
}

fn env_override() -> Option<[usize; 3]> {
    static PARSED: OnceLock<Option<[usize; 3]>> = OnceLock::new();
    *PARSED.get_or_init(|| {
        let v = std::env::var(BLOCKING_ENV).ok()?;
        let parts: Vec<usize> = v
            .split(',')
            .map(|s| s.trim().parse().ok().filter(|&x: &usize| x > 0))
            .collect::<Option<_>>()?;
        <[usize; 3]>::try_from(parts).ok()
    })
}

/// Thresholds that pick a path by problem size (all counted in multiply-adds, m·n·k, or in
/// elements).
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// Below this many multiply-adds a call runs on one thread: handing work to another
    /// thread costs more than it saves.
    pub parallel_min_fmas: usize,
    /// A (the vector side) is read in place instead of packed when it is unit-stride along
    /// the vector direction and at most this many rows (and `k` fits one `KC` block): then
    /// every element is used by few micro-tiles and packing costs more than it saves. Above
    /// it the operand read in place (strided, often from L3) no longer stays in L2 between
    /// the micro-panels of B: at 512 × 512 × 512, packing it was as fast with A in L3 and 5%
    /// faster with A in memory.
    pub direct_max_m: usize,
    /// From this many multiply-adds up, threads that split the rows of C share one packed B
    /// panel (packed together, two forks per depth block); below it each thread packs its
    /// own (one fork per call).
    pub shared_b_min_fmas: usize,
    /// Batches of products each below this many multiply-adds run one product per thread,
    /// across the batch; larger products use all threads each, one after the other.
    pub batch_split_max_fmas: usize,
    /// What packing one element costs, in multiply-adds of the micro-kernel's time: it
    /// weighs the packing that a thread split duplicates (every thread packs the operand the
    /// split does not divide) against the split's balance. About 0.6 ns per element against
    /// 58 G multiply-adds per second on one AVX-512 core.
    pub pack_fmas_per_element: usize,
    /// B (the broadcast side) is read in place, not packed, when it is unit-stride along the
    /// depth. Its columns a multiple of this many bytes apart (the L1 way size, 4 KiB on the
    /// x86 cores in view) all map to one L1 set: a micro-kernel call then reads at most
    /// `b_in_place_alias_cols` of them, or they evict each other. In place, a 32 × 14 tile ran
    /// at 77% of its packed speed with columns 4 KiB apart, at its packed speed 2 or 6 KiB
    /// apart, and two 32 × 7 calls at the packed speed 4 or 8 KiB apart.
    pub b_in_place_alias_bytes: usize,
    /// Most columns of B read in place per micro-kernel call when they alias in L1 (see
    /// `b_in_place_alias_bytes`): fewer than the ways of L1 (8), leaving room for A and C.
    pub b_in_place_alias_cols: usize,
    /// B whose columns are contiguous is read in place by rows (each depth step's columns
    /// side by side), not packed, unless its depth steps lie a multiple of this many bytes
    /// apart: a micro-panel's steps would then share a quarter of the L1 sets or fewer.
    pub b_in_place_rows_alias_bytes: usize,
    /// A row split with B read in place (nothing duplicated) and B at most this many bytes
    /// (so that it stays in L2 while every block streams it) is cut into
    /// `dynamic_blocks_per_thread` blocks per thread, each thread taking its own and then
    /// those the others have not started: a thread that starts late (woken late, or its core
    /// taken by other load) then costs one small block, not half the product. At 256³ on 2
    /// threads: +1.4% on an idle machine, +3.8% (median) and +8% (mean) under a periodic load
    /// of 1 ms in 10 ms.
    pub dynamic_split_max_b_bytes: usize,
    /// Blocks per thread of a dynamic split (see `dynamic_split_max_b_bytes`).
    pub dynamic_blocks_per_thread: usize,
}

/// The thresholds in force (the same for every kernel family).
pub const THRESHOLDS: Thresholds = Thresholds {
    parallel_min_fmas: 96 * 96 * 96,
    direct_max_m: 256,
    shared_b_min_fmas: 768 * 768 * 768,
    batch_split_max_fmas: 256 * 256 * 256,
    pack_fmas_per_element: 32,
    b_in_place_alias_bytes: 4096,
    b_in_place_alias_cols: 7,
    b_in_place_rows_alias_bytes: 256,
    dynamic_split_max_b_bytes: 512 << 10,
    dynamic_blocks_per_thread: 4,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_follow_the_caches() {
        // AVX-512 32 × 14 on 1 MiB of L2: a 56 KiB B micro-panel, a 1 MiB A block.
        let b = Blocking::for_tile(32, 14, ASSUMED_CACHES);
        assert_eq!((b.kc, b.mc), (KC_MAX, 256));
        // The B panel: 2048 columns (8 MiB) rounded up to whole micro-panels.
        assert_eq!(b.nc, 2058);
        let b = Blocking::for_tile(16, 6, ASSUMED_CACHES);
        assert_eq!((b.kc, b.mc), (KC_MAX, 256));
        // A small L2 makes the depth block shallower and keeps the A block inside it.
        let small = CacheGeometry {
            l2: 128 << 10,
            ..ASSUMED_CACHES
        };
        let b = Blocking::for_tile(32, 14, small);
        assert_eq!((b.kc, b.mc), (576, 32));
    }
}
