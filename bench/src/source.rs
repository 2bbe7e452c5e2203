//! `wasmloop bench --compare --source DIR`: a `wasmloop new` project built into each form its language reaches, with the language's own tools.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::report::Backend;

/// A project's forms, each built into a file.
type Forms = Vec<(Backend, PathBuf)>;

/// Builds `dir` (a project `wasmloop new` made, or one laid out the same way) into `out`,
/// in each form its language reaches.
pub fn build(dir: &Path, out: &Path) -> anyhow::Result<Forms> {
    let no_folder = || format!("--source {}: no such folder", dir.display());
    let dir = dir.canonicalize().with_context(no_folder)?;
    std::fs::create_dir_all(out)?;
    let has = |file: &str| dir.join(file).is_file();
    // Python and JavaScript reach a component alone, through their componentize tools.
    let component = out.join("component.wasm");
    let componentize = |program: &str, args: &str| -> anyhow::Result<Forms> {
        let args = args.split(' ');
        let mut command = Command::new(program);
        run(command.current_dir(&dir).args(args).arg(&component))?;
        Ok(vec![(Backend::Component, component.clone())])
    };
    let py = "-d wit -w action componentize app -o";
    let js = "componentize-js app.js --wit wit --world-name action -o";
    match () {
        _ if has("Cargo.toml") => rust(&dir, out),
        _ if has("go.mod") => go(&dir, out),
        _ if has("Makefile") && has("main.c") => c(&dir),
        _ if has("app.py") => componentize("componentize-py", py),
        _ if has("app.js") => componentize("npx", js),
        _ => bail!(
            "--source {}: not a project `wasmloop new` makes (it looks for Cargo.toml, go.mod, \
             a Makefile with main.c, app.py or app.js): give the built forms with --wasm, \
             --component and --native instead",
            dir.display()
        ),
    }
}

/// One source, three targets; the binary's name is the package's, read from cargo.
fn rust(dir: &Path, out: &Path) -> anyhow::Result<Forms> {
    let target_dir = out.join("target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let name = package_name(&dir.join("Cargo.toml"))?;
    let wasm = format!("{name}.wasm");
    let targets = [
        (Backend::Module, Some("wasm32-wasip1"), &wasm),
        (Backend::Component, Some("wasm32-wasip2"), &wasm),
        (Backend::Native, None, &name),
    ];
    let built = targets.map(|(backend, target, file)| {
        let mut command = Command::new(&cargo);
        let build = ["build", "--quiet", "--release", "--target-dir"];
        command.current_dir(dir).args(build).arg(&target_dir);
        let target_flag = target.map(|target| ["--target", target]);
        run(command.args(target_flag.iter().flatten()))?;
        let release = target_dir.join(target.unwrap_or("")).join("release");
        Ok((backend, release.join(file)))
    });
    built.into_iter().collect()
}

fn go(dir: &Path, out: &Path) -> anyhow::Result<Forms> {
    let targets = [
        (Backend::Module, Some("wasip1"), "module.wasm"),
        (Backend::Native, None, "native"),
    ];
    let built = targets.map(|(backend, goos, file)| {
        let file = out.join(file);
        let mut command = Command::new("go");
        command.current_dir(dir).args(["build", "-o"]).arg(&file);
        command.env("CGO_ENABLED", "0");
        if let Some(goos) = goos {
            // As the template builds it: a reactor, whose start-up the runtime snapshots.
            command.env("GOOS", goos).env("GOARCH", "wasm");
            command.arg("-buildmode=c-shared");
        }
        run(command.arg("."))?;
        Ok((backend, file))
    });
    built.into_iter().collect()
}

/// The template's Makefile: `make wasm native`, the files its `wasm:` and `native:` rules
/// name.
fn c(dir: &Path) -> anyhow::Result<Forms> {
    let make = ["--no-print-directory", "wasm", "native"];
    run(Command::new("make").current_dir(dir).args(make))?;
    let makefile = std::fs::read_to_string(dir.join("Makefile"))?;
    let output = |backend, rule: &str| {
        let file = makefile.lines().find_map(|line| line.strip_prefix(rule));
        let no_rule = || format!("the Makefile has no `{rule}` rule naming its output");
        Ok((backend, dir.join(file.with_context(no_rule)?.trim())))
    };
    [
        output(Backend::Module, "wasm:"),
        output(Backend::Native, "native:"),
    ]
    .into_iter()
    .collect()
}

/// The `name` of a Cargo.toml's package.
fn package_name(manifest: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(manifest)?;
    let mut in_package = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(value) = line.strip_prefix("name") {
            let value = value.trim_start().trim_start_matches('=').trim();
            return Ok(value.trim_matches('"').to_owned());
        }
    }
    bail!("{} names no package", manifest.display())
}

/// Runs a step (a build, a wasmloop command), failing with its output.
pub(super) fn run(command: &mut Command) -> anyhow::Result<()> {
    let program = command.get_program().to_owned();
    let output = command
        .output()
        .with_context(|| format!("cannot run {program:?}"))?;
    if !output.status.success() {
        let (out, err) = (&output.stdout, &output.stderr);
        let (out, err) = (String::from_utf8_lossy(out), String::from_utf8_lossy(err));
        bail!("{command:?} failed:\n{out}{err}");
    }
    Ok(())
}
