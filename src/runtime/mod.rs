//! The action slot: one `/init` fills it, every `/run` activates what it holds.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::action::{self, Prepared, Upload};
use crate::config::Config;
use crate::error::Error;
use crate::executor::{self, StartSpec};
use crate::protocol::{self, InitRequest};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::error::MSG_BUILT_IN;

mod activation;

pub use activation::{Action, Answered, Input};

/// What an `/init` asks for: the action's code, its entry point name and the environment
/// it adds.
pub struct Init {
    pub code: Code,
    pub main: String,
    pub env: Vec<(String, String)>,
    /// The action's name, if the `/init` gave one: what a failed start is logged under.
    pub name: Option<String>,
}

/// Where an action's code comes from.
pub enum Code {
    /// Uploaded (decoded): unpacked into a folder of its own.
    Upload(bytes::Bytes),
    /// A file of the image's (`--action`): run where it lies when it runs as it is (see
    /// `action::in_place`), else unpacked as an upload.
    File(std::path::PathBuf),
}

impl Init {
    /// docs/protocol.md 1.2 steps 2, 3, 5 and 6: the body's shape, its code, `main` and
    /// the base64.
    pub fn parse(mut body: bytes::BytesMut) -> Result<Init, Error> {
        let request: InitRequest =
            serde_json::from_slice(&body).map_err(|e| Error::BadRequest(e.to_string()))?;
        let value = request.value.unwrap_or_default();
        let code = value
            .code
            .map(|code| code.0)
            .filter(|c| !c.is_empty())
            .ok_or(Error::MissingCode)?;
        let env = value
            .env
            .as_ref()
            .map(protocol::env_pairs)
            .unwrap_or_default();
        let main = value
            .main
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| crate::config::DEFAULT_MAIN.to_owned());
        let binary = value.binary.unwrap_or(false);
        let name = value.name.filter(|n| !n.is_empty());
        // The code's text alone, where it lies in the body unless it had escapes: it is
        // decoded over itself.
        let mut code = match code {
            std::borrow::Cow::Borrowed(text) => {
                let start = text.as_ptr() as usize - body.as_ptr() as usize;
                let end = start + text.len();
                body.truncate(end);
                body.split_off(start)
            }
            std::borrow::Cow::Owned(text) => bytes::Bytes::from(text.into_bytes()).into(),
        };
        let length = action::decode::decode_code(&mut code, binary).map_err(Error::BadBase64)?;
        code.truncate(length);
        Ok(Init {
            code: Code::Upload(code.freeze()),
            main,
            env,
            name,
        })
    }
}

/// The settings of one /init whose `__OW_DEADLINE` comes before its own limits would.
struct InitBound {
    config: Config,
    /// What the deadline left when the /init arrived.
    left: Duration,
}

impl InitBound {
    fn until(deadline: &str, config: &Config) -> Option<InitBound> {
        let deadline = std::time::UNIX_EPOCH + Duration::from_millis(deadline.trim().parse().ok()?);
        let left = deadline.duration_since(std::time::SystemTime::now()).ok()?;
        // Whole milliseconds: they are printed in the error.
        let left = Duration::from_millis(u64::try_from(left.as_millis()).ok()?);
        // A tenth of what is left (at most a second) to answer before the platform gives up.
        let bound = left - (left / 10).min(Duration::from_secs(1));
        if bound >= config.action.compile_timeout && bound >= config.action.ack_timeout {
            return None;
        }
        let mut config = config.clone();
        config.action.compile_timeout = config.action.compile_timeout.min(bound);
        config.action.ack_timeout = config.action.ack_timeout.min(bound);
        Some(InitBound { config, left })
    }
}

pub struct Runtime {
    config: Config,
    /// The backends, made from `config` and kept for the runtime's life (the wasm
    /// engines among what they keep).
    registry: executor::registry::Registry,
    /// Where it counts (`--metrics-listen`), handed down to the backends.
    metrics: Option<Arc<crate::metrics::Metrics>>,
    action: RwLock<Option<Arc<Action>>>,
    /// Serializes `/init`s, so that two at once cannot both succeed.
    init_lock: tokio::sync::Mutex<()>,
    /// Set by SIGTERM: readiness answers 503 (requests are still served, see `drain`).
    unready: AtomicBool,
    /// Set once the drain begins: requests still arriving get 503.
    draining: AtomicBool,
    /// Activations this server made itself (`--protocol http`).
    made: std::sync::atomic::AtomicU64,
    /// `/init`s and `/run`s admitted and not yet answered.
    in_flight: AtomicUsize,
    /// Told when `in_flight` drops to zero while draining.
    idle: tokio::sync::Notify,
}

/// An admitted request; the drain waits for every one of these to go.
pub struct Admitted(Arc<Runtime>);

impl Drop for Admitted {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1
            && self.0.draining.load(Ordering::SeqCst)
        {
            self.0.idle.notify_waiters();
        }
    }
}

impl Runtime {
    /// The runtime for `config`, counting in `metrics` when they are on.
    pub fn new(config: Config, metrics: Option<Arc<crate::metrics::Metrics>>) -> Self {
        Runtime::with_backends(config, metrics, &[])
    }

    /// The runtime with backends of its embedder's besides the registered ones
    /// (`Registry::with_backends`).
    pub fn with_backends(
        config: Config,
        metrics: Option<Arc<crate::metrics::Metrics>>,
        more: &[&'static executor::registry::Registration],
    ) -> Self {
        Runtime {
            registry: executor::registry::Registry::with_backends(&config, metrics.clone(), more),
            metrics,
            config,
            action: RwLock::new(None),
            init_lock: tokio::sync::Mutex::new(()),
            unready: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            made: std::sync::atomic::AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            idle: tokio::sync::Notify::new(),
        }
    }

    /// Lets a request in, unless the runtime is draining. Sequentially consistent, with
    /// `drain`: each stores one flag and then reads the other, which weaker orderings
    /// allow to both miss.
    pub fn admit(self: &Arc<Self>) -> Result<Admitted, Error> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        // Counted before the check: a drain that starts now waits for this request.
        let admitted = Admitted(self.clone());
        if self.draining.load(Ordering::SeqCst) {
            return Err(Error::ShuttingDown);
        }
        Ok(admitted)
    }

    /// A number for the next activation this server makes itself (`--protocol http`),
    /// to make its id from.
    pub fn next_activation(&self) -> u64 {
        self.made.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether it serves activations now: an action is there and it is not stopping (what
    /// the readiness path answers).
    pub fn is_ready(&self) -> bool {
        self.action().is_some() && !self.is_stopping()
    }

    /// Whether it was told to stop (it may still be serving, see `stop_being_ready`).
    pub fn is_stopping(&self) -> bool {
        self.unready.load(Ordering::SeqCst)
    }

    /// From now on readiness answers 503, so that the platform stops sending requests;
    /// those that still come (until its endpoints catch up) are served as before.
    pub fn stop_being_ready(&self) {
        self.unready.store(true, Ordering::SeqCst);
    }

    /// From now on requests get 503 (and readiness too).
    pub fn refuse_new(&self) {
        self.stop_being_ready();
        self.draining.store(true, Ordering::SeqCst);
    }

    /// From now on requests get 503; completes once those admitted before are answered.
    pub async fn drain(&self) {
        self.refuse_new();
        tracing::debug!("draining: new requests get 503 until the activations in flight end");
        loop {
            let idle = self.idle.notified();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Where requests, activations and refusals are counted, when the metrics are on.
    pub fn metrics(&self) -> Option<&Arc<crate::metrics::Metrics>> {
        self.metrics.as_ref()
    }

    pub fn registry(&self) -> &executor::registry::Registry {
        &self.registry
    }

    pub fn action(&self) -> Option<Arc<Action>> {
        self.action
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The action comes with the image (`--action`, installed before the server accepts),
    /// not with an `/init`: `/init`s without code then succeed, as the platform sends them
    /// to such images.
    fn built_in(&self) -> bool {
        self.config.action.built_in.is_some()
    }

    /// docs/protocol.md 1.2 step 1, which comes before the body is even read.
    pub fn refuse_second_init(&self) -> Result<(), Error> {
        // Answered once the body is read: only one without code is accepted.
        if self.built_in() {
            return Ok(());
        }
        if self.action().is_some() && !self.config.action.allow_reinit {
            protocol::log_stderr(self.config.logs.format, protocol::MSG_ALREADY_INITIALIZED);
            return Err(Error::AlreadyInitialized);
        }
        Ok(())
    }

    /// docs/protocol.md 1.2 steps 2-8.
    pub async fn init(&self, body: bytes::BytesMut) -> Result<(), Error> {
        if self.built_in() {
            return match Init::parse(body) {
                Err(Error::MissingCode) => Ok(()),
                // The request is read as usual: malformed JSON is still a 400.
                Err(e @ Error::BadRequest(_)) => Err(e),
                _ => {
                    protocol::log_stderr(self.config.logs.format, MSG_BUILT_IN);
                    Err(Error::BuiltIn)
                }
            };
        }
        let _one_at_a_time = self.init_lock.lock().await;
        self.refuse_second_init()?;
        self.install_locked(Init::parse(body)?).await
    }

    /// Installs an action given as it is, not as an `/init` body (`wasmloop run`).
    pub async fn install(&self, init: Init) -> Result<(), Error> {
        let _one_at_a_time = self.init_lock.lock().await;
        self.refuse_second_init()?;
        self.install_locked(init).await
    }

    /// Steps 4 and 7-8: the environment, then unpack, compile and start.
    async fn install_locked(&self, init: Init) -> Result<(), Error> {
        let Init {
            code,
            main,
            env,
            name,
        } = init;
        let env = executor::action_env(&self.config, &main, env);
        // What the runtime's lines about this action's start go under, in JSON: the
        // platform puts its names (and the first activation's id) in `/init`'s `env`.
        let named = |key: &str| {
            protocol::env_value(&env, key)
                .unwrap_or_default()
                .to_owned()
        };
        let about = crate::logs::Labels {
            activation_id: named("__OW_ACTIVATION_ID"),
            namespace: named("__OW_NAMESPACE"),
            action: protocol::env_value(&env, "__OW_ACTION_NAME")
                .map(str::to_owned)
                .or(name)
                .unwrap_or_default(),
            trace_id: String::new(),
        };
        // The platform gives /init the action's timeout and says when it ends: compiles
        // and start-up waits end a little before, so that the error is ours, not a kill.
        let bounded = protocol::env_value(&env, "__OW_DEADLINE")
            .and_then(|deadline| InitBound::until(deadline, &self.config));
        let config = bounded.as_ref().map_or(&self.config, |b| &b.config);
        let past_deadline = |error: Error| match &bounded {
            Some(bound) if error.is_timeout() => Error::InitDeadline {
                left: humantime::format_duration(bound.left).to_string(),
                source: Box::new(error),
            },
            _ => error,
        };
        let began = std::time::Instant::now();
        let trust = self.registry.trust();
        let counted = |succeeded: bool| {
            if let Some(metrics) = &self.metrics {
                metrics.init(succeeded, began.elapsed());
            }
        };
        let prepared = self
            .prepare(code, &main, &env, config, trust)
            .await
            .map_err(|e| {
                counted(false);
                self.init_failure(&about, past_deadline(Error::Prepare(e)))
            })?;
        tracing::debug!(main, entry = ?prepared.entry, "action unpacked");
        let spec = StartSpec::new(config, env, main, about.clone());
        let (backend, executor) =
            self.registry
                .start(&prepared, spec, config)
                .await
                .map_err(|e| {
                    counted(false);
                    self.init_failure(&about, past_deadline(Error::Start(e)))
                })?;
        counted(true);
        executor.started_in(began.elapsed());
        let action = Arc::new(Action {
            executor,
            metrics: self.metrics.as_ref().map(|m| m.for_action(backend)),
            sentinels: config.logs.sentinels,
            timeout: config.pool.timeout,
            format: config.logs.format,
            grace: (!config.action.one_shot).then_some(config.pool.shutdown_timeout),
            _prepared: prepared,
        });
        // With re-init allowed, the old action (and its children) goes when its last run ends.
        *self.action.write().unwrap_or_else(|e| e.into_inner()) = Some(action);
        Ok(())
    }

    /// The action's folder: `code` unpacked (and compiled) as `config` says, or a file of
    /// the image's run where it lies.
    async fn prepare(
        &self,
        code: Code,
        main: &str,
        env: &[(String, String)],
        config: &Config,
        trust: Option<crate::signing::Trust>,
    ) -> Result<Prepared, action::PrepareError> {
        let bytes = match code {
            Code::Upload(bytes) => bytes,
            Code::File(file) => {
                if let Some(prepared) = action::in_place(&file)? {
                    return Ok(prepared);
                }
                let bytes = tokio::fs::read(&file)
                    .await
                    .map_err(|source| action::PrepareError::Read { path: file, source })?;
                bytes.into()
            }
        };
        action::prepare_as_configured(Upload { bytes, main }, env, config, trust).await
    }

    /// `OW_LOG_INIT_ERROR`: the detail goes to the logs, the client gets a generic message.
    fn init_failure(&self, about: &crate::logs::Labels, error: Error) -> Error {
        if !self.config.logs.log_init_error {
            return error;
        }
        let detail = match &error {
            Error::Start(e) => e.to_string(),
            other => other.to_string(),
        };
        crate::logs::runtime_line(self.config.logs.format, Some(about), &detail);
        if self.config.logs.sentinels {
            protocol::write_sentinels();
        }
        match error {
            Error::Start(_) => Error::StartLogged,
            _ => Error::PrepareLogged,
        }
    }

    /// Stops the action: its children are killed and its instances dropped, also those
    /// busy with an activation (which then answers 503), and its folder is removed once
    /// the last activation has let go of it.
    pub async fn shutdown(&self) {
        let action = self
            .action
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(action) = action {
            action.executor.stop().await;
        }
    }
}
