//! The WASI 0.3 HTTP backend (`http-p3`, on with --wasip3): components exporting `wasi:http/handler@0.3`, several activations at once in one instance, dispatched by wasmtime-wasi-http's own handler.

// Its engines are the wasm folder's made concurrent (`Engines::concurrent`: their code
// loads nowhere else, and the other engines keep their ids), and its instances are kept
// by wasmtime-wasi-http's `handler`, which feeds one store many requests. The runtime's
// pool still admits, queues and reports activations: its workers are lanes into that
// handler (`lane`), as many as instances times the activations each may take.

mod instances;
mod lane;
mod settings;

use std::sync::{Arc, OnceLock};

use wasmtime_wasi_http::p3::bindings::ServicePre;

use super::StartSpec;
use super::pool::PoolSize;
use super::registry::{Backend, Claim, Registration, StartFuture};
use super::wasm::{self, Code, Engines, WasmEngine, WasmError, World};
use crate::action::{Entry, Prepared};
use crate::config::Config;
use instances::Sharing;
use lane::{Lane, P3Pre};
pub use settings::{DISABLED, FLAGS, P3Settings};

pub const HTTP_P3: Registration = Registration {
    name: "http-p3",
    runs: "WASI 0.3 HTTP component",
    made: "a WASI 0.3 HTTP component (the Rust `wasip3` crate's `http::service::export!`) on a \
           runtime started with --wasip3",
    make: |config, shared| {
        let metrics = shared.metrics.clone();
        let engines = shared.get_or_make(|| P3Engines(Engines::concurrent(config, metrics)));
        Arc::new(P3Backend {
            engines,
            settings: P3Settings::of(config),
        }) as Arc<dyn Backend>
    },
};

/// The engines of WASI 0.3 components: a type of their own, apart from the wasm folder's
/// (`registry::Shared` keeps one value per type).
struct P3Engines(Engines);

struct P3Backend {
    engines: Arc<P3Engines>,
    settings: P3Settings,
}

impl Backend for P3Backend {
    /// A component exporting `wasi:http/handler@0.3` and not `wasi:cli/run`: one that
    /// exports WASI 0.2's handler too runs here, its 0.3 handler serving (its 0.3 half
    /// needs the async features only these engines have: docs/writing-actions.md).
    fn claims(&self, entry: &Entry) -> Option<Claim> {
        let Entry::File(path) = entry else {
            return None;
        };
        if !wasm::is_webassembly(path) {
            return None;
        }
        let bytes = std::fs::read(path).ok()?;
        let exports = wasm::top_level_exports(&bytes);
        let has = |prefix: &str| exports.iter().any(|name| name.starts_with(prefix));
        let serves_p3 =
            wasm::is_component(&bytes) && has(wasm::P3_HANDLER_EXPORT) && !has(wasm::RUN_EXPORT);
        serves_p3.then_some(Claim::Contents)
    }

    fn start<'a>(
        &'a self,
        prepared: &'a Prepared,
        spec: StartSpec,
        config: &'a Config,
        size: PoolSize,
    ) -> StartFuture<'a> {
        if !self.settings.enabled {
            return Box::pin(std::future::ready(Err(super::StartError::Unsupported(
                DISABLED.to_owned(),
            ))));
        }
        let sharing = Sharing {
            at_once: self.settings.at_once(config),
            instances: size.workers.max(1),
            reuse: size.max_activations,
            recycle_above: size.recycle_above,
            idle: self.settings.idle_timeout,
        };
        // The pool's workers are lanes: as many as activations may be in the instances.
        let lanes = PoolSize {
            workers: sharing.instances.saturating_mul(sharing.at_once),
            max_waiting: size.max_waiting,
            max_activations: None,
            recycle_above: None,
        };
        wasm::start_prepared(Service { sharing }, prepared, spec, config, &self.engines.0, lanes)
    }

    fn warm(&self) {
        if self.settings.enabled {
            self.engines.0.warm();
        }
    }
}

/// Components linked as `wasi:http/service@0.3.0`, their instances shared as `sharing`
/// says.
#[derive(Clone)]
struct Service {
    sharing: Sharing,
}

impl World for Service {
    type Pre = P3Pre;
    type Worker = Lane;

    fn link(&self, engine: &WasmEngine, code: &Code) -> Result<P3Pre, WasmError> {
        let Code::Component(component) = code else {
            return Err(WasmError::NotACommand(
                "a core module has no wasi:http/handler: build a WASI 0.3 HTTP component"
                    .to_owned(),
            ));
        };
        let linker = linker(engine).map_err(WasmError::LinkComponent)?;
        let pre = linker
            .instantiate_pre(component)
            .map_err(WasmError::LinkComponent)?;
        let service = ServicePre::new(pre).map_err(|e| {
            WasmError::NotACommand(format!(
                "the component's wasi:http/handler export is not the one wasi:http/service \
                 0.3.0 defines ({e:#}): export `handle: async func(request: request) -> \
                 result<response, error-code>` (the Rust `wasip3` crate's \
                 `http::service::export!` does)"
            ))
        })?;
        Ok(P3Pre {
            service,
            sharing: self.sharing,
            handler: OnceLock::new(),
        })
    }
}

/// WASI 0.2's interfaces as every component gets them (with the allow-list's gates), and
/// WASI 0.3's HTTP, clocks, random and cli: its sockets and filesystem are left out, which
/// would bypass the gates (Rust's standard library reaches both through 0.2).
fn linker(
    engine: &WasmEngine,
) -> wasmtime::Result<wasmtime::component::Linker<wasm::component::ComponentHost>> {
    let mut linker = engine.components.clone();
    wasmtime_wasi_http::p3::add_to_linker(&mut linker)?;
    wasmtime_wasi::p3::clocks::add_to_linker(&mut linker)?;
    wasmtime_wasi::p3::random::add_to_linker(&mut linker)?;
    wasmtime_wasi::p3::cli::add_to_linker(&mut linker)?;
    Ok(linker)
}
