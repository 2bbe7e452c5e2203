//! Compiled code of either kind: a core module (WASI preview 1) or a component (WASI 0.2).

use std::path::Path;

use wasmtime::component::Component;
use wasmtime::{Engine, Module, Precompiled};

/// What an upload compiles to; everything before instantiation is the same for both.
#[derive(Clone)]
pub enum Code {
    Module(Module),
    Component(Component),
}

/// Whether `bytes` are a component: `\0asm`, then version 0x0d and layer 1 (a core module
/// has version 1, layer 0).
pub fn is_component(bytes: &[u8]) -> bool {
    bytes.get(4..8) == Some(&[0x0d, 0x00, 0x01, 0x00])
}

/// The two sides of the WebAssembly backend: each is a backend of its own in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A core module (WASI preview 1).
    Module,
    /// A component (WASI 0.2).
    Component,
}

impl Side {
    /// The side whose code the file at `path` is, if wasmtime precompiled it (an ELF file,
    /// but not one to execute).
    pub fn of_precompiled(path: &Path) -> Option<Side> {
        match Engine::detect_precompiled_file(path) {
            Ok(Some(Precompiled::Component)) => Some(Side::Component),
            Ok(Some(Precompiled::Module)) => Some(Side::Module),
            _ => None,
        }
    }

    /// The side the file at `path` is for: WebAssembly, or code precompiled from it.
    pub fn of_file(path: &Path) -> Side {
        Side::of_precompiled(path).unwrap_or_else(|| {
            let mut head = [0u8; 8];
            let read = std::fs::File::open(path)
                .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut head));
            if read.is_ok() && is_component(&head) {
                Side::Component
            } else {
                Side::Module
            }
        })
    }
}

/// The interface a component must export to be run like a p1 command's `_start`.
pub const RUN_EXPORT: &str = "wasi:cli/run@0.2";

impl Code {
    /// Compiled code written by `serialize`, of whichever kind it is.
    ///
    /// # Safety
    /// As wasmtime's `deserialize`: the bytes must come from a trusted compile.
    pub unsafe fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Code> {
        // SAFETY: passed on to the caller.
        unsafe {
            match Engine::detect_precompiled(bytes) {
                Some(Precompiled::Component) => {
                    Component::deserialize(engine, bytes).map(Code::Component)
                }
                _ => Module::deserialize(engine, bytes).map(Code::Module),
            }
        }
    }

    /// As `deserialize`, mapping the file (its code is then shared with other processes
    /// mapping the same file).
    ///
    /// # Safety
    /// As wasmtime's `deserialize_file`: the file must come from a trusted compile.
    pub unsafe fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Code> {
        // SAFETY: passed on to the caller.
        unsafe {
            match Engine::detect_precompiled_file(path)? {
                Some(Precompiled::Component) => {
                    Component::deserialize_file(engine, path).map(Code::Component)
                }
                _ => Module::deserialize_file(engine, path).map(Code::Module),
            }
        }
    }

    pub fn serialize(&self) -> wasmtime::Result<Vec<u8>> {
        match self {
            Code::Module(module) => module.serialize(),
            Code::Component(component) => component.serialize(),
        }
    }
}

/// The interface an HTTP component exports (the `http` backend's), in any 0.2 version.
pub const HANDLER_EXPORT: &str = "wasi:http/incoming-handler@0.2.";

/// A component that some backend runs: a command, or an HTTP component (what compiling
/// checks, before the backend that claimed it links it as its own).
pub fn check_component_runs(engine: &Engine, component: &Component) -> Result<(), String> {
    let handles_http = component
        .component_type()
        .exports(engine)
        .any(|(name, _)| name.starts_with(HANDLER_EXPORT) || name.starts_with(P3_HANDLER_EXPORT));
    if handles_http {
        return Ok(());
    }
    check_component_command(engine, component)
}

/// A component that can run as an action: it exports `wasi:cli/run` (what building a
/// command for wasm32-wasip2, componentize-py or componentize-js gives).
pub fn check_component_command(engine: &Engine, component: &Component) -> Result<(), String> {
    let names: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    if names.iter().any(|name| name.starts_with(RUN_EXPORT)) {
        return Ok(());
    }
    // The interfaces this runtime runs, in a version it does not: which one to target.
    let other_version = |interface: &str| {
        names
            .iter()
            .find(|name| name.split_once('@').is_some_and(|(bare, _)| bare == interface))
    };
    if let Some(name) = other_version("wasi:http/incoming-handler") {
        return Err(format!(
            "the component exports {name}, a version of wasi:http this runtime does not run: \
             build it for the wasi:http/proxy world at 0.2.x (wasi:http/incoming-handler@0.2.x: \
             the Rust `wasi` crate's `proxy::export!` for wasm32-wasip2, or componentize-py's \
             and componentize-js's 0.2 worlds)"
        ));
    }
    if let Some(name) = other_version("wasi:cli/run") {
        return Err(format!(
            "the component exports {name}, a version of wasi:cli this runtime does not run: \
             build it as a WASI 0.2 command (wasi:cli/run@0.2.x: a Rust binary for \
             wasm32-wasip2, or componentize-py / componentize-js at their 0.2 worlds)"
        ));
    }
    Err(format!(
        "the component exports no `{RUN_EXPORT}.x` interface{}: build it as a WASI command \
         (a Rust binary for wasm32-wasip2, or a componentize-py / componentize-js component \
         for a world that includes wasi:cli/command)",
        if names.is_empty() {
            String::new()
        } else {
            format!(" (it exports {})", names.join(", "))
        }
    ))
}

/// What a WASI 0.3 HTTP component exports (`wasi:http/service`'s handler, any 0.3.x).
pub const P3_HANDLER_EXPORT: &str = "wasi:http/handler@0.3.";

/// Whether `bytes` are a component serving WASI 0.3 HTTP: compiled, and run, only by
/// engines with `EngineSettings::concurrent`.
pub fn serves_p3(bytes: &[u8]) -> bool {
    is_component(bytes)
        && top_level_exports(bytes)
            .iter()
            .any(|name| name.starts_with(P3_HANDLER_EXPORT))
}

/// The names a component exports at its top level (not those of components nested in it).
pub fn top_level_exports(bytes: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    each_top_level(bytes, |payload| {
        if let wasmparser::Payload::ComponentExportSection(exports) = payload {
            names.extend(exports.into_iter().flatten().map(|e| e.name.name.to_owned()));
        }
        true
    });
    names
}

/// Gives `visit` each section of the component's own, not of the modules and components
/// nested in it, while it returns true. Invalid bytes end the walk: compiling them tells
/// what is wrong.
pub fn each_top_level(bytes: &[u8], mut visit: impl FnMut(wasmparser::Payload<'_>) -> bool) {
    use wasmparser::{Parser, Payload};
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(payload) = payload else { break };
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            _ if depth > 0 => {}
            payload => {
                if !visit(payload) {
                    break;
                }
            }
        }
    }
}
