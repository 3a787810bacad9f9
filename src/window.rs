//! The event-time sliding window: a watermark derived from the posts and the generation
//! arithmetic that decides which index segments are live. Pure: time is passed in.

use serde::{Deserialize, Serialize};

use crate::types::EventTime;

/// Window settings (the `[window]` config section).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WindowConfig {
    /// How far back, in event-time seconds, a post is compared with earlier posts.
    pub window_secs: i64,
    /// Width of one generation in seconds. Entries are stored and expired per generation, so a
    /// representative stays matchable for between `window_secs` and `window_secs +
    /// generation_secs` after its cluster was last refreshed.
    pub generation_secs: i64,
    /// Posts whose event time is more than this many seconds ahead of the wall clock are rejected
    /// with reason `future_time` (one bogus timestamp would otherwise expire the whole window).
    /// 0 disables the check.
    pub max_future_secs: i64,
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            window_secs: 48 * 3600,
            generation_secs: 6 * 3600,
            max_future_secs: 86_400,
        }
    }
}

/// Invalid window settings.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WindowError {
    /// Both widths must be positive.
    #[error("window.window_secs and window.generation_secs must be positive (got {window} and {generation})")]
    NonPositive {
        /// window_secs
        window: i64,
        /// generation_secs
        generation: i64,
    },
}

/// Watermark state: the largest event time seen so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    window_secs: i64,
    generation_secs: i64,
    watermark: Option<i64>,
}

impl Window {
    /// A window with no posts seen yet.
    pub fn new(cfg: &WindowConfig) -> Result<Window, WindowError> {
        if cfg.window_secs <= 0 || cfg.generation_secs <= 0 {
            return Err(WindowError::NonPositive {
                window: cfg.window_secs,
                generation: cfg.generation_secs,
            });
        }
        Ok(Window {
            window_secs: cfg.window_secs,
            generation_secs: cfg.generation_secs,
            watermark: None,
        })
    }

    /// Restores a persisted watermark.
    pub fn with_watermark(mut self, watermark: Option<i64>) -> Window {
        self.watermark = watermark;
        self
    }

    /// The largest event time seen, if any.
    pub fn watermark(&self) -> Option<i64> {
        self.watermark
    }

    /// The event time to use for a post: its own, or the watermark when it has none (0 before
    /// the first timed post).
    pub fn effective_time(&self, t: Option<EventTime>) -> i64 {
        t.map(|t| t.0).or(self.watermark).unwrap_or(0)
    }

    /// Advances the watermark; it never moves backwards.
    pub fn observe(&mut self, t: i64) {
        self.watermark = Some(self.watermark.map_or(t, |w| w.max(t)));
    }

    /// Generation number of an event time.
    pub fn generation(&self, t: i64) -> i64 {
        t.div_euclid(self.generation_secs)
    }

    /// The oldest live generation: the one holding `watermark - window_secs`.
    pub fn min_live_generation(&self) -> Option<i64> {
        self.watermark
            .map(|w| (w - self.window_secs).div_euclid(self.generation_secs))
    }

    /// Whether a post at `t` is so late that its generation has already expired.
    pub fn is_expired(&self, t: i64) -> bool {
        self.min_live_generation()
            .is_some_and(|g| self.generation(t) < g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w() -> Window {
        Window::new(&WindowConfig {
            window_secs: 100,
            generation_secs: 10,
            max_future_secs: 0,
        })
        .unwrap()
    }

    #[test]
    fn watermark_is_monotone() {
        let mut win = w();
        win.observe(50);
        win.observe(20);
        assert_eq!(win.watermark(), Some(50));
    }

    #[test]
    fn expiry_is_by_event_time_generation() {
        let mut win = w();
        win.observe(205);
        // horizon 105 lies in generation 10: generations >= 10 are live.
        assert_eq!(win.min_live_generation(), Some(10));
        assert!(win.is_expired(99));
        assert!(!win.is_expired(100));
    }

    #[test]
    fn negative_times_use_floor_division() {
        let win = w();
        assert_eq!(win.generation(-1), -1);
        assert_eq!(win.generation(0), 0);
    }

    #[test]
    fn rejects_zero_widths() {
        assert!(Window::new(&WindowConfig {
            window_secs: 0,
            generation_secs: 10,
            max_future_secs: 0
        })
        .is_err());
    }
}
