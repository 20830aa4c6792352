//! FNV-1a, the one non-cryptographic hash the project uses wherever it needs a stable value from
//! bytes: the jitter of a pod's back-off, the ID of a
//! readiness-gate container, the UID of a pod from a manifest file. Stable across runs and
//! builds (unlike `std`'s `DefaultHasher`, whose output may change between Rust releases), and
//! written here because it is a few lines (the `fnv` crate has no 128-bit variant).

/// FNV-1a, 64 bits.
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a64(u64);

impl Fnv1a64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// The empty hash.
    pub fn new() -> Self {
        Fnv1a64(Self::OFFSET_BASIS)
    }

    /// Hashes `bytes` into the state.
    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// The hash of everything written.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self::new()
    }
}

/// FNV-1a, 64 bits, of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash = Fnv1a64::new();
    hash.write(bytes);
    hash.finish()
}

/// FNV-1a, 128 bits.
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a128(u128);

impl Fnv1a128 {
    const OFFSET_BASIS: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

    /// The empty hash.
    pub fn new() -> Self {
        Fnv1a128(Self::OFFSET_BASIS)
    }

    /// Hashes `bytes` into the state.
    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u128::from(*byte);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// The hash of everything written.
    pub fn finish(&self) -> u128 {
        self.0
    }
}

impl Default for Fnv1a128 {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Published FNV-1a test vectors.
    #[test]
    fn known_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        let mut empty = Fnv1a128::new();
        empty.write(b"");
        assert_eq!(empty.finish(), 0x6c62272e07bb014262b821756295c58d);
        let mut a = Fnv1a128::new();
        a.write(b"a");
        assert_eq!(a.finish(), 0xd228cb696f1a8caf78912b704e4a8964);
    }

    #[test]
    fn writes_in_pieces_hash_as_one() {
        let mut pieces = Fnv1a64::new();
        pieces.write(b"foo");
        pieces.write(b"bar");
        assert_eq!(pieces.finish(), fnv1a64(b"foobar"));
    }
}
