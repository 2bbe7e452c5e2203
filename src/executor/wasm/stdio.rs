//! A direct path for a guest's reads of its stdin and writes to its stdout and stderr, the
//! calls every activation makes: wasmtime-wasi's general `fd_write` spends ~2,500
//! instructions on each (descriptor table, stream readiness, one buffer per call) and its
//! `fd_read` ~1,000 more than this path (memory looked up by name, stream table, a span).

use wasmtime::{Caller, Extern, Linker, Memory};
use wasmtime_wasi::p1::types::Errno;
use wasmtime_wasi::p1::wasi_snapshot_preview1::{self as p1, WasiSnapshotPreview1};

use super::host::Host;
use super::streams::Sink;

const MODULE: &str = "wasi_snapshot_preview1";

/// Calls wasmtime-wasi's own implementation of `$func`, set up as its generated glue does.
macro_rules! general {
    ($caller:expr, $func:ident($($arg:expr),*)) => {{
        let caller: &mut Caller<'_, Host> = $caller;
        let fuel = wasmtime::AsContextMut::as_context_mut(&mut *caller).hostcall_fuel();
        let Some(memory) = memory(caller) else {
            wasmtime::bail!("missing required memory export");
        };
        let (data, host) = memory.data_and_store_mut(&mut *caller);
        host.wasi.set_hostcall_fuel(fuel);
        let mut memory = wiggle::GuestMemory::Unshared(data);
        p1::$func(&mut host.wasi, &mut memory, $($arg),*).await
    }};
}

/// Replaces `fd_read` and `fd_write` (and wraps `fd_close`, `fd_renumber` to notice moved
/// descriptors) in a linker that has WASI preview 1 already.
pub fn add_to_linker(linker: &mut Linker<Host>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    linker.func_wrap_async(
        MODULE,
        "fd_read",
        |mut caller: Caller<'_, Host>, (fd, iovs, iovs_len, read): (i32, i32, i32, i32)| {
            Box::new(async move {
                if fd == 0 && !caller.data().stdio.moved {
                    // As wasmtime-wasi does for stdin, whatever its flags: the guest waits
                    // here for its next request (the fiber suspends, the activation polls).
                    let stdin = caller.data().stdin.clone();
                    std::future::poll_fn(|cx| stdin.poll_ready(cx)).await;
                    return Ok(read_stdin(&mut caller, iovs, iovs_len, read) as i32);
                }
                general!(&mut caller, fd_read(fd, iovs, iovs_len, read))
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "fd_write",
        |mut caller: Caller<'_, Host>, (fd, iovs, iovs_len, written): (i32, i32, i32, i32)| {
            Box::new(async move {
                if (fd == 1 || fd == 2) && !caller.data().stdio.moved {
                    return Ok(write_stdio(&mut caller, fd, iovs, iovs_len, written) as i32);
                }
                general!(&mut caller, fd_write(fd, iovs, iovs_len, written))
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "fd_close",
        |mut caller: Caller<'_, Host>, (fd,): (i32,)| {
            Box::new(async move {
                caller.data_mut().stdio.moved |= (0..=2).contains(&fd);
                general!(&mut caller, fd_close(fd))
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "fd_renumber",
        |mut caller: Caller<'_, Host>, (from, to): (i32, i32)| {
            Box::new(async move {
                let stdio = |fd| (0..=2).contains(&fd);
                caller.data_mut().stdio.moved |= stdio(from) || stdio(to);
                general!(&mut caller, fd_renumber(from, to))
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

fn memory(caller: &mut Caller<'_, Host>) -> Option<Memory> {
    if let Some(memory) = caller.data().stdio.memory {
        return Some(memory);
    }
    let memory = match caller.get_export("memory") {
        Some(Extern::Memory(memory)) => memory,
        _ => return None,
    };
    caller.data_mut().stdio.memory = Some(memory);
    Some(memory)
}

/// The range of guest memory a pointer and a length stand for, if it is all inside `data`.
fn span(data: &[u8], at: u32, len: u32) -> Option<std::ops::Range<usize>> {
    let range = at as usize..(at as usize).checked_add(len as usize)?;
    data.get(range.clone()).map(|_| range)
}

/// The (pointer, length) pairs of an iovec array, or `None` if it is out of bounds.
fn iovecs(data: &[u8], iovs: i32, iovs_len: i32) -> Option<impl Iterator<Item = (u32, u32)>> {
    let array = &data[span(data, iovs as u32, (iovs_len as u32).checked_mul(8)?)?];
    let word = |bytes: &[u8], at: usize| {
        u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
    };
    Some(
        array
            .chunks_exact(8)
            .map(move |iov| (word(iov, 0), word(iov, 4))),
    )
}

/// Stores a call's `u32` result where the guest asked for it.
fn store_size(data: &mut [u8], at: i32, size: u32) -> Errno {
    match span(data, at as u32, 4) {
        Some(range) => {
            data[range].copy_from_slice(&size.to_le_bytes());
            Errno::Success
        }
        None => Errno::Fault,
    }
}

/// `fd_read` on the guest's stdin once input is there: what is waiting, up to the size of
/// the first non-empty buffer (as wasmtime-wasi reads it), the count to `*read`.
fn read_stdin(caller: &mut Caller<'_, Host>, iovs: i32, iovs_len: i32, read: i32) -> Errno {
    let Some(memory) = memory(caller) else {
        return Errno::Fault;
    };
    let (data, host) = memory.data_and_store_mut(&mut *caller);
    let Some(first) = iovecs(data, iovs, iovs_len).map(|mut all| all.find(|&(_, len)| len > 0))
    else {
        return Errno::Fault;
    };
    let Some((at, len)) = first else {
        return store_size(data, read, 0);
    };
    let Some(buffer) = span(data, at, len) else {
        return Errno::Fault;
    };
    let bytes = host.stdin.take(len as usize);
    data[buffer.start..buffer.start + bytes.len()].copy_from_slice(&bytes);
    store_size(data, read, bytes.len() as u32)
}

/// `fd_write` on the guest's stdout (1) or stderr (2): every buffer of the iovec array
/// goes to the stream, the total to `*written`.
fn write_stdio(
    caller: &mut Caller<'_, Host>,
    fd: i32,
    iovs: i32,
    iovs_len: i32,
    written: i32,
) -> Errno {
    let Some(memory) = memory(caller) else {
        return Errno::Fault;
    };
    let (data, host) = memory.data_and_store_mut(&mut *caller);
    let Some(iovecs) = iovecs(data, iovs, iovs_len) else {
        return Errno::Fault;
    };
    let mut total: u32 = 0;
    for (at, len) in iovecs {
        let Some(range) = span(data, at, len) else {
            return Errno::Fault;
        };
        let bytes = &data[range];
        let Some(sum) = total.checked_add(len) else {
            return Errno::Inval;
        };
        total = sum;
        if fd == 1 {
            host.stdout.accept(bytes);
        } else {
            host.stderr.accept(bytes);
        }
    }
    store_size(data, written, total)
}
