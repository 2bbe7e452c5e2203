//! One instance of an HTTP component, kept between activations: each activation is one call of its `incoming-handler.handle`.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use wasmtime::Store;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::p2::bindings::{Proxy, ProxyPre};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::WasiHttpView;

use crate::web_action as web;
use crate::executor::pool::{Close, Job, Start, Worker};
use crate::executor::wasm::component::{self, ComponentHost};
use crate::executor::wasm::descriptors::Descriptors;
use crate::executor::wasm::environ::Environ;
use crate::executor::wasm::streams::GuestStderr;
use crate::executor::wasm::{WasmSpec, exit_reason, ticker};
use crate::executor::{HttpRequest, Respond, RunError, StartError};
use crate::logs::Attribution;

/// How long a response may take to end once `handle` has returned: its last bytes are
/// on their way then, or the component left its body unfinished and they never come.
const AFTER_RETURN: Duration = Duration::from_millis(100);

/// The response an activation waits for.
type Answer = Result<axum::http::Response<HyperOutgoingBody>, ErrorCode>;

pub struct HttpInstance {
    store: Store<ComponentHost>,
    proxy: Proxy,
    /// Its stdout and stderr: both logs (the answer is the response).
    stdout: GuestStderr,
    stderr: GuestStderr,
    environ: Environ,
    attribution: Attribution,
    denials: Arc<Mutex<crate::outbound::DenialLog>>,
    descriptors: Descriptors,
    ticker: ticker::Ticker,
    memory: Arc<AtomicUsize>,
    max_result_bytes: usize,
}

impl Worker for HttpInstance {
    type Spec = WasmSpec<ProxyPre<ComponentHost>>;

    async fn start(spec: &Self::Spec, _: Start<'_>) -> Result<Self, StartError> {
        let start = &spec.start;
        let attribution = Attribution::new(start.log_format);
        let component::HttpStore {
            mut store,
            stdout,
            stderr,
            environ,
            descriptors,
            denials,
            memory,
        } = component::http_store(
            &spec.engine,
            start,
            &spec.env,
            spec.preopen.as_ref(),
            &spec.outbound,
            spec.descriptors,
            attribution.clone(),
        )?;
        let ticker = spec.engine.ticker.clone();
        let made = {
            let _ticking = ticker.running();
            tokio::time::timeout(start.ack_timeout, spec.pre.instantiate_async(&mut store)).await
        };
        let proxy = component::instantiated(made, start.ack_timeout, &stderr)?;
        stdout.flush();
        stderr.flush();
        Ok(HttpInstance {
            store,
            proxy,
            stdout,
            stderr,
            environ,
            attribution,
            denials,
            descriptors,
            ticker,
            memory,
            max_result_bytes: start.max_result_bytes,
        })
    }

    /// Nothing of it runs between activations: one whose call failed is dropped by the
    /// pool with that activation.
    fn is_alive(&mut self) -> bool {
        true
    }

    fn discard_stray_output(&mut self) -> Option<Bytes> {
        None
    }

    fn memory_bytes(&mut self) -> Option<u64> {
        Some(self.memory.load(Ordering::Relaxed) as u64)
    }

    fn attribute(&mut self, labels: std::sync::Arc<crate::logs::Labels>) {
        self.attribution.set(labels);
    }

    fn attribution(&self) -> Option<&Attribution> {
        Some(&self.attribution)
    }

    /// Both kinds: a web action's value, made a request (`web_action`), or a request
    /// as it came (`--protocol http`).
    const TAKES_REQUESTS: bool = true;

    async fn activate(&mut self, job: Job) -> Result<Bytes, RunError> {
        match job {
            Job::Value { value, context } => {
                let incoming =
                    web::request(value, &context).map_err(|e| RunError::BadInput(e.0))?;
                self.environ.arrive(&context);
                self.handle(incoming).await
            }
            Job::Line { .. } => Err(RunError::BadInput(VALUES_ONLY.to_owned())),
            Job::Request {
                request,
                context,
                respond,
            } => self.serve(*request, context, respond).await.map(|()| Bytes::new()),
        }
    }

    fn end_activation(&mut self, close: Close) {
        self.stdout.flush();
        close.write_stdout();
        if let Some(line) = crate::lock(&self.denials).left_out() {
            self.stderr.note(&line);
        }
        self.stderr.flush_with(close.stderr_tail());
        self.descriptors.new_activation();
    }
}

/// What an HTTP component answers a request line: the runtime gives it `/run`'s values
/// read (`Payload::Value`), never lines.
const VALUES_ONLY: &str = "this action takes requests and web actions' values, not request lines";

impl HttpInstance {
    /// Serves one request as it came: sends the response's head on `respond` as soon as
    /// it has it, and returns once the response's body has ended.
    async fn serve(
        &mut self,
        request: HttpRequest,
        context: std::sync::Arc<crate::context::Context>,
        respond: Respond,
    ) -> Result<(), RunError> {
        self.environ.arrive(&context);
        let (mut parts, body) = request.into_parts();
        web::set_context(&mut parts.headers, &context);
        let body = body.map_err(component::intake_error);
        let request = axum::http::Request::from_parts(parts, body);
        let (send, answer) = tokio::sync::oneshot::channel::<Answer>();
        let (ended, body_ended) = tokio::sync::oneshot::channel::<Ended>();
        // Held while the activation runs: a body whose activation was cut short (its
        // deadline, a trap, the server stopping) must not end as if it were whole.
        let running = Arc::new(());
        let activation = Arc::downgrade(&running);
        let returned = Arc::new(Returned::default());
        let told = returned.clone();
        let stderr = self.stderr.clone();
        let forward = async move {
            let response = match answer.await {
                Ok(Ok(response)) => response,
                failed => return Err(RunError::Exited(Some(unanswered(failed)))),
            };
            let say = |m: &str| stderr.note(m);
            let (mut head, body) = response.into_parts();
            if !web::RESPONSE_STATUSES.contains(&head.status.as_u16()) {
                let message = format!(
                    "the component answered status {}: answer a status from 200 to 599",
                    head.status.as_u16()
                );
                say(&format!("wasmloop: {message}"));
                respond.send(crate::protocol::json_response(
                    axum::http::StatusCode::BAD_GATEWAY,
                    crate::protocol::error_body(&message),
                ));
                // Its body is dropped unread: the component's writes fail, and it returns.
                return Ok(None);
            }
            web::drop_hop_by_hop(&mut head.headers, &say);
            let body = axum::body::Body::new(Outgoing {
                body,
                activation,
                returned: told,
                held: None,
                ended: Some(ended),
            });
            respond.send(axum::http::Response::from_parts(head, body));
            Ok(Some(body_ended))
        };
        let forwarded = self.call(request, send, forward, UNSET).await;
        // The activation lasts until the body has gone out (or the client went): the
        // component may have returned with the last of it still on its way.
        let ended = match forwarded? {
            Some(body_ended) => {
                returned.set();
                body_ended.await.unwrap_or(Ended::Whole)
            }
            None => Ended::Whole,
        };
        drop(running);
        match ended {
            Ended::Whole => Ok(()),
            Ended::Unfinished => Err(RunError::Exited(Some(UNFINISHED.to_owned()))),
            Ended::Failed(code) => Err(RunError::Exited(Some(component::body_failed(&code)))),
        }
    }

    /// Calls `handle` with the request, and reads its response as the guest writes it (up
    /// to `--max-result-bytes` of body) into the web-action result.
    async fn handle(&mut self, incoming: web::Incoming) -> Result<Bytes, RunError> {
        let mut request = axum::http::Request::builder()
            .method(incoming.method)
            .uri(incoming.path)
            .body(
                http_body_util::Full::new(incoming.body)
                    .map_err(|never| -> wasmtime_wasi_http::Error { match never {} }),
            )
            .map_err(|e| RunError::BadInput(format!("the request cannot be made: {e}")))?;
        *request.headers_mut() = incoming.headers;
        let (send, answer) = tokio::sync::oneshot::channel::<Answer>();
        let read = read_response(answer, self.max_result_bytes);
        let (parts, body) = self.call(request, send, read, UNFINISHED).await?;
        let say = |m: &str| self.stderr.note(m);
        Ok(Bytes::from(web::result(parts.status, &parts.headers, &body, &say)))
    }
}

impl HttpInstance {
    /// Calls `handle` with `request` (its response sent on `send`) while `read` takes that
    /// response: `read`'s answer, or the trap that ended the call. `unfinished` is what
    /// a call that returned without `read` ever finishing is told (see `both`).
    async fn call<B, T>(
        &mut self,
        request: axum::http::Request<B>,
        send: tokio::sync::oneshot::Sender<Answer>,
        read: impl Future<Output = Result<T, RunError>>,
        unfinished: &str,
    ) -> Result<T, RunError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<wasmtime_wasi_http::Error>,
    {
        let mut http = self.store.data_mut().http();
        let (request, out) = http
            .new_incoming_request(Scheme::Http, request)
            .and_then(|request| Ok((request, http.new_response_outparam(send)?)))
            .map_err(|e| RunError::Exited(Some(format!("cannot hand it the request: {e:#}"))))?;
        let _ticking = self.ticker.running();
        let handler = self.proxy.wasi_http_incoming_handler();
        let call = handler.call_handle(&mut self.store, request, out);
        let (called, read) = both(call, read, unfinished).await;
        if let Some(Err(e)) = called {
            self.stdout.flush();
            return Err(RunError::Exited(Some(exit_reason(Err(e), &self.stderr))));
        }
        read
    }
}

/// A component's response body on its way to the client: it tells the activation when
/// it has ended (or the client went away), and fails instead of ending if the activation
/// was cut short first. (wasmtime ends a body whose instance went as if it were whole,
/// and the client could not tell a cut body from a complete one.)
struct Outgoing {
    body: HyperOutgoingBody,
    activation: std::sync::Weak<()>,
    returned: Arc<Returned>,
    /// How it failed, held for one more turn so that what it had may go out first.
    held: Option<(Ended, axum::Error)>,
    ended: Option<tokio::sync::oneshot::Sender<Ended>>,
}

/// How a response body came to its end, as its activation learns it.
enum Ended {
    /// It ended, or the client went away.
    Whole,
    /// `handle` returned with the body neither finished nor dropped.
    Unfinished,
    /// wasmtime failed it: dropped unfinished, or not the length it announced.
    Failed(String),
}

/// Set once `handle` has returned. A body's frames come from the guest's own writes, with
/// no task between: once it has returned, a body that has none ready never ends.
#[derive(Default)]
struct Returned {
    done: std::sync::atomic::AtomicBool,
    waiting: Mutex<Option<std::task::Waker>>,
}

impl Returned {
    fn set(&self) {
        self.done.store(true, Ordering::Release);
        if let Some(waker) = crate::lock(&self.waiting).take() {
            waker.wake();
        }
    }

    /// Whether a body with nothing ready now will never have more; if not yet known, the
    /// caller is woken when it is.
    fn for_good(&self, cx: &std::task::Context<'_>) -> bool {
        *crate::lock(&self.waiting) = Some(cx.waker().clone());
        self.done.load(Ordering::Acquire)
    }
}

impl Outgoing {
    fn end(&mut self, how: Ended) {
        if let Some(ended) = self.ended.take() {
            let _ = ended.send(how);
        }
    }
}

impl Drop for Outgoing {
    fn drop(&mut self) {
        self.end(Ended::Whole);
    }
}

impl http_body::Body for Outgoing {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        if let Some((how, error)) = self.held.take() {
            self.end(how);
            return Poll::Ready(Some(Err(error)));
        }
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        let failed = match polled {
            Poll::Pending if self.returned.for_good(cx) => {
                (Ended::Unfinished, axum::Error::new(UNFINISHED))
            }
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(Ok(frame))) => return Poll::Ready(Some(Ok(frame))),
            Poll::Ready(Some(Err(code))) => {
                let code = format!("{code:?}");
                (Ended::Failed(code.clone()), axum::Error::new(code))
            }
            Poll::Ready(None) if self.activation.strong_count() == 0 => (
                Ended::Whole,
                axum::Error::new("the activation ended before its response did"),
            ),
            Poll::Ready(None) => {
                self.end(Ended::Whole);
                return Poll::Ready(None);
            }
        };
        // Held for one more turn: hyper flushes what it has while the body waits, so what
        // went before may reach the client before the error closes the connection (best
        // effort: a slow client may still leave some of it unsent).
        self.held = Some(failed);
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        false
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Why no response came: the component answered an error, or returned without one.
fn unanswered(failed: Result<Answer, tokio::sync::oneshot::error::RecvError>) -> String {
    match failed {
        Ok(Err(code)) => {
            format!("the component answered with an error instead of a response: {code:?}")
        }
        _ => UNSET.to_owned(),
    }
}

/// What `both` says when the call returned and its response never came to an end.
const UNFINISHED: &str = "the component returned from handle without finishing its response: \
     call outgoing-body.finish (Rust: OutgoingBody::finish) once the body is written";
const UNSET: &str = "the component returned from handle without setting a response: call \
     response-outparam.set (Rust: ResponseOutparam::set) before returning";

/// Runs the call and the reading of its response together (the guest writes its body as
/// it is read, a chunk at a time), until the response is read and the call has returned,
/// or until either fails. `None` for a call cut short by a failed response.
async fn both<C, R, T>(
    call: C,
    read: R,
    unfinished: &str,
) -> (Option<wasmtime::Result<()>>, Result<T, RunError>)
where
    C: Future<Output = wasmtime::Result<()>>,
    R: Future<Output = Result<T, RunError>>,
{
    let (mut call, mut read) = (pin!(call), pin!(read));
    let mut called = None;
    let mut read_result = None;
    // Made only for a call that returned before its response ended: a timer set on every
    // activation wakes the runtime's timer thread each time, a syscall and a context
    // switch per activation.
    let mut grace: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        if called.is_none()
            && let Poll::Ready(result) = call.as_mut().poll(cx)
        {
            called = Some(result);
        }
        if read_result.is_none()
            && let Poll::Ready(result) = read.as_mut().poll(cx)
        {
            read_result = Some(result);
        }
        match (&called, &read_result) {
            (Some(Err(_)), _) | (Some(Ok(())), Some(_)) | (_, Some(Err(_))) => Poll::Ready(()),
            (Some(Ok(())), None) => {
                let grace = grace.get_or_insert_with(|| Box::pin(tokio::time::sleep(AFTER_RETURN)));
                if grace.as_mut().poll(cx).is_ready() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }
            _ => Poll::Pending,
        }
    })
    .await;
    let read = read_result.unwrap_or_else(|| Err(RunError::Exited(Some(unfinished.to_owned()))));
    (called, read)
}

/// The response the guest sets, and its body, up to `max` bytes.
async fn read_response(
    answer: tokio::sync::oneshot::Receiver<Answer>,
    max: usize,
) -> Result<(axum::http::response::Parts, Bytes), RunError> {
    let response = match answer.await {
        Ok(Ok(response)) => response,
        failed => return Err(RunError::Exited(Some(unanswered(failed)))),
    };
    let (parts, body) = response.into_parts();
    Ok((parts, component::read_body(body, max).await?))
}
