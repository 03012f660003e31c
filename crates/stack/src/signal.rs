//! Ctrl-C and SIGTERM for the blocking roles (feed, monitor): the signal
//! sets a flag that their loops check, so they stop at a clean point and
//! still write their summaries.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Routes SIGINT and SIGTERM to the stop flag.
pub fn install() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

pub fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Sleeps until `until`, waking early when a stop was asked for. Returns
/// false if it was.
pub fn sleep_until(until: Instant) -> bool {
    loop {
        if stopping() {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(20)));
    }
}
