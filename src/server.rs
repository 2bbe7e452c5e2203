//! The HTTP server: `app` builds the router, `run` serves it until shutdown.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;

use crate::config::{Config, HEALTH_PATH, Protocol, READY_PATH};

/// Every other path under the runtime's own prefix: never the action's.
const PROBES: &str = "/.well-known/wasmloop/{*rest}";
use crate::handlers;
use crate::runtime::Runtime;
use crate::signals::Stop;

/// The routes: `/init` and `/run` take POST, the only method OpenWhisk sends them (the
/// reference takes any, so a stray GET /init could replace an action or run it); a GET
/// elsewhere is 404, any other method there the reference's empty 200.
/// Under `--protocol http` every other path is the action's. The health and readiness
/// paths (GET and HEAD only), and any other under `/.well-known/wasmloop/`, are the
/// runtime's under both.
pub fn app(runtime: Arc<Runtime>) -> Router {
    let probes = Router::new()
        .route(
            HEALTH_PATH,
            get(handlers::health).fallback(handlers::probe_method),
        )
        .route(
            READY_PATH,
            get(handlers::ready).fallback(handlers::probe_method),
        )
        .route(PROBES, axum::routing::any(handlers::no_such_probe));
    let routes = match runtime.config().protocol {
        Protocol::OpenWhisk => probes
            .route("/init", post(handlers::init).fallback(handlers::post_only))
            .route("/run", post(handlers::run).fallback(handlers::post_only))
            .fallback(handlers::other),
        Protocol::Http => {
            probes
                .fallback(handlers::web)
                .layer(axum::middleware::map_response_with_state(
                    runtime.clone(),
                    close_when_stopping,
                ))
        }
    };
    // A layer costs every request a little: only where there are metrics to count in.
    let routes = match runtime.metrics() {
        Some(_) => routes.layer(axum::middleware::map_response_with_state(
            runtime.clone(),
            count_refusals,
        )),
        None => routes,
    };
    routes.with_state(runtime)
}

/// Counts each refusal (a 4xx or 503 of the runtime's own), as the error that answered
/// it tagged the response (`Error::refusal`).
async fn count_refusals(
    axum::extract::State(runtime): axum::extract::State<Arc<Runtime>>,
    response: axum::response::Response,
) -> axum::response::Response {
    if let (Some(metrics), Some(why)) = (
        runtime.metrics(),
        response.extensions().get::<crate::metrics::Refusal>(),
    ) {
        metrics.refused(*why);
    }
    response
}

/// Once the server is stopping, every answer closes its connection: a client (or a proxy)
/// that keeps connections open would otherwise go on sending here over them after the
/// platform's endpoints have moved on; its next request opens one where they point.
async fn close_when_stopping(
    axum::extract::State(runtime): axum::extract::State<Arc<Runtime>>,
    mut response: axum::response::Response,
) -> axum::response::Response {
    if runtime.is_stopping() {
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// Serves until `shutdown` completes; then, under `--protocol http` on SIGTERM, goes on
/// serving for `--drain-period` while readiness answers 503 (the platform's endpoints take
/// that long to stop routing here); then answers new requests with 503 while in-flight
/// activations finish for up to `--shutdown-timeout`, and stops the action (killing its
/// children). The settings are fitted to the host first (`Config::fit_to_host`), and the
/// log format they name is what every line of the action's and the runtime's is written in.
pub async fn run(
    listener: TcpListener,
    mut config: Config,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    shutdown: impl Future<Output = Stop> + Send + 'static,
) -> std::io::Result<()> {
    config.fit_to_host();
    serve(listener, Arc::new(Runtime::new(config, metrics)), shutdown).await
}

/// `run` for a runtime made already (one with backends of its embedder's, say: see
/// `Runtime::with_backends`), its settings fitted to the host.
pub async fn serve(
    listener: TcpListener,
    runtime: Arc<Runtime>,
    shutdown: impl Future<Output = Stop> + Send + 'static,
) -> std::io::Result<()> {
    tracing::debug!(address = ?listener.local_addr().ok(), "listening");
    let built_in = runtime.config().action.built_in.clone();
    // Made now, off the async workers, so that the first /init does not pay for it (the
    // wasm engines: see each backend's `warm`). Only the backends `--backends` allows: a
    // native-only image keeps an engine's memory and the address space its pool reserves.
    runtime.registry().warm().await;
    if let Some((file, main)) = built_in {
        // Before accepting: the platform's first request waits in the backlog, then finds
        // the action compiled and started.
        let init = crate::runtime::Init {
            code: crate::runtime::Code::File(file.clone()),
            main,
            env: Vec::new(),
            name: runtime.config().action.name.clone(),
        };
        runtime.install(init).await.map_err(|e| match e {
            crate::error::Error::Prepare(e @ crate::action::PrepareError::Read { .. }) => {
                std::io::Error::other(e)
            }
            e => std::io::Error::other(format!("cannot start the action {}: {e}", file.display())),
        })?;
    }
    let (stop_serving, serving_stopped) = tokio::sync::oneshot::channel::<()>();
    let connections = Connections {
        head_within: runtime.config().limits.header_read_timeout,
        format: runtime.config().logs.format,
        metrics: runtime.metrics().cloned(),
    };
    let mut serving = std::pin::pin!(connections.serve(
        crate::linger::LingeringListener::new(listener),
        app(runtime.clone()),
        async {
            let _ = serving_stopped.await;
        },
    ));
    let stop = tokio::select! {
        served = &mut serving => return served,
        stop = shutdown => stop,
    };
    let pool = &runtime.config().pool;
    let (drain_for, grace) = (stop.drain_period(runtime.config()), pool.shutdown_timeout);
    let say = |m: &str| crate::logs::runtime_line(runtime.config().logs.format, None, m);
    // The state changes before the line is said, so that whoever reads the line (an
    // operator, a test) sees what it says already true.
    if drain_for.is_zero() {
        runtime.refuse_new();
    } else {
        runtime.stop_being_ready();
    }
    say(&stop.announce(drain_for, grace));
    if !drain_for.is_zero() {
        tokio::select! {
            () = tokio::time::sleep(drain_for) => {}
            served = &mut serving => return served,
        }
    }
    // Still listening: what arrives now gets 503, which tells the platform to place it
    // elsewhere, instead of a refused connection it may retry here.
    let drained = tokio::select! {
        drained = tokio::time::timeout(grace, runtime.drain()) => drained.is_ok(),
        served = &mut serving => return served,
    };
    if !drained {
        tracing::debug!("in-flight activations outlived the shutdown grace period");
    }
    // Activations still running are stopped here, and answer 503 (each says so).
    runtime.shutdown().await;
    let _ = stop_serving.send(());
    // Their answers (and any request mid-way) get a moment to go out.
    tokio::time::timeout(std::time::Duration::from_secs(1), serving)
        .await
        .unwrap_or(Ok(()))
}

impl Stop {
    /// How long requests are still served: `--drain-period` on SIGTERM under
    /// `--protocol http` (OpenWhisk's has none); none on Ctrl-C.
    fn drain_period(self, config: &Config) -> std::time::Duration {
        match (self, config.protocol) {
            (Stop::Terminate, Protocol::Http) => config.pool.drain_period,
            _ => std::time::Duration::ZERO,
        }
    }

    /// The line an operator reads when the stop begins: what happens next, and for how long.
    fn announce(self, drain_for: std::time::Duration, grace: std::time::Duration) -> String {
        let signal = match self {
            Stop::Terminate => "SIGTERM",
            Stop::Interrupt => "interrupted",
        };
        let said = |d: std::time::Duration| humantime::format_duration(d).to_string();
        let then = format!(
            "activations in flight then have {} to finish (--shutdown-timeout) before they are \
             stopped",
            said(grace)
        );
        if drain_for.is_zero() {
            return format!("wasmloop: {signal}: stopping; new requests get 503, {then}");
        }
        format!(
            "wasmloop: {signal}: stopping; readiness answers 503 from now on, requests are \
             still served for {} (--drain-period) while the platform stops routing here, \
             then new ones get 503; {then}",
            said(drain_for)
        )
    }
}

/// How long a scrape's request head may take on the metrics listener where
/// `--header-read-timeout` sets none (under OpenWhisk): a scrape is one short request, and
/// a connection that never sends one must not be held for ever.
const METRICS_HEAD_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves the metrics (`--metrics-listen`) on `listener` until the process ends, each
/// connection as the main listener's are, its head bounded by `head_within` (the
/// `--header-read-timeout` setting) or, without one, 30 s.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<crate::metrics::Metrics>,
    head_within: Option<std::time::Duration>,
    format: crate::logs::LogFormat,
) -> std::io::Result<()> {
    let connections = Connections {
        head_within: head_within.or(Some(METRICS_HEAD_WITHIN)),
        format,
        metrics: None,
    };
    connections
        .serve(
            crate::linger::LingeringListener::new(listener),
            crate::metrics::app(metrics),
            std::future::pending(),
        )
        .await
}

/// How each connection is served.
struct Connections {
    /// How long a request's head may take to arrive (`--header-read-timeout`), counted
    /// from when the connection is ready for it: an idle kept-alive connection closes then.
    head_within: Option<std::time::Duration>,
    format: crate::logs::LogFormat,
    /// Where the connections refused before a request are counted (not the metrics
    /// listener's own).
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Connections {
    /// Serves `app` on each connection `listener` accepts until `stop`; then stops
    /// accepting, and completes once every connection has finished its exchange.
    async fn serve(
        self,
        mut listener: crate::linger::LingeringListener,
        app: Router,
        stop: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        use axum::serve::Listener as _;
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut stop = std::pin::pin!(stop);
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(self.head_within);
        loop {
            let (io, peer) = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut stop => break,
            };
            let service = WithLocalAddr {
                app: hyper_util::service::TowerToHyperService::new(app.clone()),
                local: io.local_addr().ok().map(crate::linger::LocalAddr),
            };
            let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
            let connection = graceful.watch(connection);
            let format = self.format;
            let head_within = self.head_within;
            let metrics = self.metrics.clone();
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    refused(format, metrics.as_deref(), peer, head_within, &e);
                }
            });
        }
        drop(listener);
        graceful.shutdown().await;
        Ok(())
    }
}

/// The router, with each request told its connection's `LocalAddr`.
struct WithLocalAddr {
    app: hyper_util::service::TowerToHyperService<Router>,
    local: Option<crate::linger::LocalAddr>,
}

impl hyper::service::Service<axum::http::Request<hyper::body::Incoming>> for WithLocalAddr {
    type Response = <hyper_util::service::TowerToHyperService<Router> as hyper::service::Service<
        axum::http::Request<hyper::body::Incoming>,
    >>::Response;
    type Error = <hyper_util::service::TowerToHyperService<Router> as hyper::service::Service<
        axum::http::Request<hyper::body::Incoming>,
    >>::Error;
    type Future = <hyper_util::service::TowerToHyperService<Router> as hyper::service::Service<
        axum::http::Request<hyper::body::Incoming>,
    >>::Future;

    fn call(&self, mut request: axum::http::Request<hyper::body::Incoming>) -> Self::Future {
        if let Some(local) = self.local {
            request.extensions_mut().insert(local);
        }
        self.app.call(request)
    }
}

/// Says why a connection ended without an exchange: what its client sent was no request
/// (hyper answered it 400, 414 or 431), or its head never came whole in time. A client
/// that just went away is only a debug line.
fn refused(
    format: crate::logs::LogFormat,
    metrics: Option<&crate::metrics::Metrics>,
    peer: std::net::SocketAddr,
    head_within: Option<std::time::Duration>,
    error: &hyper::Error,
) {
    use crate::metrics::Refusal;
    // hyper tells a URI too long (answered 414) from a head too large (431) only in its
    // words: both are `is_parse_too_large`.
    let refusal = if error.is_parse_too_large() && error.to_string().contains("URI too long") {
        Refusal::UriTooLong
    } else if error.is_parse_too_large() {
        Refusal::HeadTooLarge
    } else if error.is_parse() {
        Refusal::BadRequest
    } else if error.is_timeout() {
        Refusal::HeadTimeout
    } else {
        tracing::debug!(%peer, %error, "a connection ended early");
        return;
    };
    if let Some(metrics) = metrics {
        metrics.refused(refusal);
    }
    let why = match refusal {
        Refusal::UriTooLong => "its request's URI is longer than the server takes (answered \
             414: a shorter path and query; send large values in the body)"
            .to_owned(),
        Refusal::HeadTooLarge => "its request's head is larger than the server takes \
             (answered 431: fewer or shorter headers)"
            .to_owned(),
        Refusal::HeadTimeout => format!(
            "its request's head did not arrive within {} (see --header-read-timeout): the \
             connection was closed",
            head_within.map_or_else(
                || "its limit".to_owned(),
                |d| humantime::format_duration(d).to_string()
            )
        ),
        _ => format!("what it sent is no HTTP/1.1 request (answered 400): {error}"),
    };
    crate::logs::runtime_line(
        format,
        None,
        &format!("wasmloop: a connection from {peer}: {why}"),
    );
}
