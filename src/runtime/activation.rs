//! An initialized action and its activations: each bounded by the earliest of its deadline and --timeout, counted, and finished even when its client goes.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::Admitted;
use crate::action::Prepared;
use crate::context::{self, Context as ActivationContext};
use crate::error::Error;
use crate::executor::{self, Activation, Executor, Payload, RunError};
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
        input: Input,
        admitted: Admitted,
    ) -> Result<Answered, Error> {
        let sentinels = self.sentinels;
        FinishOnDrop::new(async move {
            let answer = self.activate(input).await;
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

    /// docs/protocol.md 1.7 steps 2-7: the input read once, given to the action, its
    /// result waited for, the logs' end marked; counted by how it went.
    pub async fn activate(&self, input: Input) -> Result<Answered, Error> {
        let began = self.metrics.as_ref().map(|_| std::time::Instant::now());
        let answer = match self.read(input) {
            Ok(activation) => {
                let context = activation.context.clone();
                let answer = self.answer_of(activation).await;
                if let Err(Error::Run(RunError::Stopped)) = &answer {
                    self.stopped(&context.labels());
                }
                answer
            }
            Err(refused) => Err(refused),
        };
        self.count(began, answer.as_ref().map(|answered| answered.outcome));
        answer
    }

    /// The activation an input stands for: a `/run` body read here, once (see
    /// `context::read`), its value built only for an action that takes requests (which
    /// makes one of it); for the others the body goes on byte for byte, as one line.
    fn read(&self, input: Input) -> Result<Activation, Error> {
        let (context, payload) = match input {
            Input::Made { line, context } => (context, Payload::Line(line)),
            Input::Body(body) => {
                let takes_requests = self.executor.takes_requests();
                let read = context::read(&body, takes_requests).map_err(Error::BadRequest)?;
                let payload = if takes_requests {
                    Payload::Value(read.value)
                } else {
                    let line = executor::lines::frame_request(&body);
                    Payload::Line(match &read.lifted {
                        Some(traceparent) => context::with_traceparent(line, traceparent),
                        None => line,
                    })
                };
                (read.context, payload)
            }
        };
        Ok(Activation {
            context: Arc::new(context),
            payload,
        })
    }

    /// Counts an activation that began at `began` (taken only when the metrics are on)
    /// and went as `outcome` says, or failed with that error.
    fn count(&self, began: Option<std::time::Instant>, outcome: Result<Outcome, &Error>) {
        let (Some(metrics), Some(began)) = (&self.metrics, began) else {
            return;
        };
        metrics.activation(outcome.unwrap_or_else(outcome_of), began.elapsed());
    }

    async fn answer_of(&self, activation: Activation) -> Result<Answered, Error> {
        let limit = Limit::earliest(activation.context.deadline, self.timeout);
        let result = self
            .executor
            .activate(activation, limit.as_ref().map(|l| l.0))
            .await
            .and_then(executor::Answer::into_line)
            .map(|(result, outcome)| Answered { result, outcome });
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
        context: ActivationContext,
        admitted: Admitted,
    ) -> Result<executor::HttpResponse, Error> {
        let began = self.metrics.as_ref().map(|_| std::time::Instant::now());
        let limit = Limit::earliest(None, self.timeout);
        let deadline = limit.as_ref().map(|l| l.0);
        let activation = Activation {
            context: Arc::new(context),
            payload: Payload::Request(Box::new(request)),
        };
        let served = self
            .executor
            .activate(activation, deadline)
            .await
            .and_then(executor::Answer::into_response);
        let response = within_limit(served, limit);
        // Counted once the response's head is there: its status is how it went.
        self.count(began, response.as_ref().map(|(_, outcome)| *outcome));
        let (response, _) = response?;
        Ok(response.map(|body| executor::intake::Holding::body(body, admitted)))
    }
}

/// What an activation is given.
pub enum Input {
    /// A `/run` body, as it came: read once, by the runtime (`Action::activate`).
    Body(Bytes),
    /// A request line and its context, as the runtime made them (`--protocol http`, for
    /// an action that reads lines): nothing left to read.
    Made {
        line: Vec<u8>,
        context: ActivationContext,
    },
}

/// What an activation answered: its result line, and how it went (an `error` field, a
/// web action's 5xx), as it was read once where it was taken.
#[derive(Debug)]
pub struct Answered {
    pub result: Bytes,
    pub outcome: Outcome,
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
    /// The earlier of the two, and when it falls.
    fn earliest(deadline: Option<Instant>, timeout: Option<Duration>) -> Option<(Instant, Limit)> {
        let now = Instant::now();
        let from_deadline = deadline
            .filter(|at| *at > now)
            .map(|at| (at, Limit::Deadline(at - now)));
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

    fn in_ms(ms: u64) -> Option<Instant> {
        Some(Instant::now() + Duration::from_millis(ms))
    }

    #[test]
    fn the_earlier_limit_wins_and_the_same_one_said_twice_is_the_flag() {
        assert_eq!(Limit::earliest(None, None), None);
        let timeout = Duration::from_secs(5);
        assert_eq!(
            Limit::earliest(None, Some(timeout)).unwrap().1,
            Limit::Timeout(timeout)
        );
        let deadline = |limit: Option<(Instant, Limit)>| match limit.unwrap().1 {
            Limit::Deadline(left) => left,
            other => panic!("{other:?}"),
        };
        let left = deadline(Limit::earliest(in_ms(60_000), None));
        assert!(
            left <= Duration::from_secs(60) && left > Duration::from_secs(59),
            "{left:?}"
        );
        assert_eq!(
            Limit::earliest(in_ms(60_000), Some(timeout)).unwrap().1,
            Limit::Timeout(timeout)
        );
        let left = deadline(Limit::earliest(in_ms(1_000), Some(timeout)));
        assert!(left <= Duration::from_secs(1), "{left:?}");
        assert_eq!(
            Limit::Deadline(Duration::from_micros(2_999_600)).describe(),
            "its deadline (2s 999ms after it arrived)"
        );
        // The same instant said twice, as `wasmloop run` sends it: the flag is named.
        assert_eq!(
            Limit::earliest(in_ms(5_000), Some(timeout)).unwrap().1,
            Limit::Timeout(timeout)
        );
    }
}
