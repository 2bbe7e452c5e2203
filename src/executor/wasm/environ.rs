//! The environment a guest reads: the action's, and in a fresh instance its activation's values.

// wasmtime-wasi fixes an environment when the store is made, before a prepared instance's
// activation has come; wasi-libc (Rust, C) reads it on the first `getenv`, Go's runtime as
// it starts. So WASI's environment calls are answered here, when the guest makes them.

use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use wasmtime::component::Linker as ComponentLinker;
use wasmtime::{Caller, Extern, Linker};
use wasmtime_wasi::p1::types::Errno;

/// One instance's environment. Shared by its store (which answers the guest) and the
/// instance (which tells it the activation's values).
#[derive(Clone)]
pub struct Environ(Arc<Mutex<State>>);

struct State {
    /// The action's variables: the same for every activation.
    base: Arc<[(String, String)]>,
    /// What the guest is told: the action's variables, and in a fresh instance what its
    /// activation carries beside `value`, as `__OW_*`; `None` until that has come. Made
    /// once: a guest asks twice (the sizes, then the strings).
    told: Option<Arc<[(String, String)]>>,
    /// A fresh instance (one activation) whose guest, reading its environment before its
    /// activation has come, waits for it, so that it reads the values, not their absence.
    hold: bool,
    /// The guest waits here (the start of a prepared instance ends there too).
    waiter: Option<Waker>,
    /// Whether the instance serves one activation, whose values it is told.
    fresh: bool,
}

impl Environ {
    /// `fresh`: the instance serves one activation, whose values it gets. `can_wait`: its
    /// start may stop at the first environment read (not when an ack must come first:
    /// guests read the environment to learn that they must send one).
    pub fn new(base: Arc<[(String, String)]>, fresh: bool, can_wait: bool) -> Environ {
        Environ(Arc::new(Mutex::new(State {
            // An instance that serves several never gets one's values: they would be
            // stale from the next activation on.
            told: (!fresh).then(|| base.clone()),
            base,
            hold: fresh && can_wait,
            waiter: None,
            fresh,
        })))
    }

    /// As it was when the instance was made: for a guest renewed in place.
    pub fn renew(&self) {
        let mut state = crate::lock(&self.0);
        state.told = (!state.fresh).then(|| state.base.clone());
        state.waiter = None;
    }

    /// The activation has come: a fresh instance's guest reads its values from now on.
    pub fn arrive(&self, context: &crate::context::Context) {
        let mut state = crate::lock(&self.0);
        if state.told.is_none() {
            state.told = Some(state.base.iter().cloned().chain(context.env()).collect());
            if let Some(waiter) = state.waiter.take() {
                waiter.wake();
            }
        }
    }

    /// Whether the guest waits for its activation's values (it has started, as far as
    /// it can before its activation).
    pub fn is_waiting(&self) -> bool {
        crate::lock(&self.0).waiter.is_some()
    }

    /// The variables, once they can be told.
    async fn read(&self) -> Arc<[(String, String)]> {
        std::future::poll_fn(|cx| {
            let mut state = crate::lock(&self.0);
            match state.told.clone() {
                None if state.hold => {
                    state.waiter = Some(cx.waker().clone());
                    Poll::Pending
                }
                // A guest that must ack reads before its activation: the action's alone.
                None => Poll::Ready(state.base.clone()),
                Some(told) => {
                    state.waiter = None;
                    Poll::Ready(told)
                }
            }
        })
        .await
    }
}

/// Where a store's data keeps its instance's `Environ` (as wasmtime-wasi's
/// `add_to_linker` is given where its context is).
pub type Accessor<T> = fn(&T) -> &Environ;

/// `environ_sizes_get` and `environ_get` for modules, from the instance's `Environ`.
pub fn serve_to_modules<T: Send + 'static>(
    linker: &mut Linker<T>,
    environ: Accessor<T>,
) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "environ_sizes_get",
        move |mut caller: Caller<'_, T>, (count_at, size_at): (i32, i32)| {
            Box::new(async move {
                let vars = environ(caller.data()).clone().read().await;
                let size: usize = vars.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
                Ok(errno(with_memory(&mut caller, |memory| {
                    put_u32(memory, count_at, vars.len())?;
                    put_u32(memory, size_at, size)
                })))
            })
        },
    )?;
    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "environ_get",
        move |mut caller: Caller<'_, T>, (pointers_at, strings_at): (i32, i32)| {
            Box::new(async move {
                let vars = environ(caller.data()).clone().read().await;
                Ok(errno(with_memory(&mut caller, |memory| {
                    let (mut pointer, mut string) = (pointers_at as u32, strings_at as u32);
                    for (key, value) in vars.iter() {
                        put_u32(memory, pointer as i32, string as usize)?;
                        pointer = pointer.checked_add(4).ok_or(Errno::Overflow)?;
                        for part in [key.as_bytes(), b"=", value.as_bytes(), b"\0"] {
                            put(memory, string, part)?;
                            string = u32::try_from(part.len())
                                .ok()
                                .and_then(|len| string.checked_add(len))
                                .ok_or(Errno::Overflow)?;
                        }
                    }
                    Ok(())
                })))
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// The WASI 0.2 environment interface as wasmtime-wasi registers it (earlier 0.2 versions'
/// imports resolve to it).
const ENVIRONMENT: &str = "wasi:cli/environment@0.2.12";

/// `get-environment` for components, from the instance's `Environ`.
pub fn serve_to_components<T: Send + 'static>(
    linker: &mut ComponentLinker<T>,
    environ: Accessor<T>,
) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    linker.instance(ENVIRONMENT)?.func_wrap_async(
        "get-environment",
        move |store: wasmtime::StoreContextMut<'_, T>, (): ()| {
            let environ = environ(store.data()).clone();
            Box::new(async move { Ok((environ.read().await.to_vec(),)) })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

fn errno(result: Result<(), Errno>) -> i32 {
    i32::from(u16::from(result.err().unwrap_or(Errno::Success)))
}

/// Runs `write` on the module's memory (`fault` without one).
fn with_memory<T>(
    caller: &mut Caller<'_, T>,
    write: impl FnOnce(&mut [u8]) -> Result<(), Errno>,
) -> Result<(), Errno> {
    match caller.get_export("memory") {
        Some(Extern::Memory(memory)) => write(memory.data_mut(caller)),
        _ => Err(Errno::Fault),
    }
}

fn put_u32(memory: &mut [u8], at: i32, value: usize) -> Result<(), Errno> {
    let value = u32::try_from(value).map_err(|_| Errno::Overflow)?;
    put(memory, at as u32, &value.to_le_bytes())
}

/// Writes `bytes` at `at`, or `fault` if they do not fit in the guest's memory.
fn put(memory: &mut [u8], at: u32, bytes: &[u8]) -> Result<(), Errno> {
    let start = at as usize;
    memory
        .get_mut(start..start.saturating_add(bytes.len()))
        .ok_or(Errno::Fault)?
        .copy_from_slice(bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;

    fn base() -> Arc<[(String, String)]> {
        Arc::from(vec![("__OW_NAMESPACE".to_owned(), "_".to_owned())])
    }

    fn now(environ: &Environ) -> Option<Vec<(String, String)>> {
        let waker = Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut read = std::pin::pin!(environ.read());
        match read.as_mut().poll(&mut cx) {
            Poll::Ready(vars) => Some(vars.to_vec()),
            Poll::Pending => None,
        }
    }

    /// The context of the `/run` body `body`, as the runtime reads it.
    fn context(body: &[u8]) -> crate::context::Context {
        crate::context::read(body, false).unwrap().context
    }

    #[test]
    fn a_fresh_instance_waits_for_its_activation_and_reads_its_values() {
        let environ = Environ::new(base(), true, true);
        assert_eq!(now(&environ), None, "read before the activation came");
        assert!(environ.is_waiting());
        environ.arrive(&context(br#"{"value":{"x":1},"activation_id":"a1","deadline":"17"}"#));
        let vars = now(&environ).expect("the values have come");
        assert!(!environ.is_waiting());
        assert!(vars.contains(&("__OW_NAMESPACE".to_owned(), "_".to_owned())));
        assert!(vars.contains(&("__OW_ACTIVATION_ID".to_owned(), "a1".to_owned())));
        assert!(vars.contains(&("__OW_DEADLINE".to_owned(), "17".to_owned())));
        assert!(!vars.iter().any(|(k, _)| k == "__OW_VALUE"));
    }

    #[test]
    fn an_instance_that_serves_several_never_has_an_activations_values() {
        let environ = Environ::new(base(), false, true);
        environ.arrive(&context(br#"{"value":{},"activation_id":"a1"}"#));
        assert_eq!(now(&environ), Some(base().to_vec()));
    }

    #[test]
    fn a_fresh_instance_that_must_ack_first_reads_without_waiting() {
        let environ = Environ::new(base(), true, false);
        assert_eq!(now(&environ), Some(base().to_vec()));
    }
}
