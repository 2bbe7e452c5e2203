//! One lane into a WASI 0.3 action's instances, the pool's worker: it hands each activation to wasmtime-wasi-http's handler and reads its response, while other lanes' activations share the instance.

use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::time::Instant;
use wasmtime_wasi_http::handler::{
    ExpirationError, InstantiationError, ProxyHandler, Response, TrapOrPanicError,
};
use wasmtime_wasi_http::p3::bindings::ServicePre;
use wasmtime_wasi_http::p3::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::WasiBody;

use super::instances::{Instances, Life, NoSlot, Sharing, Ticket};
use crate::context::Context;
use crate::executor::pool::{Close, Job, Start, Worker};
use crate::executor::wasm::component::{self, ComponentHost};
use crate::executor::wasm::ticker::Ticker;
use crate::executor::wasm::{WasmSpec, exit_reason};
use crate::executor::{HttpRequest, Respond, RunError, StartError};
use crate::logs::Labels;
use crate::web_action as web;

/// A WASI 0.3 component linked, and the handler its activations go through, made with the
/// first lane and shared by all.
pub struct P3Pre {
    pub service: ServicePre<ComponentHost>,
    pub sharing: Sharing,
    pub handler: OnceLock<ProxyHandler<Instances>>,
}

impl Drop for P3Pre {
    /// The handler's instances outlive every handle on it (each waits for requests in a
    /// task of its own): they are told to go with the action.
    fn drop(&mut self) {
        if let Some(handler) = self.handler.get() {
            handler.state().stop();
        }
    }
}

pub struct Lane {
    handler: ProxyHandler<Instances>,
    ticker: Ticker,
    max_result_bytes: usize,
    /// The next activation's labels (`--log-format json`), for its instance's logs.
    labels: Option<Arc<Labels>>,
    /// Its activation's labels, which the runtime's lines about it (its report among them)
    /// go under, whoever shares its instance.
    attribution: crate::logs::Attribution,
    /// The instance of its last activation, whose logs end with it.
    last: Option<Arc<Life>>,
}

/// What a WASI 0.3 HTTP component answers a request line: the runtime gives it `/run`'s
/// values read (`Payload::Value`), never lines.
const VALUES_ONLY: &str = "this action takes requests and web actions' values, not request lines";

/// How long an activation that found every instance full waits before it asks again, if
/// no instance said it had room first.
const RETRY: Duration = Duration::from_millis(5);

impl Worker for Lane {
    type Spec = WasmSpec<P3Pre>;

    async fn start(spec: &Self::Spec, how: Start<'_>) -> Result<Self, StartError> {
        let handler = spec
            .pre
            .handler
            .get_or_init(|| {
                ProxyHandler::new(Instances::new(
                    spec.engine.clone(),
                    spec.pre.service.clone(),
                    spec.start.clone(),
                    spec.env.clone(),
                    spec.preopen.clone(),
                    spec.outbound.clone(),
                    spec.descriptors,
                    spec.pre.sharing,
                ))
            })
            .clone();
        if let Start::Checked = how {
            // `/init` learns now of a component that cannot start: one is made and
            // dropped (the handler makes its own as activations come).
            handler.state().make().await?;
        }
        Ok(Lane {
            handler,
            ticker: spec.engine.ticker.clone(),
            max_result_bytes: spec.start.max_result_bytes,
            labels: None,
            attribution: crate::logs::Attribution::new(spec.start.log_format),
            last: None,
        })
    }

    /// Nothing of it runs between activations: a retired instance is the handler's to drop.
    fn is_alive(&mut self) -> bool {
        true
    }

    fn discard_stray_output(&mut self) -> Option<Bytes> {
        None
    }

    /// Its instance's, which the activations sharing it hold together.
    fn memory_bytes(&mut self) -> Option<u64> {
        let life = self.last.as_ref()?;
        Some(life.memory.load(std::sync::atomic::Ordering::Relaxed) as u64)
    }

    fn attribute(&mut self, labels: Arc<Labels>) {
        self.attribution.set(labels.clone());
        self.labels = Some(labels);
    }

    fn attribution(&self) -> Option<&crate::logs::Attribution> {
        Some(&self.attribution)
    }

    const TAKES_REQUESTS: bool = true;

    /// The handler's instances count themselves (`Instances`).
    const IS_INSTANCE: bool = false;

    /// The guest runs in the handler's task, for every activation in its instance at once.
    const CPU_KNOWN: bool = false;

    async fn activate(&mut self, job: Job) -> Result<Bytes, RunError> {
        // The epoch advances while the activation lasts, its response's body included: a
        // guest that never yields is interrupted, and its deadline can be enforced.
        let _ticking = self.ticker.running();
        match job {
            Job::Value { value, context } => {
                let incoming =
                    web::request(value, &context).map_err(|e| RunError::BadInput(e.0))?;
                let body = http_body_util::Full::new(incoming.body)
                    .map_err(|never| match never {})
                    .boxed_unsync();
                let mut request = axum::http::Request::builder()
                    .method(incoming.method)
                    .uri(incoming.path)
                    .body(body)
                    .map_err(|e| RunError::BadInput(format!("the request cannot be made: {e}")))?;
                *request.headers_mut() = incoming.headers;
                let (ticket, response) = self.call(request, context).await?;
                let (parts, body) = response.into_parts();
                let read = component::read_body(body, self.max_result_bytes).await;
                leave(&ticket);
                let body = read?;
                let say = |m: &str| self.say(m);
                Ok(Bytes::from(web::result(parts.status, &parts.headers, &body, &say)))
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
        match &self.last {
            Some(life) => {
                life.stdout.flush();
                close.write_stdout();
                life.stderr.flush_with(close.stderr_tail());
            }
            None => close.write(),
        }
    }
}

/// Takes the activation out of its instance's: it has ended.
fn leave(ticket: &Arc<Ticket>) {
    if let Some(life) = ticket.life.get() {
        life.leave(ticket);
    }
}

impl Lane {
    /// A line of the runtime's about the activation (`wasmloop: ...`), under its labels.
    fn say(&self, message: &str) {
        self.attribution.say(message);
    }

    /// Serves one request as it came: sends the response's head on `respond` as soon as
    /// there is one, and returns once its body has ended.
    async fn serve(
        &mut self,
        request: HttpRequest,
        context: Arc<Context>,
        respond: Respond,
    ) -> Result<(), RunError> {
        let (mut parts, body) = request.into_parts();
        web::set_context(&mut parts.headers, &context);
        let body = body.map_err(component::intake_error).boxed_unsync();
        let (ticket, response) = self
            .call(axum::http::Request::from_parts(parts, body), context)
            .await?;
        let sent = self.send(response, respond).await;
        leave(&ticket);
        sent
    }

    /// Sends the response on `respond` and waits for its body to end.
    async fn send(&self, response: Response, respond: Respond) -> Result<(), RunError> {
        let (mut head, body) = response.into_parts();
        if !web::RESPONSE_STATUSES.contains(&head.status.as_u16()) {
            let message = format!(
                "the component answered status {}: answer a status from 200 to 599",
                head.status.as_u16()
            );
            self.say(&format!("wasmloop: {message}"));
            respond.send(crate::protocol::json_response(
                axum::http::StatusCode::BAD_GATEWAY,
                crate::protocol::error_body(&message),
            ));
            return Ok(());
        }
        let say = |m: &str| self.say(m);
        web::drop_hop_by_hop(&mut head.headers, &say);
        // Held while the activation runs: a body whose activation was cut short (its
        // deadline, the server stopping) must not end as if it were whole.
        let running = Arc::new(());
        let (ended, body_ended) = tokio::sync::oneshot::channel();
        let body = Watched {
            body,
            activation: Arc::downgrade(&running),
            ended: Some(ended),
        };
        respond.send(axum::http::Response::from_parts(
            head,
            axum::body::Body::new(body),
        ));
        match body_ended.await {
            Ok(Err(failed)) => Err(RunError::Exited(Some(component::body_failed(&failed)))),
            Ok(Ok(())) | Err(_) => Ok(()),
        }
    }

    /// Hands the request to the handler, which gives it to an instance with room (made if
    /// none has and `--concurrency` allows), and waits for the response's head.
    async fn call(
        &mut self,
        mut request: axum::http::Request<WasiBody>,
        context: Arc<Context>,
    ) -> Result<(Arc<Ticket>, Response), RunError> {
        let ticket = Arc::new(Ticket {
            deadline: context.deadline,
            context,
            labels: self.labels.take(),
            life: OnceLock::new(),
        });
        loop {
            let room = self.handler.state().room.clone();
            let mut room = std::pin::pin!(room.notified_owned());
            room.as_mut().enable();
            let handled = self.handler.handle(ticket.clone(), request).await;
            self.last = ticket.life.get().cloned();
            let error = match handled {
                Ok(response) => return Ok((ticket, response)),
                Err(error) => error,
            };
            match error.downcast::<InstantiationError<Arc<Ticket>>>() {
                Ok(refused) if refused.error.is::<NoSlot>() => {
                    request = refused
                        .request
                        .into_inner()
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    tracing::trace!("every instance is busy and none may be made: waiting for room");
                    let _ = tokio::time::timeout(RETRY, room).await;
                }
                Ok(refused) => {
                    return Err(RunError::Exited(Some(format!(
                        "no instance could be made for it: {:#}",
                        refused.error
                    ))));
                }
                Err(error) => {
                    let failed = self.failed(error, &ticket).await;
                    leave(&ticket);
                    return Err(failed);
                }
            }
        }
    }

    /// What an activation whose call failed is told.
    async fn failed(&self, error: wasmtime::Error, ticket: &Ticket) -> RunError {
        let late = ticket.deadline.is_some_and(|at| Instant::now() >= at);
        if late || error.is::<ExpirationError>() {
            return RunError::TimedOut;
        }
        let Some(life) = ticket.life.get() else {
            return RunError::Exited(Some(format!("{error:#}")));
        };
        if error.is::<TrapOrPanicError>() {
            return RunError::Exited(Some(life.why_it_went().await));
        }
        if let Some(code) = error.downcast_ref::<ErrorCode>() {
            return RunError::Exited(Some(format!(
                "the component answered with an error instead of a response: {code:?}"
            )));
        }
        // Its own call trapped: the store is poisoned, and every activation in it fails.
        life.trapped_by(ticket.context.activation_id());
        RunError::Exited(Some(exit_reason(Err(error), &life.stderr)))
    }
}

/// A component's response body on its way to the client: it tells the activation when it
/// has ended (or the client went away), and fails instead of ending if the activation was
/// cut short first.
struct Watched {
    body: WasiBody,
    activation: std::sync::Weak<()>,
    ended: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
}

impl Watched {
    fn end(&mut self, how: Result<(), String>) {
        if let Some(ended) = self.ended.take() {
            let _ = ended.send(how);
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.end(Ok(()));
    }
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        match std::pin::Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(None) if self.activation.strong_count() == 0 => {
                self.end(Ok(()));
                Poll::Ready(Some(Err(axum::Error::new(
                    "the activation ended before its response did",
                ))))
            }
            Poll::Ready(None) => {
                self.end(Ok(()));
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                let failed = format!("{e:?}");
                self.end(Err(failed.clone()));
                Poll::Ready(Some(Err(axum::Error::new(failed))))
            }
            polled => polled.map_err(axum::Error::new),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
