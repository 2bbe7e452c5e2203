//! What wasmtime alone costs per fresh instance of a WASI module, made or renewed, against one instance that serves every line.

// The floor under `--max-activations-per-instance 1`, two ways. Made: a store, a WASI
// context and an instance made from one `InstancePre`, with the server's own pool
// settings, `_start` run over one request line, then everything dropped. Renewed, as the
// server does it: one instance, its call abandoned once it has answered, its memory and
// globals put back (`wasmloop::executor::wasm::renew`), a new WASI context, `_start` again.
// The module is the one the server runs, rewritten to be renewable. No HTTP, no pool of
// workers: whatever the server's fresh rows cost beyond this is its own.
//
//     cargo build --release --example wasmtime_floor
//     taskset -c 0 target/release/examples/wasmtime_floor wasm-examples/out/hello-rust.wasm

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use wasmloop::config::Config;
use wasmloop::executor::wasm::compile_here;
use wasmloop::executor::wasm::renew::Renewal;
use wasmloop::executor::wasm::{Codegen, engine_settings};
use wasmtime::{Engine, InstancePre, Linker, Module, Store, UpdateDeadline};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};

/// What the examples' hellos take.
const LINE: &[u8] = b"{\"value\":{\"name\":\"Mike\"}}\n";

fn main() -> Result<()> {
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
    let settings = engine_settings(&Config::default(), Codegen::Cranelift);
    let engine = Engine::new(&wasmloop::executor::wasm::pooled_config(settings))?;
    // Compiled as the server compiles it: snapshotted at its start-up if it asks to be (the
    // Go SDK's reactors), rewritten to be renewable if it can be.
    let bytes = std::fs::read(&module).with_context(|| format!("cannot read {module}"))?;
    let code =
        compile_here(&bytes, settings, true).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    // SAFETY: compiled just now, by this runtime's own compile, for this engine's settings.
    let module = unsafe { Module::deserialize(&engine, &code) }
        .map_err(|e| anyhow::anyhow!("cannot load {module}: {e:#}"))?;
    let mut linker: Linker<WasiP1Ctx> = Linker::new(&engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |wasi| wasi)?;
    let pre = linker.instantiate_pre(&module)?;
    // Started after the compile, which runs a snapshot's start-up on a runtime of its own.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(measure(&engine, &pre, lines))
}

async fn measure(engine: &Engine, pre: &InstancePre<WasiP1Ctx>, lines: usize) -> Result<()> {
    println!("{lines} lines, three rounds; µs per line");
    for round in 1..=3 {
        let persistent = one_instance(engine, pre, lines).await?;
        let (fresh, dropping) = an_instance_each(engine, pre, lines).await?;
        let renewed = one_renewed_each_line(engine, pre, lines).await?;
        println!(
            "round {round}: persistent {:.2}; made fresh {:.2} (of which the drop {:.2}): +{:.2}; renewed {:.2}: +{:.2}",
            per_line(persistent, lines),
            per_line(fresh, lines),
            per_line(dropping, lines),
            per_line(fresh.saturating_sub(persistent), lines),
            per_line(renewed, lines),
            per_line(renewed.saturating_sub(persistent), lines),
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

/// One instance renewed after each line, as the server renews one (four MiB written at
/// most, its limit).
async fn one_renewed_each_line(
    engine: &Engine,
    pre: &InstancePre<WasiP1Ctx>,
    lines: usize,
) -> Result<Duration> {
    let one_line = || {
        let output = MemoryOutputPipe::new(1 << 16);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdin(OneLine(Arc::new(Mutex::new(Bytes::from_static(LINE)))))
            .stdout(output.clone())
            .args(&["main"]);
        (wasi.build_p1(), output)
    };
    let (wasi, _) = one_line();
    let mut store = Store::new(engine, wasi);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1)));
    let instance = pre.instantiate_async(&mut store).await?;
    let renewal = Renewal::of(&mut store, &instance, &OnceLock::new(), 4 << 20).context(
        "no renewal: the module's code does not allow it (`wasmloop serve --log-filter \
             wasmloop::executor=debug` says why), or this host cannot tell the pages written \
             (PAGEMAP_SCAN: Linux 6.7)",
    )?;
    let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
    let began = Instant::now();
    for _ in 0..lines {
        let (wasi, output) = one_line();
        *store.data_mut() = wasi;
        {
            let mut call = std::pin::pin!(start.call_async(&mut store, ()));
            // Answered, and waiting for a line that never comes: abandoned there.
            std::future::poll_fn(|cx| match call.as_mut().poll(cx) {
                Poll::Ready(ended) => Poll::Ready(Err(anyhow::anyhow!(
                    "the module ended instead of waiting for its next line: {ended:?}"
                ))),
                Poll::Pending if output.contents().ends_with(b"\n") => Poll::Ready(Ok(())),
                Poll::Pending => Poll::Pending,
            })
            .await?;
        }
        renewal.reset(&mut store)?;
    }
    Ok(began.elapsed())
}

/// A stdin of one line that then waits forever, as the server's does between requests.
#[derive(Clone)]
struct OneLine(Arc<Mutex<Bytes>>);

impl OneLine {
    fn take(&self, most: usize) -> Bytes {
        let mut line = self.0.lock().unwrap();
        let n = most.min(line.len());
        line.split_to(n)
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for OneLine {
    async fn ready(&mut self) {
        if self.0.lock().unwrap().is_empty() {
            std::future::pending::<()>().await
        }
    }
}

impl wasmtime_wasi::p2::InputStream for OneLine {
    fn read(&mut self, size: usize) -> wasmtime_wasi::p2::StreamResult<Bytes> {
        Ok(self.take(size))
    }
}

impl tokio::io::AsyncRead for OneLine {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let line = self.take(buf.remaining());
        if line.is_empty() {
            return Poll::Pending;
        }
        buf.put_slice(&line);
        Poll::Ready(Ok(()))
    }
}

impl wasmtime_wasi::cli::IsTerminal for OneLine {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdinStream for OneLine {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncRead + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::InputStream> {
        Box::new(self.clone())
    }
}
