//! Process and machine memory and CPU from Linux's /proc: a process's
//! resident set split into anonymous memory (heap: what DRAM a process
//! really holds) and file-backed pages (fsmem mappings count here), its CPU
//! time, and the machine's total memory.

use serde::{Deserialize, Serialize};

/// Resident memory of one process, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcMem {
    pub rss_bytes: u64,
    /// Anonymous pages (heap, stacks): DRAM the process alone holds.
    pub rss_anon_bytes: u64,
    /// File-backed pages resident now (binary, and fsmem mappings).
    pub rss_file_bytes: u64,
}

fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l[key.len()..].split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// Parses /proc/PID/status text.
pub fn parse_status(text: &str) -> Option<ProcMem> {
    Some(ProcMem {
        rss_bytes: kib_field(text, "VmRSS:")?,
        rss_anon_bytes: kib_field(text, "RssAnon:").unwrap_or(0),
        rss_file_bytes: kib_field(text, "RssFile:").unwrap_or(0),
    })
}

/// Memory of process `pid`, None if it is gone (or not on this host).
pub fn proc_mem(pid: u32) -> Option<ProcMem> {
    parse_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// Memory of this process.
pub fn self_mem() -> Option<ProcMem> {
    parse_status(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// Parses utime + stime (clock ticks) from /proc/PID/stat text. The command
/// name may hold spaces and parentheses, so fields are counted after the
/// last ')'.
pub fn parse_stat_cpu_ticks(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state(3) ... utime is field 14, stime 15 (1-based, whole line).
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time of process `pid` so far, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_stat_cpu_ticks(&text)?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Some(ticks as f64 / hz)
}

/// The machine's memory (MemTotal), in bytes.
pub fn mem_total_bytes() -> Option<u64> {
    kib_field(&std::fs::read_to_string("/proc/meminfo").ok()?, "MemTotal:")
}

/// Memory available for new work (MemAvailable), in bytes.
pub fn mem_available_bytes() -> Option<u64> {
    kib_field(
        &std::fs::read_to_string("/proc/meminfo").ok()?,
        "MemAvailable:",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let st = "Name:\ttickdb\nVmRSS:\t  2048 kB\nRssAnon:\t 1024 kB\nRssFile:\t 1000 kB\n";
        assert_eq!(
            parse_status(st),
            Some(ProcMem {
                rss_bytes: 2048 * 1024,
                rss_anon_bytes: 1024 * 1024,
                rss_file_bytes: 1000 * 1024
            })
        );
        assert_eq!(parse_status("Name: x\n"), None);
        let stat = "123 (tick db (x)) S 1 123 123 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 1 2 3";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(300));
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn reads_this_process() {
        let m = self_mem().unwrap();
        assert!(m.rss_bytes > 0 && m.rss_anon_bytes <= m.rss_bytes);
        assert!(cpu_seconds(std::process::id()).is_some());
        assert!(mem_total_bytes().unwrap() > 0);
    }
}
