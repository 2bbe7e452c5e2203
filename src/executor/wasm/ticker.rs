//! The epoch ticker: one thread advances every engine's epoch, and only while guests run.

// An idle container then wakes no CPU (with a thread per engine it took 100 wake-ups a
// second each).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use wasmtime::{Engine, EngineWeak};

/// How often the epoch advances while guests run: they yield to other tasks (and so meet
/// their deadlines) at this granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// With no guest running for this long, the epoch stops advancing until one runs again.
const IDLE_AFTER: Duration = Duration::from_secs(1);

static ENGINES: Mutex<Vec<EngineWeak>> = Mutex::new(Vec::new());
static THREAD: OnceLock<Thread> = OnceLock::new();
/// Guests running now, and how many times one started running.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
static STARTS: AtomicUsize = AtomicUsize::new(0);
static PARKED: AtomicBool = AtomicBool::new(false);

pub fn add(engine: &Engine) -> wasmtime::Result<()> {
    // Under the lock: engines made at the same time must not start two tickers.
    let mut engines = crate::lock(&ENGINES);
    if THREAD.get().is_none() {
        let thread = std::thread::Builder::new()
            .name("wasmloop-epoch".to_owned())
            .spawn(tick)
            .map_err(|e| wasmtime::format_err!("cannot start the epoch ticker: {e}"))?;
        let _ = THREAD.set(thread.thread().clone());
    }
    engines.push(engine.weak());
    Ok(())
}

/// Marks a guest as running until the guard is dropped.
pub fn running() -> Running {
    RUNNING.fetch_add(1, Ordering::SeqCst);
    STARTS.fetch_add(1, Ordering::SeqCst);
    if PARKED.load(Ordering::SeqCst)
        && let Some(thread) = THREAD.get()
    {
        thread.unpark();
    }
    Running(())
}

pub struct Running(());

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

fn tick() {
    let mut last_busy = Instant::now();
    let mut starts = STARTS.load(Ordering::SeqCst);
    loop {
        for engine in crate::lock(&ENGINES).iter().filter_map(EngineWeak::upgrade) {
            engine.increment_epoch();
        }
        let now_starts = STARTS.load(Ordering::SeqCst);
        if RUNNING.load(Ordering::SeqCst) > 0 || now_starts != starts {
            last_busy = Instant::now();
            starts = now_starts;
        }
        if last_busy.elapsed() < IDLE_AFTER {
            std::thread::sleep(EPOCH_TICK);
            continue;
        }
        // Parked only if no guest started since the check: `running` either sees the
        // flag and unparks, or is seen here.
        PARKED.store(true, Ordering::SeqCst);
        if RUNNING.load(Ordering::SeqCst) == 0 && STARTS.load(Ordering::SeqCst) == starts {
            std::thread::park();
        }
        PARKED.store(false, Ordering::SeqCst);
        last_busy = Instant::now();
    }
}
