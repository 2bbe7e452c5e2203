//! Why a native action is not answering or did not start, told from what Linux shows of it.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::time::Duration;

use crate::action::detect::{self, Kind};

/// Whether child `pid` has taken all of its input and is blocked reading more: it will
/// not answer until a request that only comes after its answer. Seen twice in a row with
/// no CPU time spent in between, so that a thread reading ahead while another works is not
/// taken for it.
pub struct InputWatch<'a> {
    pid: i32,
    stdin: BorrowedFd<'a>,
    cpu_when_seen: Option<u64>,
}

impl<'a> InputWatch<'a> {
    pub fn new(pid: i32, stdin: BorrowedFd<'a>) -> Self {
        InputWatch {
            pid,
            stdin,
            cpu_when_seen: None,
        }
    }

    fn check(&mut self) -> bool {
        let waiting = pipe_is_empty(self.stdin) && reading_stdin(self.pid);
        let cpu = waiting.then(|| cpu_ticks(self.pid)).flatten();
        let stuck = cpu.is_some() && cpu == self.cpu_when_seen;
        self.cpu_when_seen = cpu;
        stuck
    }

    /// Returns once the child is seen waiting for input (checked at growing intervals, up
    /// to five times a second); never, where /proc does not tell.
    pub async fn until_waiting(mut self) {
        let mut every = Duration::from_millis(10);
        loop {
            tokio::time::sleep(every).await;
            if self.check() {
                return;
            }
            every = (every * 2).min(Duration::from_millis(200));
        }
    }
}

/// Nothing left in the pipe whose write end is `fd`.
fn pipe_is_empty(fd: BorrowedFd<'_>) -> bool {
    rustix::io::ioctl_fionread(fd).is_ok_and(|queued| queued == 0)
}

/// Whether a thread of `pid` is inside read(2) or readv(2) on fd 0.
pub fn reading_stdin(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).any(|task| {
        // "<number> <arg0 in hex> ...", or "running".
        let Ok(text) = std::fs::read_to_string(task.path().join("syscall")) else {
            return false;
        };
        let mut fields = text.split_whitespace();
        let number = fields.next().and_then(|n| n.parse::<libc::c_long>().ok());
        let fd = fields.next();
        matches!(number, Some(libc::SYS_read | libc::SYS_readv)) && fd == Some("0x0")
    })
}

/// User and system CPU time of `pid` so far, in clock ticks.
fn cpu_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// What to change when spawning `exec` failed with `error`; `main` is the `/init` name.
pub fn spawn_failure(exec: &Path, main: &str, error: &io::Error) -> String {
    let name = exec.file_name().unwrap_or_default().to_string_lossy();
    match error.kind() {
        io::ErrorKind::NotFound if !exec.exists() => no_entry(exec.parent(), main),
        io::ErrorKind::NotFound => match interpreter(exec) {
            Some((Kind::Script, interpreter)) => format!(
                "its interpreter `{interpreter}` (named on its #! line) does not exist here; \
                 actions get no PATH, so name it by its full path (e.g. #!/usr/bin/python3)"
            ),
            Some((_, loader)) => format!(
                "its dynamic loader `{loader}` does not exist here: build it statically (musl, \
                 or CGO_ENABLED=0 for Go), or for this system's C library"
            ),
            None => format!("{error} (starting `{name}`)"),
        },
        io::ErrorKind::PermissionDenied => {
            let it = match interpreter(exec) {
                Some((Kind::Script, interpreter)) => {
                    format!("it or its interpreter `{interpreter}` is not executable")
                }
                _ => "it is not executable".to_owned(),
            };
            format!(
                "permission denied running `{name}`: {it}, or its folder is on a noexec mount \
                 (see --action-dir)"
            )
        }
        _ if error.raw_os_error() == Some(libc::ENOEXEC) => not_executable(exec),
        _ => format!("{error} (starting `{name}`)"),
    }
}

/// An archive without any of the names an entry point may have.
fn no_entry(folder: Option<&Path>, main: &str) -> String {
    let mut found: Vec<String> = folder
        .and_then(|f| std::fs::read_dir(f).ok())
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| {
            let slash = if e.path().is_dir() { "/" } else { "" };
            format!("{}{slash}", e.file_name().to_string_lossy())
        })
        .collect();
    found.sort();
    let holds = match found.len() {
        0 => "nothing".to_owned(),
        n if n > 12 => format!("{}, and {} more", found[..12].join(", "), n - 12),
        _ => found.join(", "),
    };
    let looked_for = format!(
        "the upload has no entry point: looked for `exec`, `exec.wasm` and `{main}.wasm`, and \
         it holds {holds}."
    );
    // One module under another name: the `main` that picks it is the change to make.
    let modules: Vec<&str> = found
        .iter()
        .filter_map(|name| name.strip_suffix(".wasm"))
        .collect();
    match modules.as_slice() {
        [module] => format!(
            "{looked_for} To run {module}.wasm, give the action \"main\": \"{module}\" (`wsk \
             action create ... --main {module}`; `wasmloop run --main {module}`), or name it \
             `exec.wasm`"
        ),
        _ => format!(
            "{looked_for} Name the executable `exec` (or the WebAssembly module `exec.wasm` or \
             `{main}.wasm`) at the top of the archive"
        ),
    }
}

/// The interpreter a script's #! line names, or the loader an ELF file asks for.
fn interpreter(exec: &Path) -> Option<(Kind, String)> {
    let bytes = std::fs::read(exec).ok()?;
    match detect::detect(&bytes) {
        Kind::Script => {
            let line = bytes[2..].split(|b| *b == b'\n').next()?;
            let text = String::from_utf8_lossy(line);
            Some((Kind::Script, text.split_whitespace().next()?.to_owned()))
        }
        Kind::Elf => Some((Kind::Elf, elf_interpreter(&bytes)?)),
        _ => None,
    }
}

/// The PT_INTERP path of a 64- or 32-bit little-endian ELF file.
fn elf_interpreter(elf: &[u8]) -> Option<String> {
    const PT_INTERP: u32 = 3;
    let bytes_at = |at: usize, n: usize| elf.get(at..at.checked_add(n)?);
    let u16_at = |at: usize| Some(u16::from_le_bytes(bytes_at(at, 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes_at(at, 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(bytes_at(at, 8)?.try_into().ok()?));
    let wide = *elf.get(4)? == 2;
    if *elf.get(5)? != 1 {
        return None;
    }
    let (table, size, count) = if wide {
        (u64_at(0x20)? as usize, u16_at(0x36)?, u16_at(0x38)?)
    } else {
        (u32_at(0x1c)? as usize, u16_at(0x2a)?, u16_at(0x2c)?)
    };
    // The file is the upload: every offset in it is checked, never trusted to add up.
    (0..usize::from(count)).find_map(|i| {
        let header = table.checked_add(i.checked_mul(usize::from(size))?)?;
        if u32_at(header)? != PT_INTERP {
            return None;
        }
        let (offset, length) = if wide {
            (
                u64_at(header.checked_add(8)?)? as usize,
                u64_at(header.checked_add(32)?)? as usize,
            )
        } else {
            (
                u32_at(header.checked_add(4)?)? as usize,
                u32_at(header.checked_add(16)?)? as usize,
            )
        };
        let path = elf.get(offset..offset.checked_add(length)?)?;
        Some(String::from_utf8_lossy(path.strip_suffix(b"\0").unwrap_or(path)).into_owned())
    })
}

/// ENOEXEC: neither a program for this machine nor a script.
fn not_executable(exec: &Path) -> String {
    let mut head = vec![0; 1024];
    let n = std::fs::File::open(exec)
        .and_then(|mut f| io::Read::read(&mut f, &mut head))
        .unwrap_or(0);
    head.truncate(n);
    if let Some(kind) = base64_of(&head) {
        return format!(
            "the code is base64 text (of {kind}), taken as it is because the /init request does \
             not say \"binary\": true; send binary code with \"binary\": true"
        );
    }
    if is_wasm_text(&head) {
        return "it is WebAssembly text (.wat), not a binary module: convert it with \
                `wasm-tools parse action.wat -o action.wasm` (or wabt's `wat2wasm`) and give \
                the .wasm"
            .to_owned();
    }
    if detect::detect(&head) == Kind::Elf {
        return "it is an ELF executable for another machine or system: build it for this one \
                (e.g. x86_64-unknown-linux-gnu or -musl)"
            .to_owned();
    }
    format!(
        "it is neither an executable for this machine nor a script starting with #! (it starts \
         with `{}`); a WebAssembly module starts with \\0asm",
        crate::executor::lines::excerpt(head.split(|b| *b == b'\n').next().unwrap_or_default(), 16)
    )
}

/// Whether `head` starts as WebAssembly text does: `(module` or `(component`, after blank
/// space and `;;` line comments.
fn is_wasm_text(head: &[u8]) -> bool {
    let mut rest = head;
    loop {
        rest = rest.trim_ascii_start();
        match rest.strip_prefix(b";;") {
            Some(comment) => match comment.iter().position(|b| *b == b'\n') {
                Some(end) => rest = &comment[end..],
                None => return false,
            },
            None => break,
        }
    }
    let word: &[u8] = rest
        .strip_prefix(b"(")
        .unwrap_or_default()
        .trim_ascii_start();
    word.starts_with(b"module") || word.starts_with(b"component")
}

/// What base64 text at the start of an upload encodes, if it looks like one.
fn base64_of(head: &[u8]) -> Option<&'static str> {
    match crate::action::decode::encoded_kind(head)? {
        Kind::Wasm => Some("a WebAssembly module"),
        Kind::Zip => Some("a zip"),
        Kind::TarGz => Some("a tar.gz"),
        Kind::Elf => Some("an ELF executable"),
        Kind::Script | Kind::Other => None,
    }
}

/// A hint for an exit status at start-up that usually means something is missing.
pub fn exit_hint(status: std::process::ExitStatus) -> String {
    let hint = match status.code() {
        Some(127) => {
            " (127: a program it runs, or a shared library it needs, was not found: see the \
             logs; actions get no PATH)"
        }
        Some(126) => " (126: a program it runs is not executable)",
        _ => "",
    };
    format!("{status}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_of_a_known_kind_is_recognized() {
        let b64 = |bytes: &[u8]| {
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes)
        };
        assert_eq!(
            base64_of(b64(b"\0asm\x01\0\0\0rest").as_bytes()),
            Some("a WebAssembly module")
        );
        assert_eq!(
            base64_of(b64(b"PK\x03\x04rest..").as_bytes()),
            Some("a zip")
        );
        assert_eq!(base64_of(b"print('hello')"), None);
        assert_eq!(base64_of(b64(b"hello world").as_bytes()), None);
    }

    #[test]
    fn the_loader_of_this_test_binary_is_found() {
        let me = std::fs::read("/proc/self/exe").unwrap();
        let loader = elf_interpreter(&me).expect("a dynamically linked test binary");
        assert!(loader.starts_with('/') && loader.contains("ld"), "{loader}");
    }

    #[test]
    fn an_elf_header_whose_offsets_overflow_gives_no_loader() {
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(elf_interpreter(&elf), None);
    }

    #[test]
    fn an_archive_without_entry_point_lists_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("main.py"), "").unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        let exec = dir.path().join("exec");
        let error = io::Error::from(io::ErrorKind::NotFound);
        let message = spawn_failure(&exec, "niam", &error);
        assert!(
            message.contains("`exec`, `exec.wasm` and `niam.wasm`")
                && message.contains("it holds lib/, main.py."),
            "{message}"
        );
    }

    #[test]
    fn one_module_under_another_name_gets_the_main_that_picks_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hello.wasm"), "").unwrap();
        let exec = dir.path().join("exec");
        let error = io::Error::from(io::ErrorKind::NotFound);
        let message = spawn_failure(&exec, "main", &error);
        assert!(
            message.contains(
                "it holds hello.wasm. To run hello.wasm, give the action \"main\": \"hello\""
            ),
            "{message}"
        );
    }

    #[test]
    fn webassembly_text_is_told_from_other_text() {
        assert!(is_wasm_text(b"(module (func (export \"_start\")))"));
        assert!(is_wasm_text(b";; a comment\n  ( component\n"));
        assert!(!is_wasm_text(b"print('(module')"));
        assert!(!is_wasm_text(b";; only a comment"));
        assert!(!is_wasm_text(b""));
    }

    #[test]
    fn a_missing_interpreter_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let exec = dir.path().join("exec");
        std::fs::write(&exec, "#!/usr/bin/python9 -u\n").unwrap();
        let error = io::Error::from(io::ErrorKind::NotFound);
        let message = spawn_failure(&exec, "main", &error);
        assert!(message.contains("`/usr/bin/python9`"), "{message}");
    }
}
