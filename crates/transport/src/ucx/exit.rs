//! Process exit with progress threads still running: they are stopped, and exit waits for
//! their teardown.
//!
//! A dropped [`super::UcxTransport`] tears down on its progress thread while its owner goes
//! on; nobody waits for it. If the process then exits, libucx's own destructors (run by the
//! dynamic loader after the `atexit` handlers) free UCX's global state under a thread still
//! destroying endpoints, its worker and its context — a SIGSEGV at exit after a run that
//! had done everything right (the transport bench's server crashed this way in CI; a server
//! process that drops its transports and exits crashed 3 times in 260 runs here, 0 in 800
//! with this). So the first progress thread registers an `atexit` handler: at exit it asks
//! every live thread to stop, as a shutdown command would, and waits for their teardowns,
//! at most [`EXIT_WAIT_MS_MAX`]. Registered after the loader's own handler, it runs before
//! the libraries' destructors.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use super::progress::CLOSE_WAIT_MS_MAX;
use super::worker::Waker;

/// Longest wait at exit: every thread's closes are bounded by [`CLOSE_WAIT_MS_MAX`], and the
/// teardown after them by UCX alone.
pub(crate) const EXIT_WAIT_MS_MAX: u64 = 2 * CLOSE_WAIT_MS_MAX;

/// The progress threads not yet torn down, and whether they must stop.
pub(crate) struct Registry {
    live: Mutex<Live>,
    torn_down: Condvar,
    exiting: AtomicBool,
}

struct Live {
    next: u64,
    threads: Vec<(u64, Arc<Waker>)>,
}

/// The process's registry, the one the exit handler drains.
static PROCESS: Registry = Registry::new();
static REGISTER_HANDLER: Once = Once::new();

/// One progress thread's place in a registry; dropped once its context is destroyed.
pub(crate) struct Registration<'a> {
    registry: &'a Registry,
    id: u64,
}

/// Registers a progress thread with the process (and, the first time, the exit handler).
pub(crate) fn register(waker: Arc<Waker>) -> Registration<'static> {
    REGISTER_HANDLER.call_once(|| {
        // SAFETY: `on_exit` is an `extern "C" fn()` that never unwinds (it only locks, wakes
        // and waits, poison ignored); atexit has no other precondition. A failed registration
        // (no memory) leaves exit as it was without this module.
        unsafe { libc::atexit(on_exit) };
    });
    PROCESS.register(waker)
}

/// Whether the process is exiting: the progress loop stops when it is.
pub(crate) fn exiting() -> bool {
    PROCESS.exiting()
}

extern "C" fn on_exit() {
    PROCESS.stop_all_and_wait(Duration::from_millis(EXIT_WAIT_MS_MAX));
}

impl Registry {
    pub(crate) const fn new() -> Registry {
        Registry {
            live: Mutex::new(Live {
                next: 0,
                threads: Vec::new(),
            }),
            torn_down: Condvar::new(),
            exiting: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        // Poison is ignored: the list is only pushed to and filtered, never left half-done.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn register(&self, waker: Arc<Waker>) -> Registration<'_> {
        let mut l = self.lock();
        let id = l.next;
        l.next += 1;
        l.threads.push((id, waker));
        Registration { registry: self, id }
    }

    pub(crate) fn exiting(&self) -> bool {
        self.exiting.load(Ordering::Acquire)
    }

    /// Marks the registry exiting, wakes every live thread and waits until all are torn down
    /// or `max` has passed; whether all were.
    pub(crate) fn stop_all_and_wait(&self, max: Duration) -> bool {
        self.exiting.store(true, Ordering::Release);
        let deadline = Instant::now() + max;
        let mut l = self.lock();
        for (_, waker) in &l.threads {
            waker.wake();
        }
        while !l.threads.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            l = self
                .torn_down
                .wait_timeout(l, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.registry
            .lock()
            .threads
            .retain(|(id, _)| *id != self.id);
        self.registry.torn_down.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_wakes_every_live_thread_and_waits_for_its_teardown() {
        let registry: &'static Registry = Box::leak(Box::new(Registry::new()));
        let waker = Arc::new(Waker::new().expect("eventfd"));
        let registration = registry.register(waker.clone());
        let thread = std::thread::spawn(move || {
            // What the progress loop does: sleep until woken, see `exiting`, tear down.
            while !waker.take_wake() {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(registry.exiting(), "woken by the exit");
            std::thread::sleep(Duration::from_millis(50));
            drop(registration);
        });
        let start = Instant::now();
        assert!(registry.stop_all_and_wait(Duration::from_secs(10)));
        assert!(
            start.elapsed() >= Duration::from_millis(50),
            "returned before the teardown"
        );
        thread.join().expect("the thread");
    }

    #[test]
    fn exit_gives_up_on_a_thread_that_never_tears_down() {
        let registry = Registry::new();
        let _stuck = registry.register(Arc::new(Waker::new().expect("eventfd")));
        assert!(!registry.stop_all_and_wait(Duration::from_millis(20)));
        assert!(registry.exiting());
    }

    #[test]
    fn with_nothing_live_exit_returns_at_once() {
        assert!(Registry::new().stop_all_and_wait(Duration::ZERO));
    }
}
