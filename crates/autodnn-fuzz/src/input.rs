//! Reading structured values from fuzz bytes: every read succeeds (zeros past the end), so
//! every byte string is some input.

/// A cursor over the fuzz input.
pub struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data, pos: 0 }
    }

    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        let v = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        v
    }

    /// The next 8 bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        for i in 0..8 {
            v |= u64::from(self.u8()) << (8 * i);
        }
        v
    }

    /// A flag.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// Uniform-ish in `0..n` (`n` ≥ 1).
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.u8()) % n.max(1)
    }

    /// One of `xs`.
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    /// A size: mostly small (`0..=small`), sometimes moderate, sometimes at the edges of the
    /// ranges the library checks (2^31, `isize::MAX`, `usize::MAX`, ...).
    pub fn size(&mut self, small: usize) -> usize {
        let sel = self.u8();
        match sel % 16 {
            0..=10 => usize::from(self.u8()) % (small + 1),
            11 => usize::from(self.u8()) + 256 * usize::from(self.u8() & 3),
            12 => {
                let edges = [
                    0,
                    1,
                    (1 << 31) - 1,
                    1 << 31,
                    1 << 32,
                    (isize::MAX as usize) / 4,
                    isize::MAX as usize,
                    usize::MAX / 2 + 1,
                    usize::MAX - 1,
                    usize::MAX,
                ];
                self.pick(&edges)
            }
            13 => 1usize << self.below(64),
            _ => self.u64() as usize,
        }
    }

    /// A signed value built like [`Bytes::size`], negative half of the time.
    pub fn signed(&mut self, small: usize) -> i64 {
        let neg = self.bool();
        let v = self.size(small);
        let v = i64::try_from(v).unwrap_or(i64::MAX);
        if neg {
            v.checked_neg().unwrap_or(i64::MIN)
        } else {
            v
        }
    }

    /// Bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }
}

/// splitmix64: deterministic data from a seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Integer values in [-4, 4]: sums of up to 2^20 products stay exact in f32.
pub fn int_data(len: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    (0..len).map(|_| (r.next_u64() % 9) as f32 - 4.0).collect()
}
