//! `wasmloop bench --compare --source DIR`: a `wasmloop new` project built into each form its language reaches, with the language's own tools.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The forms built from a project: (module, component, native), each if its language
/// reaches that backend.
#[derive(Debug, Default)]
pub struct Built {
    pub module: Option<PathBuf>,
    pub component: Option<PathBuf>,
    pub native: Option<PathBuf>,
}

/// Builds `dir` (a project `wasmloop new` made, or one laid out the same way) into `out`.
pub fn build(dir: &Path, out: &Path) -> anyhow::Result<Built> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("--source {}: no such folder", dir.display()))?;
    std::fs::create_dir_all(out)?;
    let has = |file: &str| dir.join(file).is_file();
    if has("Cargo.toml") {
        rust(&dir, out)
    } else if has("go.mod") {
        go(&dir, out)
    } else if has("Makefile") && has("main.c") {
        c(&dir)
    } else if has("app.py") {
        let component = out.join("component.wasm");
        run(Command::new("componentize-py")
            .current_dir(&dir)
            .args(["-d", "wit", "-w", "action", "componentize", "app", "-o"])
            .arg(&component))?;
        Ok(Built {
            component: Some(component),
            ..Built::default()
        })
    } else if has("app.js") {
        let component = out.join("component.wasm");
        run(Command::new("npx")
            .current_dir(&dir)
            .args([
                "componentize-js",
                "app.js",
                "--wit",
                "wit",
                "--world-name",
                "action",
                "-o",
            ])
            .arg(&component))?;
        Ok(Built {
            component: Some(component),
            ..Built::default()
        })
    } else {
        bail!(
            "--source {}: not a project `wasmloop new` makes (it looks for Cargo.toml, go.mod, \
             a Makefile with main.c, app.py or app.js): give the built forms with --wasm, \
             --component and --native instead",
            dir.display()
        )
    }
}

/// One source, three targets; the binary's name is the package's, read from cargo.
fn rust(dir: &Path, out: &Path) -> anyhow::Result<Built> {
    let target_dir = out.join("target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let name = package_name(&dir.join("Cargo.toml"))?;
    let mut built = Built::default();
    for (target, slot, file) in [
        (
            Some("wasm32-wasip1"),
            &mut built.module,
            format!("{name}.wasm"),
        ),
        (
            Some("wasm32-wasip2"),
            &mut built.component,
            format!("{name}.wasm"),
        ),
        (None, &mut built.native, name.clone()),
    ] {
        let mut command = Command::new(&cargo);
        command
            .current_dir(dir)
            .args(["build", "--quiet", "--release", "--target-dir"])
            .arg(&target_dir);
        if let Some(target) = target {
            command.args(["--target", target]);
        }
        run(&mut command)?;
        *slot = Some(
            target_dir
                .join(target.unwrap_or(""))
                .join("release")
                .join(file),
        );
    }
    Ok(built)
}

fn go(dir: &Path, out: &Path) -> anyhow::Result<Built> {
    let (module, native) = (out.join("module.wasm"), out.join("native"));
    for (goos, file) in [(Some("wasip1"), &module), (None, &native)] {
        let mut command = Command::new("go");
        command
            .current_dir(dir)
            .arg("build")
            .arg("-o")
            .arg(file)
            .env("CGO_ENABLED", "0");
        if let Some(goos) = goos {
            // As the template builds it: a reactor, whose start-up the runtime snapshots.
            command
                .env("GOOS", goos)
                .env("GOARCH", "wasm")
                .arg("-buildmode=c-shared");
        }
        command.arg(".");
        run(&mut command)?;
    }
    Ok(Built {
        module: Some(module),
        native: Some(native),
        ..Built::default()
    })
}

/// The template's Makefile: `make wasm native`, the files its `wasm:` and `native:` rules
/// name.
fn c(dir: &Path) -> anyhow::Result<Built> {
    run(Command::new("make")
        .current_dir(dir)
        .args(["--no-print-directory", "wasm", "native"]))?;
    let makefile = std::fs::read_to_string(dir.join("Makefile"))?;
    let output = |rule: &str| {
        makefile
            .lines()
            .find_map(|line| line.strip_prefix(rule))
            .map(|file| dir.join(file.trim()))
            .with_context(|| format!("the Makefile has no `{rule}` rule naming its output"))
    };
    Ok(Built {
        module: Some(output("wasm:")?),
        native: Some(output("native:")?),
        ..Built::default()
    })
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
    let output = command
        .output()
        .with_context(|| format!("cannot run {:?}", command.get_program()))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
