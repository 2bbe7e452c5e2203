//! The one error type the HTTP side returns, and the one table from error to status code.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::action::PrepareError;
use crate::executor::{RunError, StartError};
use crate::protocol::{self, MSG_INIT_LOGGED_PREPARE, MSG_INIT_LOGGED_START};

/// Why an `/init` carrying code is refused by an image with a built-in action.
pub const MSG_BUILT_IN: &str = "this runtime serves the action built into its image \
    (WASMLOOP_ACTION); it takes no other code. Create the action from the image without a \
    file (wsk action create NAME --docker IMAGE), or use the base image to send code";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}", protocol::MSG_ALREADY_INITIALIZED)]
    AlreadyInitialized,
    #[error("Error unmarshaling request: {0}")]
    BadRequest(String),
    #[error("Error reading request body: {0}")]
    BodyRead(String),
    #[error("request body too large: the limit is {limit} bytes (see --max-{route}-bytes)")]
    BodyTooLarge { limit: usize, route: &'static str },
    /// The body did not arrive in time.
    #[error(
        "the request's body did not arrive within {} (see --body-read-timeout): send it \
         faster, or raise the limit",
        humantime::format_duration(*.0)
    )]
    BodyTimedOut(std::time::Duration),
    #[error("{}", protocol::MSG_MISSING_CODE)]
    MissingCode,
    #[error("cannot decode the request: {0}")]
    BadBase64(#[source] base64::DecodeError),
    /// Unpacking or compiling the upload failed.
    #[error("{0}")]
    Prepare(#[from] PrepareError),
    /// As `Prepare`, with the detail already written to the logs (`OW_LOG_INIT_ERROR`).
    #[error("{MSG_INIT_LOGGED_PREPARE}")]
    PrepareLogged,
    #[error("cannot start action: {0}")]
    Start(#[from] StartError),
    /// As `Start`, with the detail already written to the logs (`OW_LOG_INIT_ERROR`).
    #[error("{MSG_INIT_LOGGED_START}")]
    StartLogged,
    /// An `/init` with code sent to an image that has its action built in.
    #[error("{MSG_BUILT_IN}")]
    BuiltIn,
    #[error("{}", protocol::MSG_NO_ACTION)]
    NoAction,
    /// `/init` or `/run` with another method than POST, the only one OpenWhisk sends.
    #[error("{path} takes POST only (as OpenWhisk's invoker sends it), not {method}")]
    MethodNotAllowed { path: String, method: String },
    /// The runtime's own paths (`/.well-known/wasmloop/*`) with another method than GET
    /// or HEAD: never the action's, under either protocol.
    #[error("{path} is the runtime's own probe and takes GET or HEAD only, not {method}")]
    ProbeMethod { path: String, method: String },
    /// A path under `/.well-known/wasmloop/` that is none of the runtime's.
    #[error(
        "no such path: {0} (the runtime's own paths are {health} and {ready})",
        health = crate::config::HEALTH_PATH,
        ready = crate::config::READY_PATH
    )]
    NoSuchProbe(String),
    /// An HTTP/1.1 request without the Host header HTTP/1.1 requires: the client's to fix.
    #[error(
        "the request has no Host header, which HTTP/1.1 requires (RFC 9112, section 3.2): send \
         one (any name of this server), or speak HTTP/1.0"
    )]
    NoHost,
    /// A GET on a path that is not ours: never an empty 200 a probe would take for health.
    #[error("no such path: {0} (the runtime serves POST /init and POST /run)")]
    NotFound(String),
    /// A request that arrived after SIGTERM: the platform reads 503 as "this container is
    /// going away" and places the activation elsewhere.
    #[error("the runtime is shutting down and takes no new requests")]
    ShuttingDown,
    /// The activation was stopped at its limit; the text names the limit.
    #[error("the action did not finish within {0} and was stopped")]
    TimedOut(String),
    /// Its limit passed while it waited for a busy worker.
    #[error(
        "the action did not start within {limit}: it waited {} ms for a busy instance and was never started (see --concurrency)",
        waited.as_millis()
    )]
    NeverStarted {
        limit: String,
        waited: std::time::Duration,
    },
    /// A compile or start-up wait cut short by the /init's `__OW_DEADLINE`.
    #[error(
        "{source}; the platform's deadline for this /init (__OW_DEADLINE) left {left} for it: \
         raise the action's timeout, or make /init quicker (a smaller upload, the compile \
         cache, a precompiled module)"
    )]
    InitDeadline { left: String, source: Box<Error> },
    #[error(transparent)]
    Run(#[from] RunError),
    /// A bug of ours, reported instead of dropping the connection.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// A limit on time ran out (as opposed to something failing).
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Start(StartError::AckTimeout(_))
            | Error::Prepare(PrepareError::CompileTimedOut(_)) => true,
            Error::Start(StartError::Backend(failed)) => failed.timed_out(),
            _ => false,
        }
    }

    /// Why the request never reached the action, for a refusal the metrics count.
    pub fn refusal(&self) -> Option<crate::metrics::Refusal> {
        use crate::metrics::Refusal;
        Some(match self {
            Error::BodyTooLarge { .. } => Refusal::BodyTooLarge,
            Error::BodyTimedOut(_) => Refusal::BodyTimeout,
            Error::Run(RunError::Busy(_)) => Refusal::Busy,
            Error::ShuttingDown => Refusal::ShuttingDown,
            Error::NoHost => Refusal::BadRequest,
            _ => return None,
        })
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Error::InitDeadline { source, .. } => source.status(),
            Error::AlreadyInitialized | Error::MissingCode | Error::BuiltIn => {
                StatusCode::FORBIDDEN
            }
            Error::BadRequest(_) | Error::BodyRead(_) | Error::BadBase64(_) | Error::NoHost => {
                StatusCode::BAD_REQUEST
            }
            Error::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::BodyTimedOut(_) => StatusCode::REQUEST_TIMEOUT,
            Error::Prepare(_) | Error::PrepareLogged | Error::Start(_) | Error::StartLogged => {
                StatusCode::BAD_GATEWAY
            }
            Error::NoAction | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Error::MethodNotAllowed { .. } | Error::ProbeMethod { .. } => {
                StatusCode::METHOD_NOT_ALLOWED
            }
            Error::NotFound(_) | Error::NoSuchProbe(_) => StatusCode::NOT_FOUND,
            Error::TimedOut(_) | Error::NeverStarted { .. } => StatusCode::GATEWAY_TIMEOUT,
            Error::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            // The activation's own table, as OpenWhisk's protocol answers it.
            Error::Run(e) => {
                StatusCode::from_u16(e.status(false)).unwrap_or(StatusCode::BAD_GATEWAY)
            }
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = protocol::json_response(status, protocol::error_body(&self.to_string()));
        // Counted by the server, which holds the metrics (`server::count_refusals`).
        if let Some(why) = self.refusal() {
            response.extensions_mut().insert(why);
        }
        let header = match &self {
            // A slot frees up within an activation's time; one second is a fair first guess.
            Error::Run(RunError::Busy(_)) => Some((axum::http::header::RETRY_AFTER, "1")),
            Error::MethodNotAllowed { .. } => Some((axum::http::header::ALLOW, "POST")),
            Error::ProbeMethod { .. } => Some((axum::http::header::ALLOW, "GET, HEAD")),
            _ => None,
        };
        if let Some((name, value)) = header {
            response
                .headers_mut()
                .insert(name, axum::http::HeaderValue::from_static(value));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_messages_match_the_protocol() {
        let cases: Vec<(Error, u16, &str)> = vec![
            (
                Error::AlreadyInitialized,
                403,
                "Cannot initialize the action more than once.",
            ),
            (Error::MissingCode, 403, "Missing main/no code to execute."),
            (Error::NoAction, 500, "no action defined yet"),
            (
                Error::BodyTimedOut(std::time::Duration::from_secs(60)),
                408,
                "the request's body did not arrive within 1m (see --body-read-timeout): send it \
                 faster, or raise the limit",
            ),
            (
                Error::ShuttingDown,
                503,
                "the runtime is shutting down and takes no new requests",
            ),
            (
                Error::Run(RunError::Busy(3)),
                429,
                "every instance of the action is busy and 3 activations are waiting already; \
                 try again later (see --concurrency, --max-queue)",
            ),
            (Error::Run(RunError::Exited(None)), 400, "command exited"),
            (
                Error::Run(RunError::Exited(Some("exit status: 3".into()))),
                400,
                "command exited: exit status: 3",
            ),
            (
                Error::Run(RunError::NotAnObject(bytes::Bytes::new())),
                502,
                "The action did not return a dictionary or array.",
            ),
            (
                Error::PrepareLogged,
                502,
                "The action failed to generate or locate a binary. See logs for details.",
            ),
            (
                Error::StartLogged,
                502,
                "Cannot start action. Check logs for details.",
            ),
            (
                Error::Start(StartError::Exited(None)),
                502,
                "cannot start action: command exited",
            ),
        ];
        for (error, status, message) in cases {
            assert_eq!(error.status().as_u16(), status, "{message}");
            assert_eq!(error.to_string(), message);
        }
    }

    /// A backend's own start errors keep their words, and whether one is a timeout is read
    /// from its kind, not from them.
    #[test]
    fn a_backends_start_error_keeps_its_text_and_its_kind() {
        use crate::executor::native::SpawnError;
        use crate::executor::wasm::WasmError;
        let limit = std::time::Duration::from_secs(2);
        let still: Error = StartError::from(WasmError::StillStarting(limit)).into();
        assert!(still.is_timeout());
        assert_eq!(still.status().as_u16(), 502);
        assert!(
            still.to_string().starts_with(
                "cannot start action: the guest was still running its start-up code after 2s"
            ),
            "{still}"
        );
        let compile: Error = StartError::from(WasmError::CompileTimedOut(limit)).into();
        assert!(compile.is_timeout());
        let exited: Error = StartError::from(WasmError::GuestExited {
            detail: "exit status 3".into(),
        })
        .into();
        assert!(!exited.is_timeout());
        assert_eq!(
            exited.to_string(),
            "cannot start action: command exited: exit status 3"
        );
        let pipes = std::io::Error::other("too many open files");
        let pipes: Error = StartError::from(SpawnError::Pipe(pipes)).into();
        assert!(!pipes.is_timeout());
        assert_eq!(
            pipes.to_string(),
            "cannot start action: cannot set up the pipes to the action: too many open files"
        );
        assert!(Error::Start(StartError::AckTimeout(limit)).is_timeout());
    }
}
