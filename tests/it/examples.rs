//! The examples of native-examples/ and wasm-examples/, as an action author would use them.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::support::{Backend, Server};

const LANGUAGES: [&str; 4] = ["rust", "c", "go", "sh"];

fn built_in(folder: &str, file: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(folder)
        .join("out")
        .join(file);
    assert!(
        path.is_file(),
        "{} is missing: run {folder}/build.sh first (it installs its toolchains if needed)",
        path.display()
    );
    path
}

fn built(file: &str) -> PathBuf {
    built_in("native-examples", file)
}

/// The greeting every hello example gives, and its log line.
pub fn says_hello(server: &Server) {
    server
        .run(json!({"name": "Mike"}))
        .assert(200, "{\"message\":\"Hello, Mike!\"}\n");
    server
        .run(json!({}))
        .assert(200, "{\"message\":\"Hello, Stranger!\"}\n");
    server.wait_stderr("hello: greeting Stranger");
}

/// The stdout of a command that must have succeeded; otherwise the test fails with both
/// of its outputs.
#[track_caller]
/// `wasmloop bench ARGS --out OUT` from the repository's root (where the examples' paths
/// start), with no compile cache.
fn bench_from_root(args: &[&str], out: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(out)
        .env("WASMLOOP_NO_CACHE", "1")
        .output()
        .unwrap()
}

fn succeeded(output: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn every_hello_serves_from_its_zip() {
    for lang in LANGUAGES {
        let server = Server::start().installed(&built(&format!("hello-{lang}.zip")));
        says_hello(&server);
    }
}

#[test]
fn every_hello_acks_when_asked() {
    for lang in LANGUAGES {
        let server = Server::builder()
            .env("OW_WAIT_FOR_ACK", "1")
            .start()
            .installed(&built(&format!("hello-{lang}")));
        says_hello(&server);
    }
}

#[test]
fn every_hello_runs_once_given_its_input_as_an_argument() {
    for lang in LANGUAGES {
        let output = std::process::Command::new(built(&format!("hello-{lang}")))
            .arg(r#"{"name":"Mike"}"#)
            .output()
            .unwrap();
        assert!(output.status.success(), "{lang}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "{\"message\":\"Hello, Mike!\"}\n",
            "{lang}"
        );
    }
}

#[test]
fn every_wasm_hello_serves_through_http() {
    for lang in ["rust", "c", "go"] {
        let server = Server::builder()
            .env("OW_WAIT_FOR_ACK", "1")
            .start()
            .installed(&built_in("wasm-examples", &format!("hello-{lang}.wasm")));
        says_hello(&server);
    }
}

/// A server with the WebAssembly example `file` initialized.
fn serving_wasm_example(file: &str) -> Server {
    Server::start().installed(&built_in("wasm-examples", file))
}

#[test]
fn the_rust_wasm_hello_unescapes_names_and_refuses_a_name_that_is_not_text() {
    let server = serving_wasm_example("hello-rust.wasm");
    server
        .run(json!({"name": "\"Mike\"\n❄"}))
        .assert(200, "{\"message\":\"Hello, \\\"Mike\\\"\\n❄!\"}\n");
    let reply = server.run(json!({"name": 5}));
    assert_eq!(reply.status, 200);
    let error = reply.json()["error"].as_str().unwrap().to_owned();
    assert!(
        error.starts_with("bad request: invalid type: integer `5`, expected a string"),
        "{error}"
    );
    // The instance goes on serving.
    server
        .run(json!({"name": "Mike"}))
        .assert(200, "{\"message\":\"Hello, Mike!\"}\n");
}

#[test]
fn the_markdown_action_renders_and_counts() {
    let server = serving_wasm_example("markdown.wasm");
    let input = json!({"markdown": "| a |\n|---|\n| *b* |", "options": ["tables"]});
    let first = server.run(input.clone()).json();
    assert!(
        first["html"]
            .as_str()
            .unwrap()
            .contains("<td><em>b</em></td>"),
        "{first}"
    );
    assert_eq!(first["rendered"], 1);
    assert_eq!(server.run(input).json()["rendered"], 2);
    let reply = server.run(json!({"markdown": "x", "options": ["nope"]}));
    assert_eq!(reply.json()["error"], "unknown option \"nope\"");
}

#[test]
fn bench_compares_every_row_and_writes_its_table_csv_and_plot() {
    let out = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "wasm-examples/out/hello-rust.wasm",
        "native-examples/out/hello-python.zip",
        "component-examples/out/hello-rust.wasm",
        "component-examples/out/hello-python.wasm",
    ] {
        assert!(
            root.join(file).is_file(),
            "{file} is missing: run the examples' build.sh first"
        );
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .current_dir(root)
        .args([
            "bench",
            "--hits",
            "200",
            "--warmup",
            "20",
            "--connections",
            "2",
        ])
        .args([
            "--rows",
            "wasm,wasm-logs,wasm-fresh,component,component-fresh,pipe,pipe-logs,pipe-fresh,exec,python,\
             python-component,floor,wasm-metrics",
            "--out",
        ])
        .arg(out.path())
        .env("WASMLOOP_NO_CACHE", "1")
        .output()
        .unwrap();
    let stdout = succeeded(&output);
    // The comparison's table: one writer for both.
    let header = stdout.lines().next().unwrap();
    for column in ["variant", "p50@2 µs", "p99@2", "kreq/s@2", "MiB", "err"] {
        assert!(header.contains(column), "{header}");
    }
    let rows = [
        "wasm",
        "wasm-logs",
        "wasm-fresh",
        "component",
        "component-fresh",
        "pipe",
        "pipe-logs",
        "pipe-fresh",
        "exec",
        "python",
        "python-component",
        "floor",
        "wasm-metrics",
    ];
    for row in rows {
        assert!(
            stdout
                .lines()
                .any(|l| l.split_whitespace().next() == Some(row)),
            "no {row} row in {stdout}"
        );
    }
    // And its CSV: every figure of each row.
    let csv = std::fs::read_to_string(out.path().join("bench.csv")).unwrap();
    assert_eq!(csv.lines().count(), 14, "{csv}");
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for line in csv.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        assert!(rows.contains(&cells[0]), "{line}");
        assert_eq!(cells[column("hits")], "200", "{line}");
        assert_eq!(cells[column("errors")], "0", "errors in {line}");
        assert!(
            cells[column("p50_us")].parse::<f64>().unwrap() > 0.0,
            "{line}"
        );
        // The servers bench starts say what they held; the exec row's is bench itself.
        if cells[0] != "exec" {
            let held: f64 = cells[column("rss_after_init_bytes")]
                .parse()
                .unwrap_or_else(|_| panic!("no RSS in {line}"));
            assert!(held > f64::from(1 << 20), "{line}");
        }
        // What each request cost: the server (its children's too, for pipe-fresh's
        // reaped ones) and the client; the exec row's server is bench itself.
        let server = cells[column("server_cpu_us")];
        if cells[0] == "exec" {
            assert_eq!(server, "", "{line}");
        } else {
            assert!(server.parse::<f64>().unwrap() > 0.0, "{line}");
        }
        assert!(
            cells[column("client_cpu_us")].parse::<f64>().unwrap() > 0.0,
            "{line}"
        );
    }
    let svg = std::fs::read_to_string(out.path().join("latency.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("python"),
        "a plot with a legend"
    );
    // On its own, outside the report's page, it carries the page's styles.
    assert!(
        svg.contains("<style>") && svg.contains(".grid"),
        "a styled plot"
    );
}

#[test]
fn bench_sends_the_body_it_is_given_and_says_why_answers_are_wrong() {
    let server = crate::support::Server::with_guest(crate::support::Backend::Wasm, "echo");
    let url = format!("http://{}/run", server.addr);
    let bench = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_wasmloop"))
            .args(["bench", "--hits", "30", "--warmup", "0", "--url", &url])
            .args(extra)
            .output()
            .unwrap()
    };
    let right = bench(&["--body", r#"{"value":{"n":7}}"#, "--expect", r#"{"n":7}"#]);
    let stdout = String::from_utf8_lossy(&right.stdout);
    assert!(right.status.success(), "{stdout}");
    let row = stdout.lines().find(|l| l.starts_with("url")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    // The resident set, unknown for a server bench did not start, then the errors.
    assert_eq!(cells[cells.len() - 4..], ["-", "-", "-", "0"], "{row}");

    let wrong = bench(&["--body", r#"{"value":{"n":7}}"#, "--expect", r#"{"n":8}"#]);
    let stdout = String::from_utf8_lossy(&wrong.stdout);
    assert!(!wrong.status.success(), "{stdout}");
    assert!(
        stdout.contains(
            r#"url: 30 answers were wrong; the first: 200 `{"n":7}`, expected 200 `{"n":8}`. It was sent `{"value":{"n":7}}` (the body given) and had to answer `{"n":8}` (--expect)"#
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("give --body and --expect"), "{stdout}");

    // --out writes the files for a server bench did not start, too.
    let out = tempfile::tempdir().unwrap();
    let written = bench(&["--out", out.path().to_str().unwrap()]);
    assert!(written.status.success());
    assert!(
        std::fs::read_to_string(out.path().join("bench.csv"))
            .unwrap()
            .contains("url")
    );
    assert!(out.path().join("latency.svg").is_file());

    // And the comparison: a wrong answer stops it before anything is measured, quoted,
    // and no report is written as if its figures meant anything.
    let out = tempfile::tempdir().unwrap();
    let compared = bench(&[
        "--compare",
        "--rounds",
        "2",
        "--out",
        out.path().to_str().unwrap(),
        "--body",
        r#"{"value":{"n":7}}"#,
        "--expect",
        r#"{"n":8}"#,
    ]);
    let stderr = String::from_utf8_lossy(&compared.stderr);
    assert!(!compared.status.success(), "{stderr}");
    assert!(
        stderr.contains(r#"the first was 200 `{"n":7}`, expected 200 `{"n":8}`"#)
            && stderr.contains("nothing was measured and no report written"),
        "{stderr}"
    );
    assert!(!out.path().join("report.html").exists());
    assert!(!out.path().join("compare.csv").exists());
}

/// A comparison whose answers are wrong stops at its first answer, before the cold runs:
/// the variant, what it answered and what was expected, and no report.
#[test]
fn bench_stops_a_comparison_at_its_first_wrong_answer() {
    let out = tempfile::tempdir().unwrap();
    let output = bench_from_root(
        &[
            "--wasm",
            "wasm-examples/out/hello-rust.wasm",
            "--body",
            r#"{"value":{"name":"Mike"}}"#,
            "--expect",
            r#"{"no":1}"#,
        ],
        out.path(),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            r#"module cranelift persistent: its first answer was 200 `{"message":"Hello, Mike!"}`, expected 200 `{"no":1}`"#
        ),
        "{stderr}"
    );
    assert!(!out.path().join("report.html").exists());
}

/// The comparison of one action, on a small run: every variant measured, every figure
/// present and sane (not its value), and the report's files written.
#[test]
fn bench_compares_one_action_across_backends_and_writes_its_report() {
    let out = tempfile::tempdir().unwrap();
    let output = bench_from_root(
        &[
            "--compare",
            "--hits",
            "40",
            "--warmup",
            "5",
            "--rounds",
            "4",
            "--cold-runs",
            "2",
            "--concurrency",
            "2",
        ],
        out.path(),
    );
    let stdout = succeeded(&output);
    let labels = [
        "module cranelift persistent",
        "module cranelift fresh",
        "module winch persistent",
        "module winch fresh",
        "component cranelift persistent",
        "component cranelift fresh",
        "component winch persistent",
        "component winch fresh",
        "native persistent",
        "native fresh",
    ];
    for label in labels {
        assert!(stdout.contains(label), "no {label} in the table:\n{stdout}");
    }
    let csv = std::fs::read_to_string(out.path().join("compare.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(
        rows.len(),
        labels.len() * 2,
        "one row per variant and connection count:\n{csv}"
    );
    let number = |row: &[&str], column: &str| -> Option<f64> {
        let at = header
            .iter()
            .position(|h| *h == column)
            .unwrap_or_else(|| panic!("no {column} column"));
        row[at].parse().ok()
    };
    for row in &rows {
        let line = row.join(",");
        let positive = |column: &str| {
            let value = number(row, column).unwrap_or_else(|| panic!("no {column} in {line}"));
            assert!(value > 0.0 && value.is_finite(), "{column} in {line}");
            value
        };
        let p50 = positive("p50_us");
        assert!(positive("p99_us") >= p50, "{line}");
        assert!(positive("max_us") >= p50, "{line}");
        positive("req_s");
        positive("crash_to_answer_ms");
        assert_eq!(number(row, "errors"), Some(0.0), "{line}");
        let label = row[0];
        if label.ends_with("persistent") {
            assert!(positive("rss_after_init_bytes") > 1e6, "{line}");
            if label.starts_with("native") {
                positive("cold_start_ms");
            } else {
                let compiled = positive("cold_compiled_ms");
                // Loading code beats compiling it.
                assert!(positive("cold_cache_ms") < compiled * 2.0, "{line}");
                positive("cold_signed_ms");
            }
        }
    }
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("module cranelift persistent"));
    // The runtime's build, as its build script found it in this checkout.
    if let Some(commit) = option_env!("WASMLOOP_COMMIT") {
        assert!(
            html.contains(&format!("(commit {commit})")),
            "no commit {commit}"
        );
    }
}

/// A `wasmloop new` project is built into every form its language reaches (C: a module and
/// a native executable) and compared; a folder that is no project is told what to give.
#[test]
fn bench_compares_a_projects_source_built_for_each_backend() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("greeter");
    let wasmloop = env!("CARGO_BIN_EXE_wasmloop");
    let made = std::process::Command::new(wasmloop)
        .args(["new", "c"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(made.status.success());
    let out = dir.path().join("report");
    // `bench --compare` over the project, `hits` requests a variant in `rounds` rounds.
    let compare = |hits: &str, warmup: &str, rounds: &str| {
        let mut command = std::process::Command::new(wasmloop);
        command
            .args(["bench", "--compare", "--hits", hits, "--warmup", warmup])
            .args(["--rounds", rounds, "--cold-runs", "1", "--source"])
            .arg(&project);
        command
    };
    let compared = compare("20", "2", "2")
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = succeeded(&compared);
    for label in [
        "module cranelift persistent",
        "module winch fresh",
        "native persistent",
    ] {
        assert!(stdout.contains(label), "no {label}:\n{stdout}");
    }
    assert!(
        !stdout.contains("component "),
        "C reaches no component:\n{stdout}"
    );
    let csv = std::fs::read_to_string(out.join("compare.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 6 * 2, "{csv}");

    // --forms picks among the forms built; a --crash-body that does not crash is said.
    let narrowed = compare("5", "0", "1")
        .args(["--forms", "native"])
        .args(["--crash-body", r#"{"value":{"name":"still here"}}"#])
        .output()
        .unwrap();
    assert!(!narrowed.status.success());
    let said = String::from_utf8_lossy(&narrowed.stderr);
    assert!(
        said.contains("--crash-body did not crash the action: it answered 200"),
        "{said}"
    );
    let narrowed = compare("5", "0", "1")
        .args(["--forms", "native"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&narrowed.stdout);
    assert!(narrowed.status.success(), "{stdout}");
    assert!(
        stdout.contains("native persistent") && !stdout.contains("module "),
        "{stdout}"
    );

    let empty = tempfile::tempdir().unwrap();
    let refused = std::process::Command::new(wasmloop)
        .args(["bench", "--compare", "--source"])
        .arg(empty.path())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("not a project `wasmloop new` makes"),
        "{said}"
    );
}

/// A server that dies before answering bench's set-up gets named, with its exit, instead of
/// bench failing on a bare connection error (or, when it died before accepting, waiting).
/// An action of one's own, given in one form and without `--compare`, is compared as that
/// form alone (its compilers and lifetimes), and the report is written.
#[test]
fn bench_on_a_form_of_ones_own_compares_it_without_being_asked() {
    let out = tempfile::tempdir().unwrap();
    let output = bench_from_root(
        &[
            "--wasm",
            "wasm-examples/out/hello-rust.wasm",
            "--hits",
            "20",
            "--warmup",
            "2",
            "--rounds",
            "2",
            "--cold-runs",
            "1",
            "--concurrency",
            "2",
        ],
        out.path(),
    );
    let stdout = succeeded(&output);
    for label in ["module cranelift persistent", "module winch fresh"] {
        assert!(stdout.contains(label), "no {label} in the table:\n{stdout}");
    }
    assert!(
        !stdout.contains("component") && !stdout.contains("native"),
        "only the form given is compared:\n{stdout}"
    );
    assert!(out.path().join("report.html").is_file());
    // CPU and memory read from the activations' own reports, for every variant.
    let csv = std::fs::read_to_string(out.path().join("compare.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for line in csv.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        let cpu: f64 = cells[column("cpu_us_reported")]
            .parse()
            .unwrap_or_else(|_| panic!("no reported CPU in {line}"));
        assert!(cpu > 0.0, "{line}");
        let memory: u64 = cells[column("instance_memory_bytes_reported")]
            .parse()
            .unwrap_or_else(|_| panic!("no reported memory in {line}"));
        assert!(memory >= 64 * 1024, "a module's linear memory: {line}");
    }
    assert!(
        stdout.lines().next().unwrap().contains("cpu")
            && stdout.contains("activations' own reports"),
        "the table says where its CPU and memory came from:\n{stdout}"
    );
}

#[test]
fn bench_says_why_when_its_server_dies_before_answering() {
    let guest = crate::support::Backend::Wasm.guest("loops_at_start");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args([
            "bench", "--hits", "1", "--warmup", "0", "--rows", "wasm", "--wasm",
        ])
        .arg(&guest)
        // The guest never reads its input, so /init waits this long for it.
        .env("WASMLOOP_ACK_TIMEOUT", "60s")
        .env("WASMLOOP_NO_CACHE", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let server = loop {
        let children =
            std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id()))
                .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            break pid.to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "bench started no server"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Let the /init arrive, then take the server away in the middle of it.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &server])
            .status()
            .unwrap()
            .success()
    );
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("bench still waits on a server that is gone");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("exited (signal: 9") && stderr.contains("before answering /init"),
        "{stderr}"
    );
}

/// `examples/wasmtime_floor`, which `cargo test` builds beside this binary.
fn wasmtime_floor() -> std::process::Command {
    let exe = std::env::current_exe().unwrap();
    let floor = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples")
        .join("wasmtime_floor");
    assert!(
        floor.is_file(),
        "{} is missing: `cargo build --example wasmtime_floor` (`cargo test` without --test builds it)",
        floor.display()
    );
    std::process::Command::new(floor)
}

#[test]
fn the_wasmtime_floor_measures_a_module_fresh_against_persistent() {
    let measured = wasmtime_floor()
        .arg(built_in("wasm-examples", "hello-rust.wasm"))
        .arg("5")
        .output()
        .unwrap();
    let stdout = succeeded(&measured);
    let rounds = stdout
        .lines()
        .filter(|line| {
            line.starts_with("round ")
                && line.contains("; made fresh ")
                && line.contains("; renewed ")
                && line.matches(": +").count() == 2
        })
        .count();
    assert_eq!(rounds, 3, "{stdout}");
}

#[test]
fn the_wasmtime_floor_says_what_to_change_in_its_arguments_and_module() {
    let hello = built_in("wasm-examples", "hello-rust.wasm");
    let silent = Backend::Wasm.guest("no_newline");
    let cases: [(&[&std::ffi::OsStr], &str); 4] = [
        (&[], "usage: wasmtime_floor MODULE.wasm [LINES]"),
        (&["no-such.wasm".as_ref()], "cannot read no-such.wasm"),
        (
            &[hello.as_os_str(), "many".as_ref()],
            "LINES must be a whole number",
        ),
        (
            &[silent.as_os_str(), "2".as_ref()],
            "the module answered 0 of 2 lines: it must answer each line of stdin with one line on stdout",
        ),
    ];
    for (args, message) in cases {
        let failed = wasmtime_floor().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&failed.stderr);
        assert!(!failed.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// wasmtime's CLI for the rows that run `wasmtime serve`: scripts/test.sh installs it
/// (scripts/install-wasmtime.sh) and names it in `WASMTIME`.
fn wasmtime_cli() -> String {
    std::env::var("WASMTIME").unwrap_or_else(|_| "wasmtime".to_owned())
}

#[test]
fn bench_measures_an_http_component_beside_wasmtime_serve_running_the_same_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    let wasmtime = wasmtime_cli();
    let rows = "http,wasmtime-serve,http-fresh,wasmtime-serve-fresh,http-plain,http-plain-fresh,wasm-plain";
    let output = bench_from_root(
        &[
            "--rows",
            rows,
            "--wasmtime",
            &wasmtime,
            "--hits",
            "200",
            "--warmup",
            "20",
            "-c",
            "2",
        ],
        out.path(),
    );
    // Every answer is checked: the web-action result from wasmloop, the greeting itself
    // from wasmtime serve.
    succeeded(&output);
    let csv = std::fs::read_to_string(out.path().join("bench.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for row in rows.split(',') {
        let line = csv
            .lines()
            .find(|l| l.split(',').next() == Some(row))
            .unwrap_or_else(|| panic!("no {row} row in {csv}"));
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells[column("hits")], "200", "{line}");
        assert_eq!(cells[column("errors")], "0", "errors in {line}");
        // Each server's resident set once its action was loaded.
        let held: f64 = cells[column("rss_after_init_bytes")].parse().unwrap();
        assert!(held > f64::from(4 << 20), "{line}");
        // And its CPU per request, the peer's as well as ours.
        let server: f64 = cells[column("server_cpu_us")].parse().unwrap();
        assert!(server > 0.0, "{line}");
    }
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .current_dir(root)
        .args([
            "bench",
            "--rows",
            "wasmtime-serve",
            "--wasmtime",
            "/nonexistent/wasmtime",
        ])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("scripts/install-wasmtime.sh"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

#[test]
fn bench_compares_an_http_component_as_a_form_beside_wasmtime_serve() {
    let out = tempfile::tempdir().unwrap();
    let wasmtime = wasmtime_cli();
    let output = bench_from_root(
        &[
            "--compare",
            "--forms",
            "http",
            "--wasmtime",
            &wasmtime,
            "--hits",
            "40",
            "--warmup",
            "5",
            "--rounds",
            "2",
            "--cold-runs",
            "1",
            "--concurrency",
            "2",
        ],
        out.path(),
    );
    let stdout = succeeded(&output);
    for label in [
        "http cranelift persistent",
        "http cranelift fresh",
        "http winch persistent",
        "http winch fresh",
        "http-plain cranelift persistent",
        "http-plain winch fresh",
        "wasmtime-serve persistent",
        "wasmtime-serve fresh",
    ] {
        assert!(stdout.contains(label), "no {label} in the table:\n{stdout}");
    }
    assert!(
        !stdout.contains("module "),
        "only the forms named:\n{stdout}"
    );
    let csv = std::fs::read_to_string(out.path().join("compare.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let errors = header.iter().position(|h| *h == "errors").unwrap();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let positive = |row: &[&str], name: &str| {
        let value: f64 = row[column(name)]
            .parse()
            .unwrap_or_else(|_| panic!("no {name} in {row:?}"));
        assert!(value > 0.0, "{name} in {row:?}");
    };
    for line in csv.lines().skip(1) {
        let row: Vec<&str> = line.split(',').collect();
        assert_eq!(row[errors], "0", "{line}");
        // /init's cold starts for the /run server; for the plain one and the peer, which
        // take no /init, the time from their start to a first answer, beside each other.
        match row[0] {
            "http cranelift persistent" => positive(&row, "cold_compiled_ms"),
            "http-plain cranelift persistent" | "wasmtime-serve persistent" => {
                for name in ["cold_first_answer", "cold_first_answer_cached"] {
                    positive(&row, &format!("{name}_ms"));
                    positive(&row, &format!("{name}_min_ms"));
                    positive(&row, &format!("{name}_max_ms"));
                }
            }
            _ => {}
        }
    }
    assert!(stdout.contains("cold start, ms"), "{stdout}");
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert!(html.contains("wasmtime-serve persistent"));
}
