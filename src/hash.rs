//! The project's one stable hash: 64-bit FNV-1a followed by SplitMix64's
//! finalizer where a well-mixed value is needed.
//!
//! Stable across Rust releases and platforms (unlike `DefaultHasher`):
//! split assignment, root sampling and the plugin's file names depend on it,
//! so its values are pinned by tests and must never change.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// Incremental 64-bit FNV-1a.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(OFFSET)
    }
}

impl Fnv1a {
    /// Feeds bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(PRIME);
        }
    }

    /// Feeds one byte.
    pub fn write_u8(&mut self, b: u8) {
        self.0 = (self.0 ^ u64::from(b)).wrapping_mul(PRIME);
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a::default();
    h.write(bytes);
    h.finish()
}

/// [`mix`]'s constants: the increment, then the two multipliers (public
/// so that a vectorised copy of `mix`, the model's dropout masks, uses the
/// very same ones).
pub const MIX_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
pub const MIX_MUL: [u64; 2] = [0xBF58_476D_1CE4_E5B9, 0x94D0_49BB_1331_11EB];

/// SplitMix64's finalizer: a fixed, well-mixed 64-bit hash of a 64-bit value.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(MIX_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(MIX_MUL[0]);
    z = (z ^ (z >> 27)).wrapping_mul(MIX_MUL[1]);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_values() {
        // Published FNV-1a test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        let mut h = Fnv1a::default();
        h.write(b"foo");
        h.write_u8(b'b');
        h.write(b"ar");
        assert_eq!(h.finish(), fnv1a(b"foobar"));
        assert_eq!(mix(0), 0xe220_a839_7b1d_cdaf);
    }
}
