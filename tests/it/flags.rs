//! Every flag a message names is a flag of the command that prints it: the sources' string
//! literals walked against each subcommand's `--help`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const WASMLOOP: &str = env!("CARGO_BIN_EXE_wasmloop");

/// Flags that messages in the shared layers name, though `wasmloop run` has none of them,
/// each with why no message `run` prints can name it.
const SERVER_ONLY: &[(&str, &str)] = &[
    (
        "--concurrency",
        "run takes its inputs one at a time: nothing waits for an instance",
    ),
    (
        "--max-queue",
        "run takes its inputs one at a time: nothing queues",
    ),
    (
        "--hints",
        "run always gives hints: what names --hints is said only where they are off",
    ),
    (
        "--max-run-bytes",
        "run reads no request body: its inputs are lines of its own",
    ),
    ("--body-read-timeout", "run reads no request body"),
    (
        "--recycle-above-memory",
        "named only when it is set, which run cannot do",
    ),
    (
        "--shutdown-timeout",
        "named only by a server's shutdown: an interrupted run has no grace period, and its \
         line says so without the flag",
    ),
];

/// Other programs whose flags messages quote: a flag after one of these in a literal is
/// that program's.
const OTHER_PROGRAMS: &[&str] = &[
    "cargo ",
    "docker ",
    "wsk ",
    "clang",
    "go build",
    "componentize-",
    "rustup ",
    "curl ",
];

/// The long flags `wasmloop COMMAND` takes, read from its help.
fn flags_of(command: &str) -> BTreeSet<String> {
    let help = Command::new(WASMLOOP)
        .args([command, "--help"])
        .output()
        .unwrap();
    assert!(help.status.success(), "wasmloop {command} --help failed");
    String::from_utf8_lossy(&help.stdout)
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            // `-c, --connections <N>`: the long name after the short one.
            let line = match line.as_bytes() {
                [b'-', short, b',', b' ', ..] if short.is_ascii_alphabetic() => &line[4..],
                _ => line,
            };
            let flag = line.strip_prefix("--")?;
            let end = flag
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(flag.len());
            Some(format!("--{}", &flag[..end]))
        })
        .collect()
}

/// The commands whose messages may come from `file` (a path under the repository).
fn printed_by(file: &str) -> &'static [&'static str] {
    match file {
        f if f.starts_with("bench/") => &["bench"],
        "src/local_run.rs" | "src/ow_compile.rs" => &["run"],
        "src/new_project.rs" => &["new"],
        "src/executor/wasm/command.rs" => &["compile"],
        "src/server.rs"
        | "src/handlers.rs"
        | "src/metrics.rs"
        | "src/plain_http.rs"
        | "src/linger.rs"
        | "src/executor/intake.rs" => &["serve"],
        "src/main.rs" => &["serve"],
        // The runtime's layers: what both a server and a local run print.
        _ => &["serve", "run"],
    }
}

/// The string literals of Rust source `text`, its tests and comments left out.
fn literals(text: &str) -> Vec<String> {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let bytes = text.as_bytes();
    let (mut found, mut at) = (Vec::new(), 0);
    while at < bytes.len() {
        let rest = &text[at..];
        if rest.starts_with("//") {
            at += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            at += rest.find("*/").map_or(rest.len(), |end| end + 2);
        } else if let Some(hashes) = raw_string_start(rest, at == 0 || !is_word(bytes[at - 1])) {
            let open = 2 + hashes.len();
            let close = format!("\"{hashes}");
            let end = rest[open..]
                .find(&close)
                .map_or(rest.len(), |end| open + end);
            found.push(rest[open..end].to_owned());
            at += end + close.len();
        } else if rest.starts_with('\'') {
            // A character literal ('"', '\'', '\n'), or a lifetime.
            at += match (bytes.get(at + 1), bytes.get(at + 2)) {
                (Some(b'\\'), _) => rest[2..].find('\'').map_or(rest.len(), |end| end + 3),
                (_, Some(b'\'')) => 3,
                _ => 1,
            };
        } else if rest.starts_with('"') {
            let mut end = 1;
            while end < rest.len() && bytes[at + end] != b'"' {
                end += if bytes[at + end] == b'\\' { 2 } else { 1 };
            }
            found.push(rest[1..end.min(rest.len())].to_owned());
            at += end + 1;
        } else {
            at += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    found
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `r"`, `r#"`, `br"`: a raw string's start, and its hashes.
fn raw_string_start(rest: &str, word_starts: bool) -> Option<&str> {
    if !word_starts {
        return None;
    }
    let rest = rest.strip_prefix('b').unwrap_or(rest);
    let after = rest.strip_prefix('r')?;
    let hashes = &after[..after.len() - after.trim_start_matches('#').len()];
    after[hashes.len()..].starts_with('"').then_some(hashes)
}

/// The flags `literal` names, each with the command it is named for: the one a
/// `wasmloop COMMAND` before it names, or None for the printing command's. Another
/// program's flags, and a literal that is a flag alone (an argument), are left out.
fn named_flags(literal: &str) -> Vec<(String, Option<String>)> {
    if literal.starts_with("--") && !literal.contains(' ') {
        return Vec::new();
    }
    let mut named = Vec::new();
    for (at, _) in literal.match_indices("--") {
        let before = &literal[..at];
        if before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '-') {
            continue;
        }
        let flag: String = literal[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        // `--max-{route}-bytes` is formatted: its whole name is not in the source.
        if flag.is_empty() || flag.ends_with('-') {
            continue;
        }
        if OTHER_PROGRAMS
            .iter()
            .any(|program| before.contains(program))
        {
            continue;
        }
        // A command line quoted in a code span: `wasmloop run --input`.
        let in_span = before.matches('`').count() % 2 == 1;
        let span = &before[before.rfind('`').map_or(0, |at| at + 1)..];
        let command = span.find("wasmloop ").filter(|_| in_span).map(|start| {
            span[start + "wasmloop ".len()..]
                .split(|c: char| !c.is_ascii_alphanumeric())
                .next()
                .unwrap_or("")
                .to_owned()
        });
        named.push((format!("--{flag}"), command.filter(|c| !c.is_empty())));
    }
    named
}

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn every_flag_a_message_names_is_one_its_command_takes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    sources(&root.join("bench/src"), &mut files);
    let mut flags: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for file in &files {
        let relative = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        // The flags' own declarations and help.
        if relative.starts_with("src/cli/") {
            continue;
        }
        for literal in literals(&std::fs::read_to_string(file).unwrap()) {
            for (flag, named_for) in named_flags(&literal) {
                let commands: Vec<&str> = match &named_for {
                    Some(command) => vec![command.as_str()],
                    None => printed_by(&relative).to_vec(),
                };
                for command in commands {
                    let known = flags
                        .entry(command.to_owned())
                        .or_insert_with(|| flags_of(command))
                        .contains(&flag);
                    let excused = command == "run"
                        && named_for.is_none()
                        && SERVER_ONLY.iter().any(|(only, _)| *only == flag);
                    if !known && !excused {
                        wrong.push(format!(
                            "{relative}: `wasmloop {command}` has no {flag}: \"{literal}\""
                        ));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Each excuse is still needed: the flag is one of `serve`'s and not of `run`'s.
    let (serve, run) = (flags_of("serve"), flags_of("run"));
    for (flag, why) in SERVER_ONLY {
        assert!(
            serve.contains(*flag) && !run.contains(*flag),
            "{flag}: {why}"
        );
    }
}

#[test]
fn the_walk_finds_flags_in_messages_and_not_in_comments_or_other_programs() {
    let source = r##"
        // see --in-a-comment
        let a = "too big (see --max-result-bytes)";
        let b = 'x'; let c = '"'; fn f<'a>() {}
        let d = r#"raw: give --input "JSON""#;
        let e = "build it with `cargo build --target wasm32-wasip1`";
        let f = "--for-server";
        let g = "retry with `wasmloop serve --concurrency 4`";
        let h = "a project `wasmloop new` makes: give --wasm";
    "##;
    let named: Vec<_> = literals(source)
        .iter()
        .flat_map(|l| named_flags(l))
        .collect();
    assert_eq!(
        named,
        [
            ("--max-result-bytes".to_owned(), None),
            ("--input".to_owned(), None),
            ("--concurrency".to_owned(), Some("serve".to_owned())),
            ("--wasm".to_owned(), None),
        ]
    );
}

#[test]
fn verbose_means_the_same_before_and_after_the_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let action = dir.path().join("echo.sh");
    std::fs::write(
        &action,
        "#!/bin/sh\nwhile read -r line; do echo '{\"ok\":1}' >&3; done\n",
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&action).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&action, permissions).unwrap();
    let run = |args: &[&str]| {
        let ran = Command::new(WASMLOOP).args(args).output().unwrap();
        assert!(
            ran.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&ran.stderr)
        );
        String::from_utf8_lossy(&ran.stderr).into_owned()
    };
    let file = action.to_str().unwrap();
    let before = run(&["-v", "run", file, "--input", "{}"]);
    let after = run(&["run", file, "--input", "{}", "-v"]);
    let quiet = run(&["run", file, "--input", "{}"]);
    for said in [&before, &after] {
        assert!(
            said.contains("ms wall"),
            "-v reports what the input cost: {said}"
        );
        assert!(
            said.contains("DEBUG"),
            "-v shows the runtime's diagnostics: {said}"
        );
    }
    assert!(!quiet.contains("ms wall"), "{quiet}");
}

#[test]
fn a_serve_flag_before_another_subcommand_is_refused_saying_where_it_goes() {
    let refused = Command::new(WASMLOOP)
        .args(["--listen", "9000", "run", "a.wasm"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("--listen before `run` is a flag of `serve`: give it after `wasmloop run`"),
        "{said}"
    );
    // The global flags go before or after it alike.
    let help = Command::new(WASMLOOP)
        .args(["--debug", "-v", "run", "--help"])
        .output()
        .unwrap();
    assert!(
        help.status.success(),
        "{}",
        String::from_utf8_lossy(&help.stderr)
    );
}
