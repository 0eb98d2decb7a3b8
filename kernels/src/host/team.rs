//! A fixed team of threads for a decode step's short parallel sections.
//!
//! Why not rayon: a decode step of SmolLM2 makes about 120 parallel sections of 20-100 µs
//! (weight products, attention spans). Rayon parks its idle workers, so each section woke
//! them with a futex, and the calling thread, outside the pool, slept on a latch and was
//! woken again: on this project's 2-core VM, two threads decoded no faster than one
//! (docs/benchmarks.md). Here the helpers spin for a while after each section, as
//! llama.cpp's thread pool does, so the next one starts without a system call, and the
//! calling thread takes tasks itself. Tasks are claimed one at a time from a shared
//! counter: a helper that is late or asleep never holds the caller up, which runs
//! whatever nobody claimed.
//!
//! One section runs at a time. A section started while another runs (another session's
//! decode, a test thread, a task that starts its own section) runs on its calling thread
//! alone, which is correct and only slower. The team's size is rayon's
//! (`RAYON_NUM_THREADS`, else the CPU count), so one setting sizes both.

use std::{
    panic::{catch_unwind, resume_unwind, AssertUnwindSafe},
    sync::{
        atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::*},
        OnceLock,
    },
    thread::{self, Thread},
    time::{Duration, Instant},
};

/// How long an idle helper spins before it parks: longer than the gaps inside a decode
/// step and between steps, short enough that an idle engine gives its cores back at once.
const SPIN: Duration = Duration::from_micros(500);

/// Most tasks in one section: the width of a task field of [`Team::state`].
const MAX_TASKS: usize = 0xffff;

/// Spins of a caller waiting for helpers' tasks before it starts yielding its core: well
/// past a task's usual 20-100 µs. A helper that takes longer has most likely been
/// preempted (more runnable threads than cores, the app's webview during a decode, say),
/// and the caller's spinning would hold the core the helper needs to finish.
const SPINS_BEFORE_YIELD: u32 = 1 << 14;

/// What a section runs: task `i` for each claimed `i`.
type Job<'a> = &'a (dyn Fn(usize) + Sync);

struct Team {
    /// The current section in one word: epoch (upper 32 bits), task count (16 bits) and
    /// the next unclaimed task (low 16 bits), so that a claim is one compare-and-swap,
    /// which fails for a helper still looking at an earlier section.
    state: AtomicU64,
    /// The section's job: a pointer to the caller's [`Job`], read only after a claim
    /// succeeds, while the caller waits for that task.
    job: AtomicPtr<Job<'static>>,
    /// Tasks of the current section finished.
    done: AtomicUsize,
    /// A task panicked on a helper.
    panicked: AtomicBool,
    /// A section is running.
    busy: AtomicBool,
    /// Per helper: it is parked, or about to park.
    parked: Vec<AtomicBool>,
    /// The helpers' handles, to unpark them.
    threads: OnceLock<Vec<Thread>>,
}

const fn pack(epoch: u64, tasks: usize, next: usize) -> u64 {
    epoch << 32 | (tasks as u64) << 16 | next as u64
}

const fn unpack(state: u64) -> (u64, usize, usize) {
    (
        state >> 32,
        (state >> 16 & 0xffff) as usize,
        (state & 0xffff) as usize,
    )
}

fn team() -> &'static Team {
    static TEAM: OnceLock<&'static Team> = OnceLock::new();
    TEAM.get_or_init(|| {
        let helpers = rayon::current_num_threads().max(1) - 1;
        let team: &'static Team = Box::leak(Box::new(Team {
            state: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            parked: (0..helpers).map(|_| AtomicBool::new(false)).collect(),
            threads: OnceLock::new(),
        }));
        // A helper that cannot be spawned leaves the team smaller.
        let threads = (0..helpers)
            .map_while(|i| {
                thread::Builder::new()
                    .name(format!("kivi-team-{}", i + 1))
                    .spawn(move || help(team, i))
                    .ok()
                    .map(|h| h.thread().clone())
            })
            .collect();
        team.threads.set(threads).ok();
        team
    })
}

/// Threads a section runs on: the caller and the helpers.
pub fn threads() -> usize {
    team().threads.get().map_or(0, Vec::len) + 1
}

/// Runs `job(i)` for every `i` in `0..tasks` across the team and returns when all have
/// run. The caller takes tasks too; on a busy team it runs them all. A panic in a task
/// is raised here, after the section's other claimed tasks have finished.
pub fn run(tasks: usize, job: &(dyn Fn(usize) + Sync)) {
    let team = team();
    if tasks <= 1
        || tasks > MAX_TASKS
        || threads() == 1
        || team
            .busy
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_err()
    {
        (0..tasks).for_each(job);
        return;
    }
    let mut job: Job<'_> = job;
    // SAFETY: the pointer is dereferenced only by a task claimed in this section, and the
    // section ends (every task done) before `job` goes out of scope: tasks' panics are
    // caught, so nothing unwinds past the wait below.
    let ptr = (&mut job as *mut Job<'_>).cast::<Job<'static>>();
    team.job.store(ptr, Relaxed);
    team.done.store(0, Relaxed);
    let epoch = (unpack(team.state.load(Relaxed)).0 + 1) & 0xffff_ffff;
    // SeqCst with the helpers' `parked` handshake (`wait`): either a helper sees the new
    // section, or this sees its flag and wakes it.
    team.state.store(pack(epoch, tasks, 0), SeqCst);
    if let Some(threads) = team.threads.get() {
        for (flag, thread) in team.parked.iter().zip(threads) {
            if flag.load(SeqCst) {
                thread.unpark();
            }
        }
    }
    let mut failure = None;
    while let Some(i) = claim(team, epoch) {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| job(i))) {
            failure.get_or_insert(panic);
        }
        team.done.fetch_add(1, Release);
    }
    // Every task is claimed; wait for the helpers' to finish.
    let mut spins = 0u32;
    while team.done.load(Acquire) < tasks {
        if spins < SPINS_BEFORE_YIELD {
            spins += 1;
            std::hint::spin_loop();
        } else {
            thread::yield_now();
        }
    }
    let helper_panicked = team.panicked.swap(false, Relaxed);
    team.busy.store(false, Release);
    if let Some(panic) = failure {
        resume_unwind(panic);
    }
    if helper_panicked {
        resume_unwind(Box::new("a kernel task panicked on a helper thread"));
    }
}

/// Claims the next task of section `epoch`, if any is left.
fn claim(team: &Team, epoch: u64) -> Option<usize> {
    let mut state = team.state.load(Acquire);
    loop {
        let (e, tasks, next) = unpack(state);
        if e != epoch || next >= tasks {
            return None;
        }
        match team
            .state
            .compare_exchange_weak(state, pack(e, tasks, next + 1), AcqRel, Acquire)
        {
            Ok(_) => return Some(next),
            Err(now) => state = now,
        }
    }
}

/// A helper's life: wait for a section (spinning, then parked), take its tasks, repeat.
fn help(team: &'static Team, me: usize) {
    let mut seen = unpack(team.state.load(Acquire)).0;
    loop {
        let epoch = wait(team, me, seen);
        seen = epoch;
        while let Some(i) = claim(team, epoch) {
            // SAFETY: a successful claim means the section is open, and its caller waits
            // for this task before the job's borrow ends.
            let job = unsafe { *team.job.load(Relaxed) };
            if catch_unwind(AssertUnwindSafe(|| job(i))).is_err() {
                team.panicked.store(true, Relaxed);
            }
            team.done.fetch_add(1, Release);
        }
    }
}

/// The first epoch after `seen`.
fn wait(team: &Team, me: usize, seen: u64) -> u64 {
    let epoch = || unpack(team.state.load(Acquire)).0;
    let start = Instant::now();
    loop {
        for _ in 0..256 {
            let e = epoch();
            if e != seen {
                return e;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= SPIN {
            break;
        }
    }
    loop {
        team.parked[me].store(true, SeqCst);
        let e = unpack(team.state.load(SeqCst)).0;
        if e != seen {
            team.parked[me].store(false, Relaxed);
            return e;
        }
        thread::park();
        team.parked[me].store(false, Relaxed);
        let e = epoch();
        if e != seen {
            return e;
        }
    }
}

/// Runs `f` on consecutive chunks of `data` (`chunk` items each, the last one shorter)
/// across the team: `f(index, chunk)`.
pub fn for_chunks_mut<T: Send>(data: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let chunk = chunk.max(1);
    let len = data.len();
    let base = SendPtr(data.as_mut_ptr());
    run(len.div_ceil(chunk), &|i| {
        let start = i * chunk;
        let end = (start + chunk).min(len);
        // SAFETY: tasks cover disjoint ranges of `data`, which outlives the section.
        let part = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
        f(i, part)
    });
}

/// `f(i)` for `i` in `0..n`, computed across the team, in order.
pub fn map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for_chunks_mut(&mut out, 1, |i, slot| slot[0] = Some(f(i)));
    out.into_iter()
        .map(|x| x.expect("every task ran"))
        .collect()
}

/// A raw pointer that tasks share; each writes its own range.
struct SendPtr<T>(*mut T);
// SAFETY: see `for_chunks_mut`: the ranges written through it are disjoint.
unsafe impl<T: Send> Sync for SendPtr<T> {}
unsafe impl<T: Send> Send for SendPtr<T> {}
impl<T> SendPtr<T> {
    fn get(&self) -> *mut T {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_once() {
        for tasks in [0, 1, 2, 3, 17, 1000] {
            let hits: Vec<AtomicU32> = (0..tasks).map(|_| AtomicU32::new(0)).collect();
            run(tasks, &|i| {
                hits[i].fetch_add(1, Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Relaxed) == 1), "{tasks} tasks");
        }
    }

    #[test]
    fn chunks_cover_the_slice_and_map_keeps_order() {
        let mut data = vec![0usize; 1001];
        for_chunks_mut(&mut data, 64, |c, part| {
            for (j, x) in part.iter_mut().enumerate() {
                *x = c * 64 + j;
            }
        });
        assert!(data.iter().enumerate().all(|(i, &x)| i == x));
        assert_eq!(
            map(50, |i| i * i),
            (0..50).map(|i| i * i).collect::<Vec<_>>()
        );
    }

    #[test]
    fn sections_from_many_threads_and_nested_sections_all_complete() {
        let total = AtomicUsize::new(0);
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        run(8, &|_| {
                            run(3, &|_| {
                                total.fetch_add(1, Relaxed);
                            });
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Relaxed), 4 * 200 * 8 * 3);
    }

    #[test]
    fn sections_after_the_helpers_parked_still_complete() {
        let sum = AtomicUsize::new(0);
        run(4, &|i| {
            sum.fetch_add(i, Relaxed);
        });
        thread::sleep(SPIN * 4);
        run(4, &|i| {
            sum.fetch_add(i, Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 12);
    }

    /// Slow tasks keep the caller waiting past its spins, so it yields until they end.
    #[test]
    fn a_caller_waiting_past_its_spins_still_sees_every_task() {
        let sum = AtomicUsize::new(0);
        run(4, &|i| {
            thread::sleep(Duration::from_millis(5));
            sum.fetch_add(i, Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 6);
    }

    #[test]
    fn a_panicking_task_is_raised_on_the_caller() {
        let result = catch_unwind(|| {
            run(64, &|i| {
                if i == 40 {
                    panic!("task 40");
                }
            })
        });
        assert!(result.is_err());
        // The team is usable afterwards.
        let n = AtomicUsize::new(0);
        run(16, &|_| {
            n.fetch_add(1, Relaxed);
        });
        assert_eq!(n.load(Relaxed), 16);
    }
}
