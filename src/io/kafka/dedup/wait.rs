//! How long a dedup worker waited on the order (`simdedup_order_wait_seconds_total`): pure, so
//! that what counts as waiting is stated and tested in one place.

use std::time::{Duration, Instant};

/// Counts the time between a round that found posts buffered and none allowed (blocked) and the
/// worker's next look. Each round marks once, at the time it began deciding (its look), with
/// what the look found: the interval after a blocked look is waiting, whether the next look
/// allows posts or not, and the interval after an unblocked one is not. So the time a worker
/// spends deciding the posts it may decide, and the time before its posts arrived (an idle poll,
/// or the process stopped between rounds), never count; the second did when each blocked round
/// counted whole from its start.
#[derive(Debug, Default)]
pub(super) struct WaitClock {
    last: Option<(Instant, bool)>,
}

impl WaitClock {
    /// Marks a round's look, taken at `now`: `blocked` if it found posts buffered and none
    /// allowed. Returns the waiting since the previous look.
    pub(super) fn mark(&mut self, now: Instant, blocked: bool) -> Duration {
        let waited = match self.last {
            Some((then, true)) => now.saturating_duration_since(then),
            _ => Duration::ZERO,
        };
        self.last = Some((now, blocked));
        waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn only_the_time_after_a_blocked_look_counts() {
        let t = Instant::now();
        let mut c = WaitClock::default();
        assert_eq!(c.mark(t, false), Duration::ZERO);
        // Idle for a long while, then posts arrive and wait: the idle time does not count.
        assert_eq!(c.mark(t + 5000 * MS, true), Duration::ZERO);
        assert_eq!(c.mark(t + 5010 * MS, true), 10 * MS);
        // The round that ends the wait counts up to its look; the next one does not.
        assert_eq!(c.mark(t + 5012 * MS, false), 2 * MS);
        assert_eq!(c.mark(t + 5100 * MS, false), Duration::ZERO);
    }

    #[test]
    fn the_first_look_counts_nothing_and_a_clock_going_back_counts_zero() {
        let t = Instant::now() + 100 * MS;
        let mut c = WaitClock::default();
        assert_eq!(c.mark(t, true), Duration::ZERO);
        assert_eq!(c.mark(t - MS, true), Duration::ZERO);
        assert_eq!(c.mark(t + 3 * MS, false), 4 * MS);
    }
}
