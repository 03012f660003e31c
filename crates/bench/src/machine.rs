//! What machine a benchmark ran on, and whether it was busy at the start.

use std::process::Command;

pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub ram_gib: f64,
    pub kernel: String,
    pub fs: String,
    pub loadavg: f64,
}

impl Machine {
    pub fn probe(work: &std::path::Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let ram_kib: f64 = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let fs = Command::new("df")
            // --output names the columns itself; -T with it is an error.
            .args(["--output=fstype,source"])
            .arg(work)
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| {
                s.lines()
                    .nth(1)
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" on "))
            })
            .unwrap_or_else(|| "unknown".into());
        let loadavg = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0.0);
        Machine {
            cpu,
            cores,
            ram_gib: ram_kib / 1024.0 / 1024.0,
            kernel,
            fs,
            loadavg,
        }
    }

    /// One line for a report: CPU, cores, RAM and kernel.
    pub fn summary(&self) -> String {
        format!(
            "{} ({} cores), {:.1} GiB RAM, Linux {}",
            self.cpu, self.cores, self.ram_gib, self.kernel
        )
    }

    pub fn busy(&self) -> bool {
        self.loadavg > self.cores as f64 * 0.5
    }

    pub fn markdown(&self) -> String {
        format!(
            "- CPU: {} ({} cores available)\n- RAM: {:.1} GiB\n- Linux {}\n- Benchmark directory file system: {}\n- Load average at start: {:.2}{}\n",
            self.cpu,
            self.cores,
            self.ram_gib,
            self.kernel,
            self.fs,
            self.loadavg,
            if self.busy() {
                " — **the machine was busy when the run started; treat the figures as noisy**"
            } else {
                ""
            }
        )
    }
}
