//! A module's start-up run once, where it is compiled, and kept as its initial state (Wizer).

// A reactor module that exports `wizer-initialize` and `wasmloop-serve` (the Go SDK's
// guests built with -buildmode=c-shared: docs/protocol.md, "Start-up in a snapshot") is
// instantiated once as it is compiled;
// `_initialize` (a reactor's runtime start: Go's is dear on every instance) runs, then
// `wizer-initialize`, and the memory and globals they leave become the module's initial
// state, with `wasmloop-serve` as its `_start`. Every instance then begins there, in the
// compile child, the compile cache and a signed artifact alike, and none runs start-up
// code on an activation's time. Only memories and globals are kept, which is all a guest
// waiting between two calls has: its stack has unwound.

use wasmtime::{Engine, Extern, Instance, Linker, Module, Store, StoreLimits, StoreLimitsBuilder, Val};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

use super::engine::engine_config;
use super::{Codegen, EngineSettings};

/// What the guest runs once, for the snapshot (Wizer's own default name).
pub const INITIALIZE: &str = "wizer-initialize";
/// Where each instance of the snapshot begins: its `_start`.
pub const SERVE: &str = "wasmloop-serve";

/// The most the initializer may log: enough for its last lines in an error.
const MAX_LOG_BYTES: usize = 64 << 10;

/// Whether a module's bytes ask for a snapshot: a reactor (no `_start`) that exports both
/// functions. A command that exports them too (the Go SDK in a build without
/// `-buildmode=c-shared`, whose runtime starts in `_start` and cannot run them before)
/// serves from its `_start`.
pub fn wanted(bytes: &[u8]) -> bool {
    let (mut initialize, mut serve, mut command) = (false, false, false);
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let Ok(wasmparser::Payload::ExportSection(exports)) = payload else {
            continue;
        };
        for export in exports.into_iter().flatten() {
            if export.kind == wasmparser::ExternalKind::Func {
                initialize |= export.name == INITIALIZE;
                serve |= export.name == SERVE;
                command |= export.name == "_start";
            }
        }
        break;
    }
    initialize && serve && !command
}

/// Runs the module's start-up and returns the module that starts where it ended. The
/// initializer sees what a guest sees before its first request: `main` as its only
/// argument, no environment (the action's and the activation's come with each instance),
/// no stdin, no files; `memory_cap` bounds its memory, the compile's timeout its time.
pub fn take(engine: &Engine, bytes: &[u8], settings: EngineSettings) -> Result<Vec<u8>, String> {
    let mut wizer = Wizer::new();
    wizer.init_func(INITIALIZE).func_rename("_start", SERVE);
    let (cx, instrumented) = wizer
        .instrument(bytes)
        .map_err(|e| format!("cannot snapshot the module's start-up: {e:#}"))?;
    // Run once, the initializer needs no optimized code: Winch's is much quicker to
    // make (the compile that follows is the one that counts). Cranelift's, where
    // Winch lacks a proposal the module uses.
    let quick = Engine::new(&engine_config(
        EngineSettings {
            codegen: Codegen::Winch,
            ..settings
        },
        false,
    ));
    let compiled = quick
        .as_ref()
        .map_err(|e| e.to_string())
        .and_then(|quick| Module::new(quick, &instrumented).map_err(|e| format!("{e:#}")))
        .or_else(|_| Module::new(engine, &instrumented).map_err(|e| format!("{e:#}")));
    let module = compiled
        .map_err(|e| format!("cannot compile the module for its snapshot: {e}"))?;
    let engine = module.engine().clone();
    let engine = &engine;
    let memory_cap = settings.memory_cap;
    let runtime = tokio::runtime::Builder::new_current_thread()
        // A guest may sleep (Go's runtime does as it panics).
        .enable_all()
        .build()
        .map_err(|e| format!("cannot run the module's start-up: {e}"))?;
    runtime.block_on(async {
        let logs = MemoryOutputPipe::new(MAX_LOG_BYTES);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdin(MemoryInputPipe::new(Vec::new()))
            .stdout(logs.clone())
            .stderr(logs.clone())
            .args(&["main"]);
        let host = Host {
            wasi: wasi.build_p1(),
            limits: StoreLimitsBuilder::new().memory_size(memory_cap).build(),
        };
        let mut store = Store::new(engine, host);
        store.limiter(|host| &mut host.limits);
        // No ticker runs here: the epoch never reaches it. The compile's timeout ends an
        // initializer that never returns, with the child.
        store.set_epoch_deadline(1);
        let mut linker: Linker<Host> = Linker::new(engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |host| &mut host.wasi)
            .map_err(|e| format!("{e:#}"))?;
        let failed = |what: &str, e: wasmtime::Error| {
            // The crash's own report (Go's `panic: ...` before its goroutine dump, Rust's
            // place and message), or else the first thing it logged.
            let logs = String::from_utf8_lossy(&logs.contents()).into_owned();
            let first = logs.lines().find(|l| !l.trim().is_empty()).map(str::to_owned);
            let said = match crate::last_words::crash(&logs).or(first) {
                Some(words) => format!("; it logged `{}`", crate::last_words::quoted(&words)),
                None => String::new(),
            };
            format!("the module's {what} failed while it was snapshotted: {}{said}", cause(&e))
        };
        let instance = linker
            .instantiate_async(&mut store, &module)
            .await
            .map_err(|e| failed("instantiation", e))?;
        // A reactor's own start (Go's runtime, C constructors) comes first, as a host would
        // run it before any other export.
        for name in ["_initialize", INITIALIZE] {
            if let Some(Extern::Func(func)) = instance.get_export(&mut store, name) {
                let func = func
                    .typed::<(), ()>(&store)
                    .map_err(|e| failed(&format!("`{name}`"), e))?;
                func.call_async(&mut store, ())
                    .await
                    .map_err(|e| failed(&format!("`{name}`"), e))?;
            }
        }
        let snapshot = wizer
            .snapshot(&cx, &mut State { store, instance })
            .await
            .map_err(|e| format!("cannot snapshot the module's start-up: {e:#}"))?;
        Ok(without_dead_segments(bytes, snapshot))
    })
}

/// The snapshot without the empty passive data segments Wizer leaves in place of the
/// module's own (so that `memory.init` and `data.drop` keep their indices), when the
/// module has no DataCount section, without which no code can name a segment. wasmtime
/// gives each instance's context an entry per passive segment: Go's 44,000 made every
/// instance of its snapshot many times dearer. Anything unexpected keeps the
/// snapshot as it is.
fn without_dead_segments(original: &[u8], snapshot: Vec<u8>) -> Vec<u8> {
    rebuilt_without_dead_segments(original, &snapshot).unwrap_or(snapshot)
}

fn rebuilt_without_dead_segments(original: &[u8], snapshot: &[u8]) -> Option<Vec<u8>> {
    use wasmparser::{DataKind, Operator, Parser, Payload};
    let names_segments = Parser::new(0)
        .parse_all(original)
        .any(|payload| matches!(payload, Ok(Payload::DataCountSection { .. }) | Err(_)));
    if names_segments {
        return None;
    }
    let mut module = wasm_encoder::Module::new();
    for payload in Parser::new(0).parse_all(snapshot) {
        let Ok(payload) = payload else {
            return None;
        };
        match payload {
            Payload::DataSection(reader) => {
                let mut data = wasm_encoder::DataSection::new();
                for segment in reader {
                    let Ok(segment) = segment else {
                        return None;
                    };
                    match segment.kind {
                        DataKind::Passive if segment.data.is_empty() => {}
                        DataKind::Active {
                            memory_index,
                            offset_expr,
                        } => {
                            let mut ops = offset_expr.get_operators_reader();
                            let offset = match (ops.read(), ops.read()) {
                                (Ok(Operator::I32Const { value }), Ok(Operator::End)) => value,
                                _ => return None,
                            };
                            let offset = wasm_encoder::ConstExpr::i32_const(offset);
                            data.active(memory_index, &offset, segment.data.iter().copied());
                        }
                        DataKind::Passive => return None,
                    }
                }
                module.section(&data);
            }
            // Nothing names a segment, so none needs counting.
            Payload::DataCountSection { .. } => {}
            other => keep_section(&mut module, &other, snapshot),
        }
    }
    Some(module.finish())
}

/// Copies a section a rewrite leaves alone into the module it writes, as it was.
pub(super) fn keep_section(module: &mut wasm_encoder::Module, payload: &wasmparser::Payload, bytes: &[u8]) {
    if let Some((id, range)) = payload.as_section() {
        module.section(&wasm_encoder::RawSection {
            id,
            data: &bytes[range],
        });
    }
}

/// What a trap or an exit says, without wasmtime's backtrace.
fn cause(e: &wasmtime::Error) -> String {
    if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return format!("it exited (status {}) instead of returning", exit.0);
    }
    if e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::UnreachableCodeReached) {
        return "it panicked or aborted".to_owned();
    }
    e.root_cause().to_string()
}

struct Host {
    wasi: WasiP1Ctx,
    limits: StoreLimits,
}

/// The initialized instance, read by the snapshot.
struct State {
    store: Store<Host>,
    instance: Instance,
}

impl InstanceState for State {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        // The instrumented module exports every global it asks for.
        let global = self.instance.get_global(&mut self.store, name);
        match global.map(|global| global.get(&mut self.store)) {
            Some(Val::I32(x)) => SnapshotVal::I32(x),
            Some(Val::I64(x)) => SnapshotVal::I64(x),
            Some(Val::F32(x)) => SnapshotVal::F32(x),
            Some(Val::F64(x)) => SnapshotVal::F64(x),
            Some(Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            // Wizer refuses reference-typed globals as it instruments.
            _ => SnapshotVal::I32(0),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut self.store, name) {
            Some(memory) => contents(memory.data(&self.store)),
            None => contents(&[]),
        }
    }
}
