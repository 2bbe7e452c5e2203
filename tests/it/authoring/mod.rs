//! `wasmloop new`: each template builds with its language's own tools and answers the hello.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::json;

use crate::support::Server;

mod c;
mod components;
mod go;
mod rust;

const WASMLOOP: &str = env!("CARGO_BIN_EXE_wasmloop");

/// `wasmloop new LANGUAGE` into a fresh folder `name`, each test its own: some builds share
/// their caches, never their sources.
fn new_project(language: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join(name);
    let made = Command::new(WASMLOOP)
        .args(["new", language])
        .arg(&project)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    (dir, project)
}

/// Runs a build `command` in `project`, and returns the action it wrote there. Its output is
/// kept for the failure message, where a tool's complaint explains it.
fn built(command: &mut Command, project: &Path, file: &str) -> PathBuf {
    let output = command
        .current_dir(project)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    project.join(file)
}

/// `wasmloop run FILE ARGS` with one input per line of `inputs`, the activation id fixed so
/// that answers showing it can be compared.
fn wasmloop_run(file: &Path, args: &[&str], inputs: &str) -> Output {
    let mut command = Command::new(WASMLOOP);
    command.arg("run").arg(file).arg("--no-cache");
    // A raw request line carries its own activation id: wasmloop refuses both.
    if !args.contains(&"--raw") {
        command.args(["--activation-id", "abc"]);
    }
    command.args(args);
    crate::support::output_with_input(&mut command, inputs)
}

/// The hello, to Mike and to a stranger, under `wasmloop run ACTION RUN_ARGS` and through an
/// in-process server: the two ways an author meets the action first.
fn says_hello(action: &Path, run_args: &[&str]) {
    let ran = wasmloop_run(action, run_args, "{\"name\":\"Mike\"}\n{}\n");
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        "{\"message\":\"Hello, Mike!\"}\n{\"message\":\"Hello, Stranger!\"}\n",
        "{}: {}",
        action.display(),
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(ran.status.success(), "{}", action.display());
    let server = Server::in_process().installed(action);
    server
        .run(json!({"name": "Mike"}))
        .assert(200, "{\"message\":\"Hello, Mike!\"}\n");
}

#[test]
fn new_never_writes_over_a_folder_with_files_and_lists_its_templates() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("main.rs"), "mine").unwrap();
    let refused = Command::new(WASMLOOP)
        .args(["new", "rust"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("exists and is not empty"), "{said}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("main.rs")).unwrap(),
        "mine"
    );

    let listed = Command::new(WASMLOOP)
        .args(["new", "--list"])
        .output()
        .unwrap();
    assert!(listed.status.success());
    let listed = String::from_utf8_lossy(&listed.stdout);
    // Rust first, as the docs introduce the templates.
    assert!(listed.starts_with("rust: "), "{listed}");
    let mut languages: Vec<&str> = listed
        .lines()
        .map(|line| line.split_once(": ").map_or(line, |(language, _)| language))
        .collect();
    languages.sort_unstable();
    assert_eq!(
        languages,
        [
            "c",
            "go",
            "js",
            "python",
            "rust",
            "rust-http",
            "rust-http-p3"
        ],
        "one line for each template: {listed}"
    );
}

/// `new` names the project once when the folder bears its name, and both when they differ.
#[test]
fn new_says_what_it_made_without_saying_it_twice() {
    let dir = tempfile::tempdir().unwrap();
    let said = |folder: &str| {
        let made = Command::new(WASMLOOP)
            .args(["new", "rust"])
            .arg(dir.path().join(folder))
            .output()
            .unwrap();
        assert!(made.status.success());
        String::from_utf8_lossy(&made.stdout).into_owned()
    };
    let same = said("wordfreq");
    assert!(same.starts_with("made "), "{same}");
    assert!(!same.contains(" in "), "{same}");
    assert!(same.contains("wordfreq: its README.md"), "{same}");
    let other = said("Héllo Wörld");
    assert!(other.starts_with("made hello-world in "), "{other}");
}
