//! The event-time sliding window: its settings and the generation arithmetic that decides which
//! index segments are live for a watermark. Pure: time is passed in.

use serde::{Deserialize, Serialize};

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

/// Generation arithmetic of the window. Watermarks live with their owner (one per partition in
/// the engine); this type only turns them into generation numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    window_secs: i64,
    generation_secs: i64,
}

impl Window {
    /// Checks and wraps the settings.
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
        })
    }

    /// Generation number of an event time.
    pub fn generation(&self, t: i64) -> i64 {
        t.div_euclid(self.generation_secs)
    }

    /// The oldest generation live at `watermark`: the one holding `watermark - window_secs`.
    pub fn min_live_generation(&self, watermark: i64) -> i64 {
        (watermark - self.window_secs).div_euclid(self.generation_secs)
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
    fn expiry_is_by_event_time_generation() {
        // horizon 105 lies in generation 10: generations >= 10 are live.
        assert_eq!(w().min_live_generation(205), 10);
        assert_eq!(w().min_live_generation(200), 10);
        assert_eq!(w().min_live_generation(199), 9);
    }

    #[test]
    fn negative_times_use_floor_division() {
        assert_eq!(w().generation(-1), -1);
        assert_eq!(w().generation(0), 0);
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
