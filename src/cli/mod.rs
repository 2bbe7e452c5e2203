//! The command line: every setting as a flag with an environment twin, turned into a `Config`.

mod groups;
mod run;
mod serve;
mod tools;

use std::ffi::OsString;
use std::net::SocketAddr;

use clap::{Parser, Subcommand};

use crate::executor::registry;
pub use groups::{
    ActivationArgs, LimitArgs, LogArgs, NameArgs, PoolArgs, RuntimeArgs, StartArgs, UploadArgs,
};
pub use run::RunArgs;
pub use serve::ServeArgs;
pub use tools::{KeygenArgs, NewArgs, OwCompileArgs};

#[derive(Debug, Parser)]
#[command(
    name = "wasmloop",
    version,
    about = "Runs OpenWhisk actions (WebAssembly or native executables) behind the ActionLoop protocol",
    long_about = "Runs OpenWhisk actions behind the ActionLoop protocol: POST /init once with the \
                  action's code, then POST /run for each activation. With no subcommand it serves."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Say more, before or after the subcommand: the runtime's own diagnostics on stderr
    /// (RUST_LOG gives finer control), `serve`'s hints, and under `run` what each input cost
    /// (wall time, CPU time, the instance's memory, whether the instance was fresh, reused
    /// or renewed, and the start's time after a cold one).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Diagnostics on stderr, and /init allowed more than once (the reference's `-debug`).
    #[arg(long, global = true, env = "OW_DEBUG", value_parser = clap::builder::FalseyValueParser::new())]
    pub debug: bool,
    /// Which diagnostics to print, as a tracing filter (e.g. `wasmloop=trace`).
    #[arg(long, global = true, env = "RUST_LOG", hide_env_values = true)]
    pub log_filter: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve /init and /run over HTTP (what a bare `wasmloop` does).
    Serve(ServeArgs),
    /// Run an action locally, without HTTP: each input gives one result line on stdout.
    #[command(after_help = RUN_EXIT_STATUS)]
    Run(RunArgs),
    /// The backends' own subcommands (`wasmloop compile`).
    #[command(flatten)]
    Backend(registry::BackendCommand),
    /// Make a key pair for signed artifacts: DIR/sign.key (keep it secret) and
    /// DIR/verify.key (give it to runtimes as --trust-key).
    Keygen(KeygenArgs),
    /// Write a hello action project for a language, with its SDK, into a new folder.
    New(NewArgs),
    /// Compare the backends: the same hello through each, over real HTTP, in one table.
    #[cfg(feature = "bench")]
    Bench(wasmloop_bench::command::Args),
    /// The reference proxy's `-compile MAIN`: read an upload on stdin, unpack and compile it
    /// as /init would (with OW_COMPILER), write a zip of the result on stdout.
    #[command(hide = true)]
    OwCompile(OwCompileArgs),
}

/// `wasmloop run --help`'s last words: what its exit status says.
pub(crate) const RUN_EXIT_STATUS: &str = "Exit status: 0 when every input succeeded; 3 when an answer \
    was an application error (a result with an \"error\" key); 4 when an activation failed \
    (the action exited or trapped, ran out of time, or answered no JSON object or array); 1 \
    when the action could not start or an input was not JSON. When inputs fail in more than \
    one way, the first of 1, 4, 3 wins.";

/// An address to listen on: `HOST:PORT`, or a port alone for every address.
pub(crate) fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    text.parse().map_err(|_| {
        format!("{text:?} is no address to listen on: give HOST:PORT (0.0.0.0:9090 for every address) or a port alone (9090)")
    })
}

pub(crate) fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}

/// The command line, parsed (exiting with clap's message when it is wrong). A bare
/// `wasmloop` serves, so `serve`'s flags are also the top level's; before a subcommand
/// they are refused here, where clap's `args_conflicts_with_subcommands` would also refuse
/// the global flags (`wasmloop -v run`).
pub fn parse(args: Vec<OsString>) -> Cli {
    use clap::{CommandFactory, FromArgMatches, parser::ValueSource};
    let mut command = Cli::command();
    let matches = command.clone().get_matches_from(from_reference_flags(args));
    if let Some((subcommand, _)) = matches.subcommand() {
        let given_before = command.get_arguments().find(|arg| {
            !arg.is_global_set()
                && matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine)
        });
        if let Some(arg) = given_before {
            let flag = arg.get_long().unwrap_or(arg.get_id().as_str());
            command
                .error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!(
                        "--{flag} before `{subcommand}` is a flag of `serve`: give it after \
                         `wasmloop {subcommand}` if that takes it (`wasmloop {subcommand} --help`)"
                    ),
                )
                .exit();
        }
    }
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Rewrites the reference proxy's single-dash flags (`-version`, `-debug`, `-compile MAIN`,
/// `-env JSON`) into ours, so that wasmloop can stand in for its binary in existing images.
pub fn from_reference_flags(args: Vec<OsString>) -> Vec<OsString> {
    let position = |flag: &str| args.iter().position(|a| a == flag);
    let value_after = |flag: &str| position(flag).and_then(|i| args.get(i + 1)).cloned();
    let mut out: Vec<OsString> = args.iter().take(1).cloned().collect();
    if let Some(main) = value_after("-compile") {
        out.push("ow-compile".into());
        out.push(main);
        if let Some(env) = value_after("-env") {
            out.push("--env-json".into());
            out.push(env);
        }
        if position("-debug").is_some() {
            out.push("--debug".into());
        }
        return out;
    }
    out.extend(args.iter().skip(1).map(|arg| match arg.to_str() {
        Some("-version") => "--version".into(),
        Some("-debug") => "--debug".into(),
        _ => arg.clone(),
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serve::listen_addr;
    use std::time::Duration;

    fn rewrite(args: &[&str]) -> Vec<String> {
        from_reference_flags(args.iter().map(OsString::from).collect())
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn serving_threads_follow_the_concurrency_up_to_the_cpus() {
        let threads = |args: &[&str]| {
            let cli = Cli::try_parse_from(["wasmloop", "serve"].iter().chain(args)).unwrap();
            let Some(Command::Serve(serve)) = cli.command else {
                panic!("not serve")
            };
            serve.worker_threads()
        };
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(threads(&[]), 1);
        assert_eq!(threads(&["--concurrency", "500"]), cpus);
        assert_eq!(threads(&["--concurrency", "500", "--threads", "3"]), 3);
        assert!(Cli::try_parse_from(["wasmloop", "serve", "--threads", "0"]).is_err());
    }

    #[test]
    fn hints_are_off_for_the_platform_and_on_for_whoever_asks() {
        let hints = |args: &[&str]| {
            let cli = Cli::try_parse_from(["wasmloop"].iter().chain(args)).unwrap();
            match cli.command {
                Some(Command::Serve(serve)) => serve.to_config(cli.debug, cli.verbose),
                Some(Command::Run(run)) => run.to_config(cli.verbose),
                _ => panic!("neither serve nor run"),
            }
            .unwrap()
            .logs
            .hints
        };
        assert!(!hints(&["serve"]));
        assert!(hints(&["serve", "--hints"]));
        assert!(hints(&["serve", "--debug"]));
        assert!(hints(&["serve", "-v"]));
        assert!(hints(&["serve", "--log-format", "json"]));
        assert!(hints(&["run", "a.wasm"]));
    }

    #[test]
    fn an_address_to_listen_on_may_be_a_port_alone_and_a_wrong_one_says_what_to_give() {
        let addr = serve(&["--listen", "9000", "--metrics-listen", "127.0.0.1:9090"]);
        assert_eq!(addr.listen, Some(SocketAddr::from(([0, 0, 0, 0], 9000))));
        assert_eq!(
            addr.metrics_listen,
            Some(SocketAddr::from(([127, 0, 0, 1], 9090)))
        );
        let wrong = Cli::try_parse_from(["wasmloop", "serve", "--metrics-listen", "localhost"])
            .unwrap_err()
            .to_string();
        assert!(
            wrong.contains("give HOST:PORT (0.0.0.0:9090 for every address) or a port alone"),
            "{wrong}"
        );
    }

    fn serve(args: &[&str]) -> ServeArgs {
        let cli = Cli::try_parse_from(["wasmloop", "serve"].iter().chain(args)).unwrap();
        let Some(Command::Serve(serve)) = cli.command else {
            panic!("not serve")
        };
        serve
    }

    #[test]
    fn plain_http_has_its_own_pool_deadline_and_no_sentinels_unless_told() {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let plain = serve(&["--protocol", "http", "--action", "a.wasm"])
            .to_config(false, false)
            .unwrap();
        assert_eq!(plain.pool.concurrency, 2 * cpus);
        assert_eq!(plain.pool.timeout, Some(Duration::from_secs(60)));
        assert!(!plain.logs.sentinels);
        assert_eq!(
            plain.limits.header_read_timeout,
            Some(Duration::from_secs(30))
        );
        let told = serve(&[
            "--protocol",
            "http",
            "--action",
            "a.wasm",
            "--concurrency",
            "3",
            "--timeout",
            "5s",
            "--header-read-timeout",
            "0",
        ])
        .to_config(false, false)
        .unwrap();
        assert_eq!(told.limits.header_read_timeout, None, "0 is no limit");
        assert_eq!(
            (told.pool.concurrency, told.pool.timeout),
            (3, Some(Duration::from_secs(5)))
        );
        // OpenWhisk's protocol keeps its defaults.
        let openwhisk = serve(&[]).to_config(false, false).unwrap();
        assert_eq!(
            (openwhisk.pool.concurrency, openwhisk.pool.timeout),
            (1, None)
        );
        assert!(openwhisk.logs.sentinels);
        // The invoker keeps its connections open between activations.
        assert_eq!(openwhisk.limits.header_read_timeout, None);
    }

    #[test]
    fn run_has_a_timeout_by_default_and_no_server_flags() {
        let cli = Cli::try_parse_from(["wasmloop", "run", "a.wasm"]).unwrap();
        let Some(Command::Run(run)) = cli.command else {
            panic!("not run")
        };
        let config = run.to_config(cli.verbose).unwrap();
        assert_eq!(config.pool.timeout, Some(Duration::from_secs(30)));
        assert!(!config.logs.reports);
        // -v asks for each input's report before the subcommand as after it.
        for args in [
            ["wasmloop", "-v", "run", "a.wasm"],
            ["wasmloop", "run", "a.wasm", "-v"],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            let Some(Command::Run(run)) = cli.command else {
                panic!("not run")
            };
            assert!(run.to_config(cli.verbose).unwrap().logs.reports, "{args:?}");
        }
        let wasm = config.backends.get::<crate::executor::wasm::WasmSettings>();
        assert_eq!(
            wasm.map(|w| w.compiler),
            Some(crate::executor::wasm::WasmCompiler::Tiered),
            "the wasm folder's flags were read"
        );
        assert!(!config.logs.sentinels);
        assert!(Cli::try_parse_from(["wasmloop", "run", "a.wasm", "--max-queue", "3"]).is_err());
    }

    #[test]
    fn port_is_where_to_listen_unless_listen_says() {
        let given: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(listen_addr(Some(given), Some("7".into())).unwrap(), given);
        assert_eq!(
            listen_addr(None, Some("7000".into())).unwrap().to_string(),
            "0.0.0.0:7000"
        );
        assert_eq!(listen_addr(None, None).unwrap().to_string(), "0.0.0.0:8080");
        assert_eq!(listen_addr(None, Some(String::new())).unwrap().port(), 8080);
        let bad = listen_addr(None, Some("http".into()))
            .unwrap_err()
            .to_string();
        assert!(bad.contains("PORT=\"http\" is no port number"), "{bad}");
    }

    #[test]
    fn the_reference_proxys_flags_become_ours() {
        assert_eq!(rewrite(&["w", "-version"]), ["w", "--version"]);
        assert_eq!(rewrite(&["w", "-debug"]), ["w", "--debug"]);
        assert_eq!(
            rewrite(&["w", "-debug", "-compile", "niam", "-env", "{}"]),
            ["w", "ow-compile", "niam", "--env-json", "{}", "--debug"]
        );
        assert_eq!(
            rewrite(&["w", "serve", "--listen", "0.0.0.0:1"]),
            ["w", "serve", "--listen", "0.0.0.0:1"]
        );
    }
}
