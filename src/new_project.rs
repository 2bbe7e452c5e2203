//! `wasmloop new`: writes a hello action project for a language, its SDK inside it.

use std::path::Path;

use anyhow::Context;

/// A language `wasmloop new` makes a project for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
    /// An HTTP handler (the wasi:http/proxy world), in Rust.
    RustHttp,
    /// An HTTP handler of WASI 0.3 (the wasi:http/service world), in Rust.
    #[value(name = "rust-http-p3")]
    RustHttpP3,
    Go,
    C,
    Python,
    Js,
}

/// One file of a template: its path in the project, and its text (`{{name}}` is the
/// project's name).
struct File {
    path: &'static str,
    text: &'static str,
}

/// Shortens the tables below: `file!("path in the project", "path in the repository")`.
macro_rules! file {
    ($path:literal, $source:literal) => {
        File {
            path: $path,
            text: include_str!(concat!("../", $source)),
        }
    };
}

// The files of the SDK and the hello, embedded so that `new` works offline and outside a
// wasmloop checkout.
const RUST: &[File] = &[
    file!("Cargo.toml", "templates/rust/Cargo.toml"),
    file!("src/main.rs", "templates/rust/src/main.rs"),
    file!(".gitignore", "templates/rust/gitignore"),
    file!("README.md", "templates/rust/README.md"),
    file!("sdk/Cargo.toml", "sdk/rust/Cargo.toml"),
    file!("sdk/src/lib.rs", "sdk/rust/src/lib.rs"),
];

const RUST_HTTP: &[File] = &[
    file!("Cargo.toml", "templates/rust-http/Cargo.toml"),
    file!("src/lib.rs", "templates/rust-http/src/lib.rs"),
    file!(".gitignore", "templates/rust-http/gitignore"),
    file!("README.md", "templates/rust-http/README.md"),
];

const RUST_HTTP_P3: &[File] = &[
    file!("Cargo.toml", "templates/rust-http-p3/Cargo.toml"),
    file!("src/lib.rs", "templates/rust-http-p3/src/lib.rs"),
    file!(".gitignore", "templates/rust-http-p3/gitignore"),
    file!("README.md", "templates/rust-http-p3/README.md"),
];

const GO: &[File] = &[
    file!("go.mod", "templates/go/go.mod"),
    file!("main.go", "templates/go/main.go"),
    file!(".gitignore", "templates/go/gitignore"),
    file!("README.md", "templates/go/README.md"),
    file!("sdk/go.mod", "sdk/go/go.mod"),
    file!("sdk/action.go", "sdk/go/action.go"),
    file!("sdk/results_unix.go", "sdk/go/results_unix.go"),
    file!("sdk/results_other.go", "sdk/go/results_other.go"),
    file!("sdk/snapshot_wasip1.go", "sdk/go/snapshot_wasip1.go"),
];

const C: &[File] = &[
    file!("main.c", "templates/c/main.c"),
    file!("Makefile", "templates/c/Makefile"),
    file!(".gitignore", "templates/c/gitignore"),
    file!("README.md", "templates/c/README.md"),
    file!("sdk/wasmloop.h", "sdk/c/wasmloop.h"),
];

const PYTHON: &[File] = &[
    file!("app.py", "templates/python/app.py"),
    file!(".gitignore", "templates/python/gitignore"),
    file!("README.md", "templates/python/README.md"),
    file!("wasmloop_action.py", "sdk/python/wasmloop_action.py"),
];

const JS: &[File] = &[
    file!("app.js", "templates/js/app.js"),
    file!("package.json", "templates/js/package.json"),
    file!(".gitignore", "templates/js/gitignore"),
    file!("README.md", "templates/js/README.md"),
    file!("wasmloop-action.js", "sdk/js/wasmloop-action.js"),
];

/// The world Python and JavaScript components are built for; `wit/deps/` beside it holds
/// the WASI packages it names, as the wasmtime-wasi-http crate wasmloop is built with
/// defines them (found by build.rs).
const WORLD: File = file!("wit/world.wit", "component-examples/wit/world.wit");

mod wit {
    include!(concat!(env!("OUT_DIR"), "/wit_deps.rs"));
}

impl Language {
    fn files(self) -> &'static [File] {
        match self {
            Language::Rust => RUST,
            Language::RustHttp => RUST_HTTP,
            Language::RustHttpP3 => RUST_HTTP_P3,
            Language::Go => GO,
            Language::C => C,
            Language::Python => PYTHON,
            Language::Js => JS,
        }
    }

    /// Whether the project is built into a component against `wit/`.
    fn needs_wit(self) -> bool {
        matches!(self, Language::Python | Language::Js)
    }

    /// What the template makes, for `--list`.
    pub fn describe(self) -> &'static str {
        match self {
            Language::Rust => {
                "rust: a Cargo project, the hello on the wasmloop-action crate (in sdk/); \
                 builds a module (wasm32-wasip1), a component (wasm32-wasip2) or a native \
                 executable from one source"
            }
            Language::RustHttp => {
                "rust-http: a Cargo project, an HTTP handler of the wasi:http/proxy world on \
                 the `wasi` crate (runs on wasmloop as a web action, and unchanged under \
                 wasmtime serve or Spin); builds a component (wasm32-wasip2)"
            }
            Language::RustHttpP3 => {
                "rust-http-p3: a Cargo project, an async HTTP handler of WASI 0.3's \
                 wasi:http/service world on the `wasip3` crate (many requests at once in one \
                 instance; runs on `wasmloop serve --wasip3`, and unchanged under \
                 wasmtime serve or Spin 4); builds a component (wasm32-wasip2)"
            }
            Language::Go => {
                "go: a Go module, the hello on the wasmloop.dev/action package (in sdk/, \
                 standard library only); builds a module (GOOS=wasip1 GOARCH=wasm) or a \
                 native executable from one source"
            }
            Language::C => {
                "c: a C file and a Makefile, the hello on wasmloop.h (in sdk/: the loop, a \
                 JSON reader and writer); builds a module (clang --target=wasm32-wasi) or a \
                 native executable from one source"
            }
            Language::Python => {
                "python: app.py on wasmloop_action.py, with the WIT world (in wit/) \
                 componentize-py builds a component for; may reach the network \
                 --allow-outbound lists"
            }
            Language::Js => {
                "js: app.js on wasmloop-action.js, with package.json (componentize-js) and \
                 the WIT world (in wit/) it builds a component for; may reach the network \
                 --allow-outbound lists"
            }
        }
    }
}

/// The templates, one line each.
pub fn list() -> String {
    use clap::ValueEnum;
    Language::value_variants()
        .iter()
        .map(|language| format!("{}\n", language.describe()))
        .collect()
}

/// Writes `language`'s hello project into `dir`, which must not exist yet or be empty: a
/// project is never written over files. Returns its name.
pub fn create(language: Language, dir: &Path) -> anyhow::Result<String> {
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).with_context(|| format!("{} is not a folder", dir.display()))?;
        if entries.next().is_some() {
            anyhow::bail!(
                "{} exists and is not empty: give a new folder's path, or empty this one",
                dir.display()
            );
        }
    }
    let name = project_name(dir, language);
    let write = |path: &Path, text: &str| -> anyhow::Result<()> {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    for file in language.files() {
        // `{{crate}}`: the name as Rust spells a library's file (`-` becomes `_`).
        let text = file
            .text
            .replace("{{name}}", &name)
            .replace("{{crate}}", &name.replace('-', "_"));
        write(Path::new(file.path), &text)?;
    }
    if language.needs_wit() {
        write(Path::new(WORLD.path), WORLD.text)?;
        for (file, text) in wit::WIT_DEPS {
            write(&Path::new("wit/deps").join(file), text)?;
        }
    }
    Ok(name)
}

/// A package name made from the folder's that every tool of `language` accepts: lowercase
/// ASCII letters, digits, `-` and `_` (Latin letters lose their accents), starting with a
/// letter, and none that `language` reserves (`action-` goes before those).
fn project_name(dir: &Path, language: Language) -> String {
    let base = dir
        .file_name()
        .map(|name| name.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let mut kept = String::new();
    for c in base.chars() {
        match c {
            'a'..='z' | '0'..='9' | '_' => kept.push(c),
            _ => match unaccented(c) {
                Some(plain) => kept.push_str(plain),
                // One dash for a run of anything else.
                None if !kept.ends_with('-') => kept.push('-'),
                None => {}
            },
        }
    }
    let trimmed = kept.trim_matches(['-', '_']);
    match trimmed.chars().next() {
        None => "action".to_owned(),
        Some(first) if first.is_ascii_alphabetic() && !language.reserves(trimmed) => {
            trimmed.to_owned()
        }
        Some(_) => format!("action-{trimmed}"),
    }
}

/// The plain letters of an accented Latin one (lowercase), as a person would type them.
fn unaccented(c: char) -> Option<&'static str> {
    Some(match c {
        'à'..='å' | 'ā' | 'ă' | 'ą' => "a",
        'æ' => "ae",
        'ç' | 'ć' | 'č' => "c",
        'ď' | 'đ' | 'ð' => "d",
        'è'..='ë' | 'ē' | 'ė' | 'ę' | 'ě' => "e",
        'ğ' => "g",
        'ì'..='ï' | 'ī' | 'į' | 'ı' => "i",
        'ł' | 'ľ' => "l",
        'ñ' | 'ń' | 'ň' => "n",
        'ò'..='ö' | 'ø' | 'ō' | 'ő' => "o",
        'œ' => "oe",
        'ř' => "r",
        'ś' | 'š' | 'ş' => "s",
        'ß' => "ss",
        'ť' | 'ţ' => "t",
        'ù'..='ü' | 'ū' | 'ů' | 'ű' | 'ų' => "u",
        'ý' | 'ÿ' => "y",
        'ź' | 'ż' | 'ž' => "z",
        'þ' => "th",
        _ => return None,
    })
}

/// Rust's keywords, reserved ones included: Cargo refuses them as a package's name.
const RUST_KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "static", "struct", "super", "trait", "true", "try", "type", "typeof",
    "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// Names Cargo refuses for a binary, or warns of as the standard library's.
const CARGO_RESERVED: &[&str] = &[
    "alloc",
    "build",
    "core",
    "deps",
    "examples",
    "incremental",
    "proc_macro",
    "proc-macro",
    "std",
    "test",
];

/// Names Go refuses as a path element on every system, since Windows reserves them.
fn windows_reserved(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or(name);
    matches!(stem, "con" | "prn" | "aux" | "nul")
        || (stem.len() == 4
            && (stem.starts_with("com") || stem.starts_with("lpt"))
            && stem.as_bytes()[3].is_ascii_digit())
}

impl Language {
    /// Whether a project of this language cannot be named `name`.
    fn reserves(self, name: &str) -> bool {
        match self {
            Language::Rust | Language::RustHttp | Language::RustHttpP3 => {
                RUST_KEYWORDS.contains(&name) || CARGO_RESERVED.contains(&name)
            }
            // The module is example.com/NAME (templates/go/go.mod): only a last element
            // Go refuses is left to avoid.
            Language::Go => windows_reserved(name),
            // The Makefile's own targets.
            Language::C => matches!(name, "wasm" | "native" | "clean"),
            Language::Python | Language::Js => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_name_becomes_a_package_name() {
        let name = |dir: &str| project_name(Path::new(dir), Language::Python);
        assert_eq!(name("/tmp/Hello World"), "hello-world");
        assert_eq!(name("my_action"), "my_action");
        assert_eq!(name("my action"), "my-action");
        assert_eq!(name("a.b"), "a-b");
        assert_eq!(name("2fast"), "action-2fast");
        assert_eq!(name("123"), "action-123");
        assert_eq!(name("/"), "action");
        assert_eq!(name("Crème Brûlée"), "creme-brulee");
        assert_eq!(name("日本"), "action");
        assert_eq!(name("_a__b--c_"), "a__b-c");
    }

    #[test]
    fn each_language_steers_clear_of_the_names_its_tools_refuse() {
        use clap::ValueEnum;
        let name = |dir: &str, language| project_name(Path::new(dir), language);
        assert_eq!(name("go", Language::Go), "go");
        assert_eq!(name("aux", Language::Go), "action-aux");
        assert_eq!(name("com1", Language::Go), "action-com1");
        assert_eq!(name("go", Language::Rust), "go");
        assert_eq!(name("fn", Language::Rust), "action-fn");
        assert_eq!(name("test", Language::Rust), "action-test");
        assert_eq!(name("wasm", Language::C), "action-wasm");
        for language in Language::value_variants() {
            for dir in [
                "go",
                "123",
                "a.b",
                "my action",
                "héllo wörld",
                "日本",
                "fn",
                "wasm",
            ] {
                let made = name(dir, *language);
                assert!(!language.reserves(&made), "{language:?}: {dir} -> {made}");
                assert!(
                    made.starts_with(|c: char| c.is_ascii_lowercase())
                        && made.chars().all(|c| c.is_ascii_lowercase()
                            || c.is_ascii_digit()
                            || c == '-'
                            || c == '_'),
                    "{language:?}: {dir} -> {made}"
                );
            }
        }
    }

    #[test]
    fn a_project_is_never_written_over_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "mine").unwrap();
        let error = create(Language::Rust, dir.path()).unwrap_err().to_string();
        assert!(error.contains("exists and is not empty"), "{error}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
            "mine"
        );
    }

    /// What `wsk action create NAME FILE` sends intact: wsk base64-encodes only these
    /// extensions and sends any other file as text, which corrupts a binary module or
    /// component (docs/deploying.md, "Give the zip, not the `.wasm`").
    const SENT_AS_BINARY: [&str; 3] = [".zip", ".jar", ".balx"];

    /// The files each `wsk action create` in `readme` deploys, with the line saying it.
    fn deployed_files(readme: &str) -> Vec<(String, &str)> {
        readme
            .lines()
            .filter_map(|line| {
                let at = line.find("wsk action create ")?;
                let mut words = line[at..].split_whitespace().skip(4);
                let file = words.next().filter(|word| !word.starts_with("--"))?;
                Some((file.trim_matches('`').to_owned(), line))
            })
            .collect()
    }

    /// Whether `readme` has a command that writes `file`: a zip it packs, or the `-o` of
    /// `wasmloop compile`.
    fn makes(readme: &str, file: &str) -> bool {
        readme.lines().any(|line| {
            line.contains(&format!("zip ../{file} "))
                || line.contains(&format!("-o {file}"))
                || line.contains(&format!("--output {file}"))
        })
    }

    #[test]
    fn every_template_deploys_a_file_wsk_sends_intact_and_says_how_to_make_it() {
        use clap::ValueEnum;
        for language in Language::value_variants() {
            let dir = tempfile::tempdir().unwrap();
            let project = dir.path().join("hello-web");
            create(*language, &project).unwrap();
            let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
            let deployed = deployed_files(&readme);
            assert!(
                !deployed.is_empty(),
                "{language:?}: its README deploys nothing"
            );
            for (file, line) in deployed {
                assert!(
                    SENT_AS_BINARY.iter().any(|ext| file.ends_with(ext)),
                    "{language:?}: `{line}` gives wsk {file}, which it sends as text: give a zip"
                );
                assert!(
                    makes(&readme, &file),
                    "{language:?}: its README deploys {file} but no command makes it"
                );
            }
        }
    }

    #[test]
    fn the_deploy_rule_catches_a_module_given_as_it_is() {
        let readme = "cargo build\nwsk action create hi target/hi.wasm --docker img --web raw\n";
        let deployed = deployed_files(readme);
        assert_eq!(deployed.len(), 1);
        assert_eq!(deployed[0].0, "target/hi.wasm");
        assert!(
            !SENT_AS_BINARY
                .iter()
                .any(|ext| deployed[0].0.ends_with(ext))
        );
        assert!(!makes("wsk action create hi hi.zip --docker img", "hi.zip"));
        assert!(makes("(cd pkg && zip ../hi.zip exec.wasm)", "hi.zip"));
    }

    #[test]
    fn the_rust_project_names_itself_and_carries_the_sdk() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("greeter");
        assert_eq!(create(Language::Rust, &project).unwrap(), "greeter");
        let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("name = \"greeter\""), "{manifest}");
        let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
        assert!(readme.contains("release/greeter.wasm"), "{readme}");
        assert!(!readme.contains("{{"), "{readme}");
        assert!(project.join("sdk/src/lib.rs").is_file());
        assert!(project.join(".gitignore").is_file());
    }
}
