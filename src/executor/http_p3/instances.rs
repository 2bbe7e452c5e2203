//! The instances of one WASI 0.3 action, as wasmtime-wasi-http's handler keeps them: how each is made, how many activations it takes, and when it is retired (a deadline, a trap, idleness, the action's end).

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;
use wasmtime::StoreContextMut;
use wasmtime::component::GuestTaskId;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::handler::{
    HandlerState, Instance, Proxy, ShouldAccept, WorkerExpiration, WorkerState, WorkerStatus,
};
use wasmtime_wasi_http::p3::bindings::ServicePre;

use crate::context::Context;
use crate::executor::StartSpec;
use crate::executor::wasm::component::{self, ComponentHost};
use crate::executor::wasm::descriptors::Caps;
use crate::executor::wasm::streams::GuestStderr;
use crate::executor::wasm::{WasmEngine, WasmError};
use crate::lock;
use crate::metrics::Made;
use crate::logs::{Attribution, Labels};
use crate::outbound::AllowList;

/// How an action's instances are shared and kept.
#[derive(Debug, Clone, Copy)]
pub struct Sharing {
    /// Activations one instance takes at once.
    pub at_once: usize,
    /// Instances alive at once (`--concurrency`).
    pub instances: usize,
    /// Activations one instance serves in all (`--max-activations-per-instance`).
    pub reuse: Option<NonZeroU32>,
    /// An instance holding more memory than this takes no more activations
    /// (`--recycle-above-memory`).
    pub recycle_above: Option<u64>,
    /// How long an instance with nothing to do is kept.
    pub idle: Option<Duration>,
}

/// One activation as the instance that takes it knows it.
pub struct Ticket {
    pub context: Arc<Context>,
    pub deadline: Option<Instant>,
    /// Its labels, for log lines of an instance that serves one activation at a time.
    pub labels: Option<Arc<Labels>>,
    /// The instance that took it, once one has.
    pub life: OnceLock<Arc<Life>>,
}

/// What an instance shares with the activations it serves: its logs, its memory, which
/// activations are in it, and why it was retired.
pub struct Life {
    pub stdout: GuestStderr,
    pub stderr: GuestStderr,
    pub memory: Arc<AtomicUsize>,
    attribution: Attribution,
    in_flight: Mutex<Vec<Arc<Ticket>>>,
    /// Why it was retired, once it was: what the activations that shared it are told.
    cause: Mutex<Option<String>>,
    /// The activation whose own call trapped, once its activation learnt it.
    culprit: Mutex<Option<String>>,
    /// Set when the action stops: the instance goes, whatever it is doing.
    stop: AtomicBool,
    /// Set once the handler has dropped it, and everyone waiting on it told.
    ended: tokio::sync::watch::Sender<bool>,
    /// Wakes its expiration (`Watch`) when its deadlines or its fate change.
    waker: Mutex<Option<Waker>>,
}

impl Life {
    /// Takes the activation out of those it holds: it has ended. Its expiration learns
    /// it, or it would wait for the deadline it no longer has (not its idle time).
    pub fn leave(&self, ticket: &Arc<Ticket>) {
        lock(&self.in_flight).retain(|held| !Arc::ptr_eq(held, ticket));
        self.wake();
    }

    /// Retires it: it takes no more activations and is dropped at once, its activations
    /// told `cause` (the first cause stands).
    fn retire(&self, cause: String) {
        lock(&self.cause).get_or_insert(cause);
        self.wake();
    }

    fn wake(&self) {
        if let Some(waker) = lock(&self.waker).take() {
            waker.wake();
        }
    }

    /// Whether it was retired.
    fn retired(&self) -> bool {
        self.stop.load(Ordering::Acquire) || lock(&self.cause).is_some()
    }

    /// Names the activation whose own call trapped it.
    pub fn trapped_by(&self, activation: &str) {
        lock(&self.culprit).get_or_insert_with(|| activation.to_owned());
    }

    /// What an activation that was still in it when it went is told, once it has gone
    /// (within a second: the handler drops an instance as soon as it ended).
    pub async fn why_it_went(&self) -> String {
        let mut ended = self.ended.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(1), ended.wait_for(|ended| *ended)).await;
        let cause = lock(&self.cause).clone();
        let culprit = lock(&self.culprit).clone();
        match (cause, culprit) {
            (_, Some(culprit)) => format!(
                "the instance it shared was dropped: activation {} trapped it; new \
                 activations go to a new instance",
                named(&culprit)
            ),
            (Some(cause), None) => format!(
                "the instance it shared was dropped: {cause}; new activations go to a new \
                 instance"
            ),
            (None, None) => "the instance it shared ended before it answered".to_owned(),
        }
    }
}

/// An activation id as messages name it.
fn named(id: &str) -> &str {
    if id.is_empty() { "(no id)" } else { id }
}

/// What every instance of one action is made from, and the instances alive.
pub struct Instances {
    pub engine: Arc<WasmEngine>,
    pub service: ServicePre<ComponentHost>,
    pub start: StartSpec,
    pub env: Arc<[(String, String)]>,
    pub preopen: Option<PathBuf>,
    pub outbound: Arc<AllowList>,
    pub descriptors: Caps,
    pub sharing: Sharing,
    /// One per instance that may be alive.
    slots: Arc<tokio::sync::Semaphore>,
    /// Told when an instance has gone, or takes another activation.
    pub room: Arc<tokio::sync::Notify>,
    live: Mutex<Vec<Weak<Life>>>,
    /// Whether one was made yet: the first is the action's first, the others on demand.
    made_one: AtomicBool,
}

/// No instance may be made now: `--concurrency` of them are alive. The activation waits
/// for room in one of them.
#[derive(Debug, thiserror::Error)]
#[error("every instance the action may have is alive")]
pub struct NoSlot;

impl Instances {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        engine: Arc<WasmEngine>,
        service: ServicePre<ComponentHost>,
        start: StartSpec,
        env: Arc<[(String, String)]>,
        preopen: Option<PathBuf>,
        outbound: Arc<AllowList>,
        descriptors: Caps,
        sharing: Sharing,
    ) -> Instances {
        Instances {
            engine,
            service,
            start,
            env,
            preopen,
            outbound,
            descriptors,
            slots: Arc::new(tokio::sync::Semaphore::new(sharing.instances.max(1))),
            sharing,
            room: Arc::default(),
            live: Mutex::new(Vec::new()),
            made_one: AtomicBool::new(false),
        }
    }

    /// Drops every instance, whatever it is doing: the action is going.
    pub fn stop(&self) {
        for life in lock(&self.live).drain(..).filter_map(|life| life.upgrade()) {
            life.stop.store(true, Ordering::Release);
            life.wake();
        }
    }

    /// A store with the component instantiated in it, and what it shares.
    pub async fn make(&self) -> Result<(wasmtime::Store<ComponentHost>, Proxy, Arc<Life>), WasmError> {
        let start = &self.start;
        let attribution = Attribution::new(start.log_format);
        // Its lines name the action only, unless one activation at a time is in it.
        attribution.set(Arc::new(start.about.clone()));
        let component::HttpStore {
            mut store,
            stdout,
            stderr,
            memory,
            ..
        } = component::http_store(
            &self.engine,
            start,
            &self.env,
            self.preopen.as_ref(),
            &self.outbound,
            self.descriptors,
            attribution.clone(),
        )?;
        let made = {
            let _ticking = self.engine.ticker.running();
            tokio::time::timeout(start.ack_timeout, self.service.instantiate_async(&mut store)).await
        };
        let service = component::instantiated(made, start.ack_timeout, &stderr)?;
        let life = Arc::new(Life {
            stdout,
            stderr,
            memory,
            attribution,
            in_flight: Mutex::new(Vec::new()),
            cause: Mutex::new(None),
            culprit: Mutex::new(None),
            stop: AtomicBool::new(false),
            ended: tokio::sync::watch::Sender::new(false),
            waker: Mutex::new(None),
        });
        Ok((store, Proxy::P3(service), life))
    }
}

impl HandlerState for Instances {
    type StoreData = ComponentHost;
    type WorkerExpiration = Watch;
    type WorkerState = Keeper;

    async fn instantiate(&self) -> wasmtime::Result<Instance<ComponentHost, Watch, Keeper>> {
        // Failing, not waiting: the handler hands this worker a request, which an instance
        // that is alive (and has room again) would never get while it waited here.
        let slot = self.slots.clone().try_acquire_owned().map_err(|_| NoSlot)?;
        let (store, proxy, life) = self.make().await?;
        let metrics = self.engine.metrics.clone();
        if let Some(metrics) = &metrics {
            let first = !self.made_one.swap(true, Ordering::Relaxed);
            metrics.instance_made(if first { Made::First } else { Made::Demand });
            metrics.instances().inc();
        }
        let mut live = lock(&self.live);
        live.retain(|life| life.strong_count() > 0);
        live.push(Arc::downgrade(&life));
        drop(live);
        Ok(Instance {
            store,
            proxy,
            view: <ComponentHost as WasiHttpView>::http,
            expiration: Watch {
                life: life.clone(),
                idle: self.sharing.idle,
                timer: None,
            },
            state: Keeper {
                life,
                sharing: self.sharing,
                fresh: self.start.fresh,
                slot: Some(slot),
                room: self.room.clone(),
                metrics,
            },
        })
    }
}

/// An instance's state as the handler asks it: whether it takes another activation, and
/// what becomes of it when it ends.
pub struct Keeper {
    life: Arc<Life>,
    sharing: Sharing,
    fresh: bool,
    /// Its place among the instances that may be alive, freed when it goes.
    slot: Option<tokio::sync::OwnedSemaphorePermit>,
    room: Arc<tokio::sync::Notify>,
    /// Where it is counted among the instances alive.
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if let Some(metrics) = &self.metrics {
            metrics.instances().dec();
        }
        drop(self.slot.take());
        self.room.notify_waiters();
    }
}

impl WorkerState for Keeper {
    type StoreData = ComponentHost;
    type RequestData = Arc<Ticket>;

    fn should_accept_request(&self, at_once: usize, served: usize) -> ShouldAccept {
        let reuse = self.sharing.reuse.map_or(usize::MAX, |n| n.get() as usize);
        let memory = self.life.memory.load(Ordering::Relaxed) as u64;
        let too_big = self.sharing.recycle_above.is_some_and(|most| memory > most);
        if self.life.retired() || served >= reuse || too_big {
            ShouldAccept::Never
        } else if at_once >= self.sharing.at_once {
            ShouldAccept::No
        } else {
            self.room.notify_waiters();
            ShouldAccept::Yes
        }
    }

    fn on_request_start(
        &self,
        store: StoreContextMut<'_, ComponentHost>,
        ticket: Arc<Ticket>,
        _task: GuestTaskId,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
        let _ = ticket.life.set(self.life.clone());
        if self.sharing.at_once == 1 {
            if let Some(labels) = &ticket.labels {
                self.life.attribution.set(labels.clone());
            }
            if self.fresh {
                store.data().environ.arrive(&ticket.context);
            }
        }
        let deadline = ticket.deadline;
        lock(&self.life.in_flight).push(ticket);
        // Its expiration learns the new deadline.
        self.life.wake();
        match deadline {
            Some(at) => Box::pin(tokio::time::sleep_until(at)),
            None => Box::pin(std::future::pending()),
        }
    }

    fn drop(&self, store: wasmtime::Store<ComponentHost>, result: wasmtime::Result<()>) {
        if let Err(e) = result {
            let ids: Vec<String> = lock(&self.life.in_flight)
                .iter()
                .map(|ticket| named(ticket.context.activation_id()).to_owned())
                .collect();
            let how = crate::executor::wasm::exit_reason(Err(e), &self.life.stderr);
            self.life.retire(format!(
                "it failed while serving activations {} ({how})",
                ids.join(", ")
            ));
        }
        self.life.stdout.flush();
        self.life.stderr.flush();
        drop(store);
        self.life.ended.send_replace(true);
    }
}

/// When an instance is dropped, as the handler polls it outside the store's event loop (a
/// guest that never yields still reaches it at each epoch tick): at once when the action
/// stops or the instance was retired; when an activation in it is past its deadline
/// (then it is retired, naming that activation: wasmtime 48 cannot stop one task in a
/// store); when it has been idle for `idle`.
pub struct Watch {
    life: Arc<Life>,
    idle: Option<Duration>,
    timer: Option<(Instant, Pin<Box<tokio::time::Sleep>>)>,
}

impl WorkerExpiration for Watch {
    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        status: WorkerStatus,
        start: std::time::Instant,
    ) -> Poll<()> {
        *lock(&self.life.waker) = Some(cx.waker().clone());
        loop {
            if self.life.retired() {
                return Poll::Ready(());
            }
            let now = Instant::now();
            let late = lock(&self.life.in_flight)
                .iter()
                .filter_map(|ticket| Some((ticket.deadline?, ticket.context.activation_id().to_owned())))
                .min_by_key(|(at, _)| *at);
            let at = match (late, status, self.idle) {
                (Some((at, id)), _, _) if at <= now => {
                    self.life.retire(format!(
                        "activation {} ran past its deadline, and wasmtime cannot stop one \
                         activation alone",
                        named(&id)
                    ));
                    return Poll::Ready(());
                }
                (Some((at, _)), _, _) => at,
                (None, WorkerStatus::Idle, Some(idle)) => {
                    let at = Instant::from_std(start) + idle;
                    if at <= now {
                        return Poll::Ready(());
                    }
                    at
                }
                (None, _, _) => return Poll::Pending,
            };
            if self.timer.as_ref().is_none_or(|(set, _)| *set != at) {
                self.timer = Some((at, Box::pin(tokio::time::sleep_until(at))));
            }
            let Some((_, timer)) = &mut self.timer else {
                return Poll::Pending;
            };
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}
