//! The backends, listed once (`executor::BACKENDS`): `--backends` takes their names, an upload runs on the first that claims it, and messages about a backend come from its entry.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use super::pool::PoolSize;
pub use super::{BACKENDS, COMMANDS, FLAGS};
use super::{Executor, StartError, StartSpec};
use crate::action::{Entry, Prepared};
use crate::config::Config;

/// What is known of a backend before a runtime makes it: enough for the command line and
/// for the messages naming it.
#[derive(Debug)]
pub struct Registration {
    /// Its name in `--backends` and in messages.
    pub name: &'static str,
    /// What it runs, as a message names it after "a" ("native executable or script").
    pub runs: &'static str,
    /// How an action for it is made, as a message names it after "Build it as" (when
    /// `--backends` refuses an upload, each allowed backend's way is named).
    pub made: &'static str,
    /// Makes it for one runtime. State that backends of one folder share (the wasm
    /// engines) is made once, in `shared`.
    pub make: fn(&Config, &mut Shared) -> Arc<dyn Backend>,
}

/// A backend's start of an action: its first worker, in the pool that runs its activations.
pub type StartFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Arc<dyn Executor>, StartError>> + Send + 'a>>;

/// One way of running actions, made for one runtime and owning what it keeps for it.
pub trait Backend: Send + Sync {
    /// Whether it runs what `/init` unpacked, and how closely its claim fits (`Claim`):
    /// every backend is asked, and the closest claim wins.
    fn claims(&self, entry: &Entry) -> Option<Claim>;

    /// Starts the action it claimed.
    fn start<'a>(
        &'a self,
        prepared: &'a Prepared,
        spec: StartSpec,
        config: &'a Config,
        size: PoolSize,
    ) -> StartFuture<'a>;

    /// Makes what the first `/init` would otherwise wait for: called on a blocking
    /// thread before the server accepts, for the backends `--backends` allows. A failure
    /// is the first `/init`'s to report (and to try again).
    fn warm(&self) {}

    /// Which signed artifacts' code it loads without compiling (for the keys its
    /// settings trust).
    fn trust(&self) -> Option<crate::signing::Trust> {
        None
    }

    /// Signs what `/init` unpacked for it, ahead of a server (`-compile --sign-key`): its
    /// precompiled code and the signature beside it, for runtimes that trust `key`. An
    /// action with no code to trust has nothing to sign.
    fn sign(&self, _prepared: &Prepared, _key: &ed25519_dalek::SigningKey) -> anyhow::Result<()> {
        Ok(())
    }
}

/// How closely a backend's claim on an upload fits it. Every backend is asked; the
/// closest claim wins, whatever order the backends are listed in, and two claims that fit
/// equally closely are a mistake in the backends, refused at `/init` naming both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Claim {
    /// Any file it can start (the native backend: any executable or script).
    AnyFile,
    /// The file's format (a WebAssembly module; a component).
    Format,
    /// What the format holds (a component exporting wasi:http's handler and no
    /// `wasi:cli/run`).
    Contents,
}

/// What the backends of one runtime are made with besides its settings: state the
/// backends of one folder share, one value per type, made by the first backend that asks;
/// and the runtime's metrics, where each counts what it does.
#[derive(Default)]
pub struct Shared {
    made: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Shared {
    pub fn get_or_make<T: Any + Send + Sync>(&mut self, make: impl FnOnce() -> T) -> Arc<T> {
        let value = self
            .made
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(make()))
            .clone();
        value
            .downcast::<T>()
            .unwrap_or_else(|_| unreachable!("stored under its own type id"))
    }
}

/// A backend folder's own flags, as it declares them: `serve` and `run` take them
/// (through `BackendArgs`), and they fill the folder's settings in `Config::backends`.
pub struct Flags {
    /// Adds them to a command (their `clap::Args::augment_args`).
    pub declare: fn(clap::Command) -> clap::Command,
    /// Reads what they were given into the folder's settings; `trusting` false skips what
    /// reads files to trust (keys), which `-compile`, only packing an upload, never needs.
    pub read: fn(&clap::ArgMatches, &mut crate::config::Backends, bool) -> anyhow::Result<()>,
}

/// Every folder's flags (`FLAGS`), for `serve` and `run` to flatten: the command line
/// names no backend's type.
#[derive(Debug, Clone)]
pub struct BackendArgs(clap::ArgMatches);

impl clap::Args for BackendArgs {
    fn augment_args(command: clap::Command) -> clap::Command {
        FLAGS
            .iter()
            .fold(command, |command, flags| (flags.declare)(command))
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

impl clap::FromArgMatches for BackendArgs {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(BackendArgs(matches.clone()))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.0 = matches.clone();
        Ok(())
    }
}

impl BackendArgs {
    /// Each folder's settings, as its flags say; fails on a trusted key that cannot be
    /// read (skipped unless `trusting`).
    pub fn read(
        &self,
        backends: &mut crate::config::Backends,
        trusting: bool,
    ) -> anyhow::Result<()> {
        FLAGS
            .iter()
            .try_for_each(|flags| (flags.read)(&self.0, backends, trusting))
    }
}

/// A subcommand of a backend folder's own (`wasmloop compile`), which the command line
/// takes through `BackendCommand` without naming the folder.
pub struct Subcommand {
    pub name: &'static str,
    /// The subcommand, its about text and its flags.
    pub declare: fn() -> clap::Command,
    /// Does its job with what it was given (it may end the process itself).
    pub run: fn(&clap::ArgMatches) -> anyhow::Result<()>,
}

/// One of `COMMANDS`, as given: its entry and its flags.
#[derive(Clone)]
pub struct BackendCommand(&'static Subcommand, clap::ArgMatches);

impl std::fmt::Debug for BackendCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BackendCommand").field(&self.0.name).finish()
    }
}

impl BackendCommand {
    pub fn run(&self) -> anyhow::Result<()> {
        (self.0.run)(&self.1)
    }
}

impl clap::Subcommand for BackendCommand {
    fn augment_subcommands(command: clap::Command) -> clap::Command {
        COMMANDS
            .iter()
            .fold(command, |command, sub| command.subcommand((sub.declare)()))
    }

    fn augment_subcommands_for_update(command: clap::Command) -> clap::Command {
        Self::augment_subcommands(command)
    }

    fn has_subcommand(name: &str) -> bool {
        COMMANDS.iter().any(|sub| sub.name == name)
    }
}

impl clap::FromArgMatches for BackendCommand {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let found = matches.subcommand().and_then(|(name, given)| {
            let sub = COMMANDS.iter().find(|sub| sub.name == name)?;
            Some(BackendCommand(sub, given.clone()))
        });
        found.ok_or_else(|| clap::Error::new(clap::error::ErrorKind::MissingSubcommand))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// A backend's name, as `--backends` parses it: one of `BACKENDS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendName(pub &'static str);

impl std::fmt::Display for BackendName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Every backend's name, in order: what `--backends` allows unless told otherwise.
pub fn every_name() -> Vec<BackendName> {
    BACKENDS.iter().map(|b| BackendName(b.name)).collect()
}

/// Parses one name of `--backends`; clap lists the names (and what each runs) on a mistake.
pub fn name_parser() -> impl clap::builder::TypedValueParser<Value = BackendName> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let values = BACKENDS
        .iter()
        .map(|b| PossibleValue::new(b.name).help(b.runs));
    PossibleValuesParser::new(values).map(|name| {
        let found = BACKENDS.iter().find(|b| b.name == name);
        BackendName(found.map_or("", |b| b.name))
    })
}

/// A backend made for one runtime, with its registration.
type Made = (&'static Registration, Arc<dyn Backend>);

/// The backends of one runtime, made from its settings.
pub struct Registry {
    made: Vec<Made>,
    /// The names `--backends` allows.
    allowed: Vec<&'static str>,
}

impl Registry {
    /// Makes every registered backend (each makes little until it is warmed or used):
    /// one that `--backends` leaves out still tells what it would have claimed.
    pub fn new(config: &Config, metrics: Option<Arc<crate::metrics::Metrics>>) -> Registry {
        Registry::with_backends(config, metrics, &[])
    }

    /// The registered backends and `more` (a program that embeds the runtime, or a test,
    /// adds its own this way: a `Registration` and its `Backend`, nothing else).
    pub fn with_backends(
        config: &Config,
        metrics: Option<Arc<crate::metrics::Metrics>>,
        more: &[&'static Registration],
    ) -> Registry {
        let mut shared = Shared {
            made: HashMap::new(),
            metrics,
        };
        let made: Vec<_> = BACKENDS
            .iter()
            .chain(more.iter().copied())
            .map(|registration| (registration, (registration.make)(config, &mut shared)))
            .collect();
        let allowed = match &config.action.backends {
            Some(names) => names.clone(),
            None => made.iter().map(|(b, _)| b.name).collect(),
        };
        Registry { made, allowed }
    }

    fn allowed(&self) -> impl Iterator<Item = &Arc<dyn Backend>> {
        self.made
            .iter()
            .filter(|(r, _)| self.allowed.contains(&r.name))
            .map(|(_, backend)| backend)
    }

    /// Warms the allowed backends, each on a blocking thread.
    pub async fn warm(&self) {
        let warming: Vec<_> = self
            .allowed()
            .cloned()
            .map(|backend| tokio::task::spawn_blocking(move || backend.warm()))
            .collect();
        for backend in warming {
            let _ = backend.await;
        }
    }

    /// Which signed artifacts' code this runtime loads: the first allowed backend's that
    /// loads any.
    pub fn trust(&self) -> Option<crate::signing::Trust> {
        self.allowed().find_map(|backend| backend.trust())
    }

    /// Signs what `/init` unpacked (`Backend::sign`), by the backend that claims it.
    pub fn sign(&self, prepared: &Prepared, key: &ed25519_dalek::SigningKey) -> anyhow::Result<()> {
        match self.claimant(&prepared.entry) {
            Ok(Some((_, backend))) => backend.sign(prepared, key),
            Ok(None) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Starts the action `/init` unpacked on the backend that claims it, if `--backends`
    /// allows that one; with that backend's name.
    pub async fn start(
        &self,
        prepared: &Prepared,
        spec: StartSpec,
        config: &Config,
    ) -> Result<(&'static str, Arc<dyn Executor>), StartError> {
        if let Some(expected) = &config.action.execution_env {
            check_execution_env(&prepared.bin_dir, expected)?;
        }
        let Some((registration, backend)) = self.claimant(&prepared.entry)? else {
            return Err(StartError::Unsupported(
                "no backend runs this upload".to_owned(),
            ));
        };
        if !self.allowed.contains(&registration.name) {
            return Err(StartError::BackendNotAllowed {
                found: registration,
                allowed: self.allowed.clone(),
            });
        }
        let size = PoolSize {
            workers: config.pool.concurrency,
            max_waiting: config.pool.max_queue,
            max_activations: std::num::NonZeroU32::new(config.pool.max_activations_per_instance),
            recycle_above: config.pool.recycle_above_memory,
        };
        let executor = backend.start(prepared, spec, config, size).await?;
        Ok((registration.name, executor))
    }
}

impl Registry {
    /// The backend whose claim on `entry` fits closest (`Claim`). Asked of every backend,
    /// from the file, before anything runs (or its WebAssembly is compiled): a refused
    /// upload costs a few header reads.
    fn claimant(&self, entry: &Entry) -> Result<Option<&Made>, StartError> {
        let claims: Vec<_> = self
            .made
            .iter()
            .filter_map(|made| Some((made.1.claims(entry)?, made)))
            .collect();
        let Some(closest) = claims.iter().map(|(claim, ..)| *claim).max() else {
            return Ok(None);
        };
        let mut closest = claims.into_iter().filter(|(claim, ..)| *claim == closest);
        let Some((_, made)) = closest.next() else {
            return Ok(None);
        };
        if let Some((_, (other, _))) = closest.next() {
            return Err(StartError::Unsupported(format!(
                "the {} and {} backends both claim this upload, equally closely: a mistake in \
                 their claims (each must claim only what it alone runs, or claim it more or \
                 less closely than the other)",
                made.0.name, other.name
            )));
        }
        Ok(Some(made))
    }
}

/// `OW_EXECUTION_ENV`: the action must have been built for this runtime image.
fn check_execution_env(bin_dir: &Path, expected: &str) -> Result<(), StartError> {
    let path = bin_dir.join("exec.env");
    let actual = std::fs::read_to_string(&path)
        .map_err(|source| StartError::ExecEnvUnreadable { path, source })?;
    if actual.trim() != expected {
        let newline = if actual.ends_with('\n') { "" } else { "\n" };
        let mut out = std::io::stdout().lock();
        let _ = std::io::Write::write_all(
            &mut out,
            format!(
                "Expected exec.env should start with {expected}\nActual value: {actual}{newline}"
            )
            .as_bytes(),
        );
        let _ = std::io::Write::flush(&mut out);
        return Err(StartError::ExecEnvMismatch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_have_distinct_names_and_say_what_they_run() {
        let mut names: Vec<&str> = BACKENDS.iter().map(|b| b.name).collect();
        assert_eq!(names, ["http", "http-p3", "wasm", "component", "native"]);
        names.sort();
        names.dedup();
        assert_eq!(names.len(), BACKENDS.len());
        assert!(
            BACKENDS
                .iter()
                .all(|b| !b.runs.is_empty() && !b.made.is_empty())
        );
    }

    #[test]
    fn backends_of_one_folder_share_what_it_keeps() {
        let mut shared = Shared::default();
        let made = shared.get_or_make(|| 1_u32);
        let again = shared.get_or_make(|| 2_u32);
        assert!(Arc::ptr_eq(&made, &again));
        assert_eq!(*shared.get_or_make(|| "text"), "text");
    }
}
