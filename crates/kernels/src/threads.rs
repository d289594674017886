//! Splitting a loop's nodes over threads.
//!
//! [`par_ranges`] runs a closure over contiguous node ranges, one per
//! thread, split evenly (the same ranges for the same thread count every
//! time, so sums in range order are reproducible). It runs them on the
//! runner the host installed ([`install_runner`]: training installs
//! libtorch's `at::parallel_for`, so the kernels share the OpenMP team
//! that libtorch's own operations use and never compete with its spinning
//! workers), or else on this crate's own small pool of std threads, started
//! on first use and kept for the process ([`Pool`]). One thread, the
//! default inside a compiler, runs on the calling thread: no pool is
//! started.

use crate::H;

/// Below this many nodes a step runs on the calling thread alone.
pub const PARALLEL_NODES: usize = 2048;

/// Runs `work(first_node, rows)` over `nodes` rows of 34 of `out`, split
/// into one contiguous range per thread.
pub fn split<O: Send>(out: &mut [O], nodes: usize, threads: usize, work: impl Fn(usize, &mut [O]) + Sync) {
    assert!(out.len() >= nodes * H);
    let rows = Rows(out.as_mut_ptr());
    // SAFETY: the ranges are disjoint and within `nodes`.
    par_ranges(nodes, threads, |r| work(r.start, unsafe { rows.get(r.start * H, r.len() * H) }));
}

/// [`split`] over two outputs of the same rows.
pub fn split2<A: Send, B: Send>(a: &mut [A], b: &mut [B], nodes: usize, threads: usize, work: impl Fn(usize, &mut [A], &mut [B]) + Sync) {
    assert!(a.len() >= nodes * H && b.len() >= nodes * H);
    let (ra, rb) = (Rows(a.as_mut_ptr()), Rows(b.as_mut_ptr()));
    // SAFETY: the ranges are disjoint and within `nodes`.
    par_ranges(nodes, threads, |r| work(r.start, unsafe { ra.get(r.start * H, r.len() * H) }, unsafe { rb.get(r.start * H, r.len() * H) }));
}

/// A slice that threads take disjoint parts of.
pub struct Rows<O>(*mut O);

// SAFETY: every user takes parts that no other thread touches.
unsafe impl<O: Send> Send for Rows<O> {}
unsafe impl<O: Send> Sync for Rows<O> {}

impl<O> Rows<O> {
    pub fn new(slice: &mut [O]) -> Rows<O> {
        Rows(slice.as_mut_ptr())
    }

    /// # Safety
    /// In bounds, and taken by this thread alone for the borrow.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get(&self, start: usize, len: usize) -> &mut [O] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }

    /// The start (for writes that [`Rows::get`]'s rules govern).
    pub fn ptr(&self) -> *mut O {
        self.0
    }
}

/// A buffer that threads write in disjoint row ranges.
#[derive(Clone, Copy)]
pub struct Shared(*mut f32);

// SAFETY: every user writes rows that no other thread touches.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    pub fn new(buffer: &mut [f32]) -> Shared {
        Shared(buffer.as_mut_ptr())
    }

    /// The buffer's start (writes through it follow [`Shared::slice`]'s rule).
    pub fn ptr(&self) -> *mut f32 {
        self.0
    }

    /// Elements `start..start + len`.
    ///
    /// # Safety
    /// In bounds, and written by this thread alone for the borrow.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [f32] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
}

/// The contiguous ranges `0..nodes` splits into at `threads` threads:
/// `k = min(threads, ⌈nodes / 2048⌉)` ranges of `⌈nodes / k⌉` nodes (the
/// last shorter), as `at::parallel_for` splits them; one range below
/// [`PARALLEL_NODES`] nodes.
pub fn ranges(nodes: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let k = threads.clamp(1, nodes.div_ceil(PARALLEL_NODES).max(1));
    let chunk = nodes.div_ceil(k).max(1);
    (0..k).map(|i| (i * chunk).min(nodes)..((i + 1) * chunk).min(nodes)).filter(|r| !r.is_empty() || nodes == 0).collect()
}

/// A host's parallel loop: runs `f(ctx, begin, end)` over `0..n` in
/// ranges of at least `grain`, and returns 0 (non-zero on failure).
/// `f` never unwinds.
pub type Runner = fn(n: i64, grain: i64, f: extern "C" fn(*mut std::ffi::c_void, i64, i64), ctx: *mut std::ffi::c_void) -> i32;

static RUNNER: std::sync::OnceLock<Runner> = std::sync::OnceLock::new();

/// Makes [`par_ranges`] run its ranges on `runner` for the rest of the
/// process (training: libtorch's `at::parallel_for`, whose thread count
/// is libtorch's). The first call wins.
pub fn install_runner(runner: Runner) {
    let _ = RUNNER.set(runner);
}

/// Runs `work(range)` over `0..nodes`, one contiguous range per thread
/// ([`ranges`]): on the installed [`Runner`] if there is one, else on the
/// process's [`Pool`]. `threads` 1 (or fewer than 2 × [`PARALLEL_NODES`]
/// nodes) runs `work` on the calling thread. A panic in `work` is resumed
/// on the calling thread once every range has finished.
pub fn par_ranges(nodes: usize, threads: usize, work: impl Fn(std::ops::Range<usize>) + Sync) {
    if threads.clamp(1, nodes.div_ceil(PARALLEL_NODES).max(1)) == 1 {
        return work(0..nodes);
    }
    if let Some(runner) = RUNNER.get() {
        return run_on(*runner, nodes, &work);
    }
    Pool::global().run(&ranges(nodes, threads), &work);
}

/// [`par_ranges`] on a host's runner.
fn run_on(runner: Runner, nodes: usize, work: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
    struct Call<'a> {
        work: &'a (dyn Fn(std::ops::Range<usize>) + Sync),
        cap: crate::cpu::Isa,
        panic: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
    }
    extern "C" fn run(ctx: *mut std::ffi::c_void, begin: i64, end: i64) {
        // SAFETY: `ctx` is the `Call` below, alive for the whole call.
        let call = unsafe { &*(ctx as *const Call<'_>) };
        let range = begin as usize..end as usize;
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::cpu::with_cap(call.cap, || (call.work)(range)))) {
            call.panic.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(payload);
        }
    }
    let call = Call { work, cap: crate::cpu::cap(), panic: std::sync::Mutex::new(None) };
    let status = runner(nodes as i64, PARALLEL_NODES as i64, run, &call as *const Call<'_> as *mut _);
    if let Some(payload) = call.panic.into_inner().unwrap_or_else(|p| p.into_inner()) {
        std::panic::resume_unwind(payload);
    }
    assert_eq!(status, 0, "the parallel runner failed");
}

/// A small pool of std threads, started on first use and parked between
/// loops. A loop's first range runs on the calling thread and each other
/// range on a worker (workers are added as a loop needs them, never
/// removed); the caller waits until every range has finished, so the
/// loop's borrows outlive it. Loops from several threads take turns.
pub struct Pool {
    /// One loop at a time.
    turn: std::sync::Mutex<()>,
    state: std::sync::Mutex<State>,
    /// Workers wait here for a new loop, the caller for the loop's end.
    wake: std::sync::Condvar,
    done: std::sync::Condvar,
}

#[derive(Default)]
struct State {
    /// The current loop, its lifetime erased (valid until `pending` is 0).
    job: Option<Job>,
    /// Bumped per loop: a worker takes each loop's range once.
    generation: u64,
    /// Ranges of the current loop not finished yet.
    pending: usize,
    workers: usize,
    panic: Option<Box<dyn std::any::Any + Send>>,
}

#[derive(Clone, Copy)]
struct Job {
    work: *const (dyn Fn(std::ops::Range<usize>) + Sync),
    ranges: *const std::ops::Range<usize>,
    count: usize,
    /// The caller's kernel path ([`crate::cpu::with_cap`]).
    cap: crate::cpu::Isa,
}

// SAFETY: the job's pointers are read only while the loop that owns them
// waits for `pending` to reach 0.
unsafe impl Send for Job {}

impl Pool {
    /// The process's pool.
    pub fn global() -> &'static Pool {
        static POOL: std::sync::OnceLock<Pool> = std::sync::OnceLock::new();
        POOL.get_or_init(|| Pool {
            turn: std::sync::Mutex::new(()),
            state: std::sync::Mutex::new(State::default()),
            wake: std::sync::Condvar::new(),
            done: std::sync::Condvar::new(),
        })
    }

    /// The workers started so far.
    pub fn workers(&self) -> usize {
        self.lock().workers
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `work` on every range of `ranges`, the first on this thread.
    fn run(&'static self, ranges: &[std::ops::Range<usize>], work: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
        let Some((first, rest)) = ranges.split_first() else { return };
        if rest.is_empty() {
            return work(first.clone());
        }
        let _turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        {
            let mut s = self.lock();
            while s.workers < rest.len() {
                let index = s.workers;
                let spawned = std::thread::Builder::new().name(format!("programl-kernels-{index}")).spawn(move || self.worker(index));
                if spawned.is_err() {
                    break;
                }
                s.workers += 1;
            }
            // SAFETY (the transmute): the erased borrow is used only until
            // `pending` is 0, which this call waits for below.
            let work: *const (dyn Fn(std::ops::Range<usize>) + Sync) = work;
            let work: *const (dyn Fn(std::ops::Range<usize>) + Sync + 'static) = unsafe { std::mem::transmute(work) };
            s.job = Some(Job { work, ranges: rest.as_ptr(), count: rest.len().min(s.workers), cap: crate::cpu::cap() });
            s.pending = rest.len().min(s.workers);
            s.generation += 1;
            self.wake.notify_all();
        }
        // The ranges no worker could be started for run here too.
        let started = self.lock().job.map_or(0, |j| j.count);
        let caller = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            work(first.clone());
            for r in &rest[started..] {
                work(r.clone());
            }
        }));
        let mut s = self.lock();
        while s.pending > 0 {
            s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.job = None;
        let panic = s.panic.take();
        drop(s);
        if let Err(payload) = caller {
            std::panic::resume_unwind(payload);
        }
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
    }

    fn worker(&self, index: usize) {
        let mut seen = 0u64;
        loop {
            let job = {
                let mut s = self.lock();
                loop {
                    if s.generation != seen {
                        seen = s.generation;
                        if let Some(job) = s.job.filter(|j| index < j.count) {
                            break job;
                        }
                    }
                    s = self.wake.wait(s).unwrap_or_else(|p| p.into_inner());
                }
            };
            // SAFETY: the loop that posted `job` waits for this range.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
                crate::cpu::with_cap(job.cap, || (*job.work)((*job.ranges.add(index)).clone()))
            }));
            let mut s = self.lock();
            if let Err(payload) = result {
                s.panic.get_or_insert(payload);
            }
            s.pending -= 1;
            if s.pending == 0 {
                self.done.notify_all();
            }
        }
    }
}

/// Runs `work(range, part)` over `0..nodes` as [`par_ranges`] does, each
/// range with a zeroed `part` as long as `sums`, and adds the parts to
/// `sums` in the order of their ranges (not of their finishing): the same
/// bits on every run.
pub fn par_ranges_summing(nodes: usize, threads: usize, sums: &mut [f32], work: impl Fn(std::ops::Range<usize>, &mut [f32]) + Sync) {
    let partial = std::sync::Mutex::new(Vec::<(usize, Vec<f32>)>::new());
    let len = sums.len();
    par_ranges(nodes, threads, |range| {
        let mut part = vec![0f32; len];
        let first = range.start;
        work(range, &mut part);
        partial.lock().unwrap_or_else(|p| p.into_inner()).push((first, part));
    });
    let mut partial = partial.into_inner().unwrap_or_else(|p| p.into_inner());
    partial.sort_by_key(|(first, _)| *first);
    for (_, part) in partial {
        for (d, s) in sums.iter_mut().zip(&part) {
            *d += s;
        }
    }
}
