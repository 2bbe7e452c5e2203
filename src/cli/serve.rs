//! `wasmloop serve` (and a bare `wasmloop`): where to listen, how requests arrive, the built-in action, and the runtime's groups of flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{NameArgs, RuntimeArgs, parse_listen};
use crate::config::{self, Config};

/// `serve`'s: its `--action-name` names the built-in action, so it needs one.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("action_name", |arg| arg.requires("action")))]
pub struct ServeArgs {
    /// Address and port to listen on, or a port alone for every address [default:
    /// 0.0.0.0:$PORT when PORT is set, as Knative and Cloud Run set it; else 0.0.0.0:8080].
    #[arg(long, env = "WASMLOOP_LISTEN", value_parser = parse_listen)]
    pub listen: Option<SocketAddr>,
    /// How requests reach the action: openwhisk (POST /init, POST /run) or http (every
    /// request on every path goes to the --action as HTTP, for Kubernetes, Knative and
    /// Cloud Run: the request as an OpenWhisk web action's value, its result as the
    /// response). Health at /.well-known/wasmloop/health, readiness at
    /// /.well-known/wasmloop/ready, under both.
    #[arg(long, env = "WASMLOOP_PROTOCOL", value_enum, default_value_t = config::Protocol::OpenWhisk)]
    pub protocol: config::Protocol,
    /// Serve Prometheus metrics at GET /metrics on this address, a listener of its own
    /// (off by default): activations by outcome and their times, inits, instances, the
    /// queue, outbound refusals, compiles and the compile cache.
    #[arg(long, env = "WASMLOOP_METRICS_LISTEN", value_name = "ADDR", value_parser = parse_listen)]
    pub metrics_listen: Option<SocketAddr>,
    /// Serve on this already-listening socket, inherited from a supervisor, instead of --listen.
    #[arg(long, env = "WASMLOOP_LISTEN_FD", value_name = "FD")]
    pub listen_fd: Option<i32>,
    /// An action built into the image: loaded (compiled, started) before the server accepts,
    /// so that the platform's code-less `/init` finds it ready. For images derived `FROM
    /// wasmloop` with the action copied in.
    #[arg(long, env = "WASMLOOP_ACTION", value_name = "FILE")]
    pub action: Option<PathBuf>,
    /// The built-in action's entry point name (as `/init`'s `main`).
    #[arg(
        long,
        env = "WASMLOOP_ACTION_MAIN",
        default_value = config::DEFAULT_MAIN,
        requires = "action"
    )]
    pub action_main: String,
    #[command(flatten)]
    pub name: NameArgs,
    /// Under --protocol http, how long requests are still served after SIGTERM, while the
    /// readiness path answers 503 so that the platform stops routing here; then those in
    /// flight get --shutdown-timeout. Longer than the readiness probe's period times its
    /// failure threshold, plus a few seconds for the endpoints to catch up [default: 15s;
    /// Ctrl-C skips it]. OpenWhisk's protocol has none: its invoker reads a 503 as "place
    /// the activation elsewhere".
    #[arg(long, env = "WASMLOOP_DRAIN_PERIOD", value_parser = humantime::parse_duration)]
    pub drain_period: Option<Duration>,
    /// Threads serving HTTP and running wasm instances [default: --concurrency, at most
    /// one per CPU]. Compiles and file work run on threads of their own.
    #[arg(long, env = "WASMLOOP_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

impl ServeArgs {
    /// The server's settings: every flag resolved (the trusted keys read) in one step.
    /// `debug` is the reference's `-debug`, which also allows more than one `/init`;
    /// `verbose`, like it, asks for the runtime's hints.
    pub fn to_config(&self, debug: bool, verbose: bool) -> anyhow::Result<Config> {
        let mut config = self.runtime.to_config()?;
        config.action.allow_reinit = debug;
        config.logs.hints |= debug || verbose;
        config.action.built_in = self
            .action
            .clone()
            .map(|file| (file, self.action_main.clone()));
        config.action.name = self.name.action_name.clone().or_else(|| {
            let file = self.action.as_deref()?;
            Some(file.file_stem()?.to_string_lossy().into_owned())
        });
        config.protocol = self.protocol;
        if self.protocol == config::Protocol::OpenWhisk
            && self.drain_period.is_some_and(|d| !d.is_zero())
        {
            anyhow::bail!(
                "--drain-period (WASMLOOP_DRAIN_PERIOD) applies under --protocol http only: \
                 under OpenWhisk's protocol a stopping container answers 503 at once, which \
                 tells the invoker to place the activation elsewhere; leave it unset there"
            );
        }
        if self.protocol == config::Protocol::Http {
            if self.action.is_none() {
                anyhow::bail!(
                    "--protocol http serves the action built into the image: give --action FILE \
                     (WASMLOOP_ACTION), the action's file as /init would take it"
                );
            }
            config.pool.concurrency = self.concurrency();
            config.serve_plain_http(
                self.drain_period,
                self.runtime.limits.header_read_timeout.is_some(),
            );
        }
        Ok(config)
    }

    /// Instances (or children) at once: `--concurrency`, or the protocol's default.
    pub fn concurrency(&self) -> usize {
        self.runtime.pool.concurrency.map_or_else(
            || config::default_concurrency(self.protocol, cpus()),
            usize::from,
        )
    }

    /// Where to listen: --listen, else `$PORT` on every address (Knative and Cloud Run set
    /// it), else the reference's :8080.
    pub fn listen_addr(&self) -> anyhow::Result<SocketAddr> {
        listen_addr(self.listen, std::env::var("PORT").ok())
    }

    /// Threads serving HTTP and running instances: `--threads`, or the default for the
    /// concurrency.
    pub fn worker_threads(&self) -> usize {
        self.threads.map_or_else(
            || config::default_threads(self.concurrency(), cpus()),
            usize::from,
        )
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

pub(super) fn listen_addr(
    listen: Option<SocketAddr>,
    port: Option<String>,
) -> anyhow::Result<SocketAddr> {
    if let Some(addr) = listen {
        return Ok(addr);
    }
    let default: SocketAddr = config::DEFAULT_LISTEN
        .parse()
        .expect("the default address is well-formed");
    match port.filter(|p| !p.is_empty()) {
        None => Ok(default),
        Some(port) => {
            let port: u16 = port.trim().parse().map_err(|_| {
                anyhow::anyhow!(
                    "PORT={port:?} is no port number: set it to one (1-65535), or give --listen"
                )
            })?;
            Ok(SocketAddr::new(default.ip(), port))
        }
    }
}
