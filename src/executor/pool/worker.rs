//! The worker contract: what a backend runs activations on, how one is started, and how many a pool keeps.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use super::Close;
use crate::context::Context;
use crate::executor::{HttpRequest, Respond, RunError, StartError};

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

    /// Whether each worker is an instance of its own, as the metrics count instances; a
    /// worker that is a lane into instances kept elsewhere (which count their own) is not.
    const IS_INSTANCE: bool = true;

    /// Whether it takes requests as they came (`Job::Request`) and `/run`'s values
    /// (`Job::Value`); the others take request lines (`Job::Line`).
    const TAKES_REQUESTS: bool = false;

    /// One activation: a request line or a value, answered with the result line (at most
    /// as long as the worker's spec allows); or a request as it came, its response sent
    /// on the way.
    fn activate(&mut self, job: Job) -> impl Future<Output = Result<Bytes, RunError>> + Send;

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

    /// Whether an activation's CPU time can be told at all: not where activations share an
    /// instance whose time is not split among them (the report then gives none).
    const CPU_KNOWN: bool = true;
}

/// What an activation asks of a worker, with its context (`context`).
pub enum Job {
    /// Its request line, answered with its result line.
    Line {
        line: Vec<u8>,
        context: Arc<Context>,
    },
    /// A `/run`'s value (`Worker::TAKES_REQUESTS`), answered with its result line.
    Value {
        value: Option<serde_json::Value>,
        context: Arc<Context>,
    },
    /// A request as it came (`Worker::TAKES_REQUESTS`): the response's head goes on
    /// `respond` as soon as there is one, and the activation returns (no bytes) once the
    /// response's body has ended.
    Request {
        request: Box<HttpRequest>,
        context: Arc<Context>,
        respond: Respond,
    },
}

impl Job {
    pub fn context(&self) -> &Context {
        match self {
            Job::Line { context, .. }
            | Job::Value { context, .. }
            | Job::Request { context, .. } => context,
        }
    }

    /// The request line and its context, for a worker that takes nothing else (the pool
    /// hands it nothing else: `Worker::TAKES_REQUESTS`).
    pub fn into_line(self) -> Result<(Vec<u8>, Arc<Context>), RunError> {
        match self {
            Job::Line { line, context } => Ok((line, context)),
            Job::Value { .. } | Job::Request { .. } => {
                Err(RunError::BadInput(NO_REQUESTS.to_owned()))
            }
        }
    }
}

/// What an action that takes only request lines answers a request as it came.
pub const NO_REQUESTS: &str = "this action takes requests as web actions' values, not as they came";

/// How a worker is started.
#[derive(Debug, Clone, Copy)]
pub enum Start<'a> {
    /// The action's first worker, or one replacing a worker that died: with every check
    /// that tells `/init` about an action that cannot start.
    Checked,
    /// A successor made ahead of its activation, once the action has started before: a
    /// worker may skip the checks that only matter at `/init`.
    Ahead,
    /// A fresh worker started once its activation has come, with its context (see
    /// `Worker::FRESH_STARTS_ON_ARRIVAL`).
    OnArrival(&'a Context),
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
