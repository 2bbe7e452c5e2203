//! A request's body on its way into an action that reads it as it comes: capped in size and in time, and a body that ends either way told to both sides.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};

/// Why a request's body stopped before its end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntakeError {
    #[error("the request body is larger than {0} bytes (see --max-run-bytes)")]
    TooLarge(usize),
    #[error(
        "the request body did not arrive within {} (see --body-read-timeout)",
        humantime::format_duration(*.0)
    )]
    TimedOut(Duration),
    /// The client's connection failed (it went away, or broke HTTP).
    #[error("the request body could not be read: {0}")]
    Read(String),
}

/// Where the intake tells why it stopped, for the one answering the request: a request
/// refused by the runtime's limits gets the runtime's status, whatever the action made of
/// a body cut short.
#[derive(Debug, Clone, Default)]
pub struct Stopped(Arc<Mutex<Option<IntakeError>>>);

impl Stopped {
    pub fn get(&self) -> Option<IntakeError> {
        crate::lock(&self.0).clone()
    }
}

/// `body`, failing once more than `limit` bytes have come or once `within` has passed
/// before its end.
pub struct Intake {
    body: Body,
    limit: usize,
    read: usize,
    within: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    stopped: Stopped,
    done: bool,
}

impl Intake {
    pub fn new(body: Body, limit: usize, within: Duration) -> (Intake, Stopped) {
        let stopped = Stopped::default();
        let intake = Intake {
            body,
            limit,
            read: 0,
            within,
            timer: Box::pin(tokio::time::sleep(within)),
            stopped: stopped.clone(),
            done: false,
        };
        (intake, stopped)
    }

    fn stop(&mut self, error: IntakeError) -> Poll<Option<Result<Frame<Bytes>, IntakeError>>> {
        self.done = true;
        *crate::lock(&self.stopped.0) = Some(error.clone());
        Poll::Ready(Some(Err(error)))
    }
}

impl http_body::Body for Intake {
    type Data = Bytes;
    type Error = IntakeError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, IntakeError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                self.read += frame.data_ref().map_or(0, Bytes::len);
                if self.read > self.limit {
                    let limit = self.limit;
                    return self.stop(IntakeError::TooLarge(limit));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => self.stop(IntakeError::Read(e.to_string())),
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => {
                if self.timer.as_mut().poll(cx).is_ready() {
                    let within = self.within;
                    return self.stop(IntakeError::TimedOut(within));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A response's body that holds `T` until the body has ended or is dropped (the client
/// went away): an activation's hold on the server, or its worker, lasts as long as the
/// answer it is sending.
pub struct Holding<T> {
    body: Body,
    held: Option<T>,
}

impl<T: Send + Unpin + 'static> Holding<T> {
    pub fn body(body: Body, held: T) -> Body {
        Body::new(Holding {
            body,
            held: Some(held),
        })
    }
}

impl<T: Send + Unpin> http_body::Body for Holding<T> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.held = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body sent in pieces, and one that never sends anything.
    struct Pieces(std::collections::VecDeque<Bytes>, bool);

    impl http_body::Body for Pieces {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            if self.1 {
                return Poll::Pending;
            }
            Poll::Ready(self.0.pop_front().map(|piece| Ok(Frame::data(piece))))
        }
    }

    fn chunked(pieces: &'static [&'static [u8]]) -> Body {
        Body::new(Pieces(
            pieces.iter().map(|p| Bytes::from_static(p)).collect(),
            false,
        ))
    }

    #[tokio::test]
    async fn a_body_within_its_cap_comes_whole() {
        let (intake, stopped) = Intake::new(chunked(&[b"ab", b"cd"]), 4, Duration::from_secs(5));
        let body = intake.collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"abcd");
        assert_eq!(stopped.get(), None);
    }

    #[tokio::test]
    async fn a_body_past_its_cap_stops_there_and_says_which_flag() {
        let (intake, stopped) =
            Intake::new(chunked(&[b"ab", b"cd", b"e"]), 4, Duration::from_secs(5));
        let error = intake.collect().await.unwrap_err();
        assert_eq!(error, IntakeError::TooLarge(4));
        assert!(error.to_string().contains("--max-run-bytes"));
        assert_eq!(stopped.get(), Some(IntakeError::TooLarge(4)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_stops_at_the_read_timeout() {
        let stalled = Body::new(Pieces(Default::default(), true));
        let (intake, stopped) = Intake::new(stalled, 4, Duration::from_secs(3));
        let error = intake.collect().await.unwrap_err();
        assert_eq!(error, IntakeError::TimedOut(Duration::from_secs(3)));
        assert!(error.to_string().contains("--body-read-timeout"));
        assert!(stopped.get().is_some());
    }

    #[tokio::test]
    async fn what_a_response_holds_goes_when_its_body_ends() {
        let held = Arc::new(());
        let body = Holding::body(Body::from("hi"), held.clone());
        assert_eq!(Arc::strong_count(&held), 2);
        let read = body.collect().await.unwrap().to_bytes();
        assert_eq!(&read[..], b"hi");
        assert_eq!(Arc::strong_count(&held), 1);
        let dropped = Holding::body(chunked(&[b"a"]), held.clone());
        drop(dropped);
        assert_eq!(
            Arc::strong_count(&held),
            1,
            "a client that goes away lets go too"
        );
    }
}
