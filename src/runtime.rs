//! The action slot: one `/init` fills it, every `/run` activates what it holds.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::time::Instant;

use crate::action::{self, Prepared, Upload};
use crate::config::Config;
use crate::error::Error;
use crate::executor::{self, Executor, RunError, StartSpec};
use crate::metrics::Outcome;
use crate::protocol::{self, InitRequest};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::error::MSG_BUILT_IN;

/// What an `/init` asks for: the action's code, its entry point name and the environment
/// it adds.
pub struct Init {
    pub code: Code,
    pub main: String,
    pub env: Vec<(String, String)>,
    /// The action's name, if the `/init` gave one: what a failed start is logged under.
    pub name: Option<String>,
}

/// Where an action's code comes from.
pub enum Code {
    /// Uploaded (decoded): unpacked into a folder of its own.
    Upload(bytes::Bytes),
    /// A file of the image's (`--action`): run where it lies when it runs as it is (see
    /// `action::in_place`), else unpacked as an upload.
    File(std::path::PathBuf),
}

impl Init {
    /// docs/protocol.md 1.2 steps 2, 3, 5 and 6: the body's shape, its code, `main` and
    /// the base64.
    pub fn parse(mut body: bytes::BytesMut) -> Result<Init, Error> {
        let request: InitRequest =
            serde_json::from_slice(&body).map_err(|e| Error::BadRequest(e.to_string()))?;
        let value = request.value.unwrap_or_default();
        let code = value
            .code
            .map(|code| code.0)
            .filter(|c| !c.is_empty())
            .ok_or(Error::MissingCode)?;
        let env = value
            .env
            .as_ref()
            .map(protocol::env_pairs)
            .unwrap_or_default();
        let main = value
            .main
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| crate::config::DEFAULT_MAIN.to_owned());
        let binary = value.binary.unwrap_or(false);
        let name = value.name.filter(|n| !n.is_empty());
        // The code's text alone, where it lies in the body unless it had escapes: it is
        // decoded over itself.
        let mut code = match code {
            std::borrow::Cow::Borrowed(text) => {
                let start = text.as_ptr() as usize - body.as_ptr() as usize;
                let end = start + text.len();
                body.truncate(end);
                body.split_off(start)
            }
            std::borrow::Cow::Owned(text) => bytes::Bytes::from(text.into_bytes()).into(),
        };
        let length = action::decode::decode_code(&mut code, binary).map_err(Error::BadBase64)?;
        code.truncate(length);
        Ok(Init {
            code: Code::Upload(code.freeze()),
            main,
            env,
            name,
        })
    }
}

/// The settings of one /init whose `__OW_DEADLINE` comes before its own limits would.
struct InitBound {
    config: Config,
    /// What the deadline left when the /init arrived.
    left: Duration,
}

impl InitBound {
    fn until(deadline: &str, config: &Config) -> Option<InitBound> {
        let deadline = std::time::UNIX_EPOCH + Duration::from_millis(deadline.trim().parse().ok()?);
        let left = deadline.duration_since(std::time::SystemTime::now()).ok()?;
        // Whole milliseconds: they are printed in the error.
        let left = Duration::from_millis(u64::try_from(left.as_millis()).ok()?);
        // A tenth of what is left (at most a second) to answer before the platform gives up.
        let bound = left - (left / 10).min(Duration::from_secs(1));
        if bound >= config.action.compile_timeout && bound >= config.action.ack_timeout {
            return None;
        }
        let mut config = config.clone();
        config.action.compile_timeout = config.action.compile_timeout.min(bound);
        config.action.ack_timeout = config.action.ack_timeout.min(bound);
        Some(InitBound { config, left })
    }
}

/// An initialized action: its executor, and the folder it was unpacked into.
pub struct Action {
    executor: Arc<dyn Executor>,
    /// Its activations' counters, when the metrics are on.
    metrics: Option<crate::metrics::ActionMetrics>,
    sentinels: bool,
    timeout: Option<Duration>,
    /// How the runtime's lines about its activations are written.
    format: crate::logs::LogFormat,
    /// `--shutdown-timeout`, which a line about an activation the server stopped names;
    /// none for `wasmloop run`, which has no grace period.
    grace: Option<Duration>,
    _prepared: Prepared,
}

impl Drop for Action {
    /// Its last activation has ended (each holds the action): a successor being made ahead
    /// is stopped before the folder it starts from is removed.
    fn drop(&mut self) {
        self.executor.abandon();
    }
}

pub struct Runtime {
    config: Config,
    /// The backends, made from `config` and kept for the runtime's life (the wasm
    /// engines among what they keep).
    registry: executor::registry::Registry,
    /// Where it counts (`--metrics-listen`), handed down to the backends.
    metrics: Option<Arc<crate::metrics::Metrics>>,
    action: RwLock<Option<Arc<Action>>>,
    /// Serializes `/init`s, so that two at once cannot both succeed.
    init_lock: tokio::sync::Mutex<()>,
    /// Set by SIGTERM: readiness answers 503 (requests are still served, see `drain`).
    unready: AtomicBool,
    /// Set once the drain begins: requests still arriving get 503.
    draining: AtomicBool,
    /// Activations this server made itself (`--protocol http`).
    made: std::sync::atomic::AtomicU64,
    /// `/init`s and `/run`s admitted and not yet answered.
    in_flight: AtomicUsize,
    /// Told when `in_flight` drops to zero while draining.
    idle: tokio::sync::Notify,
}

/// An admitted request; the drain waits for every one of these to go.
pub struct Admitted(Arc<Runtime>);

impl Drop for Admitted {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1
            && self.0.draining.load(Ordering::SeqCst)
        {
            self.0.idle.notify_waiters();
        }
    }
}

impl Runtime {
    /// The runtime for `config`, counting in `metrics` when they are on.
    pub fn new(config: Config, metrics: Option<Arc<crate::metrics::Metrics>>) -> Self {
        Runtime::with_backends(config, metrics, &[])
    }

    /// The runtime with backends of its embedder's besides the registered ones
    /// (`Registry::with_backends`).
    pub fn with_backends(
        config: Config,
        metrics: Option<Arc<crate::metrics::Metrics>>,
        more: &[&'static executor::registry::Registration],
    ) -> Self {
        Runtime {
            registry: executor::registry::Registry::with_backends(&config, metrics.clone(), more),
            metrics,
            config,
            action: RwLock::new(None),
            init_lock: tokio::sync::Mutex::new(()),
            unready: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            made: std::sync::atomic::AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            idle: tokio::sync::Notify::new(),
        }
    }

    /// Lets a request in, unless the runtime is draining. Sequentially consistent, with
    /// `drain`: each stores one flag and then reads the other, which weaker orderings
    /// allow to both miss.
    pub fn admit(self: &Arc<Self>) -> Result<Admitted, Error> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        // Counted before the check: a drain that starts now waits for this request.
        let admitted = Admitted(self.clone());
        if self.draining.load(Ordering::SeqCst) {
            return Err(Error::ShuttingDown);
        }
        Ok(admitted)
    }

    /// A number for the next activation this server makes itself (`--protocol http`),
    /// to make its id from.
    pub fn next_activation(&self) -> u64 {
        self.made.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether it serves activations now: an action is there and it is not stopping (what
    /// the readiness path answers).
    pub fn is_ready(&self) -> bool {
        self.action().is_some() && !self.is_stopping()
    }

    /// Whether it was told to stop (it may still be serving, see `stop_being_ready`).
    pub fn is_stopping(&self) -> bool {
        self.unready.load(Ordering::SeqCst)
    }

    /// From now on readiness answers 503, so that the platform stops sending requests;
    /// those that still come (until its endpoints catch up) are served as before.
    pub fn stop_being_ready(&self) {
        self.unready.store(true, Ordering::SeqCst);
    }

    /// From now on requests get 503 (and readiness too).
    pub fn refuse_new(&self) {
        self.stop_being_ready();
        self.draining.store(true, Ordering::SeqCst);
    }

    /// From now on requests get 503; completes once those admitted before are answered.
    pub async fn drain(&self) {
        self.refuse_new();
        tracing::debug!("draining: new requests get 503 until the activations in flight end");
        loop {
            let idle = self.idle.notified();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Where requests, activations and refusals are counted, when the metrics are on.
    pub fn metrics(&self) -> Option<&Arc<crate::metrics::Metrics>> {
        self.metrics.as_ref()
    }

    pub fn registry(&self) -> &executor::registry::Registry {
        &self.registry
    }

    pub fn action(&self) -> Option<Arc<Action>> {
        self.action
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The action comes with the image (`--action`, installed before the server accepts),
    /// not with an `/init`: `/init`s without code then succeed, as the platform sends them
    /// to such images.
    fn built_in(&self) -> bool {
        self.config.action.built_in.is_some()
    }

    /// docs/protocol.md 1.2 step 1, which comes before the body is even read.
    pub fn refuse_second_init(&self) -> Result<(), Error> {
        // Answered once the body is read: only one without code is accepted.
        if self.built_in() {
            return Ok(());
        }
        if self.action().is_some() && !self.config.action.allow_reinit {
            protocol::log_stderr(self.config.logs.format, protocol::MSG_ALREADY_INITIALIZED);
            return Err(Error::AlreadyInitialized);
        }
        Ok(())
    }

    /// docs/protocol.md 1.2 steps 2-8.
    pub async fn init(&self, body: bytes::BytesMut) -> Result<(), Error> {
        if self.built_in() {
            return match Init::parse(body) {
                Err(Error::MissingCode) => Ok(()),
                // The request is read as usual: malformed JSON is still a 400.
                Err(e @ Error::BadRequest(_)) => Err(e),
                _ => {
                    protocol::log_stderr(self.config.logs.format, MSG_BUILT_IN);
                    Err(Error::BuiltIn)
                }
            };
        }
        let _one_at_a_time = self.init_lock.lock().await;
        self.refuse_second_init()?;
        self.install_locked(Init::parse(body)?).await
    }

    /// Installs an action given as it is, not as an `/init` body (`wasmloop run`).
    pub async fn install(&self, init: Init) -> Result<(), Error> {
        let _one_at_a_time = self.init_lock.lock().await;
        self.refuse_second_init()?;
        self.install_locked(init).await
    }

    /// Steps 4 and 7-8: the environment, then unpack, compile and start.
    async fn install_locked(&self, init: Init) -> Result<(), Error> {
        let Init {
            code,
            main,
            env,
            name,
        } = init;
        let env = executor::action_env(&self.config, &main, env);
        // What the runtime's lines about this action's start go under, in JSON: the
        // platform puts its names (and the first activation's id) in `/init`'s `env`.
        let named = |key: &str| {
            protocol::env_value(&env, key)
                .unwrap_or_default()
                .to_owned()
        };
        let about = crate::logs::Labels {
            activation_id: named("__OW_ACTIVATION_ID"),
            namespace: named("__OW_NAMESPACE"),
            action: protocol::env_value(&env, "__OW_ACTION_NAME")
                .map(str::to_owned)
                .or(name)
                .unwrap_or_default(),
            trace_id: String::new(),
        };
        // The platform gives /init the action's timeout and says when it ends: compiles
        // and start-up waits end a little before, so that the error is ours, not a kill.
        let bounded = protocol::env_value(&env, "__OW_DEADLINE")
            .and_then(|deadline| InitBound::until(deadline, &self.config));
        let config = bounded.as_ref().map_or(&self.config, |b| &b.config);
        let past_deadline = |error: Error| match &bounded {
            Some(bound) if error.is_timeout() => Error::InitDeadline {
                left: humantime::format_duration(bound.left).to_string(),
                source: Box::new(error),
            },
            _ => error,
        };
        let began = std::time::Instant::now();
        let trust = self.registry.trust();
        let counted = |succeeded: bool| {
            if let Some(metrics) = &self.metrics {
                metrics.init(succeeded, began.elapsed());
            }
        };
        let prepared = self
            .prepare(code, &main, &env, config, trust)
            .await
            .map_err(|e| {
                counted(false);
                self.init_failure(&about, past_deadline(Error::Prepare(e)))
            })?;
        tracing::debug!(main, entry = ?prepared.entry, "action unpacked");
        let spec = StartSpec::new(config, env, main, about.clone());
        let (backend, executor) =
            self.registry
                .start(&prepared, spec, config)
                .await
                .map_err(|e| {
                    counted(false);
                    self.init_failure(&about, past_deadline(Error::Start(e)))
                })?;
        counted(true);
        executor.started_in(began.elapsed());
        let action = Arc::new(Action {
            executor,
            metrics: self.metrics.as_ref().map(|m| m.for_action(backend)),
            sentinels: config.logs.sentinels,
            timeout: config.pool.timeout,
            format: config.logs.format,
            grace: (!config.action.one_shot).then_some(config.pool.shutdown_timeout),
            _prepared: prepared,
        });
        // With re-init allowed, the old action (and its children) goes when its last run ends.
        *self.action.write().unwrap_or_else(|e| e.into_inner()) = Some(action);
        Ok(())
    }

    /// The action's folder: `code` unpacked (and compiled) as `config` says, or a file of
    /// the image's run where it lies.
    async fn prepare(
        &self,
        code: Code,
        main: &str,
        env: &[(String, String)],
        config: &Config,
        trust: Option<crate::signing::Trust>,
    ) -> Result<Prepared, action::PrepareError> {
        let bytes = match code {
            Code::Upload(bytes) => bytes,
            Code::File(file) => {
                if let Some(prepared) = action::in_place(&file)? {
                    return Ok(prepared);
                }
                let bytes = tokio::fs::read(&file)
                    .await
                    .map_err(|source| action::PrepareError::Read { path: file, source })?;
                bytes.into()
            }
        };
        action::prepare_as_configured(Upload { bytes, main }, env, config, trust).await
    }

    /// `OW_LOG_INIT_ERROR`: the detail goes to the logs, the client gets a generic message.
    fn init_failure(&self, about: &crate::logs::Labels, error: Error) -> Error {
        if !self.config.logs.log_init_error {
            return error;
        }
        let detail = match &error {
            Error::Start(e) => e.to_string(),
            other => other.to_string(),
        };
        crate::logs::runtime_line(self.config.logs.format, Some(about), &detail);
        if self.config.logs.sentinels {
            protocol::write_sentinels();
        }
        match error {
            Error::Start(_) => Error::StartLogged,
            _ => Error::PrepareLogged,
        }
    }

    /// Stops the action: its children are killed and its instances dropped, also those
    /// busy with an activation (which then answers 503), and its folder is removed once
    /// the last activation has let go of it.
    pub async fn shutdown(&self) {
        let action = self
            .action
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(action) = action {
            action.executor.stop().await;
        }
    }
}

impl Action {
    /// `activate`, finished even if the client hangs up halfway: cancelled there, the action
    /// would be left holding an answer nobody reads, and the logs without their sentinel.
    /// It runs in the handler's own poll (a task of its own costs two wake-ups per /run)
    /// and moves to a task only if the handler is dropped first.
    /// `admitted` goes with it: a drain waits for the activation, not for its client.
    pub async fn activate_to_completion(
        self: Arc<Self>,
        body: Bytes,
        admitted: Admitted,
    ) -> Result<Bytes, Error> {
        let sentinels = self.sentinels;
        FinishOnDrop::new(async move {
            let answer = self.activate(&body).await;
            drop(admitted);
            answer
        })
        .await
        .unwrap_or_else(|| {
            // It panicked before its sentinels: the platform waits for them.
            if sentinels {
                protocol::write_sentinels();
            }
            Err(Error::Internal("the activation failed".to_owned()))
        })
    }

    /// docs/protocol.md 1.7 steps 2-7: forward the body, wait for the result, mark the logs' end.
    pub async fn activate(&self, body: &[u8]) -> Result<Bytes, Error> {
        let began = self.metrics.as_ref().map(|_| std::time::Instant::now());
        let answer = self.activate_uncounted(body).await;
        if let Err(Error::Run(RunError::Stopped)) = &answer {
            self.stopped(&crate::logs::Labels::of(body));
        }
        self.count(began, &answer, |result| {
            if crate::metrics::is_application_error(result) {
                Outcome::ApplicationError
            } else {
                Outcome::Success
            }
        });
        answer
    }

    /// Counts an activation that began at `began` (taken only when the metrics are on) and
    /// ended with `answer`, a success judged by `succeeded`.
    fn count<T>(
        &self,
        began: Option<std::time::Instant>,
        answer: &Result<T, Error>,
        succeeded: impl FnOnce(&T) -> Outcome,
    ) {
        let (Some(metrics), Some(began)) = (&self.metrics, began) else {
            return;
        };
        let outcome = match answer {
            Ok(answered) => succeeded(answered),
            Err(error) => outcome_of(error),
        };
        metrics.activation(outcome, began.elapsed());
    }

    async fn activate_uncounted(&self, body: &[u8]) -> Result<Bytes, Error> {
        let deadline = protocol::check_run_body(body).map_err(Error::BadRequest)?;
        let limit = Limit::earliest(deadline, self.timeout);
        let line = executor::lines::lift_traceparent(executor::lines::frame_request(body));
        let result = self
            .executor
            .activate(
                executor::Activation::Line(line),
                limit.as_ref().map(|l| l.0),
            )
            .await
            .and_then(executor::Answer::into_line);
        // The executor has marked the activation's end (the sentinels) before letting the
        // next one start.
        within_limit(result, limit)
    }

    /// Says that the shutdown stopped the activation `about`: it was still running (or
    /// waiting) when `--shutdown-timeout` ran out.
    pub fn stopped(&self, about: &crate::logs::Labels) {
        let id = if about.activation_id.is_empty() {
            "without an id"
        } else {
            &about.activation_id
        };
        let message = match self.grace {
            Some(grace) => format!(
                "wasmloop: activation {id} was stopped by the shutdown: still running when \
                 --shutdown-timeout ({}) ran out, it was answered 503",
                humantime::format_duration(grace)
            ),
            None => format!("wasmloop: activation {id} was stopped: the run was interrupted"),
        };
        crate::logs::runtime_line(self.format, Some(about), &message);
    }

    /// Whether requests go to it as they came (`--protocol http`), not as web actions'
    /// values.
    pub fn takes_requests(&self) -> bool {
        self.executor.takes_requests()
    }

    /// `--protocol http`, for an action that takes requests as they came (see
    /// `Executor::takes_requests`): `admitted` goes with the response's body, which a
    /// drain waits for.
    pub async fn serve(
        &self,
        request: executor::HttpRequest,
        context: Vec<u8>,
        admitted: Admitted,
    ) -> Result<executor::HttpResponse, Error> {
        let began = self.metrics.as_ref().map(|_| std::time::Instant::now());
        let limit = Limit::earliest(None, self.timeout);
        let deadline = limit.as_ref().map(|l| l.0);
        let served = self
            .executor
            .activate(
                executor::Activation::Request {
                    request: Box::new(request),
                    context,
                },
                deadline,
            )
            .await
            .and_then(executor::Answer::into_response);
        let response = within_limit(served, limit);
        // Counted once the response's head is there: its status is the component's answer,
        // a 5xx its own word that it failed.
        self.count(began, &response, |response| {
            if response.status().is_server_error() {
                Outcome::ApplicationError
            } else {
                Outcome::Success
            }
        });
        let response = response?;
        Ok(response.map(|body| executor::intake::Holding::body(body, admitted)))
    }
}

/// How an activation that failed ended, as the metrics count it.
fn outcome_of(error: &Error) -> Outcome {
    match error {
        Error::TimedOut(_) | Error::NeverStarted { .. } => Outcome::Timeout,
        Error::BadRequest(_) => Outcome::Refused,
        Error::Run(e) => e.outcome(),
        _ => Outcome::ActionError,
    }
}

/// An activation's error, naming the limit it ran into.
fn within_limit<T>(
    result: Result<T, RunError>,
    limit: Option<(Instant, Limit)>,
) -> Result<T, Error> {
    match (result, limit) {
        (Err(RunError::TimedOut), Some((_, limit))) => Err(Error::TimedOut(limit.describe())),
        (Err(RunError::NeverStarted(waited)), Some((_, limit))) => Err(Error::NeverStarted {
            limit: limit.describe(),
            waited,
        }),
        (result, _) => Ok(result?),
    }
}

/// Polls its future in place; dropped before that future is done, it hands the rest to a
/// task of its own. A panic inside comes out as `None` instead of unwinding the caller.
struct FinishOnDrop<F: Future + Send + 'static>(Option<Pin<Box<F>>>);

impl<F: Future + Send + 'static> FinishOnDrop<F> {
    fn new(future: F) -> Self {
        FinishOnDrop(Some(Box::pin(future)))
    }
}

impl<F: Future + Send + 'static> Future for FinishOnDrop<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(future) = self.0.as_mut() else {
            return Poll::Pending;
        };
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx)));
        let output = match polled {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(output)) => Some(output),
            Err(_) => {
                tracing::error!("an activation panicked");
                None
            }
        };
        self.0 = None;
        Poll::Ready(output)
    }
}

impl<F: Future + Send + 'static> Drop for FinishOnDrop<F> {
    fn drop(&mut self) {
        if let Some(rest) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                rest.await;
            });
        }
    }
}

/// How close a deadline and `--timeout` may fall and still count as the same limit.
const SAME_LIMIT: Duration = Duration::from_millis(10);

/// What stops an activation: the request's own deadline or the runtime-wide `--timeout`.
#[derive(Debug, PartialEq)]
enum Limit {
    /// The request's deadline: how far after the request's arrival it fell.
    Deadline(Duration),
    Timeout(Duration),
}

impl Limit {
    /// The earlier of the two, and when it falls. A deadline already past on arrival is
    /// ignored: the platform's own tests send `"deadline":"123"`, and those requests run.
    fn earliest(deadline_ms: Option<u64>, timeout: Option<Duration>) -> Option<(Instant, Limit)> {
        let now = Instant::now();
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let from_deadline = deadline_ms.filter(|ms| *ms > now_ms).map(|ms| {
            let left = Duration::from_millis(ms - now_ms);
            (now + left, Limit::Deadline(left))
        });
        let from_timeout = timeout.map(|t| (now + t, Limit::Timeout(t)));
        match (from_deadline, from_timeout) {
            // A deadline within a moment of the timeout is one limit said twice (`wasmloop
            // run` sends now + --timeout): the flag, which the user can change, is named.
            (Some(d), Some(t)) => Some(if t.0 <= d.0 + SAME_LIMIT { t } else { d }),
            (d, t) => d.or(t),
        }
    }

    /// Said to the client: which limit it was, as the time the activation had (the
    /// deadline's epoch milliseconds mean nothing to a reader).
    fn describe(&self) -> String {
        match self {
            Limit::Deadline(left) => format!(
                "its deadline ({} after it arrived)",
                humantime::format_duration(rounded_to_ms(*left))
            ),
            Limit::Timeout(t) => format!("--timeout {}", humantime::format_duration(*t)),
        }
    }
}

/// A duration as a reader wants it said: to the millisecond.
fn rounded_to_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis().try_into().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_ms(ms: u64) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            + ms
    }

    #[test]
    fn a_past_deadline_is_ignored_and_the_earlier_limit_wins() {
        assert_eq!(Limit::earliest(Some(123), None), None);
        let timeout = Duration::from_secs(5);
        assert_eq!(
            Limit::earliest(Some(123), Some(timeout)).unwrap().1,
            Limit::Timeout(timeout)
        );
        let soon = in_ms(60_000);
        let deadline = |limit: Option<(Instant, Limit)>| match limit.unwrap().1 {
            Limit::Deadline(left) => left,
            other => panic!("{other:?}"),
        };
        let left = deadline(Limit::earliest(Some(soon), None));
        assert!(
            left <= Duration::from_secs(60) && left > Duration::from_secs(59),
            "{left:?}"
        );
        assert_eq!(
            Limit::earliest(Some(soon), Some(timeout)).unwrap().1,
            Limit::Timeout(timeout)
        );
        let very_soon = in_ms(1_000);
        let left = deadline(Limit::earliest(Some(very_soon), Some(timeout)));
        assert!(left <= Duration::from_secs(1), "{left:?}");
        assert_eq!(
            Limit::Deadline(Duration::from_micros(2_999_600)).describe(),
            "its deadline (2s 999ms after it arrived)"
        );
        // The same instant said twice, as `wasmloop run` sends it: the flag is named.
        let same = in_ms(5_000);
        assert_eq!(
            Limit::earliest(Some(same), Some(timeout)).unwrap().1,
            Limit::Timeout(timeout)
        );
    }
}
