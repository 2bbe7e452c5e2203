//! One worker (a child process or a wasm instance) per action: activations queue for it in
//! arrival order, each within its deadline, and a worker that failed is replaced.

use std::future::Future;

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

pub struct Slot<W: Worker> {
    spec: W::Spec,
    max_result: usize,
    // tokio's mutex is fair: waiting activations are served in arrival order.
    worker: tokio::sync::Mutex<Option<W>>,
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

impl<W: Worker> Slot<W> {
    /// Starts the first worker: failing here fails `/init`.
    pub async fn start(spec: W::Spec, max_result: usize) -> Result<Self, StartError> {
        let worker = W::start(&spec).await?;
        Ok(Slot {
            spec,
            max_result,
            worker: tokio::sync::Mutex::new(Some(worker)),
        })
    }

    pub async fn run(&self, line: Vec<u8>, deadline: Option<Instant>) -> Result<Bytes, RunError> {
        // Time spent queueing counts against the deadline too.
        let mut slot = within(deadline, async { Ok(self.worker.lock().await) }).await?;
        if slot.as_mut().is_some_and(|w| !w.is_alive()) {
            *slot = None;
        }
        let worker = match slot.as_mut() {
            Some(worker) => worker,
            None => {
                let started = within(deadline, async {
                    W::start(&self.spec).await.map_err(RunError::Restart)
                });
                slot.insert(started.await?)
            }
        };
        worker.discard_stray_output();
        let result = within(deadline, async {
            lines::check_result(worker.activate(line, self.max_result).await?)
        })
        .await;
        // A JSON answer that is not an object leaves the worker in step; any other failure
        // may leave it mid-request or out of step: replace it (dropping it kills the child
        // or the instance), and the next activation restarts it.
        if matches!(result, Err(ref e) if !matches!(e, RunError::NotAnObject)) || !worker.is_alive()
        {
            *slot = None;
        }
        result
    }
}
