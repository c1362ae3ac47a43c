//! A seeded random source that gives the same numbers on every run and machine: SplitMix64 for
//! bits, and libm (pure Rust, no platform libm) for the transcendental functions of Box-Muller.

#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal by Box-Muller; the open interval keeps ln away from 0.
    pub fn normal(&mut self) -> f64 {
        let u1 = (self.next_u64() >> 11) as f64 + 0.5;
        let u1 = u1 * (1.0 / (1u64 << 53) as f64);
        let u2 = self.uniform();
        libm::sqrt(-2.0 * libm::log(u1)) * libm::cos(2.0 * std::f64::consts::PI * u2)
    }

    /// Uniform integer in `0..n` (n > 0); the modulo bias is below 2^-40 for any n we use.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
