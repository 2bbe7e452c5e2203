//! The HTTP component backend: components of the `wasi:http/proxy` world (Spin, `wasmtime serve`), each activation one request to their `incoming-handler`.

// It shares the WebAssembly backends' engines, compile cache, tiering and caps (their
// `World` is what differs: the code is linked as a proxy, and an instance answers through
// `handle` instead of its stdout), and maps activations to requests as OpenWhisk's web
// actions do (`web`).

mod instance;

use std::path::Path;
use std::sync::Arc;

use wasmtime_wasi_http::p2::bindings::ProxyPre;

use super::pool::PoolSize;
use super::registry::{Backend, Claim, Registration, StartFuture};
use super::wasm::component::ComponentHost;
use super::wasm::{self, Code, Engines, WasmEngine, WasmError, World};
use super::StartSpec;
use crate::action::{Entry, Prepared};
use crate::config::Config;
use instance::HttpInstance;

pub const HTTP: Registration = Registration {
    name: "http",
    runs: "WebAssembly HTTP component (wasi:http/proxy)",
    made: "an HTTP component (wasmloop new rust-http)",
    make: |config, shared| {
        let metrics = shared.metrics.clone();
        let engines = shared.get_or_make(|| Engines::new(config, metrics));
        let allow_precompiled = super::wasm::WasmSettings::of(config).allow_precompiled;
        Arc::new(HttpBackend {
            engines,
            allow_precompiled,
        }) as Arc<dyn Backend>
    },
};

struct HttpBackend {
    engines: Arc<Engines>,
    /// Precompiled code may be loaded (`--allow-precompiled`): only then is an upload of it
    /// loaded to read its exports.
    allow_precompiled: bool,
}

impl Backend for HttpBackend {
    /// A component that exports `incoming-handler` and no `wasi:cli/run` (one that has
    /// both was made for the stdio contract, and runs on the component backend).
    fn claims(&self, entry: &Entry) -> Option<Claim> {
        let handles_http = match entry {
            Entry::File(path) if wasm::is_webassembly(path) => is_http_component(path),
            Entry::File(path) => {
                self.allow_precompiled
                    && wasm::Side::of_precompiled(path) == Some(wasm::Side::Component)
                    && self.loaded_handles_http(|engine| engine.load_precompiled(path))
            }
            Entry::Signed(code) => {
                let path = code.path();
                wasm::Side::of_precompiled(&path) == Some(wasm::Side::Component)
                    && self.loaded_handles_http(|engine| engine.load_signed(&path))
            }
        };
        handles_http.then_some(Claim::Contents)
    }

    fn start<'a>(
        &'a self,
        prepared: &'a Prepared,
        mut spec: StartSpec,
        config: &'a Config,
        mut size: PoolSize,
    ) -> StartFuture<'a> {
        // Left to the runtime (--max-activations-per-instance unset, or its default 0, which
        // cannot be told apart), a component that answers one request per instance gets a
        // fresh one for each: kept, it would fail every activation after its first.
        if size.max_activations.is_none()
            && let Entry::File(path) = &prepared.entry
            && let Some(maker) = one_request_per_instance(path)
        {
            tracing::debug!(
                maker,
                "a fresh instance per activation: this maker's HTTP components answer once"
            );
            size.max_activations = std::num::NonZeroU32::new(1);
            spec.fresh = true;
        }
        wasm::start_prepared(Proxy, prepared, spec, config, &self.engines, size)
    }

    fn warm(&self) {
        self.engines.warm();
    }

    fn sign(&self, prepared: &Prepared, key: &ed25519_dalek::SigningKey) -> anyhow::Result<()> {
        match &prepared.entry {
            Entry::File(component) if wasm::is_webassembly(component) => {
                self.engines.sign_beside(component, key)
            }
            _ => Ok(()),
        }
    }
}

impl HttpBackend {
    /// Whether code compiled already (precompiled, or a signed artifact's) is an HTTP
    /// component: its exports are read from the code loaded by the engine that runs it (a
    /// few milliseconds, once per `/init`). Code that does not load is left to the
    /// component backend, whose start says why.
    fn loaded_handles_http(&self, load: impl FnOnce(&WasmEngine) -> Result<Code, String>) -> bool {
        let Ok(engine) = self.engines.engine(self.engines.final_tier()) else {
            return false;
        };
        let Ok(Code::Component(component)) = load(&engine) else {
            return false;
        };
        let exports: Vec<String> = component
            .component_type()
            .exports(&engine.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        handles_http(&exports)
    }
}

/// Whether a component with these exports is a WASI 0.2 HTTP component, not a command.
/// One that exports WASI 0.3's handler too is left to that backend: its 0.3 half needs the
/// async features only that backend's engines have (`EngineSettings::concurrent`).
fn handles_http(exports: &[String]) -> bool {
    let has = |prefix: &str| exports.iter().any(|name| name.starts_with(prefix));
    has(wasm::HANDLER_EXPORT) && !has(wasm::RUN_EXPORT) && !has(wasm::P3_HANDLER_EXPORT)
}

/// Components linked as `wasi:http/proxy`.
#[derive(Clone)]
struct Proxy;

impl World for Proxy {
    type Pre = ProxyPre<ComponentHost>;
    type Worker = HttpInstance;

    fn link(&self, engine: &WasmEngine, code: &Code) -> Result<Self::Pre, WasmError> {
        let Code::Component(component) = code else {
            return Err(WasmError::NotACommand(
                "a core module has no wasi:http/incoming-handler: build an HTTP component \
                 (Rust: the `wasi` crate's `wasi::http::proxy::export!` for wasm32-wasip2)"
                    .to_owned(),
            ));
        };
        let pre = engine
            .components
            .instantiate_pre(component)
            .map_err(|e| wasm::unlinked(&engine.engine, component, e))?;
        ProxyPre::new(pre).map_err(|e| {
            // wasmtime names the version its bindings look for, not the component's own.
            WasmError::NotACommand(format!(
                "the component's wasi:http/incoming-handler export is not the one the \
                 wasi:http/proxy 0.2 world defines ({e:#}): export `handle: func(request: \
                 incoming-request, response-out: response-outparam)` (the Rust `wasi` crate's \
                 `proxy::export!` does)"
            ))
        })
    }
}

/// Whether the file is a component whose exports make it an HTTP component: read from its
/// export section, before anything is compiled.
fn is_http_component(path: &Path) -> bool {
    let mut head = [0u8; 8];
    let is_component = std::fs::File::open(path)
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut head))
        .is_ok_and(|()| wasm::is_component(&head));
    if !is_component {
        return false;
    }
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    handles_http(&wasm::top_level_exports(&bytes))
}

/// The tools whose HTTP components answer a single request per instance: ComponentizeJS
/// (StarlingMonkey's fetch event takes one `respondWith`; a second request on the same
/// instance returns without a response).
const ONE_REQUEST_MAKERS: &[&str] = &["ComponentizeJS"];

/// The maker named in a component's own `producers` section (its `processed-by`) whose
/// HTTP components answer once per instance, if it is one of those.
fn one_request_per_instance(path: &Path) -> Option<&'static str> {
    use wasmparser::{KnownCustom, Payload};
    let bytes = std::fs::read(path).ok()?;
    let mut found = None;
    wasm::each_top_level(&bytes, |payload| {
        if let Payload::CustomSection(section) = payload
            && let KnownCustom::Producers(fields) = section.as_known()
        {
            found = fields
                .into_iter()
                .flatten()
                .flat_map(|field| field.values.into_iter().flatten())
                .find_map(|value| ONE_REQUEST_MAKERS.iter().copied().find(|m| *m == value.name));
        }
        found.is_none()
    });
    found
}
