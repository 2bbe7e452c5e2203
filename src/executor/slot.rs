//! One worker (a child process or a wasm instance) per action: activations queue for it in
//! arrival order, each within its deadline, and a worker that failed is replaced.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

use tokio::time::Instant;

use super::{RunError, StartError, lines};

/// What a backend runs activations on.
pub trait Worker: Sized + Send + 'static {
    /// Everything needed to start (and restart) a worker.
    type Spec: Send + Sync;

    fn start(spec: &Self::Spec) -> impl Future<Output = Result<Self, StartError>> + Send;

    /// False once the worker has ended on its own (exited, trapped).
    fn is_alive(&mut self) -> bool;

    /// Drops output nobody asked for (extra lines after the last result), so that it
    /// cannot pass for the next activation's answer.
    fn discard_stray_output(&mut self);

    /// Sends one request line and waits for the result line.
    fn activate(
        &mut self,
        line: Vec<u8>,
        max_result: usize,
    ) -> impl Future<Output = Result<Bytes, RunError>> + Send;
}

/// How many workers, and how many activations may wait for one.
#[derive(Debug, Clone, Copy)]
pub struct PoolSize {
    pub workers: usize,
    pub max_waiting: usize,
}

/// Up to `workers` workers of one action, made on demand; activations beyond that wait
/// in arrival order (tokio's semaphore is fair), up to `max_waiting` of them.
pub struct Slot<W: Worker> {
    spec: W::Spec,
    max_result: usize,
    size: PoolSize,
    permits: tokio::sync::Semaphore,
    /// Workers not serving anyone right now.
    idle: std::sync::Mutex<Vec<W>>,
    waiting: AtomicUsize,
}

/// Runs `future` until `deadline` (if any); running out of time is `RunError::TimedOut`.
async fn within<T>(
    deadline: Option<Instant>,
    future: impl Future<Output = Result<T, RunError>>,
) -> Result<T, RunError> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, future)
            .await
            .unwrap_or(Err(RunError::TimedOut)),
        None => future.await,
    }
}

/// Counts an activation as waiting for as long as it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<W: Worker> Slot<W> {
    /// Starts the first worker: failing here fails `/init`.
    pub async fn start(
        spec: W::Spec,
        max_result: usize,
        size: PoolSize,
    ) -> Result<Self, StartError> {
        let worker = W::start(&spec).await?;
        Ok(Slot {
            spec,
            max_result,
            size,
            permits: tokio::sync::Semaphore::new(size.workers.max(1)),
            idle: std::sync::Mutex::new(vec![worker]),
            waiting: AtomicUsize::new(0),
        })
    }

    fn take_idle(&self) -> Option<W> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    pub async fn run(&self, line: Vec<u8>, deadline: Option<Instant>) -> Result<Bytes, RunError> {
        // Only activations that find every worker busy count against the queue's bound.
        let permit = match self.permits.try_acquire() {
            Ok(permit) => permit,
            Err(_) => {
                if self.waiting.fetch_add(1, Ordering::Relaxed) >= self.size.max_waiting {
                    self.waiting.fetch_sub(1, Ordering::Relaxed);
                    return Err(RunError::Busy(self.size.max_waiting));
                }
                let _waiting = Waiting(&self.waiting);
                // Time spent queueing counts against the deadline too.
                within(deadline, async {
                    self.permits.acquire().await.map_err(|_| RunError::Busy(0))
                })
                .await?
            }
        };
        // Owned by this activation until it ends: were it cancelled, the worker goes with it.
        // A worker that died while idle is replaced before this activation.
        let mut worker = match self.take_idle().and_then(|mut w| w.is_alive().then_some(w)) {
            Some(worker) => worker,
            None => {
                within(deadline, async {
                    W::start(&self.spec).await.map_err(RunError::Restart)
                })
                .await?
            }
        };
        worker.discard_stray_output();
        let result = within(deadline, async {
            lines::check_result(worker.activate(line, self.max_result).await?)
        })
        .await;
        // A JSON answer that is not an object leaves the worker in step; any other failure
        // may leave it mid-request or out of step: it is dropped (killing the child or the
        // instance), and a later activation starts a fresh one.
        let in_step = matches!(result, Ok(_) | Err(RunError::NotAnObject));
        if in_step && worker.is_alive() {
            self.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(worker);
        }
        drop(permit);
        result
    }
}
