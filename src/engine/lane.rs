//! A partition's decision order as plain arithmetic: what a partition (a lane) carries from one
//! post to the next (watermark, arrival, the window's horizon) and the plan of its next post,
//! its order key and the state after it. A plan depends on the posts before it in its
//! partition, never on their verdicts, so a dedup worker plans its buffered posts once and
//! knows their keys before deciding them (`io::kafka::dedup`).

use crate::index::{OrderKey, Visibility};
use crate::types::EventTime;
use crate::window::{Horizon, Window};

use super::Position;

/// What a partition carries from one post to the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lane {
    /// Largest event time seen (`OrderKey::tau`); none before the partition's first post.
    pub watermark: Option<i64>,
    /// Largest live arrival seen (`OrderKey::arrival`; 0 for none).
    pub arrival: i64,
    /// What the window expires by (`Window::advance`); none before the first post.
    pub horizon: Option<Horizon>,
}

/// A post's place in its partition's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Its order key.
    pub key: OrderKey,
    /// The window watermark it is decided at: the horizon's mark after it.
    pub mark: i64,
    /// The partition's state after it.
    pub after: Lane,
}

/// The order key of the next post of a partition whose watermark is `watermark` (none before
/// its first post) and whose largest live arrival is `seen` (0 for none): `Engine::order_key`,
/// for code that follows a partition without deciding it (`io::kafka::lookahead`). After the
/// post the partition's watermark is the key's `tau`, and its arrival the key's `arrival` when
/// not 0.
pub fn next_order_key(
    watermark: Option<i64>,
    seen: i64,
    at: Position,
    time: Option<EventTime>,
    v: &Visibility,
) -> OrderKey {
    let t = time.map(|t| t.0).or(watermark).unwrap_or(0);
    let tau = watermark.map_or(t, |w| w.max(t));
    let own = at.arrival.filter(|a| v.is_live(tau, *a)).unwrap_or(0);
    OrderKey {
        tau,
        arrival: own.max(seen),
        partition: at.partition,
        seq: at.seq,
    }
}

/// The plan of a post at `at` with event time `time`, next after a partition in state `lane`.
/// A post without a time takes the watermark; the first post of a partition starts its
/// horizon even without one.
pub fn plan(
    lane: &Lane,
    at: Position,
    time: Option<EventTime>,
    window: &Window,
    v: &Visibility,
) -> Plan {
    let key = next_order_key(lane.watermark, lane.arrival, at, time, v);
    let mut horizon = lane.horizon;
    if let Some(t) = time
        .map(|t| t.0)
        .or(lane.horizon.is_none().then_some(key.tau))
    {
        window.advance(&mut horizon, t);
    }
    Plan {
        key,
        mark: horizon.map_or(key.tau, |h| h.mark),
        after: Lane {
            watermark: Some(key.tau),
            arrival: if key.arrival != 0 {
                key.arrival
            } else {
                lane.arrival
            },
            horizon,
        },
    }
}
