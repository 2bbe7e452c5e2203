//! The HTTP server: `app` builds the router, `run` serves it until shutdown.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::routing::any;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::handlers;
use crate::runtime::Runtime;

/// The routes; any method is accepted, as the reference proxy does.
pub fn app(runtime: Arc<Runtime>) -> Router {
    Router::new()
        .route("/init", any(handlers::init))
        .route("/run", any(handlers::run))
        .fallback(handlers::other)
        .with_state(runtime)
}

/// Serves until `shutdown` completes; then answers new requests with 503 while in-flight
/// activations finish for up to `--shutdown-timeout`, and stops the action (killing its
/// children).
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let grace = config.shutdown_timeout;
    tracing::debug!(address = ?listener.local_addr().ok(), "listening");
    let built_in = config.built_in_action.clone();
    let runtime = Arc::new(Runtime::new(config));
    // Made now, off the async workers, so that the first wasm /init does not pay for them:
    // measured, 1.9-2.4 ms for a hello from the compile cache against 2.7-3.2 ms made on
    // demand. A native-only deployment pays with ~2 MiB of resident memory (10.3 MiB idle
    // against 8.3) and the pool's address-space reservation; cold starts of wasm actions,
    // this runtime's main use, weigh more.
    let (first, then) = runtime.engines().tiers();
    let made = std::iter::once(first).chain(then).map(|codegen| {
        let engines = runtime.engines().clone();
        tokio::task::spawn_blocking(move || engines.engine(codegen))
    });
    // A failure is the first wasm /init's to report (and to try again).
    for making in made.collect::<Vec<_>>() {
        let _ = making.await;
    }
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
