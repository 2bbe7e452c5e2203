//! The action slot: one `/init` fills it, every `/run` activates what it holds.

use std::sync::{Arc, RwLock};

use bytes::Bytes;

use crate::action::{self, Compiler, Limits, Prepared, Upload};
use crate::config::Config;
use crate::error::Error;
use crate::executor::{self, AnyExecutor, Executor, RunError, StartSpec};
use crate::protocol::{self, InitRequest};

/// An initialized action: its executor, and the folder it was unpacked into.
pub struct Action {
    executor: AnyExecutor,
    sentinels: bool,
    _prepared: Prepared,
}

pub struct Runtime {
    config: Config,
    action: RwLock<Option<Arc<Action>>>,
    /// Serializes `/init`s, so that two at once cannot both succeed.
    init_lock: tokio::sync::Mutex<()>,
}

impl Runtime {
    pub fn new(config: Config) -> Self {
        Runtime {
            config,
            action: RwLock::new(None),
            init_lock: tokio::sync::Mutex::new(()),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn action(&self) -> Option<Arc<Action>> {
        self.action
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// PROTOCOL.md 1.2 step 1, which comes before the body is even read.
    pub fn refuse_second_init(&self) -> Result<(), Error> {
        if self.action().is_some() && !self.config.allow_reinit {
            protocol::log_stderr(protocol::MSG_ALREADY_INITIALIZED);
            return Err(Error::AlreadyInitialized);
        }
        Ok(())
    }

    /// PROTOCOL.md 1.2 steps 2-8.
    pub async fn init(&self, body: &[u8]) -> Result<(), Error> {
        let _one_at_a_time = self.init_lock.lock().await;
        self.refuse_second_init()?;
        let request: InitRequest =
            serde_json::from_slice(body).map_err(|e| Error::BadRequest(e.to_string()))?;
        let value = request.value.unwrap_or_default();
        let code = value
            .code
            .filter(|c| !c.is_empty())
            .ok_or(Error::MissingCode)?;
        let init_env = value
            .env
            .as_ref()
            .map(protocol::env_pairs)
            .unwrap_or_default();
        let env = executor::action_env(&self.config, init_env);
        let main = value
            .main
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "main".to_owned());
        let bytes = action::decode::decode_code(&code, value.binary.unwrap_or(false))
            .map_err(Error::BadBase64)?;
        drop(code);

        let config = &self.config;
        let path = std::env::var("PATH").ok();
        let compiler = config.compiler.as_deref().map(|program| Compiler {
            program,
            env: &env,
            path: path.as_deref(),
            timeout: config.compile_timeout,
        });
        let limits = Limits {
            max_entries: config.max_archive_entries,
            max_bytes: config.max_unpacked_bytes,
        };
        let upload = Upload { bytes, main: &main };
        let prepared = action::prepare(upload, &config.action_dir, limits, compiler.as_ref())
            .await
            .map_err(|e| self.init_failure(Error::Prepare(e)))?;
        let spec = StartSpec::new(config, env, main);
        let executor = executor::start(&prepared, spec, config)
            .await
            .map_err(|e| self.init_failure(Error::Start(e)))?;
        let action = Arc::new(Action {
            executor,
            sentinels: config.sentinels,
            _prepared: prepared,
        });
        // With re-init allowed, the old action (and its children) goes when its last run ends.
        *self.action.write().unwrap_or_else(|e| e.into_inner()) = Some(action);
        Ok(())
    }

    /// `OW_LOG_INIT_ERROR`: the detail goes to the logs, the client gets a generic message.
    fn init_failure(&self, error: Error) -> Error {
        if !self.config.log_init_error {
            return error;
        }
        let detail = match &error {
            Error::Start(e) => e.to_string(),
            other => other.to_string(),
        };
        protocol::log_stderr(&detail);
        if self.config.sentinels {
            protocol::write_sentinels();
        }
        match error {
            Error::Start(_) => Error::StartLogged,
            _ => Error::PrepareLogged,
        }
    }

    /// Drops the action, killing its children.
    pub fn shutdown(&self) {
        self.action
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }
}

impl Action {
    /// PROTOCOL.md 1.7 steps 2-7: forward the body, wait for the result, mark the logs' end.
    pub async fn activate(&self, body: &[u8]) -> Result<Bytes, Error> {
        protocol::check_run_body(body).map_err(Error::BadRequest)?;
        let result = self
            .executor
            .run(executor::lines::frame_request(body))
            .await;
        if self.sentinels {
            protocol::write_sentinels();
        }
        let line = result?;
        if !protocol::is_object_or_array(&line) {
            return Err(RunError::NotAnObject.into());
        }
        Ok(line)
    }
}
