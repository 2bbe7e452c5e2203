//! `wasmloop new`: writes a hello action project for a language, its SDK inside it.

use std::path::Path;

use anyhow::Context;

/// A language `wasmloop new` makes a project for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
}

/// One file of a template: its path in the project, and its text (`{{name}}` is the
/// project's name).
struct File {
    path: &'static str,
    text: &'static str,
}

/// The files of the SDK and the hello, embedded so that `new` works offline and outside
/// a wasmloop checkout.
const RUST: &[File] = &[
    File {
        path: "Cargo.toml",
        text: include_str!("../templates/rust/Cargo.toml"),
    },
    File {
        path: "src/main.rs",
        text: include_str!("../templates/rust/src/main.rs"),
    },
    File {
        path: ".gitignore",
        text: include_str!("../templates/rust/gitignore"),
    },
    File {
        path: "README.md",
        text: include_str!("../templates/rust/README.md"),
    },
    File {
        path: "sdk/Cargo.toml",
        text: include_str!("../sdk/rust/Cargo.toml"),
    },
    File {
        path: "sdk/src/lib.rs",
        text: include_str!("../sdk/rust/src/lib.rs"),
    },
];

impl Language {
    fn files(self) -> &'static [File] {
        match self {
            Language::Rust => RUST,
        }
    }

    /// What the template makes, for `--list`.
    pub fn describe(self) -> &'static str {
        match self {
            Language::Rust => {
                "rust: a Cargo project, the hello on the wasmloop-action crate (in sdk/); \
                 builds a module (wasm32-wasip1), a component (wasm32-wasip2) or a native \
                 executable from one source"
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
    let name = project_name(dir);
    for file in language.files() {
        let path = dir.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, file.text.replace("{{name}}", &name))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(name)
}

/// A package name made from the folder's: lowercase letters, digits, `-` and `_` (what
/// Cargo accepts), starting with a letter.
fn project_name(dir: &Path) -> String {
    let base = dir
        .file_name()
        .map(|name| name.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let kept: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = kept.trim_matches('-');
    match trimmed.chars().next() {
        Some(first) if first.is_ascii_alphabetic() => trimmed.to_owned(),
        Some(_) => format!("action-{trimmed}"),
        None => "action".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_name_becomes_a_package_name() {
        let name = |dir: &str| project_name(Path::new(dir));
        assert_eq!(name("/tmp/Hello World"), "hello-world");
        assert_eq!(name("my_action"), "my_action");
        assert_eq!(name("2fast"), "action-2fast");
        assert_eq!(name("/"), "action");
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
