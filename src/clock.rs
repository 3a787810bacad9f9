//! The wall clock, read in one place: the future-time check and the window-lag gauge compare
//! event times with it. The decision itself never reads it (expiry is by event time).

/// Unix seconds now (0 if the clock is before 1970).
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Unix milliseconds now (0 if the clock is before 1970): end-to-end latency is measured against
/// Kafka record timestamps.
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
