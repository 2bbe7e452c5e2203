//! CPU time spent by a server (with its children) and by the bench's own client, so a row can say what each request cost the machine.

use std::time::Duration;

use wasmloop_common::process::cpu_time;

/// What `pid`'s children it has waited for used (`cutime` + `cstime`, in clock ticks):
/// a process per activation ends before the next reading.
fn reaped_children(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis (a command may hold spaces and parentheses
    // of its own), cutime and cstime are the 14th and 15th fields.
    let after = stat.rfind(')').map_or("", |at| &stat[at + 1..]);
    let fields = after.split_whitespace().skip(13).take(2);
    let used: u64 = fields.filter_map(|f| f.parse::<u64>().ok()).sum();
    let ticks = rustix::param::clock_ticks_per_second().max(1);
    Duration::from_nanos(used.saturating_mul(1_000_000_000) / ticks)
}

/// Every living process under `pid`, at any depth.
fn descendants(pid: u32) -> Vec<u32> {
    let children = crate::serve::child_pids(pid);
    let deeper: Vec<u32> = children.iter().flat_map(|c| descendants(*c)).collect();
    children.into_iter().chain(deeper).collect()
}

/// The CPU a server has used so far: its own threads, its descendants alive now, and
/// what each of them has reaped (a child's waited-for children count in its `cutime`).
/// None when the server is gone. What was reaped is known to the clock tick (10 ms), the
/// rest to the nanosecond: a process per activation is counted well over many requests.
pub fn server(pid: u32) -> Option<Duration> {
    let own = cpu_time(pid)?;
    let living = descendants(pid);
    let children: Duration = living.iter().filter_map(|child| cpu_time(*child)).sum();
    let reaped: Duration = living.into_iter().chain([pid]).map(reaped_children).sum();
    Some(own + children + reaped)
}

/// The CPU the bench's own process has used so far: the client's.
pub fn client() -> Duration {
    cpu_time(0).unwrap_or_default()
}

/// CPU per request, in µs: none for no requests.
pub fn per_request(used: Duration, requests: usize) -> Option<f64> {
    (requests > 0).then(|| used.as_secs_f64() * 1e6 / requests as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_child_counts_in_its_parents_figure_and_a_gone_process_has_none() {
        // A shell whose child spins: the time is the grandchild's, not the shell's own.
        let mut shell = std::process::Command::new("sh")
            .args([
                "-c",
                "sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'; sleep 30",
            ])
            .spawn()
            .expect("sh runs");
        let pid = shell.id();
        let started = server(pid).expect("a living process has a clock");
        let mut last = started;
        for _ in 0..200 {
            std::thread::sleep(Duration::from_millis(20));
            last = server(pid).expect("still alive");
            if last - started > Duration::from_millis(50) {
                break;
            }
        }
        assert!(
            last - started > Duration::from_millis(50),
            "the spinning grandchild's CPU was not counted: {:?}",
            last - started
        );
        shell.kill().unwrap();
        shell.wait().unwrap();
        assert_eq!(server(pid), None);
    }

    #[test]
    fn per_request_divides_what_was_used_and_has_nothing_for_no_requests() {
        assert_eq!(per_request(Duration::from_millis(20), 400), Some(50.0));
        assert_eq!(per_request(Duration::from_millis(20), 0), None);
    }
}
