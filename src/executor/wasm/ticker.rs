//! The epoch ticker: one thread per set of engines advances their epochs, and only while
//! guests run.

// An idle container then wakes no CPU (with a thread per engine it took 100 wake-ups a
// second each).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use wasmtime::{Engine, EngineWeak};

/// How often the epoch advances while guests run: they yield to other tasks (and so meet
/// their deadlines) at this granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// With no guest running for this long, the epoch stops advancing until one runs again.
const IDLE_AFTER: Duration = Duration::from_secs(1);

/// A handle on one ticker; its thread ends once the last handle is gone.
#[derive(Clone, Default)]
pub struct Ticker(Arc<State>);

#[derive(Default)]
struct State {
    engines: Mutex<Vec<EngineWeak>>,
    thread: OnceLock<Thread>,
    /// Guests running now, and how many times one started running.
    running: AtomicUsize,
    starts: AtomicUsize,
    parked: AtomicBool,
}

impl Drop for State {
    /// A parked thread would never learn that its ticker is gone.
    fn drop(&mut self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

impl Ticker {
    /// Advances `engine`'s epoch from now on, as long as the engine lives.
    pub fn add(&self, engine: &Engine) -> wasmtime::Result<()> {
        // Under the lock: engines made at the same time must not start two threads.
        let mut engines = crate::lock(&self.0.engines);
        if self.0.thread.get().is_none() {
            let state = Arc::downgrade(&self.0);
            let thread = std::thread::Builder::new()
                .name("wasmloop-epoch".to_owned())
                .spawn(move || tick(state))
                .map_err(|e| wasmtime::format_err!("cannot start the epoch ticker: {e}"))?;
            let _ = self.0.thread.set(thread.thread().clone());
        }
        engines.push(engine.weak());
        Ok(())
    }

    /// Marks a guest as running until the guard is dropped.
    pub fn running(&self) -> Running {
        let state = &self.0;
        state.running.fetch_add(1, Ordering::SeqCst);
        state.starts.fetch_add(1, Ordering::SeqCst);
        if state.parked.load(Ordering::SeqCst)
            && let Some(thread) = state.thread.get()
        {
            thread.unpark();
        }
        Running(self.0.clone())
    }
}

pub struct Running(Arc<State>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The thread's loop. It holds its state only while it looks at it: sleeping or parked,
/// it holds nothing, so that the state can go (and the thread end) with its last handle.
fn tick(state: Weak<State>) {
    let mut last_busy = Instant::now();
    let mut starts = 0;
    loop {
        let Some(ticker) = state.upgrade() else {
            return;
        };
        for engine in crate::lock(&ticker.engines)
            .iter()
            .filter_map(EngineWeak::upgrade)
        {
            engine.increment_epoch();
        }
        let now_starts = ticker.starts.load(Ordering::SeqCst);
        if ticker.running.load(Ordering::SeqCst) > 0 || now_starts != starts {
            last_busy = Instant::now();
            starts = now_starts;
        }
        if last_busy.elapsed() < IDLE_AFTER {
            drop(ticker);
            std::thread::sleep(EPOCH_TICK);
            continue;
        }
        // Parked only if no guest started since the check: `running` either sees the
        // flag and unparks, or is seen here.
        ticker.parked.store(true, Ordering::SeqCst);
        let idle = ticker.running.load(Ordering::SeqCst) == 0
            && ticker.starts.load(Ordering::SeqCst) == starts;
        // Dropped before parking: the last handle's drop unparks the thread (a token kept
        // if it comes first), which then finds the state gone.
        let parked = Arc::downgrade(&ticker);
        drop(ticker);
        if idle {
            std::thread::park();
        }
        if let Some(ticker) = parked.upgrade() {
            ticker.parked.store(false, Ordering::SeqCst);
        }
        last_busy = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_ends_with_its_last_handle() {
        let ticker = Ticker::default();
        let engine = Engine::default();
        ticker.add(&engine).unwrap();
        let state = Arc::downgrade(&ticker.0);
        let running = ticker.running();
        drop(ticker);
        assert!(
            state.upgrade().is_some(),
            "a running guest keeps its ticker"
        );
        drop(running);
        // The thread may hold it for the moment of a tick.
        let gone = Instant::now() + Duration::from_secs(5);
        while state.upgrade().is_some() {
            assert!(Instant::now() < gone, "the ticker outlived its last handle");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
