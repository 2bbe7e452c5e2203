//! Starting an action's process with `posix_spawn`, its stdin and fd 3 wired to our pipes.
//!
//! `std::process::Command` can only put a descriptor on fd 3 from a `pre_exec` hook, which
//! makes it fork the whole server (page tables and all) instead of using `posix_spawn`:
//! the difference is a visible share of a native `/init`, and more on every restart.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use rustix::process::{Pid, PidfdFlags, Signal, WaitIdOptions, WaitOptions};
use tokio::io::unix::AsyncFd;

/// A running (or exited, not yet dropped) child, in a process group of its own.
pub struct Child {
    pid: Pid,
    /// How we learn that it exited, without a signal handler. Taken only by `drop`, to reap
    /// the child once it has died.
    exit: Option<ExitWatch>,
    status: Option<ExitStatus>,
}

/// What tells that a child exited.
enum ExitWatch {
    /// Readable once the child exits.
    Pidfd(AsyncFd<OwnedFd>),
    /// Where `pidfd_open` is missing (Linux before 5.3, some sandboxes and seccomp policies,
    /// valgrind): a thread blocked in `waitid` for the child, which flips this when it
    /// returns. The thread never reaps, so the status stays the child's to collect.
    Thread(tokio::sync::watch::Receiver<bool>),
}

impl ExitWatch {
    fn open(pid: Pid) -> io::Result<ExitWatch> {
        match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
            Ok(pidfd) => {
                // SAFETY: the AsyncFd owns the descriptor, which stays open until dropped.
                let pidfd = unsafe {
                    AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
                }
                .map_err(|e| e.into_parts().1)?;
                Ok(ExitWatch::Pidfd(pidfd))
            }
            Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {
                ExitWatch::thread(pid)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn thread(pid: Pid) -> io::Result<ExitWatch> {
        tracing::trace!("no pidfd_open here: a thread waits for this native child");
        let (exited, watch) = tokio::sync::watch::channel(false);
        std::thread::Builder::new()
            .name("wasmloop-child-exit".to_owned())
            .stack_size(64 * 1024)
            .spawn(move || {
                // NOWAIT: seen, not reaped (`try_wait` reaps). An error (the child already
                // reaped) ends the watch too.
                let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
                let _ = rustix::process::waitid(rustix::process::WaitId::Pid(pid), options);
                let _ = exited.send(true);
            })?;
        Ok(ExitWatch::Thread(watch))
    }

    /// Whether it has told that the child exited, without a system call.
    fn has_fired(&self) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match self {
            ExitWatch::Pidfd(pidfd) => pidfd.poll_read_ready(&mut cx).is_ready(),
            ExitWatch::Thread(watch) => *watch.borrow(),
        }
    }

    /// Returns once it has told that the child exited. Cancel-safe.
    async fn fired(&mut self) -> io::Result<()> {
        match self {
            ExitWatch::Pidfd(pidfd) => {
                // Cleared in case it was not the exit; once it was, `try_wait` sees it next.
                pidfd.readable().await?.clear_ready();
            }
            ExitWatch::Thread(watch) => {
                // The sender goes only after saying so, or with its thread.
                let _ = watch.wait_for(|exited| *exited).await;
            }
        }
        Ok(())
    }
}

/// Where a child's output goes: its fd 3 (results), stdout and stderr.
pub struct Outputs<'a> {
    pub fd3: &'a OwnedFd,
    pub stdout: &'a OwnedFd,
    pub stderr: &'a OwnedFd,
}

/// Starts `program` with exactly `env`, and `stdin` and `outputs` as its fds 0, 1, 2 and
/// 3, SIGPIPE back to its default and no signals blocked. Our copies of the four are the
/// caller's to close.
pub fn spawn(
    program: &Path,
    env: &[(String, String)],
    stdin: &OwnedFd,
    outputs: &Outputs<'_>,
) -> io::Result<Child> {
    let program = c_string(program.as_os_str())?;
    let argv = [program.as_ptr().cast_mut(), std::ptr::null_mut()];
    let env: Vec<CString> = env
        .iter()
        .map(|(k, v)| c_string(OsStr::new(&format!("{k}={v}"))))
        .collect::<io::Result<_>>()?;
    let mut envp: Vec<*mut libc::c_char> = env.iter().map(|e| e.as_ptr().cast_mut()).collect();
    envp.push(std::ptr::null_mut());
    // dup2 onto 0 to 3 in that order must not clobber its own sources.
    let stdin = above_stdio(stdin)?;
    let stdout = above_stdio(outputs.stdout)?;
    let stderr = above_stdio(outputs.stderr)?;
    let fd3 = above_stdio(outputs.fd3)?;

    let mut actions = FileActions::new()?;
    actions.dup2(stdin.as_raw_fd(), 0)?;
    actions.dup2(stdout.as_raw_fd(), 1)?;
    actions.dup2(stderr.as_raw_fd(), 2)?;
    actions.dup2(fd3.as_raw_fd(), 3)?;
    let attributes = Attributes::new()?;

    let mut pid: libc::pid_t = 0;
    let mut tries = 0;
    let code = loop {
        // No safe wrapper for posix_spawn exists (rustix has none; std's Command forks
        // when asked for a descriptor on fd 3, see above).
        // SAFETY: every pointer is valid for the call: NUL-terminated strings,
        // null-terminated arrays, and initialized actions and attributes. posix_spawn does
        // not keep them.
        let code = unsafe {
            libc::posix_spawn(
                &mut pid,
                program.as_ptr(),
                &actions.0,
                &attributes.0,
                argv.as_ptr(),
                envp.as_ptr(),
            )
        };
        // "Text file busy": the executable was just written (unpacked, compiled), and a
        // child forked meanwhile by another thread still holds it open for writing until
        // it execs, microseconds later. Waiting a moment is the remedy.
        if code != libc::ETXTBSY || tries == 50 {
            break code;
        }
        tries += 1;
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    if code != 0 {
        return Err(io::Error::from_raw_os_error(code));
    }
    let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::other("posix_spawn gave no pid"))?;
    // The child is ours until we reap it, so its pid cannot be reused under the watch.
    let exit = ExitWatch::open(pid).inspect_err(|_| kill_and_reap(pid))?;
    Ok(Child {
        pid,
        exit: Some(exit),
        status: None,
    })
}

impl Child {
    pub fn pid(&self) -> libc::pid_t {
        self.pid.as_raw_pid()
    }

    /// Whether the child is still running, as far as the reactor has seen: no system call
    /// unless its exit watch has fired (the reactor notices a pidfd turn readable in the
    /// same wait that brings the next request). Asked before every activation, so a system
    /// call saved here is one per activation.
    pub fn seems_alive(&mut self) -> bool {
        if self.status.is_some() {
            return false;
        }
        match &self.exit {
            None => false,
            Some(exit) if !exit.has_fired() => true,
            Some(_) => matches!(self.try_wait(), Ok(None)),
        }
    }

    /// The exit status if the child has exited, without waiting. A child found dead has
    /// its process group killed before it is reaped: whatever it started goes with it (a
    /// reaped leader's group id could be taken by another process later).
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        // A waiting thread must see the exit before the child is reaped: waiting for a pid
        // already reaped, it could wait on another child that took the pid.
        if matches!(&self.exit, Some(exit @ ExitWatch::Thread(_)) if !exit.has_fired()) {
            return Ok(self.status);
        }
        if self.status.is_none() {
            // NOWAIT: seen, not reaped, so that its pid still names its group.
            let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
            if rustix::process::waitid(rustix::process::WaitId::Pid(self.pid), options)?.is_some() {
                let _ = rustix::process::kill_process_group(self.pid, Signal::KILL);
                if let Some((_, status)) =
                    rustix::process::waitpid(Some(self.pid), WaitOptions::empty())?
                {
                    self.status = Some(ExitStatus::from_raw(status.as_raw()));
                }
            }
        }
        Ok(self.status)
    }

    /// Waits for the child to exit. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            let exit = self.exit.as_mut().expect("taken only when dropped");
            exit.fired().await?;
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let pid = self.pid;
        kill(pid);
        match (self.exit.take(), tokio::runtime::Handle::try_current()) {
            // Dying takes a moment: its exit watch tells when, and reaping it then leaves no
            // zombie behind (with a pidfd, without a thread of its own).
            (Some(mut exit), Ok(runtime)) => {
                runtime.spawn(async move {
                    let _ = exit.fired().await;
                    reap(pid);
                });
            }
            (exit, _) => {
                std::thread::spawn(move || {
                    // As in try_wait: a waiting thread sees the exit before it is reaped.
                    if let Some(ExitWatch::Thread(watch)) = exit {
                        while !*watch.borrow() && watch.has_changed().is_ok() {
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                    }
                    reap(pid);
                });
            }
        }
    }
}

/// SIGKILL to the child's process group (anything it started) and to the child.
fn kill(pid: Pid) {
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    let _ = rustix::process::kill_process(pid, Signal::KILL);
}

/// Waits for child `pid` and reaps it.
fn reap(pid: Pid) {
    let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
}

/// SIGKILL to a child that could not be set up, then reap it.
fn kill_and_reap(pid: Pid) {
    kill(pid);
    reap(pid);
}

fn c_string(text: &OsStr) -> io::Result<CString> {
    CString::new(text.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a program path or environment variable holds a NUL byte",
        )
    })
}

/// A copy of `fd` numbered 4 or above (close-on-exec), so that duplicating it onto 0 or 3
/// cannot overwrite the other source first.
fn above_stdio(fd: &OwnedFd) -> io::Result<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, 4)?)
}

struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> io::Result<Self> {
        // SAFETY: init fills the zeroed struct; it is destroyed in Drop only once initialized.
        unsafe {
            let mut actions = std::mem::zeroed();
            check(libc::posix_spawn_file_actions_init(&mut actions))?;
            Ok(FileActions(actions))
        }
    }

    /// dup2(from, to) in the child, which also clears close-on-exec on `to`.
    fn dup2(&mut self, from: RawFd, to: RawFd) -> io::Result<()> {
        // SAFETY: the actions were initialized.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, from, to) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

struct Attributes(libc::posix_spawnattr_t);

impl Attributes {
    /// Its own process group, SIGPIPE at its default (Rust ignores it, and ignored signals
    /// stay ignored across exec), and an empty signal mask.
    fn new() -> io::Result<Self> {
        // SAFETY: init fills the zeroed struct before any other call; the signal sets are
        // locals filled by sigemptyset/sigaddset.
        unsafe {
            let mut attributes = std::mem::zeroed();
            check(libc::posix_spawnattr_init(&mut attributes))?;
            let mut attributes = Attributes(attributes);
            let mut defaults: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut defaults);
            libc::sigaddset(&mut defaults, libc::SIGPIPE);
            check(libc::posix_spawnattr_setsigdefault(
                &mut attributes.0,
                &defaults,
            ))?;
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut mask);
            check(libc::posix_spawnattr_setsigmask(&mut attributes.0, &mask))?;
            check(libc::posix_spawnattr_setpgroup(&mut attributes.0, 0))?;
            let flags = libc::POSIX_SPAWN_SETPGROUP
                | libc::POSIX_SPAWN_SETSIGDEF
                | libc::POSIX_SPAWN_SETSIGMASK;
            check(libc::posix_spawnattr_setflags(
                &mut attributes.0,
                flags as libc::c_short,
            ))?;
            Ok(attributes)
        }
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

fn check(code: libc::c_int) -> io::Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that exits with status 3 once its stdin gives a line (or ends), its exit
    /// watched by a pidfd or, as where `pidfd_open` is missing, by a thread.
    fn child(dir: &Path, thread: bool) -> (Child, OwnedFd) {
        use std::os::unix::fs::PermissionsExt;
        let script = dir.join("exits-3");
        std::fs::write(&script, "#!/bin/sh\nread line\nexit 3\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (stdin, to_child) = rustix::pipe::pipe().unwrap();
        let (_, fd3) = rustix::pipe::pipe().unwrap();
        let (_, stdout) = rustix::pipe::pipe().unwrap();
        let (_, stderr) = rustix::pipe::pipe().unwrap();
        let outputs = Outputs {
            fd3: &fd3,
            stdout: &stdout,
            stderr: &stderr,
        };
        let mut child = spawn(&script, &[], &stdin, &outputs).unwrap();
        if thread {
            child.exit = Some(ExitWatch::thread(child.pid).unwrap());
        }
        (child, to_child)
    }

    /// Whether `pid` is gone (reaped, not a zombie) within 5 s; the runtime runs meanwhile.
    async fn reaped(pid: libc::pid_t) -> bool {
        for _ in 0..500 {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        false
    }

    #[tokio::test]
    async fn an_exit_is_seen_and_a_dropped_child_reaped_with_a_pidfd_or_a_thread() {
        for thread in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (mut child, to_child) = child(dir.path(), thread);
            assert!(child.seems_alive(), "thread: {thread}");
            rustix::io::write(&to_child, b"go\n").unwrap();
            let status = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
                .await
                .expect("the exit is seen")
                .unwrap();
            assert_eq!(status.code(), Some(3), "thread: {thread}");
            assert!(!child.seems_alive(), "thread: {thread}");

            // Seen between activations, with no wait pending: the check a native action
            // makes before each one.
            let (mut child, to_child) = self::child(dir.path(), thread);
            rustix::io::write(&to_child, b"go\n").unwrap();
            let mut alive = true;
            for _ in 0..500 {
                alive = child.seems_alive();
                if !alive {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(!alive, "thread: {thread}: the exit was not seen");
            assert_eq!(child.try_wait().unwrap().and_then(|s| s.code()), Some(3));

            // Dropped while it runs: killed, and reaped once it has died (no zombie).
            let (child, _to_child) = self::child(dir.path(), thread);
            let pid = child.pid();
            drop(child);
            assert!(reaped(pid).await, "thread: {thread}: {pid} was not reaped");
        }
    }
}
