//! A process's CPU time and resident set, read from the kernel as the runtime's metrics and the bench's figures need them.

use std::time::Duration;

/// The CPU time process `pid` has used, all its threads, to the nanosecond, from its
/// process CPU clock (0: this process, as the kernel takes it). None once it is gone.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid place for the id; a pid that is gone is an error return.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write; `clock` came from clock_getcpuclockid.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(now.tv_sec).ok()?,
        u32::try_from(now.tv_nsec).ok()?,
    ))
}

/// What process `pid` holds resident now, in bytes (0: this process): its own pages, not
/// its children's (Linux's /proc/PID/statm; None elsewhere, or once it is gone).
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let statm = match pid {
        0 => std::fs::read_to_string("/proc/self/statm"),
        pid => std::fs::read_to_string(format!("/proc/{pid}/statm")),
    }
    .ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_processs_clock_moves_with_its_work_and_a_gone_process_has_none() {
        // Work until the clock says 30 ms, however long a busy machine makes that take;
        // a clock that does not move fails after 10 s of it.
        let own = || cpu_time(0).expect("this process has a clock");
        let before = own();
        let mut x = 0u64;
        let spin = std::time::Instant::now();
        while own() - before < Duration::from_millis(30) && spin.elapsed() < Duration::from_secs(10)
        {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(own() - before >= Duration::from_millis(30), "{x}");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(cpu_time(pid), None);
        assert_eq!(resident_bytes(pid), None);
    }

    #[test]
    fn the_resident_set_grows_with_the_pages_touched() {
        let before = resident_bytes(0).expect("this process's resident set");
        assert_eq!(
            resident_bytes(std::process::id()).map(|b| b > 0),
            Some(true)
        );
        let touched = std::hint::black_box(vec![1u8; 32 << 20]);
        let after = resident_bytes(0).unwrap();
        assert!(after >= before + (24 << 20), "{before} to {after}");
        drop(touched);
    }
}
