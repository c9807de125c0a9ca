//! The handle's worker threads: a fork-join pool in which the calling thread takes part.
//!
//! A parallel region ([`Pool::run`]) is a count of tasks and one function of the task's
//! number. The caller publishes it, takes tasks itself, and returns once every task has run;
//! the `threads − 1` workers take the others. Tasks go to whichever thread asks first, so a
//! worker that starts late (its core busy with another process) costs only the tasks it did
//! not take.
//!
//! Idle workers spin on the region counter for [`WORKER_SPIN`] (a `pause` loop, never
//! `sched_yield`), then sleep on a condition variable, and a new region wakes the sleepers.
//! Yielding while waiting hands the core to any other runnable thread of the machine for a
//! whole time slice, even one of the lowest priority, and a yielding thread is not woken
//! when work arrives: with rayon's idle loop (which yields), ResNet-50 at batch 1 on 2
//! threads took 52 ms beside two `nice -n 19` busy loops against 21 ms without them.
//!
//! A pool may instead run its regions on threads the embedding program owns (a
//! [`ParallelRunner`], for example the OpenMP team of a framework whose own operators run
//! between autodnn's calls): then no worker of autodnn's spins beside the framework's.
//!
//! One region runs at a time. A region started while another thread's region runs, or from
//! inside a task, runs all its tasks on the calling thread: a handle shared by several
//! threads never waits on itself, and a nested region never deadlocks.

use std::any::Any;
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long an idle worker spins on the region counter before it sleeps (OpenMP runtimes
/// spin for milliseconds too). Waking a sleeping worker costs more than the regions of
/// small calls: on the 2-core VM a 256³ product on 2 threads took 72 µs back to back and
/// 142 µs after a 1 ms pause with a 200 µs spin, 81 µs with this one; with another
/// process on the worker's core, a wake-up waited up to that process's time slice (a
/// 90th percentile of 2.2 ms after a 5 ms pause). `autodnn tune --model resnet50 --mb 8
/// --threads 2 --dir all` measured its choices at 700 ms in all with a 200 µs spin, 525
/// with 2 ms, 459 with 10 ms (one run each beside a fuzz campaign).
pub(crate) const WORKER_SPIN: Duration = Duration::from_millis(2);

/// How long the caller spins for the workers' last tasks before it sleeps.
pub(crate) const CALLER_SPIN: Duration = Duration::from_millis(1);

type Task<'a> = dyn Fn(usize) + Sync + 'a;

/// Threads the embedding program lends for a parallel region: `runner(n, body)` calls
/// `body(i)` once on each of up to `n` threads at once, `i` in `0..n` being each thread's
/// number (one of them may be the calling thread), and returns when every call has returned.
/// It may run fewer than `n` (the region's remaining work then runs on the calling thread).
/// `body` never unwinds: a panic inside it is caught and resumed on the caller after the
/// runner returns, so a runner in C (OpenMP's `GOMP_parallel`) is safe.
///
/// ```
/// use std::sync::Arc;
/// use autodnn::{gemm::GemmDesc, runtime::ParallelRunner, Handle};
/// // Scoped threads started for each region: correct, if slower than a team kept waiting.
/// let runner: Arc<ParallelRunner> = Arc::new(|n, body| {
///     std::thread::scope(|s| {
///         for i in 1..n {
///             s.spawn(move || body(i));
///         }
///         body(0);
///     })
/// });
/// let h = Handle::with_runner(2, runner)?;
/// let (a, b) = (vec![1.0f32; 256 * 256], vec![1.0f32; 256 * 256]);
/// let mut c = vec![0.0f32; 256 * 256];
/// h.gemm(&GemmDesc::new(256, 256, 256), 1.0, &a, &b, 0.0, &mut c)?;
/// assert!(c.iter().all(|&v| v == 256.0));
/// # Ok::<(), autodnn::Error>(())
/// ```
pub type ParallelRunner = dyn Fn(usize, &(dyn Fn(usize) + Sync)) + Send + Sync;

/// A published region. It lives on the caller's stack; workers reach it only while
/// [`Shared::active`] counts them (see [`Pool::run`]).
struct Job {
    /// The region's function, its lifetime erased (see the SAFETY notes).
    f: *const Task<'static>,
    tasks: usize,
    next: AtomicUsize,
    /// Each worker runs `f(its index)` once and takes nothing else.
    per_thread: bool,
}

struct State {
    job: Option<*const Job>,
    epoch: u64,
    shutdown: bool,
    /// The caller sleeps on `Shared::done`.
    caller_waits: bool,
}

// SAFETY: the raw pointers in `State` are only dereferenced by workers that registered in
// `Shared::active` while the job was published; the publishing caller does not return (so
// the job and its function outlive every use) until `active` is back to 0.
unsafe impl Send for State {}

struct Shared {
    state: Mutex<State>,
    /// Workers wait here for a new region.
    work: Condvar,
    /// The caller waits here for the workers to leave its region.
    done: Condvar,
    /// `State::epoch`, readable without the lock by spinning workers.
    epoch: AtomicU64,
    /// Workers inside the current region.
    active: AtomicUsize,
    /// Workers that ran their task of a per-thread region.
    ran: AtomicUsize,
    /// The first panic of a task in the current region.
    panic: PanicSlot,
    /// Held by the thread whose region runs.
    busy: Mutex<()>,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            state: Mutex::new(State {
                job: None,
                epoch: 0,
                shutdown: false,
                caller_waits: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            epoch: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            ran: AtomicUsize::new(0),
            panic: Mutex::new(None),
            busy: Mutex::new(()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

thread_local! {
    /// Whether this thread is running a task of some pool's region.
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

/// Sets [`IN_TASK`] for its lifetime (restoring the previous value, also on unwinding).
struct InTask(bool);

impl InTask {
    fn enter() -> InTask {
        InTask(IN_TASK.with(|c| c.replace(true)))
    }
}

impl Drop for InTask {
    fn drop(&mut self) {
        IN_TASK.with(|c| c.set(self.0));
    }
}

/// A fixed set of worker threads (see the module's documentation).
pub(crate) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Regions run on the embedder's threads (`threads` of them) instead of `workers`.
    external: Option<(Arc<ParallelRunner>, usize)>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pool({} threads)", self.threads())
    }
}

impl Pool {
    /// A pool for `threads` threads in all: the caller and `threads − 1` workers named
    /// `name-1`, `name-2`, ...
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when a thread cannot be started.
    pub(crate) fn new(threads: usize, name: &str) -> Result<Pool> {
        let mut pool = Pool {
            shared: Shared::new(),
            workers: Vec::new(),
            external: None,
        };
        for w in 1..threads.max(1) {
            let shared = pool.shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("{name}-{w}"))
                .spawn(move || worker(&shared, w))
                .map_err(|e| Error::OutOfMemory {
                    bytes: 0,
                    what: format!("starting worker thread {w} of {threads}: {e}"),
                })?;
            // On an error above, dropping `pool` stops the workers started so far.
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// A pool whose regions run on up to `threads` threads lent by `runner`; it starts no
    /// threads of its own.
    pub(crate) fn with_runner(threads: usize, runner: Arc<ParallelRunner>) -> Pool {
        Pool {
            shared: Shared::new(),
            workers: Vec::new(),
            external: Some((runner, threads.max(1))),
        }
    }

    /// Threads a region runs on: the caller and the workers.
    pub(crate) fn threads(&self) -> usize {
        match &self.external {
            Some((_, n)) => *n,
            None => self.workers.len() + 1,
        }
    }

    /// Runs `f(t)` for every `t` in `0..tasks`, each exactly once, on the caller and the
    /// workers; returns when all have run. The caller takes task 0 first. A panic of a task
    /// is resumed on the caller once every task has finished.
    pub(crate) fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if tasks == 0 {
            return;
        }
        let nested = IN_TASK.with(Cell::get);
        let busy = if tasks == 1 || self.threads() == 1 || nested {
            None
        } else {
            match self.shared.busy.try_lock() {
                Ok(g) => Some(g),
                Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        };
        match (busy, &self.external) {
            (Some(_guard), Some((runner, n))) => lend(&**runner, (*n).min(tasks), tasks, f, false),
            (Some(_guard), None) => self.publish(tasks, f, false),
            (None, _) => {
                let _in = InTask::enter();
                (0..tasks).for_each(f);
            }
        }
    }

    /// Runs `f(i)` once on every thread of the pool, `i` being the thread's number (0 for
    /// the caller), waiting for another thread's region to end first: for per-thread state
    /// (packing buffers) and for keeping every core busy. From inside a task it runs `f(0)`
    /// alone.
    pub(crate) fn each_thread(&self, f: &(dyn Fn(usize) + Sync)) {
        if IN_TASK.with(Cell::get) || self.threads() == 1 {
            let _in = InTask::enter();
            f(0);
            return;
        }
        let _guard = self.shared.busy.lock().unwrap_or_else(|e| e.into_inner());
        match &self.external {
            Some((runner, n)) => lend(&**runner, *n, *n, f, true),
            None => self.publish(self.threads(), f, true),
        }
    }

    /// Publishes a region, takes part in it and waits for it (the caller holds `busy`).
    fn publish(&self, tasks: usize, f: &(dyn Fn(usize) + Sync), per_thread: bool) {
        let s = &*self.shared;
        // SAFETY: only the lifetime is erased. Workers call `f` only while registered in
        // `s.active`, and this function returns (ending the borrow) only after the job is
        // withdrawn from `State` and `s.active` is back to 0: no call outlives `f`.
        let f_static: *const Task<'static> = unsafe {
            std::mem::transmute::<*const Task<'_>, *const Task<'static>>(f as *const Task<'_>)
        };
        let job = Job {
            f: f_static,
            tasks,
            next: AtomicUsize::new(if per_thread { tasks } else { 1 }),
            per_thread,
        };
        s.ran.store(0, Ordering::Relaxed);
        {
            let mut st = s.lock();
            st.job = Some(&job as *const Job);
            st.epoch += 1;
            s.epoch.store(st.epoch, Ordering::Release);
        }
        s.work.notify_all();
        run_caught(&s.panic, || {
            f(0);
            if !per_thread {
                take_tasks(&job.next, job.tasks, f);
            }
        });
        // A per-thread region waits for every worker to have run its task.
        if per_thread {
            let workers = self.workers.len();
            wait_until(s, || s.ran.load(Ordering::Acquire) >= workers);
        }
        // Withdraw the job: no worker joins it any more; then wait for those inside.
        s.lock().job = None;
        wait_until(s, || s.active.load(Ordering::Acquire) == 0);
        resume_first(&s.panic);
    }
}

/// Runs a region on `threads` threads lent by `runner`: each takes tasks (or, `per_thread`,
/// runs `f(its number)`), then the caller takes whatever they left.
fn lend(
    runner: &ParallelRunner,
    threads: usize,
    tasks: usize,
    f: &(dyn Fn(usize) + Sync),
    per_thread: bool,
) {
    let next = AtomicUsize::new(0);
    let panicked: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);
    let body = |i: usize| {
        run_caught(&panicked, || {
            if !per_thread {
                take_tasks(&next, tasks, f);
            } else if i < tasks {
                f(i);
            }
        })
    };
    runner(threads, &body);
    if !per_thread {
        run_caught(&panicked, || take_tasks(&next, tasks, f));
    }
    resume_first(&panicked);
}

/// The first panic of a region's tasks, resumed on the caller once the region is over.
type PanicSlot = Mutex<Option<Box<dyn Any + Send>>>;

/// Runs `f` as a region's task on this thread: a panic is kept in `slot` (the first one
/// only) rather than unwinding through the pool or a runner's C frames.
fn run_caught(slot: &PanicSlot, f: impl FnOnce()) {
    let _in = InTask::enter();
    if let Err(p) = panic::catch_unwind(AssertUnwindSafe(f)) {
        slot.lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(p);
    }
}

/// Resumes the panic kept in `slot`, if any.
fn resume_first(slot: &PanicSlot) {
    if let Some(p) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
        panic::resume_unwind(p);
    }
}

/// The numbers `next..n`, each handed out once however many threads ask for them.
pub(crate) fn claim(next: &AtomicUsize, n: usize) -> impl Iterator<Item = usize> + '_ {
    std::iter::from_fn(move || {
        let i = next.fetch_add(1, Ordering::Relaxed);
        (i < n).then_some(i)
    })
}

/// Takes tasks `next..tasks` one at a time until none is left.
fn take_tasks(next: &AtomicUsize, tasks: usize, f: &Task<'_>) {
    claim(next, tasks).for_each(f);
}

/// Spins for [`CALLER_SPIN`], then sleeps on `done`, until `ready()`.
fn wait_until(s: &Shared, ready: impl Fn() -> bool) {
    if spin_until(CALLER_SPIN, &ready) {
        return;
    }
    let mut st = s.lock();
    while !ready() {
        st.caller_waits = true;
        st = s.done.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    st.caller_waits = false;
}

/// Spins (a `pause` loop) until `ready()` or for at most `limit`; whether it became ready.
fn spin_until(limit: Duration, ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) && start.elapsed() > limit {
            return false;
        }
    }
}

/// A worker's loop: wait for a region, join it, take tasks, leave.
fn worker(s: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        spin_until(WORKER_SPIN, || s.epoch.load(Ordering::Acquire) != seen);
        let mut st = s.lock();
        while st.epoch == seen && !st.shutdown {
            st = s.work.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.shutdown {
            return;
        }
        seen = st.epoch;
        let Some(job) = st.job else { continue };
        // Registered under the lock, so the caller cannot withdraw the job in between.
        s.active.fetch_add(1, Ordering::AcqRel);
        drop(st);
        // SAFETY: the caller keeps the job (and the function it points to) alive until
        // `active` is back to 0, and this thread counts in `active` until below.
        let job = unsafe { &*job };
        // SAFETY: as above.
        let f = unsafe { &*job.f };
        run_caught(&s.panic, || {
            if job.per_thread {
                f(index);
            } else {
                take_tasks(&job.next, job.tasks, f);
            }
        });
        let per_thread = job.per_thread;
        if per_thread {
            s.ran.fetch_add(1, Ordering::AcqRel);
        }
        // The last use of `job`: after this the caller may return.
        let last = s.active.fetch_sub(1, Ordering::AcqRel) == 1;
        if last || per_thread {
            // Under the lock, so that a caller about to sleep cannot miss it.
            let st = s.lock();
            if st.caller_waits {
                s.done.notify_all();
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        {
            // A new epoch as well, so that a spinning worker stops spinning at once.
            let mut st = self.shared.lock();
            st.shutdown = true;
            st.epoch += 1;
            self.shared.epoch.store(st.epoch, Ordering::Release);
        }
        self.shared.work.notify_all();
        for w in self.workers.drain(..) {
            // A worker's tasks catch their panics, so a join error is not expected; there
            // is nothing to do with one while dropping.
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn counts(pool: &Pool, tasks: usize) -> Vec<usize> {
        let seen: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
        pool.run(tasks, &|t| {
            seen[t].fetch_add(1, Ordering::Relaxed);
        });
        seen.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn every_task_runs_once() {
        for threads in 1..=4 {
            let pool = Pool::new(threads, "test").unwrap();
            assert_eq!(pool.threads(), threads);
            for tasks in [0, 1, 2, 3, 7, 64, 1000] {
                for _ in 0..20 {
                    assert_eq!(counts(&pool, tasks), vec![1; tasks], "{threads} threads");
                }
            }
        }
    }

    #[test]
    fn workers_take_tasks_and_sleep_between_regions() {
        let pool = Pool::new(3, "test").unwrap();
        let names = Mutex::new(HashSet::new());
        // Tasks long enough that the workers, woken from sleep, take some of them.
        for round in 0..5 {
            if round > 0 {
                std::thread::sleep(WORKER_SPIN * 5);
            }
            pool.run(64, &|_| {
                std::thread::sleep(Duration::from_millis(1));
                let name = std::thread::current().name().map(str::to_owned);
                names.lock().unwrap().insert(name);
            });
        }
        assert_eq!(names.into_inner().unwrap().len(), 3);
    }

    #[test]
    fn nested_regions_run_on_the_calling_thread() {
        let pool = Pool::new(2, "test").unwrap();
        let total = AtomicUsize::new(0);
        pool.run(8, &|_| {
            let me = std::thread::current().id();
            pool.run(5, &|_| {
                assert_eq!(std::thread::current().id(), me);
                total.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 40);
    }

    #[test]
    fn callers_on_several_threads_share_one_pool() {
        let pool = Pool::new(2, "test").unwrap();
        std::thread::scope(|s| {
            for _ in 0..6 {
                s.spawn(|| {
                    for tasks in [2, 5, 33] {
                        for _ in 0..200 {
                            assert_eq!(counts(&pool, tasks), vec![1; tasks]);
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn each_thread_runs_once_on_every_thread() {
        for threads in 1..=4 {
            let pool = Pool::new(threads, "test").unwrap();
            for _ in 0..10 {
                let ids = Mutex::new(Vec::new());
                pool.each_thread(&|i| ids.lock().unwrap().push((i, std::thread::current().id())));
                let mut ids = ids.into_inner().unwrap();
                ids.sort_by_key(|p| p.0);
                let index: Vec<usize> = ids.iter().map(|p| p.0).collect();
                assert_eq!(index, (0..threads).collect::<Vec<_>>());
                let distinct: HashSet<_> = ids.iter().map(|p| p.1).collect();
                assert_eq!(distinct.len(), threads);
            }
        }
    }

    /// A runner of scoped threads that runs only `lent` of the threads it is asked for.
    fn scoped_runner(lent: usize) -> Arc<ParallelRunner> {
        Arc::new(move |n, body| {
            std::thread::scope(|s| {
                for i in 1..n.min(lent) {
                    s.spawn(move || body(i));
                }
                body(0);
            })
        })
    }

    #[test]
    fn regions_on_lent_threads() {
        for lent in [1, 2, 3] {
            let pool = Pool::with_runner(3, scoped_runner(lent));
            assert_eq!(pool.threads(), 3);
            for tasks in [0, 1, 2, 3, 50] {
                assert_eq!(counts(&pool, tasks), vec![1; tasks], "{lent} lent");
            }
            let ran = Mutex::new(Vec::new());
            pool.each_thread(&|i| ran.lock().unwrap().push(i));
            let mut ran = ran.into_inner().unwrap();
            ran.sort_unstable();
            assert_eq!(ran, (0..lent).collect::<Vec<_>>());
            // Nested regions run on the calling thread, not on the runner again.
            let total = AtomicUsize::new(0);
            pool.run(4, &|_| {
                pool.run(3, &|_| _ = total.fetch_add(1, Ordering::Relaxed))
            });
            assert_eq!(total.load(Ordering::Relaxed), 12);
        }
    }

    #[test]
    fn a_panicking_task_on_lent_threads_reaches_the_caller() {
        let pool = Pool::with_runner(2, scoped_runner(2));
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            pool.run(8, &|t| assert!(t != 3, "task 3"));
        }));
        assert!(r.is_err());
        assert_eq!(counts(&pool, 9), vec![1; 9]);
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_and_the_pool_goes_on() {
        let pool = Pool::new(2, "test").unwrap();
        for bad in [0, 1, 5] {
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                pool.run(6, &|t| {
                    if t == bad {
                        panic!("task {t}");
                    }
                })
            }));
            let msg = r.unwrap_err();
            assert_eq!(
                msg.downcast_ref::<String>().unwrap(),
                &format!("task {bad}")
            );
            assert_eq!(counts(&pool, 9), vec![1; 9]);
        }
    }
}
