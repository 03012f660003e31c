//! Child processes of a benchmark (tickdb servers, QuestDB). Each runs in its
//! own process group with PR_SET_PDEATHSIG, and the guard kills the group on
//! drop, so a failed or interrupted benchmark leaves no orphans. Ctrl-C sets
//! a flag that the benchmark loops check; unwinding then drops the guards.

use crate::error::{BenchError, Result};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Routes Ctrl-C and SIGTERM to the interrupt flag.
pub fn install_interrupt_handler() {
    let handler = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

pub fn check_interrupt() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        Err(BenchError::Interrupted)
    } else {
        Ok(())
    }
}

/// Sleeps, but returns early with `Interrupted` on Ctrl-C.
pub fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        check_interrupt()?;
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
    }
    Ok(())
}

/// Gives the memory this process has freed back to the kernel (glibc's
/// `malloc_trim`). `Child::spawn` forks (its `pre_exec` rules out
/// `posix_spawn`), and a fork copies the page table of every page this
/// process holds. After the key-value workload, whose gigabytes of values
/// are freed but stay with malloc, the bench held 5.2 GB, and each spawn
/// took about 0.2 s longer: the rdb restart benchmark timed that as part of
/// the restart. Call it after a workload that ran in this process.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages; no live allocation moves.
    unsafe {
        libc::malloc_trim(0);
    }
}

pub struct Child {
    name: String,
    inner: Option<std::process::Child>,
    pub log: PathBuf,
}

impl Child {
    pub fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Result<Child> {
        let out = std::fs::File::create(log)
            .map_err(BenchError::io(format!("creating {}", log.display())))?;
        let err = out.try_clone().map_err(BenchError::io("log handle"))?;
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let inner = cmd
            .spawn()
            .map_err(BenchError::io(format!("starting {name}")))?;
        Ok(Child {
            name: name.to_string(),
            inner: Some(inner),
            log: log.to_path_buf(),
        })
    }

    /// Fails if the process has exited (with the tail of its log).
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = self.inner.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                return Err(BenchError::Server(format!(
                    "{} exited ({st}); log {}:\n{}",
                    self.name,
                    self.log.display(),
                    log_tail(&self.log)
                )));
            }
        }
        Ok(())
    }

    /// The process id, while it is ours.
    pub fn pid(&self) -> Option<u32> {
        self.inner.as_ref().map(|c| c.id())
    }

    /// Waits for the process to exit by itself (a feed or monitor with a
    /// duration); Ctrl-C and `timeout` stop the wait with an error.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<std::process::ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            check_interrupt()?;
            let Some(c) = self.inner.as_mut() else {
                return Err(BenchError::Server(format!(
                    "{} was already stopped",
                    self.name
                )));
            };
            if let Ok(Some(st)) = c.try_wait() {
                self.inner = None;
                return Ok(st);
            }
            if Instant::now() > end {
                return Err(BenchError::Server(format!(
                    "{} did not finish within {timeout:?}; log {}:\n{}",
                    self.name,
                    self.log.display(),
                    log_tail(&self.log)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, without waiting: asks a feed to finish what it is doing
    /// and exit (then `wait_exit`).
    pub fn ask_to_stop(&self) {
        if let Some(c) = self.inner.as_ref() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
        }
    }

    /// The exit status if the process has exited, without waiting.
    pub fn try_exit(&mut self) -> Option<std::process::ExitStatus> {
        let st = self.inner.as_mut()?.try_wait().ok()??;
        self.inner = None;
        Some(st)
    }

    /// SIGKILL to the group at once: a crash, with no shutdown work.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.inner.take() {
            unsafe {
                libc::kill(-(c.id() as i32), libc::SIGKILL);
            }
            let _ = c.wait();
        }
    }

    /// SIGTERM, then SIGKILL to the group after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut c) = self.inner.take() else {
            return;
        };
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        let end = Instant::now() + grace;
        while Instant::now() < end {
            if let Ok(Some(_)) = c.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        unsafe {
            libc::kill(-(c.id() as i32), libc::SIGKILL);
        }
        let _ = c.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(BenchError::io("finding a free port"))?;
    Ok(l.local_addr()
        .map_err(BenchError::io("finding a free port"))?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_bytes() -> u64 {
        tickdb_stack::procfs::self_mem().map_or(0, |m| m.rss_bytes)
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_small_blocks_go_back_to_the_kernel() {
        // 512 MiB in 1 KiB blocks, then one block that stays, above them in
        // the arena, so that freeing the rest leaves a hole malloc keeps
        // (as the key-value workload's values did) instead of trimming.
        const BLOCKS: usize = 512 * 1024;
        let mut blocks: Vec<Vec<u8>> = (0..BLOCKS).map(|i| vec![i as u8; 1024]).collect();
        let keep = vec![1u8; 1024];
        blocks.clear();
        blocks.shrink_to_fit();
        let held = rss_bytes();
        release_freed_memory();
        let after = rss_bytes();
        assert_eq!(keep[0], 1);
        assert!(
            after + (256 << 20) < held,
            "RSS {held} before the release, {after} after"
        );
    }
}
