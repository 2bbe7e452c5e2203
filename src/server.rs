//! The HTTP server: `app` builds the router, `run` serves it until shutdown.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;

use crate::config::{Config, HEALTH_PATH, Protocol, READY_PATH};
use crate::handlers;
use crate::runtime::Runtime;

/// The routes: `/init` and `/run` take POST, the only method OpenWhisk sends them (the
/// reference takes any, so a stray GET /init could replace an action or run it); a GET
/// elsewhere is 404, any other method there the reference's empty 200.
/// Under `--protocol http` every other path is the action's. The health and readiness
/// paths are the runtime's under both.
pub fn app(runtime: Arc<Runtime>) -> Router {
    let probes = Router::new()
        .route(HEALTH_PATH, get(handlers::health).fallback(handlers::other))
        .route(READY_PATH, get(handlers::ready).fallback(handlers::other));
    let routes = match runtime.config().protocol {
        Protocol::OpenWhisk => probes
            .route("/init", post(handlers::init).fallback(handlers::post_only))
            .route("/run", post(handlers::run).fallback(handlers::post_only))
            .fallback(handlers::other),
        Protocol::Http => probes.fallback(handlers::web),
    };
    routes.with_state(runtime)
}

/// Serves until `shutdown` completes; then answers new requests with 503 while in-flight
/// activations finish for up to `--shutdown-timeout`, and stops the action (killing its
/// children). The settings are fitted to the host first (`Config::fit_to_host`), and the
/// log format they name is what every line of the action's and the runtime's is written in.
pub async fn run(
    listener: TcpListener,
    mut config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    config.fit_to_host();
    let grace = config.pool.shutdown_timeout;
    tracing::debug!(address = ?listener.local_addr().ok(), "listening");
    let built_in = config.action.built_in.clone();
    let runtime = Arc::new(Runtime::new(config));
    // Made now, off the async workers, so that the first /init does not pay for it (the
    // wasm engines: see each backend's `warm`). Only the backends `--backends` allows: a
    // native-only image keeps the ~2 MiB and the address space an engine's pool reserves.
    runtime.registry().warm().await;
    if let Some((file, main)) = built_in {
        // Before accepting: the platform's first request waits in the backlog, then finds
        // the action compiled and started.
        let bytes = tokio::fs::read(&file).await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot read the action {}: {e}", file.display()),
            )
        })?;
        let init = crate::runtime::Init {
            bytes: bytes.into(),
            main,
            env: Vec::new(),
            name: None,
        };
        runtime.install(init).await.map_err(|e| {
            std::io::Error::other(format!("cannot start the action {}: {e}", file.display()))
        })?;
    }
    let (stop_serving, serving_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut serving = std::pin::pin!(
        axum::serve(
            crate::linger::LingeringListener::new(listener),
            app(runtime.clone())
        )
        .with_graceful_shutdown(async {
            let _ = serving_stopped.await;
        })
        .into_future()
    );
    tokio::select! {
        served = &mut serving => return served,
        () = shutdown => {}
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
    // Activations still running are stopped here, and answer 503.
    runtime.shutdown().await;
    let _ = stop_serving.send(());
    // Their answers (and any request mid-way) get a moment to go out.
    tokio::time::timeout(std::time::Duration::from_secs(1), serving)
        .await
        .unwrap_or(Ok(()))
}

/// Completes on SIGTERM (how platforms stop containers) or Ctrl-C.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = terminate => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::debug!("shutting down");
}
