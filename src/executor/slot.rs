//! One worker (a child process or a wasm instance) per action: activations queue for it in
//! arrival order, each within its deadline, and a worker that failed is replaced.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use tokio::time::Instant;

use super::{RunError, StartError, lines};
use crate::lock;

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
    /// What new workers are made from; `upgrade` replaces it.
    spec: RwLock<Arc<W::Spec>>,
    /// Bumped with each new spec: workers made from an older one are retired.
    generation: AtomicU64,
    max_result: usize,
    size: PoolSize,
    permits: tokio::sync::Semaphore,
    /// Workers not serving anyone right now, with the generation they were made from.
    idle: Mutex<Vec<(u64, W)>>,
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
            spec: RwLock::new(Arc::new(spec)),
            generation: AtomicU64::new(0),
            max_result,
            size,
            permits: tokio::sync::Semaphore::new(size.workers.max(1)),
            idle: Mutex::new(vec![(0, worker)]),
            waiting: AtomicUsize::new(0),
        })
    }

    fn current_spec(&self) -> (u64, Arc<W::Spec>) {
        let spec = self.spec.read().unwrap_or_else(|e| e.into_inner());
        (self.generation.load(Ordering::Acquire), spec.clone())
    }

    /// An idle worker of the current generation that is still alive; others are dropped.
    fn take_idle(&self) -> Option<(u64, W)> {
        let current = self.generation.load(Ordering::Acquire);
        let mut retired = Vec::new();
        let found = {
            let mut idle = lock(&self.idle);
            loop {
                match idle.pop() {
                    Some((generation, mut worker)) => {
                        if generation == current && worker.is_alive() {
                            break Some((generation, worker));
                        }
                        retired.push(worker);
                    }
                    None => break None,
                }
            }
        };
        // Dropped outside the lock: stopping a worker may take a moment.
        drop(retired);
        found
    }

    async fn start_worker(&self) -> Result<(u64, W), StartError> {
        let (generation, spec) = self.current_spec();
        Ok((generation, W::start(&spec).await?))
    }

    /// From now on workers are made from `spec`, once a first worker made from it has
    /// started (otherwise the old spec stays, and the error is returned). Idle workers
    /// made from the old spec are swapped for fresh ones as these are ready, so that
    /// activations find one; busy ones are dropped when their activation ends.
    pub async fn upgrade(&self, spec: W::Spec) -> Result<(), StartError> {
        let mut fresh = W::start(&spec).await?;
        let current = {
            let mut slot_spec = self.spec.write().unwrap_or_else(|e| e.into_inner());
            *slot_spec = Arc::new(spec);
            self.generation.fetch_add(1, Ordering::AcqRel) + 1
        };
        loop {
            let stale = {
                let mut idle = lock(&self.idle);
                match idle.iter().position(|(g, _)| *g != current) {
                    Some(at) => Some(std::mem::replace(&mut idle[at], (current, fresh)).1),
                    None => {
                        // Every worker was busy: this one serves the next activation.
                        if idle.len() < self.size.workers.max(1) {
                            idle.push((current, fresh));
                        }
                        None
                    }
                }
            };
            // Dropped outside the lock: stopping a worker may take a moment.
            if stale.is_none() {
                return Ok(());
            }
            drop(stale);
            if !lock(&self.idle).iter().any(|(g, _)| *g != current) {
                return Ok(());
            }
            match self.start_worker().await {
                Ok((_, worker)) => fresh = worker,
                Err(e) => {
                    // The new spec has worked once: activations will start their own.
                    tracing::debug!(error = %e, "cannot start a worker to replace an old one");
                    return Ok(());
                }
            }
        }
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
        let (generation, mut worker) = match self.take_idle() {
            Some(idle) => idle,
            None => {
                within(deadline, async {
                    self.start_worker().await.map_err(RunError::Restart)
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
        // instance), and a later activation starts a fresh one. Whether it is still alive
        // is asked once, by `take_idle` before its next activation (for a child, a waitpid
        // system call), not here as well.
        let in_step = matches!(result, Ok(_) | Err(RunError::NotAnObject));
        let current = generation == self.generation.load(Ordering::Acquire);
        if in_step && current {
            lock(&self.idle).push((generation, worker));
        }
        drop(permit);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker that answers with the id of the spec it was made from.
    struct Fake(u32);

    struct FakeSpec {
        id: u32,
        starts: bool,
    }

    impl Worker for Fake {
        type Spec = FakeSpec;

        async fn start(spec: &FakeSpec) -> Result<Self, StartError> {
            if spec.starts {
                Ok(Fake(spec.id))
            } else {
                Err(StartError::Exited)
            }
        }

        fn is_alive(&mut self) -> bool {
            true
        }

        fn discard_stray_output(&mut self) {}

        async fn activate(&mut self, _: Vec<u8>, _: usize) -> Result<Bytes, RunError> {
            Ok(Bytes::from(format!("{{\"spec\":{}}}\n", self.0)))
        }
    }

    async fn answer(slot: &Slot<Fake>) -> String {
        let answer = slot.run(b"{}\n".to_vec(), None).await.unwrap();
        String::from_utf8(answer.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn an_upgrade_whose_worker_cannot_start_keeps_the_old_spec() {
        let size = PoolSize {
            workers: 2,
            max_waiting: 10,
        };
        let slot = Slot::start(
            FakeSpec {
                id: 1,
                starts: true,
            },
            1024,
            size,
        )
        .await
        .unwrap();
        assert_eq!(answer(&slot).await, "{\"spec\":1}\n");
        let failing = FakeSpec {
            id: 2,
            starts: false,
        };
        assert!(slot.upgrade(failing).await.is_err());
        assert_eq!(answer(&slot).await, "{\"spec\":1}\n");
        assert!(
            slot.upgrade(FakeSpec {
                id: 3,
                starts: true
            })
            .await
            .is_ok()
        );
        assert_eq!(answer(&slot).await, "{\"spec\":3}\n");
        assert_eq!(answer(&slot).await, "{\"spec\":3}\n");
        let idle = lock(&slot.idle);
        assert_eq!(idle.len(), 1, "the old worker was swapped, not added to");
        assert!(idle.iter().all(|(g, w)| *g == 1 && w.0 == 3));
    }
}
