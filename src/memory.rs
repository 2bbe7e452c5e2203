//! The container's memory limit (cgroup v1 or v2), and the wasm memory cap it leaves room for.

use std::path::{Path, PathBuf};

/// What the runtime keeps for itself out of a container's limit: its own memory, each
/// instance's compiled code and tables, request buffers. A quarter of the limit, and at
/// least this.
const MIN_RESERVE: u64 = 48 << 20;
/// The smallest cap worth giving an instance, whatever the limit (a Rust hello needs far less).
const MIN_CAP: u64 = 16 << 20;
/// Linear memory grows in 64 KiB pages.
const WASM_PAGE: u64 = 64 << 10;

/// The default cap on each instance's linear memory: `fallback`, or less where the
/// container's memory limit could not hold `concurrency` instances at it (OpenWhisk's
/// `--memory` covers the whole container, 256 MB by default, and the kernel would kill
/// the container before a guest reached a 256 MiB cap).
pub fn default_cap(limit: Option<u64>, concurrency: usize, fallback: usize) -> usize {
    let Some(limit) = limit else {
        return fallback;
    };
    let reserve = (limit / 4).max(MIN_RESERVE);
    let per_instance = limit.saturating_sub(reserve) / concurrency.max(1) as u64;
    let cap = per_instance.max(MIN_CAP) / WASM_PAGE * WASM_PAGE;
    usize::try_from(cap).unwrap_or(fallback).min(fallback)
}

/// The memory limit of the cgroup this process runs in, if it has one.
pub fn container_limit() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    limit_files(&own, Path::new("/sys/fs/cgroup"))
        .into_iter()
        .find_map(|file| parse_limit(&std::fs::read_to_string(file).ok()?))
}

/// Where the limit may be written, most specific first: the process's own cgroup under the
/// mount (v2 `memory.max`, v1 `memory.limit_in_bytes`), then the mount's root (what a
/// container with its own cgroup namespace sees).
fn limit_files(proc_self_cgroup: &str, root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if id == "0" && controllers.is_empty() {
            files.push(root.join(path).join("memory.max"));
            files.push(root.join("memory.max"));
        } else if controllers.split(',').any(|c| c == "memory") {
            files.push(root.join("memory").join(path).join("memory.limit_in_bytes"));
            files.push(root.join("memory/memory.limit_in_bytes"));
        }
    }
    files
}

/// A limit file's value: "max" (v2) or a huge number (v1's unlimited) mean none.
fn parse_limit(text: &str) -> Option<u64> {
    let limit = text.trim().parse::<u64>().ok()?;
    (limit < 1 << 60).then_some(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const DEFAULT: usize = 256 << 20;

    #[test]
    fn the_cap_leaves_the_runtime_room_inside_the_container() {
        assert_eq!(default_cap(Some(128 * MIB), 1, DEFAULT), 80 << 20);
        assert_eq!(default_cap(Some(256 * MIB), 1, DEFAULT), 192 << 20);
        assert_eq!(default_cap(Some(256 * MIB), 4, DEFAULT), 48 << 20);
        // Room to spare: the usual default.
        assert_eq!(default_cap(Some(2048 * MIB), 1, DEFAULT), DEFAULT);
        assert_eq!(default_cap(None, 1, DEFAULT), DEFAULT);
        // Never below a useful floor, and always whole wasm pages.
        assert_eq!(default_cap(Some(64 * MIB), 8, DEFAULT), 16 << 20);
        assert_eq!(
            default_cap(Some(200 * MIB + 12345), 3, DEFAULT) % (64 << 10),
            0
        );
    }

    #[test]
    fn limit_files_are_found_for_both_cgroup_versions() {
        let root = Path::new("/sys/fs/cgroup");
        assert_eq!(
            limit_files("0::/system.slice/docker-1.scope\n", root),
            [
                root.join("system.slice/docker-1.scope/memory.max"),
                root.join("memory.max")
            ]
        );
        assert_eq!(
            limit_files("5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n", root)[..2],
            [
                root.join("memory/docker/abc/memory.limit_in_bytes"),
                root.join("memory/memory.limit_in_bytes")
            ]
        );
    }

    #[test]
    fn unlimited_reads_as_no_limit() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("134217728\n"), Some(128 * MIB));
    }
}
