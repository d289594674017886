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

/// `a · b + c`: one FMA instruction in a loop compiled for FMA (`FMA`:
/// the AVX2 and AVX-512 variants), a multiply and an add elsewhere
/// (`f32::mul_add` without the instruction is a library call that
/// computes the exact fused result in software: the portable loop spent
/// seconds a module in it).
#[inline(always)]
pub(crate) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `ln 2` in two parts (the first exact in few bits), for `r = x - n ln 2`
/// without cancellation: Cephes' `expf`, shared by every exponential here
/// (this one, the AVX-512 kernels' and the AVX2 cell's).
pub(crate) const LN2_HI: f32 = 0.693_359_4;
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
/// Cephes' polynomial for `(e^r - 1 - r) / r²`, highest degree first.
pub(crate) const EXP_POLY: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];

/// `e^x`, branch-free: `2^n · p(r)` with `x = n ln 2 + r`, `|r| ≤ ln2/2`
/// (Cephes' polynomial). Inputs are clamped to [-87, 88]. `FMA`: see
/// [`madd`]; both forms are accurate to ~1e-7 (tested).
#[inline(always)]
pub fn exp_by<const FMA: bool>(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let x = x.max(-87.0).min(88.0);
    let shifted = x * std::f32::consts::LOG2_E + MAGIC;
    let n = shifted - MAGIC;
    let r = madd::<FMA>(-n, LN2_HI, x);
    let r = madd::<FMA>(-n, LN2_LO, r);
    let mut p = EXP_POLY[0];
    for c in EXP_POLY[1..].iter().copied() {
        p = madd::<FMA>(p, r, c);
    }
    let y = madd::<FMA>(p * r, r, r + 1.0);
    let n = shifted.to_bits() as i32 - MAGIC.to_bits() as i32;
    y * f32::from_bits(((n + 127) << 23) as u32)
}

#[inline(always)]
pub fn sigmoid_by<const FMA: bool>(x: f32) -> f32 {
    1.0 / (1.0 + exp_by::<FMA>(-x))
}

#[inline(always)]
pub fn tanh_by<const FMA: bool>(x: f32) -> f32 {
    2.0 * sigmoid_by::<FMA>(2.0 * x) - 1.0
}

/// [`exp_by`] with FMAs (the vectorised loops' form).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    exp_by::<true>(x)
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    sigmoid_by::<true>(x)
}

#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    tanh_by::<true>(x)
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
