//! A seeded random number generator (SplitMix64), so a soak's choices — which workload
//! comes next, which fault, how long to wait — follow from its seed alone. Each part of
//! the soak draws from its own stream ([`Rng::stream`]), so the faults come in the same
//! order whatever the workload's timing did to its own draws.

/// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit state, a good spread for this use.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// An independent stream for one part of the soak, named so that adding a stream
    /// never shifts another.
    pub fn stream(seed: u64, name: &str) -> Self {
        let mut r = Self(seed);
        for b in name.bytes() {
            r.0 ^= u64::from(b);
            r.next_u64();
        }
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        debug_assert!(low <= high);
        low + self.next_u64() % (high - low + 1)
    }

    /// A duration in `[d/2, 3d/2]` (milliseconds resolution).
    pub fn around(&mut self, d: std::time::Duration) -> std::time::Duration {
        let ms = d.as_millis() as u64;
        std::time::Duration::from_millis(self.range(ms / 2, ms + ms / 2))
    }

    /// The items in a random order (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.range(0, i as u64) as usize;
            items.swap(i, j);
        }
    }
}
