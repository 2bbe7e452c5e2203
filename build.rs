//! Finds the WASI interfaces (WIT) of the wasmtime-wasi-http crate wasmloop is built with, for `wasmloop new` to write into component projects.
//!
//! A Python or JavaScript component is built against WIT files; the ones that match what
//! wasmloop provides are those its own wasmtime-wasi-http crate defines, so they are taken
//! from that crate's source (in cargo's registry) rather than copied into the repository.

use std::path::{Path, PathBuf};

const CRATE: &str = "wasmtime-wasi-http";

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rerun-if-env-changed=CARGO_HOME");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let version = locked_version(&manifest_dir.join("Cargo.lock"));
    let deps = find_wit_deps(&version).unwrap_or_else(|| {
        panic!(
            "wasmloop embeds the WIT files of {CRATE} {version} from cargo's registry, and \
             found no registry/src/*/{CRATE}-{version}/wit/deps under $CARGO_HOME or \
             ~/.cargo: run `cargo fetch --locked` first, or set CARGO_HOME to where cargo \
             keeps its registry"
        )
    });
    let mut files: Vec<PathBuf> = std::fs::read_dir(&deps)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "wit"))
        .collect();
    files.sort();
    let mut code = String::from(
        "/// The WASI WIT packages components are built against: (file name, text).\n",
    );
    code.push_str("pub const WIT_DEPS: &[(&str, &str)] = &[\n");
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        let name = file.file_name().unwrap().to_string_lossy();
        code.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            file.display().to_string()
        ));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("wit_deps.rs");
    std::fs::write(out, code).unwrap();

    if let Some(commit) = commit(&manifest_dir.join(".git")) {
        println!("cargo:rustc-env=WASMLOOP_COMMIT={commit}");
    }
}

/// The checkout's commit, short, read from `.git` without running git (which a build
/// from a source archive, as the image's, has neither of); `wasmloop bench` reports it.
fn commit(git: &Path) -> Option<String> {
    let head_file = git.join("HEAD");
    println!("cargo:rerun-if-changed={}", head_file.display());
    let head = std::fs::read_to_string(&head_file).ok()?;
    let hash = match head.trim().strip_prefix("ref: ") {
        Some(reference) => {
            let loose = git.join(reference);
            println!("cargo:rerun-if-changed={}", loose.display());
            match std::fs::read_to_string(&loose) {
                Ok(hash) => hash,
                Err(_) => {
                    let packed = git.join("packed-refs");
                    println!("cargo:rerun-if-changed={}", packed.display());
                    std::fs::read_to_string(packed)
                        .ok()?
                        .lines()
                        .find(|line| line.ends_with(&format!(" {reference}")))?
                        .split_once(' ')?
                        .0
                        .to_owned()
                }
            }
        }
        None => head,
    };
    let hash = hash.trim();
    (hash.len() >= 12 && hash.bytes().all(|b| b.is_ascii_hexdigit())).then(|| hash[..12].to_owned())
}

/// The version of the crate Cargo.lock pins.
fn locked_version(lock: &Path) -> String {
    let text =
        std::fs::read_to_string(lock).expect("Cargo.lock is read for the WIT crate's version");
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line == format!("name = \"{CRATE}\"")
            && let Some(version) = lines.next().and_then(|l| l.strip_prefix("version = \""))
        {
            return version.trim_end_matches('"').to_owned();
        }
    }
    panic!("Cargo.lock has no {CRATE}: wasmloop depends on it")
}

fn find_wit_deps(version: &str) -> Option<PathBuf> {
    let homes = [
        std::env::var_os("CARGO_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")),
    ];
    homes.into_iter().flatten().find_map(|home| {
        std::fs::read_dir(home.join("registry/src"))
            .ok()?
            .find_map(|index| {
                let deps = index
                    .ok()?
                    .path()
                    .join(format!("{CRATE}-{version}"))
                    .join("wit/deps");
                deps.is_dir().then_some(deps)
            })
    })
}
