//! Element types of the products, and the branch-free transcendental
//! functions the loops vectorise.
//!
//! The exponential is a branch-free polynomial (Cephes' `expf`, relative
//! error ~1e-7) that the compiler vectorises.

/// An element of a product: FP32, or BF16 stored as its upper 16 bits.
pub trait Elem: Copy + Send + Sync + 'static {
    fn f32(self) -> f32;
    fn from_f32(x: f32) -> Self;
}

impl Elem for f32 {
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(x: f32) -> f32 {
        x
    }
}

/// BF16 bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct Bf16(pub u16);

impl Elem for Bf16 {
    #[inline(always)]
    fn f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
    /// Round to nearest even, as libtorch converts (NaN never occurs here).
    #[inline(always)]
    fn from_f32(x: f32) -> Bf16 {
        let bits = x.to_bits();
        Bf16(((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16)
    }
}

/// `e^x`, branch-free: `2^n · p(r)` with `x = n ln 2 + r`, `|r| ≤ ln2/2`
/// (Cephes' polynomial). Inputs are clamped to [-87, 88].
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let x = x.max(-87.0).min(88.0);
    let shifted = x * std::f32::consts::LOG2_E + MAGIC;
    let n = shifted - MAGIC;
    // (mul_add: one FMA instruction where the loop is compiled for FMA,
    // as the AVX2 variants are.)
    let r = (-n).mul_add(0.693_359_4, x);
    let r = (-n).mul_add(-2.121_944_4e-4, r);
    let mut p = 1.987_569_1e-4f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 0.166_666_65);
    p = p.mul_add(r, 0.5);
    let y = (p * r).mul_add(r, r + 1.0);
    let n = shifted.to_bits() as i32 - MAGIC.to_bits() as i32;
    y * f32::from_bits(((n + 127) << 23) as u32)
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    2.0 * sigmoid(2.0 * x) - 1.0
}

/// Runs `$body` with the type `$T` bound to [`Bf16`] when `$bf16`, else to
/// `f32`: one call site for the two element types of the products.
#[macro_export]
macro_rules! with_elem {
    ($bf16:expr, $T:ident => $body:expr) => {
        if $bf16 {
            type $T = $crate::elem::Bf16;
            $body
        } else {
            type $T = f32;
            $body
        }
    };
}
pub use with_elem;
