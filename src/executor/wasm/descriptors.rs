//! Caps on the files and sockets each instance holds open, within what the runtime leaves its guests.
//!
//! Every descriptor a guest opens is one of the process's own: a guest that keeps opening
//! files or sockets would otherwise exhaust the container's `nofile` limit, and the runtime
//! could no longer accept a connection or start a replacement instance. Each instance has
//! its own caps (`--max-instance-files`, `--max-instance-sockets`), and all the instances of
//! an action share what the runtime does not keep for itself (`Config::guest_descriptors`).
//!
//! What an instance holds is counted from its WASI resource table when it asks for one
//! more (closing removes the entry), so nothing has to follow each close.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::streams::GuestStderr;

/// What a guest asks to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    /// A TCP or UDP socket, or an HTTP request's connection.
    Socket,
}

/// The descriptors all instances of one action may hold at once.
#[derive(Debug)]
pub struct Shared {
    most: usize,
    held: AtomicUsize,
}

impl Shared {
    pub fn new(most: usize) -> Arc<Shared> {
        Arc::new(Shared {
            most,
            held: AtomicUsize::new(0),
        })
    }
}

/// The caps of one instance.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub files: usize,
    pub sockets: usize,
}

/// Why a guest may not open one more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The instance holds its cap of this kind.
    Cap(Kind),
    /// The action's instances hold all the runtime leaves them.
    Shared,
}

/// One instance's count. Cheap to clone: an HTTP connection holds a clone for its life.
#[derive(Clone)]
pub struct Descriptors(Arc<Mutex<State>>);

struct State {
    caps: Caps,
    shared: Arc<Shared>,
    files: usize,
    /// TCP and UDP sockets, as last counted in the table.
    sockets: usize,
    /// HTTP requests whose connection is open.
    connections: usize,
    /// What this instance has added to `shared.held`.
    counted: usize,
    logs: GuestStderr,
    /// Whether this activation's logs said so already, per refusal.
    said: [bool; 3],
}

impl State {
    fn total(&self) -> usize {
        self.files + self.sockets + self.connections
    }

    /// Brings the action-wide count in line with this instance's.
    fn recount(&mut self) {
        let total = self.total();
        if total > self.counted {
            self.shared
                .held
                .fetch_add(total - self.counted, Ordering::Relaxed);
        } else {
            self.shared
                .held
                .fetch_sub(self.counted - total, Ordering::Relaxed);
        }
        self.counted = total;
    }

    fn in_use(&self, kind: Kind) -> usize {
        match kind {
            Kind::File => self.files,
            Kind::Socket => self.sockets + self.connections,
        }
    }

    fn cap(&self, kind: Kind) -> usize {
        match kind {
            Kind::File => self.caps.files,
            Kind::Socket => self.caps.sockets,
        }
    }

    /// Whether one more of `kind` fits; if so, it is counted.
    fn admit(&mut self, kind: Kind) -> Result<(), Refusal> {
        self.recount();
        let refusal = if self.in_use(kind) >= self.cap(kind) {
            Refusal::Cap(kind)
        } else if self.shared.held.load(Ordering::Relaxed) >= self.shared.most {
            Refusal::Shared
        } else {
            return Ok(());
        };
        let which = match refusal {
            Refusal::Cap(Kind::File) => 0,
            Refusal::Cap(Kind::Socket) => 1,
            Refusal::Shared => 2,
        };
        if !std::mem::replace(&mut self.said[which], true) {
            self.logs.note(&self.refusal_line(kind, refusal));
        }
        Err(refusal)
    }

    /// The log line of a refusal: what was refused, the cap, and the setting to change.
    fn refusal_line(&self, kind: Kind, refusal: Refusal) -> String {
        let what = match kind {
            Kind::File => "a file",
            Kind::Socket => "a socket",
        };
        match refusal {
            Refusal::Cap(Kind::File) => format!(
                "wasmloop: refused to open {what}: too many open files for this instance: {} \
                 (--max-instance-files, WASMLOOP_MAX_INSTANCE_FILES); close files the action \
                 is done with, or raise the cap",
                self.caps.files
            ),
            Refusal::Cap(Kind::Socket) => format!(
                "wasmloop: refused to open {what}: too many open sockets for this instance: {} \
                 (--max-instance-sockets, WASMLOOP_MAX_INSTANCE_SOCKETS; HTTP requests count \
                 while their connection is open); close connections the action is done with, \
                 or raise the cap",
                self.caps.sockets
            ),
            Refusal::Shared => format!(
                "wasmloop: refused to open {what}: the action's instances hold {} files and \
                 sockets, all that the container's open-file limit (nofile) leaves them beside \
                 what the runtime keeps for itself; raise the limit (docker run --ulimit \
                 nofile=N), or lower --concurrency or the per-instance caps",
                self.shared.most
            ),
        }
    }
}

impl Descriptors {
    pub fn new(caps: Caps, shared: Arc<Shared>, logs: GuestStderr) -> Self {
        Descriptors(Arc::new(Mutex::new(State {
            caps,
            shared,
            files: 0,
            sockets: 0,
            connections: 0,
            counted: 0,
            logs,
            said: [false; 3],
        })))
    }

    /// May the guest, holding `files` open files, open one more?
    pub fn admit_file(&self, files: usize) -> Result<(), Refusal> {
        let mut state = crate::lock(&self.0);
        state.files = files;
        state.admit(Kind::File)?;
        // Counted until the next look at the table, which will find it there.
        state.files += 1;
        state.recount();
        Ok(())
    }

    /// May the guest, holding `sockets` TCP and UDP sockets, open one more?
    pub fn admit_socket(&self, sockets: usize) -> Result<(), Refusal> {
        let mut state = crate::lock(&self.0);
        state.sockets = sockets;
        state.admit(Kind::Socket)?;
        state.sockets += 1;
        state.recount();
        Ok(())
    }

    /// May the guest send an HTTP request? The connection counts as a socket until the
    /// returned guard goes.
    pub fn admit_connection(&self) -> Result<Connection, Refusal> {
        let mut state = crate::lock(&self.0);
        state.admit(Kind::Socket)?;
        state.connections += 1;
        state.recount();
        Ok(Connection(self.clone()))
    }

    /// A new activation: its logs say again what is refused.
    pub fn new_activation(&self) {
        crate::lock(&self.0).said = [false; 3];
    }
}

impl Drop for State {
    /// The instance is gone, and with it whatever it held.
    fn drop(&mut self) {
        self.shared.held.fetch_sub(self.counted, Ordering::Relaxed);
    }
}

/// An HTTP request's connection, counted for as long as it is open.
pub struct Connection(Descriptors);

impl Drop for Connection {
    fn drop(&mut self) {
        let mut state = crate::lock(&self.0.0);
        state.connections = state.connections.saturating_sub(1);
        state.recount();
    }
}

/// How many entries of type `T` a resource table holds.
pub fn live<T: std::any::Any>(table: &mut wasmtime::component::ResourceTable) -> usize {
    table.iter_mut().filter(|entry| entry.is::<T>()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(shared: &Arc<Shared>, files: usize, sockets: usize) -> Descriptors {
        Descriptors::new(
            Caps { files, sockets },
            shared.clone(),
            GuestStderr::default(),
        )
    }

    #[test]
    fn each_instance_is_held_to_its_caps_and_all_to_what_they_share() {
        let shared = Shared::new(5);
        let one = instance(&shared, 2, 2);
        assert_eq!(one.admit_file(0), Ok(()));
        assert_eq!(one.admit_file(1), Ok(()));
        assert_eq!(one.admit_file(2), Err(Refusal::Cap(Kind::File)));
        // A file closed since is found missing at the next count.
        assert_eq!(one.admit_file(1), Ok(()));
        let connection = one.admit_connection().unwrap();
        assert_eq!(one.admit_socket(0), Ok(()));
        assert_eq!(one.admit_socket(1), Err(Refusal::Cap(Kind::Socket)));
        drop(connection);
        assert_eq!(one.admit_socket(1), Ok(()));
        assert_eq!(shared.held.load(Ordering::Relaxed), 4);
        let two = instance(&shared, 8, 8);
        assert_eq!(two.admit_file(0), Ok(()));
        assert_eq!(two.admit_file(1), Err(Refusal::Shared));
        // What an instance held is given back when it goes.
        drop(one);
        assert_eq!(shared.held.load(Ordering::Relaxed), 1);
        assert_eq!(two.admit_file(1), Ok(()));
    }

    #[test]
    fn a_refusal_is_logged_once_an_activation_naming_the_cap_and_its_setting() {
        let one = instance(&Shared::new(100), 0, 4);
        let said = |d: &Descriptors| crate::lock(&d.0).said;
        assert!(one.admit_file(0).is_err());
        assert_eq!(said(&one), [true, false, false]);
        one.new_activation();
        assert_eq!(said(&one), [false; 3]);
        assert!(one.admit_file(0).is_err());
        assert_eq!(said(&one), [true, false, false]);
        let line = crate::lock(&one.0).refusal_line(Kind::File, Refusal::Cap(Kind::File));
        assert_eq!(
            line,
            "wasmloop: refused to open a file: too many open files for this instance: 0 \
             (--max-instance-files, WASMLOOP_MAX_INSTANCE_FILES); close files the action is \
             done with, or raise the cap"
        );
    }
}
