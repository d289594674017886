//! Memory that inference keeps across calls.
//!
//! Inside a host compiler, a forward pass that allocates its buffers anew
//! pays for fresh pages every time: glibc hands large blocks back to the
//! system when they are freed, and the kernel faults and zeroes every page
//! again on the next call. Measured on a 1,289-node module at T = 6, one
//! forward pass took about 2,000 page faults the first time and about 900
//! on every later call, some 3 µs each: a third of the whole inference
//! (`examples/first_call.rs`, README "What it costs"). A [`Workspace`]
//! is one block, kept by the model and grown when a larger graph comes,
//! from which every forward pass carves its per-step buffers; on the CPU it
//! is an anonymous mapping advised for transparent huge pages (2 MiB pages
//! where the kernel allows them, so its first use faults a handful of
//! times rather than once per 4 KiB).

use tch::{Device, Kind, Tensor};

/// Floats per buffer alignment: 64 bytes, a cache line and an AVX-512 row.
const ALIGN: i64 = 16;
/// Growth granularity, and the alignment of the CPU mapping: 2 MiB.
const HUGE_PAGE: usize = 2 << 20;

/// Per-model scratch memory for inference. Buffers carved from it are
/// views that must not outlive the next [`Workspace::carve`] or the
/// workspace itself; the model's forward pass keeps them inside the call.
#[derive(Default)]
pub(crate) struct Workspace {
    arena: Option<Arena>,
}

/// One block of `floats` f32 on `device`.
struct Arena {
    /// A 1-d f32 view of the whole block. Declared before `mapping`, so it
    /// is dropped before the memory is unmapped.
    whole: Tensor,
    floats: i64,
    device: Device,
    /// The CPU block's own mapping (`None`: `whole` owns its memory).
    _mapping: Option<Mapping>,
}

/// An anonymous private mapping, unmapped on drop.
struct Mapping {
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value alone.
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

impl Arena {
    fn new(floats: i64, device: Device) -> Arena {
        if device == Device::Cpu {
            if let Some(arena) = Arena::mapped(floats) {
                return arena;
            }
        }
        Arena { whole: Tensor::empty([floats], (Kind::Float, device)), floats, device, _mapping: None }
    }

    /// `floats` f32 in an anonymous mapping starting on a 2 MiB boundary,
    /// advised for huge pages; `None` if the system refuses the mapping.
    fn mapped(floats: i64) -> Option<Arena> {
        let bytes = floats as usize * 4;
        let len = bytes + HUGE_PAGE;
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let mapping = Mapping { base, len };
        let start = (base as usize).next_multiple_of(HUGE_PAGE);
        // SAFETY: `start .. start + bytes` lies inside the mapping (it has
        // a spare 2 MiB for the alignment). The advice is only a hint:
        // where huge pages are off it fails and nothing changes.
        let whole = unsafe {
            libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
            Tensor::f_from_blob(start as *const u8, &[floats], &[1], Kind::Float, Device::Cpu).ok()?
        };
        Some(Arena { whole, floats, device: Device::Cpu, _mapping: Some(mapping) })
    }
}

impl Workspace {
    /// Bytes held.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.arena.as_ref().map_or(0, |a| a.floats as usize * 4)
    }

    /// Uninitialised contiguous f32 buffers of the given shapes on
    /// `device`, each starting on a 64-byte boundary, carved from one block
    /// that grows (by at least half, in 2 MiB steps) when it is too small.
    /// The buffers alias whatever an earlier `carve` returned.
    ///
    /// # Safety
    /// The buffers borrow the block without owning it: every one of them,
    /// and every view of them, is dropped before the next `carve` and
    /// before the workspace, and none reaches autograd.
    pub(crate) unsafe fn carve<const B: usize>(&mut self, device: Device, shapes: [&[i64]; B]) -> [Tensor; B] {
        let sizes = shapes.map(|s| s.iter().product::<i64>());
        let mut offsets = [0i64; B];
        let mut total = 0i64;
        for (offset, size) in offsets.iter_mut().zip(sizes) {
            *offset = total;
            total += (size + ALIGN - 1) / ALIGN * ALIGN;
        }
        let fits = self.arena.as_ref().is_some_and(|a| a.device == device && a.floats >= total);
        if !fits {
            let old = self.arena.as_ref().filter(|a| a.device == device).map_or(0, |a| a.floats);
            let want = total.max(old + old / 2).max(1) as usize * 4;
            let floats = (want.next_multiple_of(HUGE_PAGE) / 4) as i64;
            // Drop the old block (and its views) before mapping the new one.
            self.arena = None;
            self.arena = Some(Arena::new(floats, device));
        }
        let whole = &self.arena.as_ref().expect("allocated above").whole;
        std::array::from_fn(|i| whole.narrow(0, offsets[i], sizes[i]).view(shapes[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_disjoint_aligned_and_reused() {
        let mut ws = Workspace::default();
        // SAFETY (all carves): each buffer is dropped before the next carve.
        let [mut a, mut b] = unsafe { ws.carve(Device::Cpu, [&[3, 5], &[7]]) };
        assert_eq!((a.size(), b.size()), (vec![3, 5], vec![7]));
        assert!(a.is_contiguous() && b.is_contiguous());
        assert_eq!(a.data_ptr() as usize % 64, 0);
        assert_eq!(b.data_ptr() as usize % 64, 0);
        assert!(b.data_ptr() as usize >= a.data_ptr() as usize + 15 * 4);
        let _ = a.fill_(1.0);
        let _ = b.fill_(2.0);
        assert_eq!(a.sum(Kind::Float).double_value(&[]), 15.0);
        let held = ws.bytes();
        assert_eq!(held % HUGE_PAGE, 0);
        let base = a.data_ptr() as usize;
        drop((a, b));
        // The same block serves a later call of the same size, and grows
        // for a larger one.
        let [c] = unsafe { ws.carve(Device::Cpu, [&[15]]) };
        assert_eq!((c.data_ptr() as usize, ws.bytes()), (base, held));
        drop(c);
        let big = held as i64 / 4 + 1;
        let [mut d] = unsafe { ws.carve(Device::Cpu, [&[big]]) };
        assert!(ws.bytes() >= held + held / 2);
        let _ = d.fill_(3.0);
        assert_eq!(d.sum(Kind::Float).double_value(&[]), 3.0 * big as f64);
    }
}
