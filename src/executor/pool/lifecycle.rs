//! A pool's workers from birth to end: the first start, taking an idle one or making one, renewing, retiring with a successor made ahead, upgrading to newer code.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::time::Instant;

use super::{Pool, PoolSize, Reporting, Start, Worker, micros, within};
use crate::executor::report::InstanceUse;
use crate::executor::{AbortOnDrop, RunError, StartError};
use crate::lock;
use crate::metrics::{Made, Metrics};

/// An idle worker, and how many activations it has answered: once it has served one, it
/// holds the action's state (counters, caches, connections), which only its own end may
/// lose.
pub(super) struct Idle<W> {
    pub(super) worker: W,
    _alive: Alive,
    /// The spec it was made from.
    pub(super) generation: u64,
    pub(super) activations: u32,
    /// It has served its activations and is renewed before it serves again.
    pub(super) stale: bool,
    /// It was renewed in place and has not served since.
    pub(super) renewed: bool,
}

impl<W: Worker> Idle<W> {
    /// A worker just made, for the reason the metrics count.
    fn new(worker: W, generation: u64, why: Made, metrics: &Option<Arc<Metrics>>) -> Self {
        let metrics = &metrics.clone().filter(|_| W::IS_INSTANCE);
        if let Some(metrics) = metrics {
            metrics.instance_made(why);
        }
        Idle {
            worker,
            _alive: Alive::new(metrics.clone()),
            generation,
            activations: 0,
            stale: false,
            renewed: false,
        }
    }

    /// How the activation that takes it finds it, as its report says; a renewal is told
    /// once.
    pub(super) fn instance_use(&mut self) -> InstanceUse {
        let found = match (self.activations, self.renewed) {
            (0, true) => InstanceUse::Renewed,
            (0, false) => InstanceUse::Fresh,
            _ => InstanceUse::Reused,
        };
        self.renewed = false;
        found
    }

    fn served(&self) -> bool {
        self.activations > 0
    }
}

/// Counts a worker among those alive (the metrics' gauge) for as long as it lives.
struct Alive(Option<Arc<Metrics>>);

impl Alive {
    fn new(metrics: Option<Arc<Metrics>>) -> Self {
        if let Some(metrics) = &metrics {
            metrics.instances().inc();
        }
        Alive(metrics)
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        if let Some(metrics) = &self.0 {
            metrics.instances().dec();
        }
    }
}

impl<W: Worker> Pool<W> {
    /// Starts the first worker: failing here fails `/init`.
    pub async fn start(
        spec: W::Spec,
        size: PoolSize,
        reporting: impl Into<Reporting>,
    ) -> Result<Arc<Self>, StartError> {
        let reporting: Reporting = reporting.into();
        let worker = W::start(&spec, Start::Checked).await?;
        let first = Idle::new(worker, 0, Made::First, &reporting.metrics);
        Ok(Arc::new_cyclic(|me| Pool {
            spec: RwLock::new(Arc::new(spec)),
            generation: AtomicU64::new(0),
            size,
            reporting,
            permits: Arc::new(tokio::sync::Semaphore::new(size.workers.max(1))),
            me: me.clone(),
            idle: Mutex::new(vec![first]),
            waiting: AtomicUsize::new(0),
            helper: std::sync::OnceLock::new(),
            stopping: tokio::sync::watch::Sender::new(false),
            cold: Mutex::new(None),
        }))
    }

    /// Ties `task` to this slot: it is stopped when the slot goes (at once, if the slot
    /// has one already).
    pub fn keep_helper(&self, task: tokio::task::AbortHandle) {
        // A refused one is dropped here, which stops it.
        let _ = self.helper.set(AbortOnDrop(task));
    }

    pub(super) fn current_spec(&self) -> (u64, Arc<W::Spec>) {
        let spec = self.spec.read().unwrap_or_else(|e| e.into_inner());
        (self.generation.load(Ordering::Acquire), spec.clone())
    }

    /// An idle worker that is still alive; dead ones are dropped.
    pub(super) fn take_idle(&self) -> Option<Idle<W>> {
        let mut dead = Vec::new();
        let found = {
            let mut idle = lock(&self.idle);
            loop {
                match idle.pop() {
                    Some(mut entry) => {
                        if entry.worker.is_alive() {
                            break Some(entry);
                        }
                        dead.push(entry);
                    }
                    None => break None,
                }
            }
        };
        // Dropped outside the lock: stopping a worker may take a moment.
        drop(dead);
        found
    }

    /// A worker waiting to be renewed, taken out of the idle ones.
    pub(super) fn take_stale(&self) -> Option<Idle<W>> {
        let mut idle = lock(&self.idle);
        let at = idle.iter().position(|entry| entry.stale)?;
        Some(idle.swap_remove(at))
    }

    /// `entry`, renewed in place to serve again (see `Worker::renew`); or, where it
    /// cannot be (made from older code, or its worker could not), a new worker instead.
    pub(super) async fn renewed(
        &self,
        mut entry: Idle<W>,
        ahead: bool,
    ) -> Result<Idle<W>, StartError> {
        let began = std::time::Instant::now();
        let (generation, spec) = self.current_spec();
        // One made from older code (optimized code came since) is replaced by newer.
        if entry.generation == generation && entry.worker.renew(&spec).await {
            tracing::debug!(
                renewed_us = micros(began.elapsed()),
                "worker renewed in place"
            );
            entry.stale = false;
            entry.activations = 0;
            entry.renewed = true;
            if let Some(metrics) = &self.reporting.metrics {
                metrics.instance_made(Made::Renewed);
            }
            return Ok(entry);
        }
        drop(entry);
        self.start_worker(ahead, Made::Lifetime).await
    }

    /// A worker made from the current spec, for the reason `why`; `ahead` of its
    /// activation for a retired worker's successor (see `Start::Ahead`).
    pub(super) async fn start_worker(&self, ahead: bool, why: Made) -> Result<Idle<W>, StartError> {
        let (generation, spec) = self.current_spec();
        let worker = if ahead {
            W::start(&spec, Start::Ahead).await?
        } else {
            W::start(&spec, Start::Checked).await?
        };
        Ok(Idle::new(worker, generation, why, &self.reporting.metrics))
    }

    /// Whether each worker is started for its activation, with its values (see
    /// `Worker::FRESH_STARTS_ON_ARRIVAL`).
    pub(super) fn starts_on_arrival(&self) -> bool {
        W::FRESH_STARTS_ON_ARRIVAL && self.size.max_activations.is_some_and(|n| n.get() == 1)
    }

    /// Whether `worker` holds more memory than `--recycle-above-memory` allows.
    pub(super) fn grew_too_large(&self, worker: &mut W) -> bool {
        let Some(mark) = self.size.recycle_above else {
            return false;
        };
        match worker.memory_bytes() {
            Some(bytes) if bytes > mark => {
                tracing::debug!(
                    bytes,
                    mark,
                    "worker past --recycle-above-memory: replacing it"
                );
                true
            }
            _ => false,
        }
    }

    /// Retires a worker that has served its activations: it is dropped, then its
    /// successor is made, both off the request's path (the answer goes out first), holding
    /// `permit` until the successor is idle, so that the next activation finds it ready
    /// (or waits for it, instead of making one of its own beside it).
    ///
    /// A worker that can be renewed in place is idle again at once, stale: a task renews
    /// it, unless an activation takes it first and renews it itself (on one CPU the next
    /// request is often read before that task runs, and would otherwise wait for it).
    pub(super) fn retire(
        &self,
        mut entry: Idle<W>,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
        renew: bool,
    ) {
        let Some(pool) = self.me.upgrade() else {
            return;
        };
        // Stopped with the pool (by `stop`, or when the action goes).
        let mut stopping = self.stopping.subscribe();
        if renew && entry.worker.can_renew() {
            entry.stale = true;
            lock(&self.idle).push(entry);
            drop(permit);
            tokio::spawn(async move {
                // Held while it renews: an activation meanwhile waits for it, instead of
                // making a worker of its own beside it.
                let Ok(_permit) = pool.permits.clone().try_acquire_owned() else {
                    return;
                };
                let Some(stale) = pool.take_stale() else {
                    return;
                };
                let renewed = tokio::select! {
                    _ = stopping.wait_for(|stop| *stop) => return,
                    renewed = pool.renewed(stale, true) => renewed,
                };
                match renewed {
                    Ok(entry) if !*pool.stopping.borrow() => lock(&pool.idle).push(entry),
                    Ok(_) => {}
                    // The next activation tries again, and reports the failure.
                    Err(e) => tracing::debug!(error = %e, "cannot make a fresh worker ahead"),
                }
            });
            return;
        }
        // A worker that could have been renewed goes for its lifetime; one that may not be
        // (`renew` false) for its memory.
        let successor = if renew { Made::Lifetime } else { Made::Memory };
        tokio::spawn(async move {
            let _permit = permit;
            // Its place (a pool slot, a process) is free before the successor takes one.
            let began = std::time::Instant::now();
            drop(entry);
            let ended = began.elapsed();
            if pool.starts_on_arrival() {
                tracing::debug!(ended_us = micros(ended), "worker ended");
                return;
            }
            let made = tokio::select! {
                _ = stopping.wait_for(|stop| *stop) => return,
                made = pool.start_worker(true, successor) => made,
            };
            match made {
                Ok(fresh) if !*pool.stopping.borrow() => {
                    // What a fresh instance costs, off the request's path: an operator
                    // weighing `--max-activations-per-instance` reads it here.
                    tracing::debug!(
                        ended_us = micros(ended),
                        made_us = micros(began.elapsed() - ended),
                        "worker ended and its successor made ahead"
                    );
                    lock(&pool.idle).push(fresh)
                }
                Ok(_) => {}
                // The next activation tries again, and reports the failure.
                Err(e) => tracing::debug!(error = %e, "cannot make a fresh worker ahead"),
            }
        });
    }

    /// From now on workers are made from `spec` (restarts, pool growth), once a first
    /// worker made from it has started (otherwise the old spec stays, and the error is
    /// returned). Idle workers that have never served are swapped for workers made from
    /// it; a worker that has served keeps running, whatever it was made from, until it
    /// ends: its state is the action's, and persistent actions count on it. Returns how
    /// many workers were swapped.
    pub async fn upgrade(&self, spec: W::Spec) -> Result<usize, StartError> {
        let worker = W::start(&spec, Start::Checked).await?;
        let current = {
            let mut slot_spec = self.spec.write().unwrap_or_else(|e| e.into_inner());
            *slot_spec = Arc::new(spec);
            self.generation.fetch_add(1, Ordering::AcqRel) + 1
        };
        let mut fresh = Idle::new(worker, current, Made::Upgrade, &self.reporting.metrics);
        let replaceable = |entry: &Idle<W>| !entry.served() && entry.generation != current;
        let mut swapped = 0;
        loop {
            let unserved = {
                let mut idle = lock(&self.idle);
                idle.iter()
                    .position(replaceable)
                    .map(|at| std::mem::replace(&mut idle[at], fresh))
            };
            let Some(unserved) = unserved else {
                // Nothing to swap: the fresh worker is dropped, as it was never needed.
                return Ok(swapped);
            };
            swapped += 1;
            // Dropped outside the lock: stopping a worker may take a moment.
            drop(unserved);
            if !lock(&self.idle).iter().any(replaceable) {
                return Ok(swapped);
            }
            match self.start_worker(false, Made::Upgrade).await {
                Ok(worker) => fresh = worker,
                Err(e) => {
                    // The new spec has worked once: activations will start their own.
                    tracing::debug!(error = %e, "cannot start a worker to replace an old one");
                    return Ok(swapped);
                }
            }
        }
    }

    /// The worker for an activation with `context`: an idle one (renewed
    /// first if it is stale), or one made for it. A worker that died while idle is
    /// replaced before the activation.
    pub(super) async fn take(
        &self,
        context: &crate::context::Context,
        deadline: Option<Instant>,
    ) -> Result<Idle<W>, RunError> {
        let entry = if self.starts_on_arrival() {
            // The one made at `/init` has no activation's values: it only showed that the
            // action starts.
            drop(std::mem::take(&mut *lock(&self.idle)));
            let (generation, spec) = self.current_spec();
            let began = std::time::Instant::now();
            let started = within(deadline, async {
                let worker = W::start(&spec, Start::OnArrival(context)).await;
                worker
                    .map(|worker| {
                        Idle::new(worker, generation, Made::Lifetime, &self.reporting.metrics)
                    })
                    .map_err(RunError::Restart)
            })
            .await?;
            tracing::debug!(
                made_us = micros(began.elapsed()),
                "worker started on arrival"
            );
            started
        } else {
            match self.take_idle() {
                Some(idle) if idle.stale => {
                    within(deadline, async {
                        self.renewed(idle, false).await.map_err(RunError::Restart)
                    })
                    .await?
                }
                Some(idle) => idle,
                None => {
                    within(deadline, async {
                        self.start_worker(false, Made::Demand)
                            .await
                            .map_err(RunError::Restart)
                    })
                    .await?
                }
            }
        };
        Ok(entry)
    }

    /// Gives `entry` back once its activation ended with `result`: idle again, or
    /// retired (holding the activation's `permit` until its successor is made).
    pub(super) fn give_back(
        &self,
        mut entry: Idle<W>,
        result: &Result<Option<crate::executor::lines::ResultLine>, RunError>,
        permit: &mut Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        // A JSON answer that is not an object leaves the worker in step; any other failure
        // may leave it mid-request or out of step: it is dropped (killing the child or the
        // instance), and a later activation starts a fresh one. Whether it is still alive
        // is asked once, by `take_idle` before its next activation (for a child, a waitpid
        // system call), not here as well.
        // Input refused before the worker saw it leaves it as it was too.
        if !matches!(
            result,
            Ok(_) | Err(RunError::NotAnObject(_) | RunError::BadInput(_))
        ) {
            return;
        }
        {
            entry.activations = entry.activations.saturating_add(1);
            let served_all = self
                .size
                .max_activations
                .is_some_and(|most| entry.activations >= most.get());
            let too_large = self.grew_too_large(&mut entry.worker);
            if served_all || too_large {
                if served_all {
                    tracing::debug!(
                        activations = entry.activations,
                        "worker retired after its activations: making a fresh one"
                    );
                }
                // A renewed instance would keep its memory: what the mark is to free.
                self.retire(entry, permit.take(), !too_large);
            } else {
                lock(&self.idle).push(entry);
            }
        }
    }
}
