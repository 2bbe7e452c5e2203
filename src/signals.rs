//! The signals that stop the runtime, told apart: SIGTERM (a platform) from Ctrl-C (a person).

use std::future::Future;

/// What told the server to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: how a platform stops a container, while its endpoints may still route here.
    Terminate,
    /// Ctrl-C: a person at a terminal, who wants it gone now.
    Interrupt,
}

/// Completes on SIGTERM (how platforms stop containers) or Ctrl-C, saying which.
pub fn stopped() -> impl Future<Output = Stop> + Send + 'static {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    // Installed now, not at the first poll: a SIGTERM that came between (the server may
    // be answering by then) would end the process at once, without its drain.
    let terminate = signal(SignalKind::terminate()).ok();
    let interrupt = signal(SignalKind::interrupt()).ok();
    async move {
        let received = |handler: Option<Signal>| async move {
            match handler {
                Some(mut handler) => {
                    handler.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let stop = tokio::select! {
            () = received(terminate) => Stop::Terminate,
            () = received(interrupt) => Stop::Interrupt,
        };
        tracing::debug!(?stop, "shutting down");
        stop
    }
}
