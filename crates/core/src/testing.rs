//! What randomized tests across the crates share.

/// The seed of a randomized test: `TICKDB_SEED` when set (to rerun a
/// failure), else the clock's nanoseconds. Printed with how to rerun it.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("TICKDB_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{test}: seed {seed} (rerun with TICKDB_SEED={seed})");
    seed
}
