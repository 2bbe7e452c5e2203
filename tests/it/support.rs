//! Helpers: build the test actions, start a `wasmloop` process, talk raw HTTP/1.1 to it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

pub const SENTINEL: &str = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX";
/// Generous: this runs on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);

/// The three ways wasmloop runs an action; most tests run against each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Native,
    /// A WASI preview 1 module.
    Wasm,
    /// A WASI 0.2 component: the same test actions, built for wasm32-wasip2.
    Component,
}

/// Defines each test function once and a `#[test]` for it in `native`, `wasm` and
/// `component`.
macro_rules! each_backend {
    ($( $(#[$meta:meta])* fn $name:ident($backend:ident: Backend) $body:block )*) => {
        $( $(#[$meta])* fn $name($backend: crate::support::Backend) $body )*
        mod native {
            $( #[test] fn $name() { super::$name(crate::support::Backend::Native) } )*
        }
        mod wasm {
            $( #[test] fn $name() { super::$name(crate::support::Backend::Wasm) } )*
        }
        mod component {
            $( #[test] fn $name() { super::$name(crate::support::Backend::Component) } )*
        }
    };
}

impl Backend {
    /// A test action of `tests/guest`, built for this backend.
    pub fn guest(self, name: &str) -> PathBuf {
        let path = match self {
            Backend::Native => built_guests(None).join(name),
            Backend::Wasm => built_guests(Some("wasm32-wasip1")).join(format!("{name}.wasm")),
            Backend::Component => built_guests(Some("wasm32-wasip2")).join(format!("{name}.wasm")),
        };
        assert!(
            path.is_file(),
            "no test action {name} in tests/guest/src/bin"
        );
        path
    }

    /// The bytes of a test action, as an /init body.
    pub fn init_guest(self, name: &str) -> Value {
        init_binary(&read(&self.guest(name)))
    }

    /// Where this backend's actions write their results, as wasmloop's messages name it.
    pub fn result_channel(self) -> &'static str {
        match self {
            Backend::Native => "fd 3",
            Backend::Wasm | Backend::Component => "stdout",
        }
    }

    /// The status a guest's `exit(code)` ends with: Rust's std for wasm32-wasip2 exits
    /// through WASI 0.2.0's `exit`, which only tells success from failure.
    pub fn exit_code(self, code: u8) -> u8 {
        match self {
            Backend::Component if code != 0 => 1,
            _ => code,
        }
    }

    /// What the guest's "stdout" log lines look like on the runtime's stdout and stderr:
    /// a WebAssembly guest's stdout carries results, so it logs everything on stderr.
    pub fn split_logs(self, stdout_line: &str, stderr_line: &str) -> (String, String) {
        match self {
            Backend::Native => (stdout_line.to_owned(), stderr_line.to_owned()),
            Backend::Wasm | Backend::Component => {
                (String::new(), format!("{stdout_line}{stderr_line}"))
            }
        }
    }
}

/// Builds tests/guest once per target (native: debug, quick to build; wasm: release,
/// small and quick to compile at /init).
fn built_guests(target: Option<&'static str>) -> PathBuf {
    static BUILT: [OnceLock<PathBuf>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let cell = &BUILT[match target {
        None => 0,
        Some("wasm32-wasip1") => 1,
        Some(_) => 2,
    }];
    cell.get_or_init(|| {
        let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("guest");
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest/Cargo.toml");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let mut command = Command::new(cargo);
        command
            .args(["build", "--quiet", "--locked", "--manifest-path"])
            .arg(&manifest);
        command.arg("--target-dir").arg(&target_dir);
        if let Some(target) = target {
            command.args(["--release", "--target", target]);
        }
        let status = command
            .status()
            .expect("cannot run cargo to build the test actions");
        assert!(
            status.success(),
            "building tests/guest failed{}",
            if target.is_some() {
                " (is the target installed? rustup target add wasm32-wasip1 wasm32-wasip2)"
            } else {
                ""
            }
        );
        match target {
            Some(target) => target_dir.join(target).join("release"),
            None => target_dir.join("debug"),
        }
    })
    .clone()
}

/// The HTTP component of tests/http-guest (a `wasi:http/proxy` world whose request path
/// chooses what it does), built once.
pub fn http_guest() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| built_component("http-guest", "wasmloop_test_http_guest"))
        .clone()
}

/// The WASI 0.3 HTTP component of tests/p3-guest (`wasi:http/service@0.3.0`, its request
/// path choosing what it does), built once.
pub fn p3_guest() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| built_component("p3-guest", "wasmloop_test_p3_guest"))
        .clone()
}

/// The component of tests/dual-guest, which exports both WASI 0.2's and WASI 0.3's HTTP
/// handler, built once.
pub fn dual_guest() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| built_component("dual-guest", "wasmloop_test_dual_guest"))
        .clone()
}

/// The component the crate in tests/`folder` builds for wasm32-wasip2 (`library`.wasm).
fn built_component(folder: &str, library: &str) -> PathBuf {
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(folder);
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(folder)
        .join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "--locked", "--release"])
        .args(["--target", "wasm32-wasip2", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        .status()
        .expect("cannot run cargo to build a test component");
    assert!(
        status.success(),
        "building tests/{folder} failed (is the target installed? rustup target add \
         wasm32-wasip2)"
    );
    target_dir.join(format!("wasm32-wasip2/release/{library}.wasm"))
}

/// A file of tests/fixtures.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Runs `command` (its three standard streams piped) with `stdin` as its input, to its end.
pub fn output_with_input(command: &mut Command, stdin: &str) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

pub fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// An `/init` body for code given as bytes (sent as base64).
pub fn init_binary(bytes: &[u8]) -> Value {
    let code = base64::engine::general_purpose::STANDARD.encode(bytes);
    json!({ "value": { "code": code, "binary": true, "main": "main", "env": null } })
}

/// An `/init` body for code given as text.
pub fn init_text(code: &str) -> Value {
    json!({ "value": { "code": code, "binary": false, "main": "main" } })
}

/// A zip holding `(name, bytes, unix mode)` entries; a mode of `0o120xxx` makes a link to `bytes`.
pub fn zip_of(entries: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    for (name, bytes, mode) in entries {
        let options = zip::write::SimpleFileOptions::default().unix_permissions(*mode & 0o777);
        if mode & 0o170000 == 0o120000 {
            zip.add_symlink(*name, std::str::from_utf8(bytes).unwrap(), options)
                .unwrap();
        } else {
            zip.start_file(*name, options).unwrap();
            zip.write_all(bytes).unwrap();
        }
    }
    zip.finish().unwrap();
    out.into_inner()
}

/// One HTTP answer, with the framing already checked, and the checks tests make of it.
#[derive(Debug)]
pub struct Reply(wasmloop_bench::harness::Reply);

impl std::ops::Deref for Reply {
    type Target = wasmloop_bench::harness::Reply;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }

    /// The `error` text of a JSON error body (panics when there is none).
    pub fn error(&self) -> String {
        match &self.json()["error"] {
            Value::String(text) => text.clone(),
            _ => panic!("no error in the body: {}", self.text()),
        }
    }

    /// Asserts the status and the exact body, which for errors ends with a newline.
    #[track_caller]
    pub fn assert(&self, status: u16, body: &str) {
        assert_eq!((self.status, self.text().as_str()), (status, body));
        if !body.is_empty() {
            assert_eq!(self.header("content-type"), Some("application/json"));
        }
    }

    /// Asserts the status and that the JSON error message contains `part`, for errors
    /// whose full text comes from elsewhere (a parser, wasmtime, the operating system).
    #[track_caller]
    pub fn assert_error(&self, status: u16, part: &str) {
        assert_eq!(self.status, status, "{}", self.text());
        assert!(self.error().contains(part), "{}", self.text());
    }
}

/// Sends one request on a fresh connection and checks that the answer has a
/// `Content-Length` matching its body (the platform needs it) and is not chunked.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Reply {
    let reply = Reply(
        wasmloop_bench::harness::request(addr, method, path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}")),
    );
    assert_eq!(
        reply.header("transfer-encoding"),
        None,
        "answers are never chunked"
    );
    let length = reply
        .header("content-length")
        .expect("every answer has a Content-Length");
    assert_eq!(
        length.parse::<usize>().unwrap(),
        reply.body.len(),
        "Content-Length is exact"
    );
    reply
}

/// What a stream of the runtime printed, gathered on its own thread.
#[derive(Default)]
struct Capture {
    bytes: Mutex<Vec<u8>>,
    grew: Condvar,
}

impl Capture {
    fn gather(self: Arc<Self>, mut from: impl Read + Send + 'static) {
        std::thread::spawn(move || {
            let mut chunk = [0u8; 64 * 1024];
            while let Ok(n @ 1..) = from.read(&mut chunk) {
                self.bytes.lock().unwrap().extend_from_slice(&chunk[..n]);
                self.grew.notify_all();
            }
        });
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes.lock().unwrap()).into_owned()
    }

    fn wait_for(&self, what: &str, count: usize) {
        let deadline = Instant::now() + WAIT;
        let mut bytes = self.bytes.lock().unwrap();
        while String::from_utf8_lossy(&bytes).matches(what).count() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "waited in vain for {count} × {what:?} in:\n{}",
                String::from_utf8_lossy(&bytes)
            );
            bytes = self.grew.wait_timeout(bytes, left).unwrap().0;
        }
    }
}

/// A `wasmloop serve` process on a free loopback port, with its stdout and stderr captured;
/// or, with `WASMLOOP_TEST_IMAGE` set, a container of that image started as OpenWhisk's
/// invoker starts one (scripts/image-test.sh runs the contract cases that way).
pub struct Server {
    pub addr: SocketAddr,
    /// The process, or what follows the container's logs; none for a server in this process.
    child: Option<Mutex<Child>>,
    /// A server running in this test process (`ServerBuilder::start`'s default).
    in_process: Option<InProcess>,
    /// The container's id, when the server is one (`child` then follows its logs).
    container: Option<String>,
    out: Arc<Capture>,
    err: Arc<Capture>,
    pub action_dir: tempfile::TempDir,
}

/// The image the tests run against instead of a local process, if any.
pub fn test_image() -> Option<String> {
    std::env::var("WASMLOOP_TEST_IMAGE")
        .ok()
        .filter(|i| !i.is_empty())
}

/// `docker ARGS`, its stdout trimmed; panics with its stderr if it fails.
pub fn docker(args: &[&str]) -> String {
    let output = Command::new("docker")
        .args(args)
        .output()
        .expect("cannot run docker");
    assert!(
        output.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

pub struct ServerBuilder {
    env: Vec<(String, String)>,
    args: Vec<String>,
    listen_fd: i32,
    nofile: Option<u64>,
    process: bool,
    discard_logs: bool,
}

/// A server run by `wasmloop::server::run` on a thread of the test process, with the
/// settings `wasmloop serve ARGS` resolves to: no process to start, and each server with
/// its own engines. Its logs are the test process's own, so a test that reads them, sets
/// the environment or signals the server asks for a process instead (`process`).
struct InProcess {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcess {
    fn start(args: &[String], action_dir: &Path) -> (InProcess, SocketAddr) {
        use clap::Parser;
        let mut argv = vec!["wasmloop".to_owned(), "serve".to_owned()];
        argv.extend(args.iter().cloned());
        let cli = wasmloop::cli::Cli::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("wasmloop {args:?}: {e}"));
        let Some(wasmloop::cli::Command::Serve(serve)) = cli.command else {
            panic!("wasmloop {args:?} does not serve");
        };
        let mut config = serve
            .to_config(cli.debug, cli.verbose)
            .unwrap_or_else(|e| panic!("wasmloop {args:?}: {e:#}"));
        config.action.dir = action_dir.to_owned();
        // Compile children run the binary: this process is the test's.
        config
            .backends
            .get_mut::<wasmloop::executor::wasm::WasmSettings>()
            .compile_exe = PathBuf::from(env!("CARGO_BIN_EXE_wasmloop"));
        // The test's own stdout: sentinels would only clutter it.
        config.logs.sentinels = false;
        // Dropped, it stops at once (see `InProcess::drop`).
        config.pool.shutdown_timeout = Duration::ZERO;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let threads = serve.worker_threads();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                // Stopped as the invoker removes a container, at once: the runtime's own
                // shutdown with no grace, which stops the action and its children (and
                // any worker being made ahead) before its folder goes.
                let stop = async {
                    let _ = stopped.await;
                    wasmloop::signals::Stop::Interrupt
                };
                wasmloop::server::run(listener, config, None, stop)
                    .await
                    .expect("the server failed");
            });
            runtime.shutdown_background();
        });
        let server = InProcess {
            stop: Some(stop),
            thread: Some(thread),
        };
        (server, addr)
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl ServerBuilder {
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self.process()
    }

    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_owned());
        self
    }

    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Starts it with this open-file limit (soft and hard), as `docker run --ulimit nofile`.
    pub fn nofile(mut self, limit: u64) -> Self {
        self.nofile = Some(limit);
        self.process()
    }

    /// Hands the listening socket down as this descriptor instead of 3.
    pub fn listen_fd(mut self, fd: i32) -> Self {
        self.listen_fd = fd;
        self.process()
    }

    /// A process whose stdout and stderr go to /dev/null, for a test that floods them and
    /// reads neither (it cannot wait for sentinels).
    pub fn discard_logs(mut self) -> Self {
        self.discard_logs = true;
        self.process()
    }

    /// A `wasmloop serve` process (the default), for a test that reads its logs, sets its
    /// environment, signals it or counts its children.
    pub fn process(mut self) -> Self {
        self.process = true;
        self
    }

    /// A server in this test process (see `InProcess`), for a case that looks only at
    /// statuses and bodies; against an image, still a container.
    pub fn in_process(mut self) -> Self {
        self.process = false;
        self
    }

    /// Starts wasmloop on a socket we bind and hand down as its fd 3: it is listening
    /// before the process even starts, so there is no readiness to wait for, and no race
    /// for a free port.
    pub fn start(self) -> Server {
        if let Some(image) = test_image() {
            return self.start_container(&image, &[]);
        }
        let action_dir = tempfile::tempdir().unwrap();
        if !self.process {
            let (in_process, addr) = InProcess::start(&self.args, action_dir.path());
            return Server {
                addr,
                child: None,
                in_process: Some(in_process),
                container: None,
                out: Arc::default(),
                err: Arc::default(),
                action_dir,
            };
        }
        let mut launch =
            wasmloop_bench::harness::Launch::new(env!("CARGO_BIN_EXE_wasmloop"), self.listen_fd);
        if let Some(limit) = self.nofile {
            launch = launch.nofile(limit);
        }
        launch
            .command()
            .args(&self.args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("WASMLOOP_ACTION_DIR", action_dir.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        let logs = || match self.discard_logs {
            true => Stdio::null(),
            false => Stdio::piped(),
        };
        launch.command().stdout(logs()).stderr(logs());
        let (mut child, addr) = launch.spawn().expect("cannot start wasmloop");
        let out = Arc::new(Capture::default());
        let err = Arc::new(Capture::default());
        if let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) {
            out.clone().gather(stdout);
            err.clone().gather(stderr);
        }
        Server {
            addr,
            child: Some(Mutex::new(child)),
            in_process: None,
            container: None,
            out,
            err,
            action_dir,
        }
    }

    /// A container of `image`, run as OpenWhisk's invoker runs one: a memory limit without
    /// swap, two capabilities dropped, the invoker's ulimits, only `__OW_API_HOST` in the
    /// environment, reached on the bridge network's address at port 8080, and the image's
    /// own entry point (`serve` and the builder's arguments as its command). `docker_args`
    /// go before the image (e.g. a different `--memory`).
    pub fn start_container(self, image: &str, docker_args: &[&str]) -> Server {
        let mut run: Vec<String> = [
            "run",
            "-d",
            "--memory",
            "256m",
            "--memory-swap",
            "256m",
            "--cap-drop",
            "NET_RAW",
            "--cap-drop",
            "NET_ADMIN",
            "--ulimit",
            "nofile=1024:1024",
            "--pids-limit",
            "1024",
            "-e",
            "__OW_API_HOST=https://openwhisk.example",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        for (key, value) in &self.env {
            run.extend(["-e".to_owned(), format!("{key}={value}")]);
        }
        run.extend(docker_args.iter().map(|a| a.to_string()));
        run.extend([image.to_owned(), "serve".to_owned()]);
        run.extend(self.args);
        let run: Vec<&str> = run.iter().map(String::as_str).collect();
        let id = docker(&run);
        let ip = docker(&["inspect", "-f", "{{.NetworkSettings.IPAddress}}", &id]);
        let addr: SocketAddr = format!("{ip}:8080").parse().unwrap();
        let mut logs = Command::new("docker")
            .args(["logs", "-f", &id])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot follow the container's logs");
        let out = Arc::new(Capture::default());
        let err = Arc::new(Capture::default());
        out.clone().gather(logs.stdout.take().unwrap());
        err.clone().gather(logs.stderr.take().unwrap());
        let deadline = Instant::now() + WAIT;
        while TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "the container never listened: {}",
                err.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Server {
            addr,
            child: Some(Mutex::new(logs)),
            in_process: None,
            container: Some(id),
            out,
            err,
            action_dir: tempfile::tempdir().unwrap(),
        }
    }
}

impl Server {
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            env: Vec::new(),
            args: Vec::new(),
            listen_fd: 3,
            nofile: None,
            process: true,
            discard_logs: false,
        }
    }

    pub fn start() -> Server {
        Server::builder().start()
    }

    /// A server in this process (see `ServerBuilder::in_process`).
    pub fn in_process() -> Server {
        Server::builder().in_process().start()
    }

    /// A server in this process initialized with one of the test actions.
    pub fn in_process_with_guest(backend: Backend, name: &str) -> Server {
        Server::in_process().initialized_with(backend, name)
    }

    /// A server initialized with one of the test actions.
    pub fn with_guest(backend: Backend, name: &str) -> Server {
        Server::start().initialized_with(backend, name)
    }

    /// This server with one of the test actions installed.
    pub fn initialized_with(self, backend: Backend, name: &str) -> Server {
        self.installed(&backend.guest(name))
    }

    /// This server with the action in `file` installed by an `/init`, as the platform sends
    /// it.
    pub fn installed(self, file: &Path) -> Server {
        self.init(&init_binary(&read(file)))
            .assert(200, "{\"ok\":true}\n");
        self
    }

    pub fn post(&self, path: &str, body: &[u8]) -> Reply {
        http(self.addr, "POST", path, body)
    }

    pub fn init(&self, body: &Value) -> Reply {
        self.post("/init", body.to_string().as_bytes())
    }

    /// `/run` with `{"value": value}`.
    pub fn run(&self, value: Value) -> Reply {
        self.post("/run", json!({ "value": value }).to_string().as_bytes())
    }

    /// Initializes the wasm `grows_memory` guest, checks that it can take 16 MiB, then asks
    /// it for `mib` more: the answer.
    pub fn grow_wasm_guest_by(&self, mib: u64) -> Reply {
        self.init(&Backend::Wasm.init_guest("grows_memory"))
            .assert(200, "{\"ok\":true}\n");
        self.run(json!({"mib": 16}))
            .assert(200, "{\"allocated_mib\":16}\n");
        self.run(json!({ "mib": mib }))
    }

    /// The server's own stdout and stderr, which a server in this process does not have.
    #[track_caller]
    fn logs(&self) -> (&Capture, &Capture) {
        assert!(
            self.in_process.is_none(),
            "this test reads the server's logs: start it with Server::builder().process()"
        );
        (&*self.out, &*self.err)
    }

    #[track_caller]
    pub fn stdout(&self) -> String {
        self.logs().0.text()
    }

    #[track_caller]
    pub fn stderr(&self) -> String {
        self.logs().1.text()
    }

    /// Waits until each stream holds `count` sentinels: they follow the activation's logs.
    #[track_caller]
    pub fn wait_sentinels(&self, count: usize) {
        let (out, err) = self.logs();
        out.wait_for(SENTINEL, count);
        err.wait_for(SENTINEL, count);
    }

    #[track_caller]
    pub fn wait_stderr(&self, what: &str) {
        self.logs().1.wait_for(what, 1);
    }

    #[track_caller]
    pub fn wait_stderr_count(&self, what: &str, count: usize) {
        self.logs().1.wait_for(what, count);
    }

    #[track_caller]
    pub fn wait_stdout(&self, what: &str) {
        self.logs().0.wait_for(what, 1);
    }

    #[track_caller]
    fn child(&self) -> &Mutex<Child> {
        self.child
            .as_ref()
            .expect("this test signals the server: start it with Server::builder().process()")
    }

    #[track_caller]
    pub fn pid(&self) -> u32 {
        assert!(
            self.container.is_none(),
            "a test that signals the process itself cannot run against a container"
        );
        self.child().lock().unwrap().id()
    }

    /// A figure of the server process's `/proc/PID/status`, such as `VmRSS`, in bytes.
    #[track_caller]
    pub fn memory(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in {status}"));
        kib * 1024
    }

    /// The server's resident memory, in bytes.
    #[track_caller]
    pub fn resident(&self) -> u64 {
        self.memory("VmRSS")
    }

    /// Starts the server's resident high-water mark (`VmHWM`) again from its resident memory
    /// now (`/proc/PID/clear_refs`, Linux 4.0), and returns that.
    #[track_caller]
    pub fn reset_high_water(&self) -> u64 {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5")
            .expect("cannot reset the server's memory high-water mark");
        self.resident()
    }

    /// The container's id, when the server runs in one.
    pub fn container(&self) -> Option<&str> {
        self.container.as_deref()
    }

    /// Sends SIGTERM and returns the exit code.
    pub fn terminate(self) -> Option<i32> {
        match &self.container {
            Some(id) => {
                docker(&["kill", "-s", "TERM", id]);
            }
            // SAFETY: kill(2) on our own child's pid.
            None => unsafe {
                libc::kill(self.pid() as i32, libc::SIGTERM);
            },
        }
        self.wait_exit()
    }

    /// Waits for the server to exit and returns its exit code.
    pub fn wait_exit(&self) -> Option<i32> {
        if let Some(id) = &self.container {
            return docker(&["wait", id]).parse().ok();
        }
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child().lock().unwrap().try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "wasmloop did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Counts sentinel lines in a stream and returns the rest of it.
pub fn split_sentinels(stream: &str) -> (usize, String) {
    let count = stream.lines().filter(|l| *l == SENTINEL).count();
    let rest = stream
        .lines()
        .filter(|l| *l != SENTINEL)
        .collect::<Vec<_>>()
        .join("\n");
    (count, rest)
}

impl Drop for Server {
    fn drop(&mut self) {
        // As the invoker removes a container: SIGKILL, whatever it was doing.
        if let Some(id) = &self.container {
            let _ = Command::new("docker").args(["rm", "-f", id]).output();
        }
        if let Some(child) = &mut self.child {
            let child = child.get_mut().unwrap_or_else(|e| e.into_inner());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An HTTP server on loopback, until dropped: for the components that call out.
pub struct HttpServer {
    pub addr: SocketAddr,
}

/// What an `HttpServer` answers to each request.
#[derive(Clone, Copy)]
enum Answer {
    /// This body, whatever was asked.
    Fixed(&'static str),
    /// The request as JSON: its method, path, `x-test` header and body.
    Echo,
}

impl HttpServer {
    /// Answers every request with `body`.
    pub fn start(body: &'static str) -> HttpServer {
        HttpServer::serving(Answer::Fixed(body))
    }

    /// Answers every request with what it was, as JSON.
    pub fn echo() -> HttpServer {
        HttpServer::serving(Answer::Echo)
    }

    fn serving(answer: Answer) -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || answer_http(stream, answer));
            }
        });
        HttpServer { addr }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

fn answer_http(mut stream: TcpStream, answer: Answer) {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let (mut length, mut test_header) = (0, String::new());
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let value = value.trim();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.parse().unwrap_or(0),
                "x-test" => test_header = value.to_owned(),
                _ => {}
            }
        }
        line.clear();
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let (body, kind) = match answer {
        Answer::Fixed(body) => (body.to_owned(), "text/plain"),
        Answer::Echo => {
            let mut parts = request_line.split_whitespace();
            let echoed = json!({
                "method": parts.next(),
                "path": parts.next(),
                "x-test": test_header,
                "body": String::from_utf8_lossy(&body),
            });
            (echoed.to_string(), "application/json")
        }
    };
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}
