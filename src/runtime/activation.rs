//! An initialized action and its activations: each bounded by the earliest of its deadline and --timeout, counted, and finished even when its client goes.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::time::Instant;

use super::Admitted;
use crate::action::Prepared;
use crate::error::Error;
use crate::executor::{self, Executor, RunError};
use crate::metrics::Outcome;
use crate::protocol;

/// An initialized action: its executor, and the folder it was unpacked into.
pub struct Action {
    pub(super) executor: Arc<dyn Executor>,
    /// Its activations' counters, when the metrics are on.
    pub(super) metrics: Option<crate::metrics::ActionMetrics>,
    pub(super) sentinels: bool,
    pub(super) timeout: Option<Duration>,
    /// How the runtime's lines about its activations are written.
    pub(super) format: crate::logs::LogFormat,
    /// `--shutdown-timeout`, which a line about an activation the server stopped names;
    /// none for `wasmloop run`, which has no grace period.
    pub(super) grace: Option<Duration>,
    pub(super) _prepared: Prepared,
}

impl Drop for Action {
    /// Its last activation has ended (each holds the action): a successor being made ahead
    /// is stopped before the folder it starts from is removed.
    fn drop(&mut self) {
        self.executor.abandon();
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
pub(super) enum Limit {
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
