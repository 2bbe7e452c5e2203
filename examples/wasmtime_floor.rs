//! What wasmtime alone costs per fresh instance of a WASI module, against one instance that serves every line.

// The floor under `--max-activations-per-instance 1`: a store, a WASI context and an
// instance made from one `InstancePre`, with the server's own pool settings, `_start` run
// over one request line, then everything dropped. No HTTP, no pool of workers, no
// prepared successor: whatever the server's fresh rows cost beyond this is its own.
//
//     cargo build --release --example wasmtime_floor
//     taskset -c 0 target/release/examples/wasmtime_floor wasm-examples/out/hello-rust.wasm

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use wasmloop::config::{Codegen, Config};
use wasmtime::{Engine, InstancePre, Linker, Module, Store, UpdateDeadline};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};

/// What the examples' hellos take.
const LINE: &[u8] = b"{\"value\":{\"name\":\"Mike\"}}\n";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(module) = args.next() else {
        bail!(
            "usage: wasmtime_floor MODULE.wasm [LINES] (a WASI command that answers each line of stdin on stdout)"
        );
    };
    let lines: usize = match args.next() {
        Some(n) => n.parse().context("LINES must be a whole number")?,
        None => 20_000,
    };
    // What `wasmloop serve` makes with its defaults (`--concurrency 1`).
    let settings = Config::default().engine_settings(Codegen::Cranelift);
    let engine = Engine::new(&wasmloop::executor::wasm::pooled_config(settings))?;
    let module = Module::from_file(&engine, &module)
        .map_err(|e| anyhow::anyhow!("cannot load {module}: {e:#}"))?;
    let mut linker: Linker<WasiP1Ctx> = Linker::new(&engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |wasi| wasi)?;
    let pre = linker.instantiate_pre(&module)?;
    println!("{lines} lines, three rounds; µs per line");
    for round in 1..=3 {
        let persistent = one_instance(&engine, &pre, lines).await?;
        let (fresh, dropping) = an_instance_each(&engine, &pre, lines).await?;
        println!(
            "round {round}: persistent {:.2}, fresh {:.2} (of which the drop {:.2}): a fresh instance costs +{:.2}",
            per_line(persistent, lines),
            per_line(fresh, lines),
            per_line(dropping, lines),
            per_line(fresh.saturating_sub(persistent), lines),
        );
    }
    Ok(())
}

fn per_line(time: Duration, lines: usize) -> f64 {
    time.as_secs_f64() * 1e6 / lines as f64
}

/// A store whose guest reads `input` and writes to `output`, yielding at each epoch tick
/// as the server's do (no ticker runs here, so it never does).
fn store(engine: &Engine, input: Vec<u8>, output: MemoryOutputPipe) -> Store<WasiP1Ctx> {
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdin(MemoryInputPipe::new(input))
        .stdout(output)
        .args(&["main"]);
    let mut store = Store::new(engine, wasi.build_p1());
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1)));
    store
}

/// Runs `_start` to its end (stdin's end), checking that it answered every line.
async fn run(
    mut store: Store<WasiP1Ctx>,
    pre: &InstancePre<WasiP1Ctx>,
    output: &MemoryOutputPipe,
    lines: usize,
) -> Result<Store<WasiP1Ctx>> {
    let instance = pre.instantiate_async(&mut store).await?;
    let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
    // Go's runtime ends with `proc_exit(0)` where others return from `_start`.
    if let Err(e) = start.call_async(&mut store, ()).await
        && !matches!(
            e.downcast_ref::<wasmtime_wasi::I32Exit>(),
            Some(wasmtime_wasi::I32Exit(0))
        )
    {
        return Err(e.into());
    }
    let answers = output
        .contents()
        .iter()
        .filter(|byte| **byte == b'\n')
        .count();
    if answers != lines {
        bail!(
            "the module answered {answers} of {lines} lines: it must answer each line of stdin with one line on stdout"
        );
    }
    Ok(store)
}

async fn one_instance(
    engine: &Engine,
    pre: &InstancePre<WasiP1Ctx>,
    lines: usize,
) -> Result<Duration> {
    let input = LINE.repeat(lines);
    let output = MemoryOutputPipe::new(usize::MAX);
    let began = Instant::now();
    let store = run(store(engine, input, output.clone()), pre, &output, lines).await?;
    drop(store);
    Ok(began.elapsed())
}

/// The whole time, and the part of it spent dropping stores.
async fn an_instance_each(
    engine: &Engine,
    pre: &InstancePre<WasiP1Ctx>,
    lines: usize,
) -> Result<(Duration, Duration)> {
    let mut dropping = Duration::ZERO;
    let began = Instant::now();
    for _ in 0..lines {
        let output = MemoryOutputPipe::new(1 << 16);
        let store = run(
            store(engine, LINE.to_vec(), output.clone()),
            pre,
            &output,
            1,
        )
        .await?;
        let dropped = Instant::now();
        drop(store);
        dropping += dropped.elapsed();
    }
    Ok((began.elapsed(), dropping))
}
