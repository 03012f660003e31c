//! The C allocator's thresholds, set once at process start.
//!
//! glibc's malloc starts by returning memory to the kernel eagerly: a free
//! block above 128 KiB at the top of an arena is trimmed (`madvise` with
//! `MADV_DONTNEED` in a thread's arena), and every allocation above 128 KiB
//! is its own `mmap`. It raises both thresholds only as it sees large
//! blocks freed. A query that gathers millions of rows (one symbol's
//! quotes on a 50M-row rdb) allocates and frees tens of megabytes each
//! time on the query threads, and each run then faulted thousands of pages
//! back in, zeroed by the kernel: measured 5,000 to 6,000 page faults a
//! query and a 10–15% longer median.
//!
//! `tune` fixes the thresholds where glibc's own adjustment ends up:
//! blocks up to `MMAP_THRESHOLD_BYTES` come from the arenas and are
//! reused, larger ones are mapped and unmapped as before (so one huge
//! result still goes back to the kernel when freed), and an arena keeps up
//! to `TRIM_THRESHOLD_BYTES` free at its top. A thread's arena grows in
//! heaps of at most 64 MiB, and a heap that empties is still unmapped
//! whole, so what stays mapped is bounded by that per arena.
//!
//! A `GLIBC_TUNABLES` naming either threshold is left to win: whoever set
//! it meant it.

/// Blocks above this are mapped on their own: glibc's own largest
/// dynamic threshold (`DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit).
pub const MMAP_THRESHOLD_BYTES: usize = 32 << 20;

/// Free memory an arena keeps at its top before returning it: twice the
/// mmap threshold, as glibc's dynamic adjustment sets it.
pub const TRIM_THRESHOLD_BYTES: usize = 64 << 20;

/// Sets the thresholds (see the module comment), first thing in `main`,
/// before any thread starts. Records what it did for `state`: nothing
/// where it is not glibc or `GLIBC_TUNABLES` sets them.
pub fn tune() {
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    let state = if overridden(&tunables) {
        State::LeftToTunables
    } else if set_thresholds() {
        State::Tuned
    } else {
        State::NotGlibc
    };
    let _ = STATE.set(state);
}

/// What `tune` did in this process, as `/status` reports it
/// (`process.malloc`): an operator reading the RSS can see which
/// thresholds the allocator runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The thresholds are `MMAP_THRESHOLD_BYTES` and `TRIM_THRESHOLD_BYTES`.
    Tuned,
    /// `GLIBC_TUNABLES` sets a threshold: glibc's, as the variable says.
    LeftToTunables,
    /// Not glibc (or mallopt refused): the allocator's own.
    NotGlibc,
    /// `tune` was never called: glibc's dynamic defaults.
    NotCalled,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Tuned => "tuned",
            State::LeftToTunables => "left to GLIBC_TUNABLES",
            State::NotGlibc => "not glibc",
            State::NotCalled => "glibc defaults (not tuned)",
        }
    }
}

static STATE: std::sync::OnceLock<State> = std::sync::OnceLock::new();

/// What `tune` did (`State::NotCalled` before it ran, or if it never did).
pub fn state() -> State {
    STATE.get().copied().unwrap_or(State::NotCalled)
}

/// Whether a `GLIBC_TUNABLES` value sets either threshold.
fn overridden(tunables: &str) -> bool {
    tunables.split(':').any(|t| {
        t.starts_with("glibc.malloc.mmap_threshold=")
            || t.starts_with("glibc.malloc.trim_threshold=")
    })
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_thresholds() -> bool {
    let (Ok(mmap), Ok(trim)) = (
        libc::c_int::try_from(MMAP_THRESHOLD_BYTES),
        libc::c_int::try_from(TRIM_THRESHOLD_BYTES),
    ) else {
        return false;
    };
    // SAFETY: mallopt only sets allocator parameters (under the main
    // arena's lock), with values glibc documents as valid.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, mmap) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, trim) == 1
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_thresholds() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tunable_setting_either_threshold_wins() {
        assert!(overridden("glibc.malloc.trim_threshold=1048576"));
        assert!(overridden(
            "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536"
        ));
        assert!(!overridden(""));
        assert!(!overridden("glibc.malloc.arena_max=2"));
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_the_thresholds() {
        // The values are within what mallopt accepts (it answers 1).
        assert!(set_thresholds());
    }
}
