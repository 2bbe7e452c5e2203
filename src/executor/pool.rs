//! Each backend's `Executor`: a pool of workers (children or wasm instances) activations queue for.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use bytes::Bytes;
use tokio::time::Instant;

use super::report::{InstanceUse, Report, cpu_timed};
use super::{
    AbortOnDrop, Executor, HttpRequest, Respond, RunError, RunFuture, ServeFuture, StartError,
    lines,
};
use crate::lock;
use crate::metrics::{Made, Metrics};

/// What a backend runs activations on.
pub trait Worker: Sized + Send + 'static {
    /// Everything needed to start (and restart) a worker.
    type Spec: Send + Sync;

    /// Starts a worker, the way `how` says.
    fn start(
        spec: &Self::Spec,
        how: Start<'_>,
    ) -> impl Future<Output = Result<Self, StartError>> + Send;

    /// Whether a fresh worker (one activation each) must start once its activation has
    /// come, to be given that activation's values (a worker that cannot learn them later):
    /// then none is made ahead, and each starts with `Start::OnArrival`.
    const FRESH_STARTS_ON_ARRIVAL: bool = false;

    /// Whether `renew` may work: the worker can be made as good as a new one in place.
    fn can_renew(&self) -> bool {
        false
    }

    /// Makes the worker as good as a new one from `spec`, in place (a WebAssembly
    /// instance whose module allows it): cheaper than ending it and making another. False
    /// if it could not; it is then dropped and replaced.
    fn renew(&mut self, _spec: &Self::Spec) -> impl Future<Output = bool> + Send {
        std::future::ready(false)
    }

    /// False once the worker has ended on its own (exited, trapped).
    fn is_alive(&mut self) -> bool;

    /// Drops output nobody asked for (extra lines after the last result), so that it
    /// cannot pass for the next activation's answer, and returns it (if any) for the logs.
    fn discard_stray_output(&mut self) -> Option<Bytes>;

    /// Marks the end of an activation (see `Close`), with whatever log lines the worker
    /// held back to go out in the same write.
    fn end_activation(&mut self, close: Close) {
        close.write();
    }

    /// Sends one request line and waits for the result line (at most as long as the
    /// worker's spec allows).
    fn activate(&mut self, line: Vec<u8>) -> impl Future<Output = Result<Bytes, RunError>> + Send;

    /// Whether it takes HTTP requests themselves (`serve`).
    const SERVES_HTTP: bool = false;

    /// Serves one request as it came (see `Executor::serve`): sends the response's head on
    /// `respond` as soon as it has it, and returns once the response's body has ended.
    /// `context` is the activation's request line without a value.
    fn serve(
        &mut self,
        _request: HttpRequest,
        _context: Vec<u8>,
        _respond: Respond,
    ) -> impl Future<Output = Result<(), RunError>> + Send {
        std::future::ready(Err(RunError::BadInput(
            "this action takes requests as web actions' values, not as they came".to_owned(),
        )))
    }

    /// Told before each activation which one it is, when log lines carry it
    /// (`--log-format json`).
    fn attribute(&mut self, _labels: std::sync::Arc<crate::logs::Labels>) {}

    /// Where its logs' labels are, if they are kept: the runtime's lines about the worker's
    /// activation (an answer that was not an object, output after it) go under them.
    fn attribution(&self) -> Option<&crate::logs::Attribution> {
        None
    }

    /// Told before each activation whether others queue behind it: a worker may then keep
    /// the CPU it would otherwise offer its child.
    fn others_queued(&mut self, _queued: bool) {}

    /// What it holds in memory now (its linear memories; a child's resident set), if
    /// known: a worker past `--recycle-above-memory` is replaced once its activation ends.
    fn memory_bytes(&mut self) -> Option<u64> {
        None
    }

    /// The most it has held (a child's peak resident set), for the activation's report;
    /// a linear memory never shrinks, so what it holds now is its peak.
    fn peak_memory_bytes(&mut self) -> Option<u64> {
        self.memory_bytes()
    }

    /// The CPU time a worker that runs outside the runtime's threads (a child process)
    /// has used in all, for the activation's report; `None`: it runs inside the polls of
    /// `activate`, which are timed instead.
    fn cpu_time(&mut self) -> Option<std::time::Duration> {
        None
    }
}

/// How a worker is started.
#[derive(Debug, Clone, Copy)]
pub enum Start<'a> {
    /// The action's first worker, or one replacing a worker that died: with every check
    /// that tells `/init` about an action that cannot start.
    Checked,
    /// A successor made ahead of its activation, once the action has started before: a
    /// worker may skip the checks that only matter at `/init`.
    Ahead,
    /// A fresh worker started once its activation has come, whose request is this line
    /// (see `Worker::FRESH_STARTS_ON_ARRIVAL`).
    OnArrival(&'a [u8]),
}

/// How many workers, how many activations may wait for one, and how long a worker lives.
#[derive(Debug, Clone, Copy)]
pub struct PoolSize {
    pub workers: usize,
    pub max_waiting: usize,
    /// Activations a worker serves before it is replaced by a fresh one (`None`: it serves
    /// until it ends, the ActionLoop's own model).
    pub max_activations: Option<std::num::NonZeroU32>,
    /// A worker holding more memory than this after an activation is replaced.
    pub recycle_above: Option<u64>,
}

/// How an activation's logs end, written before the next activation may start on the
/// same workers, so that no log line of the next can come before this one's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The sentinels on stdout and stderr, as the platform reads the logs.
    Sentinels,
    /// Only what the worker held back (`wasmloop run`).
    Logs,
}

/// What a pool writes of its own about each activation, beside the action's logs, and
/// where it counts.
#[derive(Clone)]
pub struct Reporting {
    pub end: End,
    /// Whether an answer that is not a JSON object or array is explained on stderr
    /// (`LogSettings::hints`); the HTTP body is the fixed message either way.
    pub hints: bool,
    /// How those lines are written.
    pub format: crate::logs::LogFormat,
    /// Whether each activation's logs end with its report (`LogSettings::reports`).
    pub reports: bool,
    /// Whether answers go out as plain HTTP responses (`--protocol http`), which a
    /// report's status follows.
    pub web: bool,
    /// Where instances, the queue and its refusals are counted.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Reporting {
    pub fn of(
        config: &crate::config::Config,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> Reporting {
        Reporting {
            end: if config.logs.sentinels {
                End::Sentinels
            } else {
                End::Logs
            },
            hints: config.logs.hints,
            format: config.logs.format,
            reports: config.logs.reports,
            web: config.protocol == crate::config::Protocol::Http,
            metrics,
        }
    }
}

/// Unit tests' pools: no hints, no reports.
#[cfg(test)]
impl From<End> for Reporting {
    fn from(end: End) -> Reporting {
        Reporting {
            end,
            hints: false,
            format: crate::logs::LogFormat::Text,
            reports: false,
            web: false,
            metrics: None,
        }
    }
}

/// How one activation's logs end, as its worker writes them: its report (when one is
/// asked for), then the end `End` says.
pub struct Close {
    end: End,
    /// What follows the held-back logs on stderr: the rendered report and the end's.
    tail: std::borrow::Cow<'static, [u8]>,
}

impl Close {
    /// `end`, after `report` (rendered) on stderr.
    fn after(end: End, mut report: Vec<u8>) -> Close {
        report.extend_from_slice(end.stderr_tail());
        Close {
            end,
            tail: std::borrow::Cow::Owned(report),
        }
    }

    /// Writes it, where no log lines were held back.
    pub fn write(&self) {
        self.write_stdout();
        if !self.tail.is_empty() {
            crate::protocol::write_stderr(&self.tail);
        }
    }

    /// The stdout half, which comes first.
    pub fn write_stdout(&self) {
        self.end.write_stdout();
    }

    /// What follows the held-back logs on stderr.
    pub fn stderr_tail(&self) -> &[u8] {
        &self.tail
    }
}

impl From<End> for Close {
    fn from(end: End) -> Close {
        Close {
            end,
            tail: std::borrow::Cow::Borrowed(end.stderr_tail()),
        }
    }
}

impl End {
    /// Writes the end, where no log lines were held back.
    pub fn write(self) {
        self.write_stdout();
        let tail = self.stderr_tail();
        if !tail.is_empty() {
            crate::protocol::write_stderr(tail);
        }
    }

    /// The stdout half, which comes first.
    pub fn write_stdout(self) {
        if self == End::Sentinels {
            crate::protocol::write_stdout_sentinel();
        }
    }

    /// What follows the held-back logs on stderr.
    pub fn stderr_tail(self) -> &'static [u8] {
        match self {
            End::Sentinels => crate::protocol::SENTINEL.as_bytes(),
            End::Logs => b"",
        }
    }
}

/// What an activation asks of its worker.
enum Job {
    /// Its request line, answered with its result line.
    Run,
    /// A request served as it came (`Worker::serve`).
    Serve(Box<HttpRequest>, Respond),
}

/// What an activation leaves to its end: the permit it holds until then, whether its
/// worker has written the end already, and what its report and lines need: when it began
/// (taken only for a report) and its labels (only in json).
#[derive(Default)]
struct Ending {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    written: bool,
    began: Option<std::time::Instant>,
    labels: Option<Arc<crate::logs::Labels>>,
}

/// Up to `workers` workers of one action, made on demand; activations beyond that wait
/// in arrival order (tokio's semaphore is fair), up to `max_waiting` of them.
pub struct Pool<W: Worker> {
    /// What new workers are made from; `upgrade` replaces it.
    spec: RwLock<Arc<W::Spec>>,
    /// Bumped with each new spec.
    generation: AtomicU64,
    size: PoolSize,
    reporting: Reporting,
    /// One per worker that may exist: held by each activation until it has ended, and by
    /// the making of a retired worker's successor until that is idle.
    permits: Arc<tokio::sync::Semaphore>,
    /// The pool itself, for the tasks that make successors.
    me: Weak<Pool<W>>,
    /// Workers not serving anyone right now.
    idle: Mutex<Vec<Idle<W>>>,
    waiting: AtomicUsize,
    /// A task that works for this slot (compiling a wasm module's optimized code), stopped
    /// when the slot goes.
    helper: std::sync::OnceLock<AbortOnDrop>,
    /// Set by `stop`: every activation under way ends, dropping its worker.
    stopping: tokio::sync::watch::Sender<bool>,
    /// How long the action's start took, until the first activation's report says it.
    cold: Mutex<Option<std::time::Duration>>,
}

/// An idle worker, and how many activations it has answered: once it has served one, it
/// holds the action's state (counters, caches, connections), which only its own end may
/// lose.
struct Idle<W> {
    worker: W,
    _alive: Alive,
    /// The spec it was made from.
    generation: u64,
    activations: u32,
    /// It has served its activations and is renewed before it serves again.
    stale: bool,
    /// It was renewed in place and has not served since.
    renewed: bool,
}

impl<W> Idle<W> {
    /// A worker just made, for the reason the metrics count.
    fn new(worker: W, generation: u64, why: Made, metrics: &Option<Arc<Metrics>>) -> Self {
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

/// Whole microseconds, for the debug lines that time workers.
fn micros(time: std::time::Duration) -> u64 {
    u64::try_from(time.as_micros()).unwrap_or(u64::MAX)
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

    fn current_spec(&self) -> (u64, Arc<W::Spec>) {
        let spec = self.spec.read().unwrap_or_else(|e| e.into_inner());
        (self.generation.load(Ordering::Acquire), spec.clone())
    }

    /// An idle worker that is still alive; dead ones are dropped.
    fn take_idle(&self) -> Option<Idle<W>> {
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
    fn take_stale(&self) -> Option<Idle<W>> {
        let mut idle = lock(&self.idle);
        let at = idle.iter().position(|entry| entry.stale)?;
        Some(idle.swap_remove(at))
    }

    /// `entry`, renewed in place to serve again (see `Worker::renew`); or, where it
    /// cannot be (made from older code, or its worker could not), a new worker instead.
    async fn renewed(&self, mut entry: Idle<W>, ahead: bool) -> Result<Idle<W>, StartError> {
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
    async fn start_worker(&self, ahead: bool, why: Made) -> Result<Idle<W>, StartError> {
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
    fn starts_on_arrival(&self) -> bool {
        W::FRESH_STARTS_ON_ARRIVAL && self.size.max_activations.is_some_and(|n| n.get() == 1)
    }

    /// Whether `worker` holds more memory than `--recycle-above-memory` allows.
    fn grew_too_large(&self, worker: &mut W) -> bool {
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
    fn retire(
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
}

impl<W: Worker> Executor for Pool<W>
where
    W::Spec: 'static,
{
    fn run(&self, line: Vec<u8>, deadline: Option<Instant>) -> RunFuture<'_> {
        Box::pin(self.job(Job::Run, line, deadline))
    }

    fn serves_http(&self) -> bool {
        W::SERVES_HTTP
    }

    fn started_in(&self, took: std::time::Duration) {
        if self.reporting.reports {
            *lock(&self.cold) = Some(took);
        }
    }

    fn serve(
        &self,
        request: HttpRequest,
        context: Vec<u8>,
        deadline: Option<Instant>,
    ) -> ServeFuture<'_> {
        Box::pin(async move {
            let pool = self.me.upgrade().ok_or(RunError::Stopped)?;
            let (respond, head) = Respond::new();
            // The activation goes on once the head is out, until the worker has written
            // the body: a task of its own holds the worker until then.
            let task = tokio::spawn(async move {
                pool.job(Job::Serve(Box::new(request), respond), context, deadline)
                    .await
            });
            match head.await {
                Ok(response) => Ok(response),
                Err(_) => match task.await {
                    Ok(Err(e)) => Err(e),
                    Ok(Ok(_)) => Err(RunError::Exited(Some(
                        "it ended the activation without a response".to_owned(),
                    ))),
                    Err(panicked) => {
                        tracing::error!(error = %panicked, "an activation panicked");
                        self.reporting.end.write();
                        Err(RunError::Exited(Some("the activation failed".to_owned())))
                    }
                },
            }
        })
    }

    fn abandon(&self) {
        self.stopping.send_replace(true);
    }

    fn stop(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            self.stopping.send_replace(true);
            drop(std::mem::take(&mut *lock(&self.idle)));
            // Each activation holds a permit until it has dropped its worker.
            let all = u32::try_from(self.size.workers.max(1)).unwrap_or(u32::MAX);
            let _ = self.permits.acquire_many(all).await;
            self.permits.close();
            drop(std::mem::take(&mut *lock(&self.idle)));
        })
    }
}

impl<W: Worker> Pool<W> {
    /// One activation of either kind, ended (its logs marked) before the next may start.
    async fn job(
        &self,
        job: Job,
        line: Vec<u8>,
        deadline: Option<Instant>,
    ) -> Result<Bytes, RunError> {
        let mut stopping = self.stopping.subscribe();
        let head_sent = match &job {
            Job::Serve(_, respond) => Some(respond.head_sent()),
            Job::Run => None,
        };
        // Read only for the activation's report.
        let began = self.reporting.reports.then(std::time::Instant::now);
        // Parsing the request line costs a few µs: only when the lines carry its labels.
        let labels = self
            .reporting
            .format
            .is_json()
            .then(|| Arc::new(crate::logs::Labels::of(&line)));
        let mut ending = Ending {
            began,
            labels: labels.clone(),
            ..Ending::default()
        };
        let result = tokio::select! {
            // First, so that an activation that starts after `stop` starts no worker.
            biased;
            // Dropping the activation drops its worker: the child or instance ends.
            _ = stopping.wait_for(|stop| *stop) => {
                // `activate`, which says so for every other failure, was dropped: its
                // worker (and the labels it held) with it.
                let sent = head_sent.as_ref().map_or(0, |sent| sent.load(Ordering::Acquire));
                if sent != 0 {
                    crate::logs::runtime_line(
                        self.reporting.format,
                        labels.as_deref(),
                        &format!("wasmloop: the response was cut short: {}", RunError::Stopped),
                    );
                }
                if let Some(began) = began {
                    let report = Report {
                        verdict: self.verdict(&Err(RunError::Stopped), sent),
                        wall: began.elapsed(),
                        cpu: None,
                        memory: None,
                        instance: None,
                        init: None,
                    };
                    let mut rendered = Vec::new();
                    report.render(self.reporting.format, labels.as_deref(), &mut rendered);
                    crate::logs::Stream::Stderr.write(&rendered);
                }
                Err(RunError::Stopped)
            }
            result = self.activate(job, line, deadline, head_sent.as_deref(), &mut ending) => result,
        };
        if !ending.written {
            self.reporting.end.write();
        }
        // Only now may the next activation start on these workers.
        drop(ending);
        result
    }

    /// How an activation that ended with `result` went, as its report says it: for a
    /// request served as it came, `sent` is the status its response went out with (0 if
    /// none did), which stands even for one cut short; a stdio action's result is the
    /// response under `--protocol http`, with its `statusCode`.
    fn verdict(&self, result: &Result<Bytes, RunError>, sent: u16) -> super::report::Verdict {
        use crate::metrics::Outcome;
        let (outcome, status, error) = match result {
            Err(e) => (
                e.outcome(),
                e.status(self.reporting.web),
                Some(e.to_string()),
            ),
            Ok(_) if sent != 0 => (Outcome::Success, sent, None),
            Ok(result) => {
                let outcome = if crate::metrics::is_application_error(result) {
                    Outcome::ApplicationError
                } else {
                    Outcome::Success
                };
                let asked = self.reporting.web.then(|| web_status(result)).flatten();
                (outcome, asked.unwrap_or(200), None)
            }
        };
        let status = if sent != 0 { sent } else { status };
        // An answer of 5xx is the action's own word that it failed, as an `error` field is.
        let outcome = match outcome {
            Outcome::Success if status >= 500 => Outcome::ApplicationError,
            outcome => outcome,
        };
        super::report::Verdict {
            outcome,
            status,
            error,
        }
    }

    /// A line of the runtime's about `worker`'s activation: under its labels in JSON.
    fn say_about(&self, worker: &W, message: &str) {
        match worker.attribution() {
            Some(attribution) => attribution.say(message),
            None => crate::logs::runtime_line(self.reporting.format, None, message),
        }
    }

    /// One activation on a worker; `head_sent`, for a request served as it came, is set
    /// once its response's head went out (a failure after that is told as a cut).
    async fn activate(
        &self,
        job: Job,
        line: Vec<u8>,
        deadline: Option<Instant>,
        head_sent: Option<&std::sync::atomic::AtomicU16>,
        ending: &mut Ending,
    ) -> Result<Bytes, RunError> {
        let began = ending.began;
        // Only activations that find every worker busy count against the queue's bound.
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
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
                })?
            }
        };
        ending.permit = Some(permit);
        // Owned by this activation until it ends: were it cancelled, the worker goes with it.
        // A worker that died while idle is replaced before this activation.
        let mut entry = if self.starts_on_arrival() {
            // The one made at `/init` has no activation's values: it only showed that the
            // action starts.
            drop(std::mem::take(&mut *lock(&self.idle)));
            let (generation, spec) = self.current_spec();
            let began = std::time::Instant::now();
            let started = within(deadline, async {
                let worker = W::start(&spec, Start::OnArrival(&line)).await;
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
        let instance = match (entry.activations, entry.renewed) {
            (0, true) => InstanceUse::Renewed,
            (0, false) => InstanceUse::Fresh,
            _ => InstanceUse::Reused,
        };
        entry.renewed = false;
        let worker = &mut entry.worker;
        if let Some(stray) = worker.discard_stray_output() {
            // Still under the activation that wrote it: the next is not attributed yet.
            let say = |m: &str| self.say_about(worker, m);
            lines::report_stray(&say, &stray);
        }
        worker.others_queued(self.waiting.load(Ordering::Relaxed) > 0);
        let Reporting {
            hints,
            format,
            reports,
            ..
        } = self.reporting;
        if let Some(labels) = ending.labels.take() {
            worker.attribute(labels);
        }
        let cpu_before = if reports { worker.cpu_time() } else { None };
        let mut polled = std::time::Duration::ZERO;
        let work = async {
            match job {
                Job::Run => lines::check_result(worker.activate(line).await?),
                Job::Serve(request, respond) => worker
                    .serve(*request, line, respond)
                    .await
                    .map(|()| Bytes::new()),
            }
        };
        let result = within(deadline, cpu_timed(work, &mut polled, reports)).await;
        // OpenWhisk's runtime tests expect nothing on stderr but what the action wrote when
        // it answers a JSON value that is not an object: that explanation is for those who
        // asked for it. A line that is no JSON at all (a print on the result channel) no
        // canonical case sends, and without a word the 502 would leave its author guessing.
        match &result {
            // Under the activation's labels: the client saw a body cut, and this says why.
            Err(e) if head_sent.is_some_and(|sent| sent.load(Ordering::Acquire) != 0) => self
                .say_about(
                    worker,
                    &format!("wasmloop: the response was cut short: {e}"),
                ),
            Err(RunError::NotJson(line)) => {
                lines::report_not_json(&|m| self.say_about(worker, m), line, hints)
            }
            Err(RunError::NotAnObject(line)) if hints => {
                lines::report_not_an_object(&|m| self.say_about(worker, m), line)
            }
            _ => {}
        }
        let close = if let Some(began) = began {
            // A child's own clock where it has one; an instance ran inside the polls.
            let cpu = match cpu_before {
                Some(before) => worker.cpu_time().map(|after| after.saturating_sub(before)),
                None => Some(polled),
            };
            let sent = head_sent.map_or(0, |sent| sent.load(Ordering::Acquire));
            let report = Report {
                verdict: self.verdict(&result, sent),
                wall: began.elapsed(),
                cpu,
                memory: worker.peak_memory_bytes(),
                instance: Some(instance),
                init: lock(&self.cold).take(),
            };
            let labels = worker.attribution().and_then(|a| a.labels());
            let mut rendered = Vec::new();
            report.render(format, labels.as_deref(), &mut rendered);
            Close::after(self.reporting.end, rendered)
        } else {
            Close::from(self.reporting.end)
        };
        worker.end_activation(close);
        ending.written = true;
        // A JSON answer that is not an object leaves the worker in step; any other failure
        // may leave it mid-request or out of step: it is dropped (killing the child or the
        // instance), and a later activation starts a fresh one. Whether it is still alive
        // is asked once, by `take_idle` before its next activation (for a child, a waitpid
        // system call), not here as well.
        // Input refused before the worker saw it leaves it as it was too.
        if matches!(
            result,
            Ok(_) | Err(RunError::NotAnObject(_) | RunError::BadInput(_))
        ) {
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
                self.retire(entry, ending.permit.take(), !too_large);
            } else {
                lock(&self.idle).push(entry);
            }
        }
        result
    }
}

/// The status a web action's result asks for (`statusCode`), as `--protocol http` sends
/// it; none for a result that names none.
fn web_status(result: &[u8]) -> Option<u16> {
    #[derive(serde::Deserialize)]
    struct Response {
        #[serde(rename = "statusCode")]
        status_code: Option<u16>,
    }
    serde_json::from_slice::<Response>(result).ok()?.status_code
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker that answers with the id of the spec it was made from, and exits when
    /// asked to.
    struct Fake(u32);

    struct FakeSpec {
        id: u32,
        starts: bool,
    }

    impl Worker for Fake {
        type Spec = FakeSpec;

        async fn start(spec: &FakeSpec, _: Start<'_>) -> Result<Self, StartError> {
            if spec.starts {
                Ok(Fake(spec.id))
            } else {
                Err(StartError::Exited(None))
            }
        }

        fn is_alive(&mut self) -> bool {
            true
        }

        fn discard_stray_output(&mut self) -> Option<Bytes> {
            None
        }

        async fn activate(&mut self, line: Vec<u8>) -> Result<Bytes, RunError> {
            if line == b"exit\n" {
                return Err(RunError::Exited(None));
            }
            Ok(Bytes::from(format!("{{\"spec\":{}}}\n", self.0)))
        }
    }

    async fn answer(slot: &Pool<Fake>) -> String {
        let answer = slot.run(b"{}\n".to_vec(), None).await.unwrap();
        String::from_utf8(answer.to_vec()).unwrap()
    }

    fn spec(id: u32) -> FakeSpec {
        FakeSpec { id, starts: true }
    }

    const SIZE: PoolSize = PoolSize {
        workers: 2,
        max_waiting: 10,
        max_activations: None,
        recycle_above: None,
    };

    #[tokio::test]
    async fn a_worker_that_has_served_outlives_an_upgrade_and_its_successor_is_new() {
        let slot = Pool::start(spec(1), SIZE, End::Logs).await.unwrap();
        assert_eq!(answer(&slot).await, "{\"spec\":1}\n");
        let failing = FakeSpec {
            id: 2,
            starts: false,
        };
        assert!(slot.upgrade(failing).await.is_err());
        assert_eq!(answer(&slot).await, "{\"spec\":1}\n");
        assert_eq!(slot.upgrade(spec(3)).await.unwrap(), 0, "nothing swapped");
        assert_eq!(
            answer(&slot).await,
            "{\"spec\":1}\n",
            "the worker that served keeps its state"
        );
        assert_eq!(
            lock(&slot.idle).len(),
            1,
            "the unneeded fresh worker is not kept"
        );
        // Once it ends, its successor is made from the new spec.
        assert!(slot.run(b"exit\n".to_vec(), None).await.is_err());
        assert_eq!(answer(&slot).await, "{\"spec\":3}\n");
    }

    #[tokio::test]
    async fn a_worker_that_has_not_served_is_swapped_at_an_upgrade() {
        let slot = Pool::start(spec(1), SIZE, End::Logs).await.unwrap();
        assert_eq!(slot.upgrade(spec(2)).await.unwrap(), 1);
        assert_eq!(answer(&slot).await, "{\"spec\":2}\n");
        let idle = lock(&slot.idle);
        assert_eq!(idle.len(), 1, "the old worker was swapped, not added to");
        assert!(idle.iter().all(|e| e.generation == 1 && e.worker.0 == 2));
    }

    /// A worker that answers how many activations it has served, made by a spec that
    /// counts the workers made.
    struct Counting(u32);

    impl Worker for Counting {
        type Spec = Arc<AtomicUsize>;

        async fn start(made: &Self::Spec, _: Start<'_>) -> Result<Self, StartError> {
            made.fetch_add(1, Ordering::SeqCst);
            Ok(Counting(0))
        }

        fn is_alive(&mut self) -> bool {
            true
        }

        fn discard_stray_output(&mut self) -> Option<Bytes> {
            None
        }

        async fn activate(&mut self, _line: Vec<u8>) -> Result<Bytes, RunError> {
            self.0 += 1;
            Ok(Bytes::from(format!("{{\"count\":{}}}\n", self.0)))
        }
    }

    #[tokio::test]
    async fn a_worker_is_replaced_after_its_activations_by_one_made_ahead() {
        let made = Arc::new(AtomicUsize::new(0));
        // One worker at a time: the next activation waits for the successor.
        let size = PoolSize {
            workers: 1,
            max_activations: std::num::NonZeroU32::new(2),
            ..SIZE
        };
        let pool = Pool::<Counting>::start(made.clone(), size, End::Logs)
            .await
            .unwrap();
        let mut answers = Vec::new();
        for _ in 0..5 {
            let answer = pool.run(b"{}\n".to_vec(), None).await.unwrap();
            answers.push(String::from_utf8(answer.to_vec()).unwrap());
        }
        assert_eq!(
            answers,
            [
                "{\"count\":1}\n",
                "{\"count\":2}\n",
                "{\"count\":1}\n",
                "{\"count\":2}\n",
                "{\"count\":1}\n"
            ]
        );
        // The third worker was made ahead, after the fourth answer, and waits idle.
        let ready = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while lock(&pool.idle).len() != 1 || made.load(Ordering::SeqCst) != 3 {
                tokio::task::yield_now().await;
            }
        });
        assert!(ready.await.is_ok(), "made {}", made.load(Ordering::SeqCst));
        // Stopping the pool waits for, and stops, a successor being made.
        pool.stop().await;
        assert!(lock(&pool.idle).is_empty());
    }

    /// A worker whose activations wait for a go-ahead, and which records what it was told
    /// about the queue before each.
    struct Gated {
        gate: Arc<tokio::sync::Semaphore>,
        told: Arc<Mutex<Vec<bool>>>,
    }

    impl Worker for Gated {
        type Spec = (Arc<tokio::sync::Semaphore>, Arc<Mutex<Vec<bool>>>);

        async fn start(spec: &Self::Spec, _: Start<'_>) -> Result<Self, StartError> {
            Ok(Gated {
                gate: spec.0.clone(),
                told: spec.1.clone(),
            })
        }

        fn is_alive(&mut self) -> bool {
            true
        }

        fn discard_stray_output(&mut self) -> Option<Bytes> {
            None
        }

        fn others_queued(&mut self, queued: bool) {
            lock(&self.told).push(queued);
        }

        async fn activate(&mut self, _line: Vec<u8>) -> Result<Bytes, RunError> {
            self.gate.acquire().await.unwrap().forget();
            Ok(Bytes::from_static(b"{}\n"))
        }
    }

    #[tokio::test]
    async fn a_worker_is_told_whether_activations_queue_behind_the_one_it_serves() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let told = Arc::new(Mutex::new(Vec::<bool>::new()));
        let one = PoolSize {
            workers: 1,
            max_waiting: 10,
            max_activations: None,
            recycle_above: None,
        };
        let slot = Pool::<Gated>::start((gate.clone(), told.clone()), one, End::Logs)
            .await
            .unwrap();
        let runs: Vec<_> = (0..3)
            .map(|_| {
                let slot = slot.clone();
                tokio::spawn(async move { slot.run(b"{}\n".to_vec(), None).await })
            })
            .collect();
        // The first is served alone; two queue behind it.
        while slot.waiting.load(Ordering::Relaxed) < 2 {
            tokio::task::yield_now().await;
        }
        gate.add_permits(3);
        for run in runs {
            run.await.unwrap().unwrap();
        }
        assert_eq!(*lock(&told), [false, true, false]);
    }
}
