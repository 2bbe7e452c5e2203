//! Caps on the files and sockets each instance holds open, within what the runtime leaves its guests.
//!
//! Every descriptor a guest opens is one of the process's own: a guest that keeps opening
//! files or sockets would otherwise exhaust the container's `nofile` limit, and the runtime
//! could no longer accept a connection or start a replacement instance. Each instance has
//! its own caps (`--max-instance-files`, `--max-instance-sockets`), and no guest may open
//! one more once the process holds what the runtime leaves guests (`WasmSettings::guest_descriptors`).
//!
//! What an instance holds is counted from its WASI resource table when it asks for one
//! more (closing removes the entry), so nothing has to follow each close.

use std::sync::{Arc, Mutex};

use super::streams::GuestStderr;

/// What a guest asks to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    File,
    /// A TCP or UDP socket, or an HTTP request's connection.
    Socket,
}

/// The descriptors the process may hold before guests are refused more: what the
/// runtime keeps for itself (accepting connections, logging, starting replacements) stays
/// free whatever the guests hold, and however they hold it (a component's file stream
/// keeps its file open after the file's descriptor is dropped).
#[derive(Debug, Clone, Copy)]
pub struct Shared {
    most: usize,
    /// How many descriptors the process holds now.
    open: fn() -> usize,
}

impl Shared {
    pub fn new(most: usize) -> Shared {
        Shared {
            most,
            open: open_descriptors,
        }
    }

    fn full(&self) -> bool {
        (self.open)() >= self.most
    }
}

/// The process's open descriptors, counted where the kernel lists them: a directory read,
/// which only a guest opening a file or a socket pays for.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |fds| fds.count())
}

/// The caps of one instance, and what the process may hold.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub files: usize,
    pub sockets: usize,
    pub shared: Shared,
}

/// Why a guest may not open one more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// The instance holds its cap of this kind.
    Cap(Opening),
    /// The process holds all the descriptors the runtime leaves its guests.
    Shared,
}

/// One instance's count. Cheap to clone: an HTTP connection holds a clone for its life.
#[derive(Clone)]
pub struct Descriptors(Arc<Mutex<State>>);

struct State {
    caps: Caps,
    /// TCP and UDP sockets, as last counted in the table: an HTTP request, which cannot
    /// see the table, goes by this.
    sockets: usize,
    /// HTTP requests whose connection is open: what the table does not show.
    connections: usize,
    logs: GuestStderr,
    /// Whether this activation's logs said so already, per refusal.
    said: [bool; 3],
}

impl State {
    /// Whether one more of `kind` fits beside the `held` the instance holds (as its
    /// caller has just counted them) and what the process holds.
    fn admit(&mut self, kind: Opening, held: usize) -> Result<(), NoRoom> {
        let cap = match kind {
            Opening::File => self.caps.files,
            Opening::Socket => self.caps.sockets,
        };
        let refusal = if held >= cap {
            NoRoom::Cap(kind)
        } else if self.caps.shared.full() {
            NoRoom::Shared
        } else {
            return Ok(());
        };
        let which = match refusal {
            NoRoom::Cap(Opening::File) => 0,
            NoRoom::Cap(Opening::Socket) => 1,
            NoRoom::Shared => 2,
        };
        if !std::mem::replace(&mut self.said[which], true) {
            self.logs.note(&self.refusal_line(kind, refusal));
        }
        Err(refusal)
    }

    /// The log line of a refusal: what was refused, the cap, and the setting to change.
    fn refusal_line(&self, kind: Opening, refusal: NoRoom) -> String {
        let what = match kind {
            Opening::File => "a file",
            Opening::Socket => "a socket",
        };
        match refusal {
            NoRoom::Cap(Opening::File) => format!(
                "wasmloop: refused to open {what}: too many open files for this instance: {} \
                 (--max-instance-files, WASMLOOP_MAX_INSTANCE_FILES); close files the action \
                 is done with, or raise the cap",
                self.caps.files
            ),
            NoRoom::Cap(Opening::Socket) => format!(
                "wasmloop: refused to open {what}: too many open sockets for this instance: {} \
                 (--max-instance-sockets, WASMLOOP_MAX_INSTANCE_SOCKETS; HTTP requests count \
                 while their connection is open); close connections the action is done with, \
                 or raise the cap",
                self.caps.sockets
            ),
            NoRoom::Shared => format!(
                "wasmloop: refused to open {what}: the runtime holds {} descriptors, all that \
                 the container's open-file limit (nofile) leaves its guests beside what it \
                 keeps for itself; raise the limit (docker run --ulimit nofile=N), or lower \
                 --concurrency or the per-instance caps",
                self.caps.shared.most
            ),
        }
    }
}

impl Descriptors {
    pub fn new(caps: Caps, logs: GuestStderr) -> Self {
        Descriptors(Arc::new(Mutex::new(State {
            caps,
            sockets: 0,
            connections: 0,
            logs,
            said: [false; 3],
        })))
    }

    /// May the guest, holding `files` open files, open one more?
    pub fn admit_file(&self, files: usize) -> Result<(), NoRoom> {
        crate::lock(&self.0).admit(Opening::File, files)
    }

    /// May the guest, holding `sockets` TCP and UDP sockets, open one more?
    pub fn admit_socket(&self, sockets: usize) -> Result<(), NoRoom> {
        let mut state = crate::lock(&self.0);
        state.sockets = sockets;
        let held = sockets + state.connections;
        state.admit(Opening::Socket, held)
    }

    /// May the guest send an HTTP request? Its connection counts as a socket until the
    /// returned guard goes.
    pub fn admit_connection(&self) -> Result<Connection, NoRoom> {
        let mut state = crate::lock(&self.0);
        let held = state.sockets + state.connections;
        state.admit(Opening::Socket, held)?;
        state.connections += 1;
        Ok(Connection(self.clone()))
    }

    /// A new activation: its logs say again what is refused.
    pub fn new_activation(&self) {
        crate::lock(&self.0).said = [false; 3];
    }
}

/// An HTTP request's connection, counted for as long as it is open.
pub struct Connection(Descriptors);

impl Drop for Connection {
    fn drop(&mut self) {
        let mut state = crate::lock(&self.0.0);
        state.connections = state.connections.saturating_sub(1);
    }
}

/// How many entries of type `T` a resource table holds.
pub fn live<T: std::any::Any>(table: &mut wasmtime::component::ResourceTable) -> usize {
    table.iter_mut().filter(|entry| entry.is::<T>()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(shared: Shared, files: usize, sockets: usize) -> Descriptors {
        let caps = Caps {
            files,
            sockets,
            shared,
        };
        Descriptors::new(caps, GuestStderr::default())
    }

    #[test]
    fn each_instance_is_held_to_its_caps_and_all_to_what_the_process_may_hold() {
        let shared = Shared::new(usize::MAX);
        let one = instance(shared, 2, 2);
        assert_eq!(one.admit_file(0), Ok(()));
        assert_eq!(one.admit_file(1), Ok(()));
        assert_eq!(one.admit_file(2), Err(NoRoom::Cap(Opening::File)));
        // A file closed since is found missing at the next count.
        assert_eq!(one.admit_file(1), Ok(()));
        let connection = one.admit_connection().unwrap();
        assert_eq!(one.admit_socket(0), Ok(()));
        assert_eq!(one.admit_socket(1), Err(NoRoom::Cap(Opening::Socket)));
        drop(connection);
        assert_eq!(one.admit_socket(1), Ok(()));
        // Past what the process may hold, nothing more, whatever the instance's caps.
        let full = Shared {
            most: 10,
            open: || 10,
        };
        let two = instance(full, 8, 8);
        assert_eq!(two.admit_file(0), Err(NoRoom::Shared));
        assert_eq!(two.admit_socket(0), Err(NoRoom::Shared));
        assert!(open_descriptors() > 2, "stdio at least");
    }

    #[test]
    fn a_refusal_is_logged_once_an_activation_naming_the_cap_and_its_setting() {
        let one = instance(Shared::new(100), 0, 4);
        let said = |d: &Descriptors| crate::lock(&d.0).said;
        assert!(one.admit_file(0).is_err());
        assert_eq!(said(&one), [true, false, false]);
        one.new_activation();
        assert_eq!(said(&one), [false; 3]);
        assert!(one.admit_file(0).is_err());
        assert_eq!(said(&one), [true, false, false]);
        let line = crate::lock(&one.0).refusal_line(Opening::File, NoRoom::Cap(Opening::File));
        assert_eq!(
            line,
            "wasmloop: refused to open a file: too many open files for this instance: 0 \
             (--max-instance-files, WASMLOOP_MAX_INSTANCE_FILES); close files the action is \
             done with, or raise the cap"
        );
    }
}
