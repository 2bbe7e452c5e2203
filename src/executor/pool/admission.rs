//! Admission: an activation takes a free worker's permit at once, or waits in the queue (up to its bound, then 429), counted while it waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::time::Instant;

use super::{Pool, Worker, within};
use crate::executor::RunError;
use crate::metrics::Metrics;

impl<W: Worker> Pool<W> {
    /// Admits an activation: the permit it holds until it has ended. Time spent waiting
    /// counts against its `deadline`.
    pub(super) async fn admit(
        &self,
        deadline: Option<Instant>,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, RunError> {
        // Only activations that find every worker busy count against the queue's bound.
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Ok(permit),
            Err(_) => {
                if self.waiting.fetch_add(1, Ordering::Relaxed) >= self.size.max_waiting {
                    self.waiting.fetch_sub(1, Ordering::Relaxed);
                    if let Some(metrics) = &self.reporting.metrics {
                        metrics.queue_full();
                    }
                    return Err(RunError::Busy(self.size.max_waiting));
                }
                let _waiting = Waiting::new(&self.waiting, &self.reporting.metrics);
                let queued = Instant::now();
                // Time spent queueing counts against the deadline too.
                within(deadline, async {
                    self.permits
                        .clone()
                        .acquire_owned()
                        .await
                        .map_err(|_| RunError::Stopped)
                })
                .await
                .map_err(|e| match e {
                    RunError::TimedOut => RunError::NeverStarted(queued.elapsed()),
                    other => other,
                })
            }
        }
    }
}

/// Counts an activation as waiting for as long as it lives (its count is added first).
struct Waiting<'a>(&'a AtomicUsize, &'a Option<Arc<Metrics>>);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize, metrics: &'a Option<Arc<Metrics>>) -> Self {
        if let Some(metrics) = metrics {
            metrics.queue_depth().inc();
        }
        Waiting(count, metrics)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        if let Some(metrics) = self.1 {
            metrics.queue_depth().dec();
        }
    }
}
