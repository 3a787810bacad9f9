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
    /// Largest step, in seconds, one post may move the window's watermark forward on its own.
    /// A post dated further ahead is decided (against a window ending at its own time) but moves
    /// the watermark only if the next post with a time also lies beyond the step (a real gap in
    /// the stream); otherwise it is taken as an outlier, so one stray timestamp cannot expire
    /// the window. 0 = every post moves the watermark (no outlier guard).
    pub max_watermark_step_secs: i64,
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            window_secs: 48 * 3600,
            generation_secs: 6 * 3600,
            max_future_secs: 86_400,
            max_watermark_step_secs: 6 * 3600,
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
    max_step_secs: i64,
}

/// A partition's window watermark: the largest event time seen, except that a single post
/// dated more than `max_watermark_step_secs` ahead moves it only when the next timed post
/// confirms the jump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Horizon {
    /// The watermark the window expires by.
    pub mark: i64,
    /// A jump not confirmed yet.
    pending: Option<i64>,
}

impl Horizon {
    /// A horizon standing at `mark`.
    pub fn at(mark: i64) -> Horizon {
        Horizon {
            mark,
            pending: None,
        }
    }
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
            max_step_secs: cfg.max_watermark_step_secs.max(0),
        })
    }

    /// Moves a horizon for a post at event time `t` (see [`Horizon`]). A post that does not
    /// confirm a pending jump drops it; of two posts that confirm each other, the watermark
    /// goes to the later one if they are within a step of each other, else to the earlier.
    pub fn advance(&self, h: &mut Option<Horizon>, t: i64) {
        let Some(cur) = h else {
            *h = Some(Horizon::at(t));
            return;
        };
        let pending = cur.pending.take();
        if t <= cur.mark {
            return;
        }
        if self.max_step_secs == 0 || t - cur.mark <= self.max_step_secs {
            cur.mark = t;
            return;
        }
        match pending {
            None => cur.pending = Some(t),
            Some(p) if (p - t).abs() <= self.max_step_secs => cur.mark = p.max(t),
            Some(p) => cur.mark = p.min(t),
        }
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
            max_watermark_step_secs: 0,
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
    fn one_outlying_time_does_not_move_the_watermark_but_a_confirmed_gap_does() {
        let w = Window::new(&WindowConfig {
            window_secs: 100,
            generation_secs: 10,
            max_future_secs: 0,
            max_watermark_step_secs: 50,
        })
        .unwrap();
        let mut h = None;
        for t in [1000, 1010, 1_000_000, 1020, 1015, 1030] {
            w.advance(&mut h, t);
        }
        assert_eq!(h.map(|h| h.mark), Some(1030), "the outlier was dropped");
        // A real gap: two posts beyond the step in a row.
        w.advance(&mut h, 5000);
        assert_eq!(h.map(|h| h.mark), Some(1030));
        w.advance(&mut h, 5005);
        assert_eq!(h.map(|h| h.mark), Some(5005));
        // Without the guard every post moves it.
        let free = Window::new(&WindowConfig {
            max_watermark_step_secs: 0,
            ..WindowConfig::default()
        })
        .unwrap();
        let mut h = Some(Horizon::at(10));
        free.advance(&mut h, 1_000_000);
        assert_eq!(h.map(|h| h.mark), Some(1_000_000));
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
            max_future_secs: 0,
            max_watermark_step_secs: 0,
        })
        .is_err());
    }
}
