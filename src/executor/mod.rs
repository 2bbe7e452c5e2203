//! The `Executor` seam between HTTP and the backends, and starting the backend an upload needs.

pub mod intake;
pub mod lines;
pub mod pool;
pub mod registry;
pub mod report;

/// Declares each backend's folder and lists its registrations in `BACKENDS`, in order.
macro_rules! backends {
    ($($folder:ident: $($registration:ident),+;)+) => {
        $(pub mod $folder;)+

        /// Every backend, in the order `--help` lists them: which one runs an upload is
        /// the closest claim's (`registry::Claim`), not a matter of this order.
        pub const BACKENDS: &[registry::Registration] = &[$($($folder::$registration),+),+];
    };
}

// The backends: a new one is its folder (a `Registration`, a `Backend` and a `Worker`)
// and a line here. Uploads two could run are told apart by how closely each claims them:
// a module precompiled by `wasmloop compile` is an ELF file too, which the native backend
// claims as any file and the WebAssembly one by its format; an HTTP component is a
// component too, which its backend claims by its exports.
backends! {
    http: HTTP;
    http_p3: HTTP_P3;
    wasm: MODULES, COMPONENTS;
    native: NATIVE;
}

/// Each folder's own flags (`registry::Flags`), in the order `--help` lists them; the
/// http backend takes the wasm folder's.
pub const FLAGS: &[registry::Flags] = &[wasm::FLAGS, http_p3::FLAGS, native::FLAGS];

/// The folders' own subcommands (`registry::Subcommand`), in the order `--help` lists them.
pub const COMMANDS: &[registry::Subcommand] = &[wasm::COMPILE];

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::config::{Config, PROXY_VERSION};
use crate::protocol;

/// Runs activations of one initialized action: what a backend gives the runtime, which
/// holds it as `dyn Executor` without knowing which backend it is.
pub trait Executor: Send + Sync {
    /// One activation: a request line (see `lines::frame_request`), answered with the
    /// action's result line (an object or array, with its `\n`); or, for an action that
    /// takes them (`takes_requests`), a `/run`'s value, answered likewise, or a request as
    /// it came, answered with the response as soon as its head is there, its body sent as
    /// the action writes it (the activation lasts until that body has ended). Past
    /// `deadline` the activation is stopped and the action restarted.
    fn activate(&self, activation: Activation, deadline: Option<Instant>) -> ActivateFuture<'_>;

    /// Whether its actions take requests (`Payload::Request`, and `/run`'s values as
    /// `Payload::Value`, which they make requests of); the others take request lines,
    /// which is how they get a request: as a web action's value (`web_action`).
    fn takes_requests(&self) -> bool;

    /// Stops the action: every worker, idle or busy, is stopped (busy ones' activations
    /// end with `RunError::Stopped`), later activations are refused, and the future
    /// completes once no worker is left.
    fn stop(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

    /// Told when the action goes with no activation left (its folder goes with it): no
    /// worker is made for it any more, not even one being made ahead.
    fn abandon(&self);

    /// Told how long the action's start took: the first activation's report says it.
    fn started_in(&self, _took: Duration) {}
}

/// One activation, as the runtime hands it to an action: its context, read once where
/// its request arrived, and what the action takes.
pub struct Activation {
    pub context: std::sync::Arc<crate::context::Context>,
    pub payload: Payload,
}

/// What an activation gives its action.
pub enum Payload {
    /// Its request line (`/run`'s body framed as one line, or a web action's value made
    /// one), for an action that reads lines.
    Line(Vec<u8>),
    /// A `/run`'s value, for an action that takes requests (`takes_requests`): it makes
    /// its request of it by the web-action convention (`web_action`).
    Value(Option<serde_json::Value>),
    /// A request as it came (`--protocol http`), its body read as the action reads it.
    Request(Box<HttpRequest>),
}

/// What an activation answered.
pub enum Answer {
    /// The result line, and how the activation went as its answer says.
    Line { line: Bytes, outcome: Outcome },
    /// The response, as soon as its head is there, and how the activation went as its
    /// status says.
    Response {
        response: HttpResponse,
        outcome: Outcome,
    },
}

pub use crate::metrics::Outcome;

impl Answer {
    /// The result line of an activation that was a request line or a value.
    pub fn into_line(self) -> Result<(Bytes, Outcome), RunError> {
        match self {
            Answer::Line { line, outcome } => Ok((line, outcome)),
            Answer::Response { .. } => Err(RunError::Exited(Some(
                "it answered a response where a result line was due".to_owned(),
            ))),
        }
    }

    /// The response of an activation that was a request as it came.
    pub fn into_response(self) -> Result<(HttpResponse, Outcome), RunError> {
        match self {
            Answer::Response { response, outcome } => Ok((response, outcome)),
            Answer::Line { .. } => Err(RunError::Exited(Some(
                "it answered a result line where a response was due".to_owned(),
            ))),
        }
    }
}

/// An activation under way (boxed, so that `Executor` can be a trait object).
pub type ActivateFuture<'a> = Pin<Box<dyn Future<Output = Result<Answer, RunError>> + Send + 'a>>;

/// A request handed to an action as it came, and its response.
pub type HttpRequest = axum::http::Request<axum::body::Body>;
pub type HttpResponse = axum::http::Response<axum::body::Body>;

/// Where a worker sends the response's head, as soon as it has one; whether it did is
/// told to whoever waits for the activation's end.
pub struct Respond {
    head: tokio::sync::oneshot::Sender<HttpResponse>,
    /// The status sent, once the head has gone out (0 before).
    sent: std::sync::Arc<std::sync::atomic::AtomicU16>,
}

impl Respond {
    /// The sender, and the receiver of the head.
    pub fn new() -> (Respond, tokio::sync::oneshot::Receiver<HttpResponse>) {
        let (head, receiver) = tokio::sync::oneshot::channel();
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(0));
        (Respond { head, sent }, receiver)
    }

    /// Its status, set once the head has gone out (0 before): a failure after it cuts the
    /// response short.
    pub fn head_sent(&self) -> std::sync::Arc<std::sync::atomic::AtomicU16> {
        self.sent.clone()
    }

    pub fn send(self, response: HttpResponse) {
        let status = response.status().as_u16();
        self.sent
            .store(status, std::sync::atomic::Ordering::Release);
        // A client that went away takes no answer; the activation still ends as it would.
        let _ = self.head.send(response);
    }
}

/// A background task that ends with its owner.
pub(crate) struct AbortOnDrop(pub tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Why an action could not be started (at `/init`, or when restarting it): the ways the
/// contract names (docs/protocol.md 1.5) and the runtime's own checks; a backend's own
/// reasons are its folder's error type, carried as `Backend`.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// It exited before it counted as started; the detail says how.
    #[error("{}{}", protocol::MSG_COMMAND_EXITED, detail(.0))]
    Exited(Option<String>),
    #[error("{}", protocol::MSG_ABRUPT_EXIT)]
    AckAbrupt,
    /// The ack line is not JSON: the parser's message.
    #[error("{0}")]
    AckNotJson(String),
    /// The ack is JSON without `"ok":true`; a launcher that could not start may say why
    /// in an `"error"` string, which follows the fixed text.
    #[error("{}{}", protocol::MSG_NOT_INITIALIZED_PROPERLY, .0.as_deref().map(|d| format!(" {d}")).unwrap_or_default())]
    AckNotOk(Option<String>),
    #[error(
        "the action did not acknowledge its start within {} (see --ack-timeout)",
        humantime::format_duration(*.0)
    )]
    AckTimeout(Duration),
    #[error("{}", protocol::MSG_EXEC_ENV_MISMATCH)]
    ExecEnvMismatch,
    #[error("cannot read {path}: {source}")]
    ExecEnvUnreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Unsupported(String),
    /// The upload needs a backend that `--backends` leaves out.
    #[error(
        "this upload is a {} (the {} backend), which this runtime does not run: --backends \
         (WASMLOOP_BACKENDS) allows {}. Build it as {}, or add {} to the setting (an image \
         that allows it)",
        found.runs,
        found.name,
        names(allowed),
        ways_to_build(allowed),
        found.name
    )]
    BackendNotAllowed {
        found: &'static registry::Registration,
        allowed: Vec<&'static str>,
    },
    /// A backend's own reason, in its words.
    #[error(transparent)]
    Backend(Failed),
}

/// A backend's own reason for not starting an action: an error type of its folder (the
/// native backend's `SpawnError`, the WebAssembly backends' `WasmError`), which tells the
/// runtime only what it decides on: whether a limit on time ran out.
pub trait BackendFailure: std::error::Error + Send + Sync + 'static {
    /// Whether the start was stopped at a limit on time, not failed.
    fn timed_out(&self) -> bool {
        false
    }
}

/// A `BackendFailure`, its text as the backend said it.
#[derive(Debug)]
pub struct Failed {
    error: Box<dyn std::error::Error + Send + Sync>,
    timed_out: bool,
}

impl Failed {
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// The backend's own error, when it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.error.downcast_ref()
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Failed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl<E: BackendFailure> From<E> for StartError {
    fn from(error: E) -> StartError {
        StartError::Backend(Failed {
            timed_out: error.timed_out(),
            error: Box::new(error),
        })
    }
}

fn names(backends: &[&str]) -> String {
    if backends.is_empty() {
        return "none".to_owned();
    }
    backends.join(",")
}

/// How an upload could be made for one of the `allowed` backends, each as its registration
/// says, in the registry's order.
fn ways_to_build(allowed: &[&str]) -> String {
    let ways: Vec<&str> = BACKENDS
        .iter()
        .filter(|b| allowed.contains(&b.name))
        .map(|b| b.made)
        .collect();
    if ways.is_empty() {
        return "nothing this runtime runs: its setting allows no backend".to_owned();
    }
    ways.join(" or as ")
}

/// docs/protocol.md 1.5: the ack is JSON with `"ok":true`, spaced as the action likes.
pub fn parse_ack(line: &[u8]) -> Result<(), StartError> {
    let ack: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| StartError::AckNotJson(e.to_string()))?;
    match ack.get("ok") {
        Some(serde_json::Value::Bool(true)) => Ok(()),
        _ => Err(StartError::AckNotOk(
            ack.get("error").and_then(|e| e.as_str()).map(str::to_owned),
        )),
    }
}

/// `: <detail>` when there is one, as docs/protocol.md 1.7 step 5 puts it after `command exited`.
fn detail(detail: &Option<String>) -> String {
    detail
        .as_deref()
        .map(|d| format!(": {d}"))
        .unwrap_or_default()
}

/// Why an activation produced no usable result.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The action exited (or closed its result channel) during the activation.
    #[error("{}{}", protocol::MSG_COMMAND_EXITED, detail(.0))]
    Exited(Option<String>),
    /// The result line (here) is JSON, but neither an object nor an array.
    #[error("{}", protocol::MSG_NOT_AN_OBJECT)]
    NotAnObject(Bytes),
    /// The result line (here) is not JSON at all (a stray log line?): same message, but
    /// the worker is out of step and gets replaced.
    #[error("{}", protocol::MSG_NOT_AN_OBJECT)]
    NotJson(Bytes),
    /// The action took its request and went back to waiting for input without answering.
    #[error("{0}")]
    NoAnswer(lines::NoAnswer),
    /// It waited this long in the queue for a busy worker, past its deadline.
    #[error("it waited {} ms for a busy instance and was never started", .0.as_millis())]
    NeverStarted(Duration),
    /// Every worker is busy and the queue is full: the platform should try elsewhere.
    #[error(
        "every instance of the action is busy and {0} activations are waiting already; try again later (see --concurrency, --max-queue)"
    )]
    Busy(usize),
    /// The activation ran past its deadline and was stopped.
    #[error("the action did not finish in time and was stopped")]
    TimedOut,
    #[error("the action's result line is longer than {0} bytes (see --max-result-bytes)")]
    ResultTooLong(usize),
    /// An HTTP component's response body, which its result carries, is past the cap.
    #[error(
        "the component's response body is longer than {0} bytes (see --max-result-bytes, \
         which bounds an HTTP component's response body)"
    )]
    BodyTooLong(usize),
    /// The runtime is shutting down: the activation was stopped, or never started.
    #[error("the runtime is shutting down; the activation was stopped")]
    Stopped,
    /// The action had died and could not be started again.
    #[error("cannot start action: {0}")]
    Restart(#[source] StartError),
    /// The activation's value cannot become what the action takes (an HTTP component's
    /// request): the caller's to fix; the action never saw it.
    #[error("{0}")]
    BadInput(String),
}

impl RunError {
    /// The status a client gets for it: under OpenWhisk's protocol the reference's (an
    /// exit is 400, which the platform reads as the action's failure); as a plain HTTP
    /// response (`web`) a gateway's 502.
    pub fn status(&self, web: bool) -> u16 {
        match self {
            RunError::TimedOut | RunError::NeverStarted(_) => 504,
            RunError::Stopped => 503,
            // Not 503: the platform would take the container for dying and destroy it.
            RunError::Busy(_) => 429,
            RunError::Exited(_) if web => 502,
            RunError::Exited(_) | RunError::BadInput(_) => 400,
            RunError::NotAnObject(_)
            | RunError::NotJson(_)
            | RunError::NoAnswer(_)
            | RunError::ResultTooLong(_)
            | RunError::BodyTooLong(_)
            | RunError::Restart(_) => 502,
        }
    }

    /// How the activation ended, as the metrics and its report count it.
    pub fn outcome(&self) -> crate::metrics::Outcome {
        use crate::metrics::Outcome;
        match self {
            RunError::TimedOut | RunError::NeverStarted(_) => Outcome::Timeout,
            RunError::Busy(_) | RunError::Stopped | RunError::BadInput(_) => Outcome::Refused,
            _ => Outcome::ActionError,
        }
    }
}

/// What every backend needs to start an action.
#[derive(Clone)]
pub struct StartSpec {
    pub env: Vec<(String, String)>,
    pub main: String,
    pub wait_for_ack: bool,
    pub ack_timeout: Duration,
    pub max_result_bytes: usize,
    /// Each worker serves one activation (`--max-activations-per-instance 1`): it may
    /// be given that activation's values in its environment.
    pub fresh: bool,
    /// How the worker's log lines, and the runtime's about it, are written.
    pub log_format: crate::logs::LogFormat,
    /// What the runtime's lines about the action's start are filed under (in JSON): the
    /// action the `/init` named.
    pub about: crate::logs::Labels,
}

impl StartSpec {
    /// What workers start with. The environment leaves out what belongs to one activation
    /// (`protocol::PER_ACTIVATION_ENV`): the platform puts the first activation's values in
    /// `/init`'s `env`, and an instance that serves more would read them, stale, from the
    /// second activation on; each request line carries its own.
    pub fn new(
        config: &Config,
        mut env: Vec<(String, String)>,
        main: String,
        about: crate::logs::Labels,
    ) -> Self {
        env.retain(|(key, _)| !protocol::PER_ACTIVATION_ENV.contains(&key.as_str()));
        StartSpec {
            env,
            main,
            wait_for_ack: config.action.wait_for_ack.is_some(),
            ack_timeout: config.action.ack_timeout,
            max_result_bytes: config.limits.max_result_bytes,
            fresh: config.pool.max_activations_per_instance == 1,
            log_format: config.logs.format,
            about,
        }
    }
}

/// The action's environment (docs/protocol.md 1.5), later entries overriding earlier ones. Ours
/// adds `__OW_ACTION_MAIN`, the `/init` `main`: a launcher (Python's, say) calls the
/// function it names, where the reference bakes it in with a compile step.
pub fn action_env(
    config: &Config,
    main: &str,
    init_env: Vec<(String, String)>,
) -> Vec<(String, String)> {
    let mut env = BTreeMap::new();
    env.insert("__OW_PROXY_VERSION".to_owned(), PROXY_VERSION.to_owned());
    env.insert("__OW_ACTION_MAIN".to_owned(), main.to_owned());
    if let Some(value) = &config.action.execution_env {
        env.insert("__OW_EXECUTION_ENV".to_owned(), value.clone());
    }
    if let Some(value) = &config.action.wait_for_ack {
        env.insert("__OW_WAIT_FOR_ACK".to_owned(), value.clone());
    }
    env.extend(config.action.inherited_env.iter().cloned());
    env.extend(init_env);
    env.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_of_the_wrong_kind_is_the_actions_failure_and_says_which() {
        let line = || Answer::Line {
            line: Bytes::from_static(b"{}\n"),
            outcome: Outcome::Success,
        };
        let response = || Answer::Response {
            response: HttpResponse::new(axum::body::Body::empty()),
            outcome: Outcome::Success,
        };
        assert!(line().into_line().is_ok());
        assert!(response().into_response().is_ok());
        let wrong = |answer: Result<(), RunError>| match answer {
            Err(RunError::Exited(Some(detail))) => detail,
            _ => panic!("a wrong kind passed"),
        };
        assert_eq!(
            wrong(response().into_line().map(drop)),
            "it answered a response where a result line was due"
        );
        assert_eq!(
            wrong(line().into_response().map(drop)),
            "it answered a result line where a response was due"
        );
    }

    #[test]
    fn later_sources_override_earlier_ones_in_the_action_env() {
        let mut config = Config::default();
        config.action.wait_for_ack = Some("1".into());
        config.action.inherited_env = vec![
            ("__OW_API_HOST".into(), "https://h?a=b".into()),
            ("__OW_WAIT_FOR_ACK".into(), "yes".into()),
        ];
        let env = action_env(
            &config,
            "niam",
            vec![("__OW_API_HOST".into(), "init".into())],
        );
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("__OW_PROXY_VERSION"), Some(PROXY_VERSION));
        assert_eq!(get("__OW_WAIT_FOR_ACK"), Some("yes"));
        assert_eq!(get("__OW_API_HOST"), Some("init"));
        assert_eq!(get("__OW_ACTION_MAIN"), Some("niam"));
        assert_eq!(get("__OW_EXECUTION_ENV"), None);
        assert_eq!(get("PATH"), None);
    }

    #[test]
    fn run_errors_carry_their_detail_after_a_colon() {
        assert_eq!(RunError::Exited(None).to_string(), "command exited");
        assert_eq!(
            RunError::Exited(Some("signal: 9 (SIGKILL)".into())).to_string(),
            "command exited: signal: 9 (SIGKILL)"
        );
    }
}
