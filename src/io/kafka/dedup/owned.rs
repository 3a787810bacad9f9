//! The routed partitions this worker owns: assignment and revocation, polling routed records
//! into per-partition buffers, and starting a partition at the watermark its previous owner
//! left (from the changelog's progress markers).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError as RdError;
use rdkafka::error::KafkaResult;
use rdkafka::message::BorrowedMessage;
use rdkafka::Message;

use super::super::client::RebalanceEvent;
use super::super::fetch;
use super::super::gate::{Bound, Last};
use super::super::lookahead::gates_of;
use super::super::wire::{decode_routed_record, routed_seq, RoutedPost, Words};
use super::super::KafkaError;
use super::{Clients, Worker, IDLE_WAIT};
use crate::engine::{Engine, Plan, Position};
use crate::index::OrderKey;
use crate::metrics;
use crate::verify::{Gates, Screened};

/// Routed records taken per poll round before the worker decides (and reads the changelog),
/// shared among the owned partitions' queues.
const ROUTED_POLL_BATCH: usize = 2_000;

/// A partition's queue is left unread while this many of its posts are buffered: memory stays
/// bounded while a partition waits for the others, however the broker batches its fetches.
const MAX_BUFFERED_POSTS: usize = 50_000;

/// A routed post waiting for its turn: post `index` of the `count` in the record at `offset`.
pub(super) struct Slot {
    pub(super) offset: u64,
    pub(super) index: u32,
    pub(super) count: u32,
    /// The post, boxed: lanes buffer thousands of slots while catching up, and every push and
    /// every doubling of a lane's buffer moves them (a decoded post is 584 bytes, a slot 184
    /// with it boxed; in a profile of one of two workers draining a backlog, pushing to the
    /// lanes fell from 3.8% of its CPU to 1.8%, and zeroing fresh pages from 2.8% to 1.0%).
    pub(super) post: Result<Box<RoutedPost>, String>,
    /// Verification's gates of the post (`lookahead::gates_of`).
    pub(super) gates: Option<Gates>,
    /// Its place in the partition's order, once planned (`Owned::plan`).
    pub(super) plan: Cell<Option<Plan>>,
    /// Only an identical text can match it (`Lookahead::exact_only`).
    pub(super) exact: bool,
}

impl Slot {
    fn new(offset: u64, index: u32, count: u32, post: Result<RoutedPost, String>) -> Slot {
        Slot {
            offset,
            index,
            count,
            gates: post
                .as_ref()
                .ok()
                .and_then(|p| gates_of(&p.analyzed.sketch())),
            post: post.map(Box::new),
            plan: Cell::new(None),
            exact: false,
        }
    }

    /// The key it is counted by in `Owned::copies`, if it is counted there.
    fn copy_hash(&self) -> Option<u32> {
        self.gates
            .as_ref()
            .and_then(|g| g.text_hash)
            .filter(|_| self.exact)
    }
}

/// A partition this worker owns.
pub(super) struct Owned {
    pub(super) buf: VecDeque<Slot>,
    /// What the screen reads of each buffered post, in the same order (a default record for
    /// a post without gates): checks of the other lanes' heads scan these (`own_check`).
    pub(super) screens: VecDeque<Screened>,
    pub(super) started: bool,
    pub(super) next_offset: u64,
    /// When the last record arrived (or the partition was assigned): a partition with nothing
    /// buffered, nothing new for `idle_after_ms` and nothing left to fetch (`fetch`) is idle.
    /// End-of-partition events are not relied on: some brokers send none when the committed
    /// offset already is the end.
    pub(super) last_record: Instant,
    pub(super) fetch: fetch::FetchProgress,
    /// Where consumption resumed: the committed offset, if one was found.
    pub(super) start: Option<i64>,
    /// Whether what the previous owner left (`Progress::resume`) has been taken over: once
    /// the sync record is read back, so that all its markers are known.
    pub(super) resumed: bool,
    /// The previous owner (or this worker before a restart) decided everything before the
    /// resume offset and declared the partition idle there, and nothing arrived since the
    /// assignment: until a record arrives, the partition is idle as soon as the broker confirms
    /// nothing is left to fetch, without waiting out `idle_after_ms` again.
    pub(super) idle_before: bool,
    /// The last record decided: offset, and the partition's watermark and arrival after it.
    pub(super) last: Option<(u64, i64, i64)>,
    /// The last marker sent: its bound, last record and whether it said this worker waits.
    pub(super) sent: Option<(Bound, Last, bool)>,
    pub(super) sent_at: Instant,
    pub(super) acked_markers: VecDeque<u64>,
    pub(super) stored: Option<u64>,
    /// How many buffered posts from the front are planned (`Owned::plan`).
    planned: Cell<usize>,
    /// The buffered posts that only an identical text can match, counted by the low 32 bits of
    /// their text hash: a post of that class is compared with the buffer only when it holds a
    /// copy of its text (`lanes`).
    pub(super) copies: HashMap<u32, u32>,
    /// What is known of the head post while it waits (reset when it is decided).
    pub(super) head: Head,
}

/// What is known of a lane's head post while it waits.
#[derive(Default)]
pub(super) struct Head {
    /// Since when it has waited in the global order, if it has.
    pub(super) waiting_since: Option<Instant>,
    /// Per partition read ahead, how far it was compared with the undecided posts there
    /// (`Lookahead::check_resuming`).
    pub(super) checked: RefCell<BTreeMap<u32, Option<OrderKey>>>,
}

impl Owned {
    pub(super) fn new(start: Option<Option<i64>>) -> Owned {
        Owned {
            buf: VecDeque::new(),
            screens: VecDeque::new(),
            started: false,
            next_offset: 0,
            last_record: Instant::now(),
            fetch: fetch::FetchProgress::new(start),
            start: start.flatten(),
            resumed: false,
            idle_before: false,
            last: None,
            sent: None,
            sent_at: Instant::now(),
            acked_markers: VecDeque::new(),
            stored: None,
            planned: Cell::new(0),
            copies: HashMap::new(),
            head: Head::default(),
        }
    }

    /// The plan of buffered post `i` of partition `p` (`Engine::plan`), planning the posts
    /// before it first, from the partition's state in `engine`. Plans are kept: the state moves
    /// only as planned, as the posts are decided in order (`Engine::decide`). A malformed
    /// record moves nothing: it is rejected without being decided.
    pub(super) fn plan(&self, i: usize, engine: &Engine, p: u32) -> Option<Plan> {
        let slot = self.buf.get(i)?;
        if let Some(plan) = slot.plan.get() {
            return Some(plan);
        }
        let mut n = self.planned.get();
        let mut lane = match n {
            0 => engine.lane(p),
            _ => self.buf[n - 1].plan.get()?.after,
        };
        while n <= i {
            let s = &self.buf[n];
            let post = s.post.as_ref().ok();
            let at = Position {
                partition: p,
                seq: routed_seq(s.offset, s.index),
                arrival: post.and_then(|r| r.input_ms),
            };
            let mut plan = engine.plan(&lane, at, post.and_then(|r| r.created_at));
            if post.is_none() {
                plan.after = lane;
            }
            s.plan.set(Some(plan));
            lane = plan.after;
            n += 1;
        }
        self.planned.set(n);
        slot.plan.get()
    }

    /// How many buffered posts from the front are planned with keys below `key`.
    pub(super) fn planned_below(&self, key: &OrderKey) -> usize {
        self.buf
            .partition_point(|s| s.plan.get().is_some_and(|p| p.key < *key))
    }

    /// Buffers a post (`exact`: only an identical text can match it; `screened`: what the
    /// screen reads of it).
    fn push(&mut self, mut slot: Slot, exact: bool, screened: Screened) {
        slot.exact = exact;
        if let Some(hash) = slot.copy_hash() {
            *self.copies.entry(hash).or_default() += 1;
        }
        self.buf.push_back(slot);
        self.screens.push_back(screened);
    }

    /// How many buffered posts from the front are planned (`plan`).
    pub(super) fn planned(&self) -> usize {
        self.planned.get()
    }

    /// Takes the front post off the buffer.
    pub(super) fn pop_front(&mut self) -> Option<Slot> {
        let slot = self.buf.pop_front()?;
        self.screens.pop_front();
        self.planned.set(self.planned.get().saturating_sub(1));
        if let Some(hash) = slot.copy_hash() {
            if let Some(n) = self.copies.get_mut(&hash) {
                *n -= 1;
                if *n == 0 {
                    self.copies.remove(&hash);
                }
            }
        }
        Some(slot)
    }
}

impl Worker<'_> {
    pub(super) fn rebalance(&mut self, c: &Clients) -> Result<(), KafkaError> {
        for ev in c.routed.consumer().context().drain() {
            match ev {
                RebalanceEvent::Assigned(ps) => {
                    metrics::global().set_health("dedup", Ok(()));
                    if !ps.is_empty() {
                        self.send_sync(c)?;
                    }
                    let starts =
                        fetch::committed_starts(c.routed.consumer(), &self.k.routed_topic, &ps);
                    for p in ps {
                        c.routed.split(p);
                        self.owned.insert(p, Owned::new(starts.get(&p).copied()));
                    }
                    if !self.owned.is_empty() && self.owned.len() < self.partitions as usize {
                        c.separate_changelog(self.k)?;
                    }
                }
                RebalanceEvent::Revoked(ps) => {
                    for p in ps {
                        c.routed.remove(p);
                        self.owned.remove(&p);
                        self.acks.remove(p);
                        self.engine.set_watermark(p, None);
                    }
                }
            }
        }
        Ok(())
    }

    /// Buffers routed records; returns whether anything arrived. Rebalance events are applied
    /// as soon as a poll serves them, before any record that followed them: a record never
    /// lands in state that an assignment is about to reset, and records of revoked partitions
    /// are dropped (their next owner decides them). When nothing is buffered, or when `wait`
    /// says so, and nothing has arrived, it waits up to `IDLE_WAIT` for a queue to receive
    /// something.
    pub(super) fn poll_routed(&mut self, c: &Clients, wait: bool) -> Result<bool, KafkaError> {
        let idle = self.owned.values().all(|o| o.buf.is_empty());
        // Token words are printed only in enriched outputs.
        let words = if self.cfg.output.enrich {
            Words::Keep
        } else {
            Words::Skip
        };
        let mut any = self.poll_routed_queues(c, words)?;
        if !any && (idle || wait) {
            c.routed.wait(IDLE_WAIT);
            any = self.poll_routed_queues(c, words)?;
        }
        for (p, o) in self.owned.iter_mut() {
            o.fetch
                .refresh(c.routed.consumer(), &self.k.routed_topic, *p);
        }
        Ok(any)
    }

    /// One pass over the routed queues, without waiting: the consumer's own queue until it is
    /// empty (rebalances, and records fetched before their partition's queue was split, which
    /// come before what that queue holds), then each owned partition's queue while fewer than
    /// `MAX_BUFFERED_POSTS` of its posts are buffered, up to a share of `ROUTED_POLL_BATCH`
    /// records each. Returns whether a record of an owned partition arrived.
    fn poll_routed_queues(&mut self, c: &Clients, words: Words) -> Result<bool, KafkaError> {
        let mut any = false;
        for _ in 0..ROUTED_POLL_BATCH {
            if c.routed.main_pending() == 0 {
                break;
            }
            match c.routed.poll_main() {
                // A rebalance is served by a poll that returns nothing.
                None => self.rebalance(c)?,
                Some(m) => any |= self.take_routed(m, words),
            }
        }
        if c.routed.main_pending() > 0 {
            return Ok(any);
        }
        let owned: Vec<u32> = self.owned.keys().copied().collect();
        let share = (ROUTED_POLL_BATCH / owned.len().max(1)).max(1);
        for p in owned {
            let room = |w: &Self| {
                w.owned
                    .get(&p)
                    .is_some_and(|o| o.buf.len() < MAX_BUFFERED_POSTS)
            };
            if !room(self) {
                continue;
            }
            c.routed.read_partition(p, share, |m| {
                any |= self.take_routed(m, words);
                room(self)
            });
        }
        Ok(any)
    }

    /// Buffers the posts of a polled routed record; returns whether it was a record of an
    /// owned partition.
    fn take_routed(&mut self, m: KafkaResult<BorrowedMessage<'_>>, words: Words) -> bool {
        let m = match m {
            Ok(m) => m,
            Err(RdError::PartitionEOF(_)) => return false,
            Err(e) => {
                tracing::warn!(error = %e, "routed consumer error");
                return false;
            }
        };
        let (p, offset) = (m.partition() as u32, m.offset() as u64);
        let Some(owned) = self.owned.get_mut(&p) else {
            return false;
        };
        let la = &self.lookahead;
        let exact = |s: &Slot| {
            s.gates
                .as_ref()
                .is_some_and(|g| la.exact_only(g.chars, g.tokens))
        };
        let now = Instant::now();
        let idle_after = Duration::from_millis(self.k.idle_after_ms);
        let was_quiet =
            owned.buf.is_empty() && (owned.idle_before || now - owned.last_record >= idle_after);
        self.wake.record(was_quiet, now);
        owned.last_record = now;
        owned.idle_before = false;
        owned.fetch.polled(offset);
        match decode_routed_record(m.payload().unwrap_or_default(), words) {
            Ok(posts) => {
                let count = posts.len() as u32;
                let now = crate::clock::now_millis();
                for (index, post) in posts.into_iter().enumerate() {
                    if let Some(ms) = post.input_ms {
                        metrics::global().observe_received(true, ms, now);
                    }
                    let slot = Slot::new(offset, index as u32, count, Ok(post));
                    let exact = exact(&slot);
                    let screened = slot.gates.as_ref().map(|g| la.screened(g));
                    owned.push(slot, exact, screened.unwrap_or_default());
                }
            }
            Err(e) => owned.push(
                Slot::new(offset, 0, 1, Err(e.to_string())),
                false,
                Screened::default(),
            ),
        }
        true
    }

    /// Starts partitions whose first record is buffered, once the changelog has been read to its
    /// end since they were assigned: each resumes with the watermark its previous owner had just
    /// before the resume offset (commits happen only right after a progress marker). A partition
    /// that resumes behind what this worker's index has already expired gets the index rebuilt.
    /// Each call also renews the window held for partitions started from their first record
    /// (`hold_fresh_windows`).
    pub(super) fn start_partitions(
        &mut self,
        c: &Clients,
        stop: &AtomicBool,
    ) -> Result<(), KafkaError> {
        if self.sync_nonce.is_some() {
            return Ok(());
        }
        for (p, o) in self.owned.iter_mut().filter(|(_, o)| !o.resumed) {
            let (last, idle) = self.progress.resume(*p, o.start);
            o.last = last;
            // A record polled since the assignment is still buffered: nothing starts before this.
            o.idle_before = idle && o.buf.is_empty();
            o.resumed = true;
            tracing::debug!(partition = p, start = ?o.start, ?last, idle_before = o.idle_before, "resuming");
        }
        let waiting: Vec<(u32, u64)> = self
            .owned
            .iter()
            .filter(|(_, o)| !o.started)
            .filter_map(|(p, o)| o.buf.front().map(|s| (*p, s.offset)))
            .collect();
        for (p, offset) in waiting {
            let mark = self.progress.before(p, offset).map(|(o, mark)| {
                if o + 1 != offset {
                    tracing::warn!(
                        partition = p,
                        offset,
                        marker = o,
                        "no progress marker right before the resume offset"
                    );
                }
                mark
            });
            self.engine
                .set_watermark(p, if offset == 0 { None } else { mark });
            if let Some(o) = self.owned.get_mut(&p) {
                o.started = true;
                o.next_offset = offset;
            }
        }
        self.hold_fresh_windows();
        let behind: Vec<u32> = self
            .owned
            .keys()
            .copied()
            .filter(|p| {
                self.head_key(*p)
                    .is_some_and(|k| self.engine.lacks_generations_for(k.tau))
            })
            .collect();
        if !behind.is_empty() {
            tracing::info!(
                partitions = ?behind,
                "partitions resume behind entries this worker expired: rebuilding the index"
            );
            self.rebuild_index(c, stop)?;
        }
        Ok(())
    }

    /// Holds the window of the earliest head among started partitions without a watermark
    /// (started from their first record): until that post is decided, nothing it may match is
    /// expired by posts of partitions further ahead, nor skipped by a rebuild of the index.
    fn hold_fresh_windows(&mut self) {
        let oldest = self
            .owned
            .iter()
            .filter(|(p, o)| o.started && !self.engine.watermarks().contains_key(p))
            .filter_map(|(p, _)| self.head_key(*p).map(|k| k.tau))
            .min();
        self.engine.hold_window_of(oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{EmptyPolicy, EngineConfig};
    use crate::io::kafka::lookahead::tests::routed;
    use crate::text::tokenize::{Tokenizer, Weighting};

    // Keys planned ahead, through a malformed record (rejected, moving nothing), are the ones
    // the engine decides with as the front posts are taken off one by one; the count of short
    // texts by hash follows what is buffered.
    #[test]
    fn plans_made_ahead_are_the_keys_posts_are_decided_with() {
        let tok = Tokenizer::new(Weighting::Tf, "");
        let cfg = EngineConfig {
            index: crate::index::IndexConfig::default(),
            verify: crate::verify::VerifyConfig::default(),
            window: crate::window::WindowConfig::default(),
            empty_posts: EmptyPolicy::Pass,
            visibility: Default::default(),
        };
        let mut engine = Engine::new(&cfg).unwrap();
        let mut o = Owned::new(None);
        o.started = true;
        let now = 1_700_000_000;
        let posts = [
            (Some(now), "地铁停运了"),
            (
                Some(now - 30),
                "今天早上地铁二号线又停运了上班的朋友们记得绕行",
            ),
            (None, "地铁停运了"),
            (Some(now + 20), "周末去西湖看荷花"),
        ];
        for (i, (t, text)) in posts.iter().enumerate() {
            let offset = if i < 2 { i as u64 } else { i as u64 + 1 };
            if i == 2 {
                o.push(
                    Slot::new(2, 0, 1, Err("malformed".into())),
                    false,
                    Screened::default(),
                );
            }
            let input_ms = 1_700_000_000_000 + i as i64;
            let post = routed(&tok, &i.to_string(), *t, input_ms, text);
            let slot = Slot::new(offset, 0, 1, Ok(post));
            let exact = slot.gates.as_ref().is_some_and(|g| g.chars < 11);
            let screened = slot.gates.as_ref().map(|g| Screened::of(g, &cfg.verify));
            o.push(slot, exact, screened.unwrap_or_default());
        }
        let copies = |o: &Owned| o.copies.values().sum::<u32>();
        assert_eq!((o.copies.len(), copies(&o)), (2, 3));
        assert_eq!(o.screens.len(), o.buf.len());
        // Only planned posts count as below a key, in key order (where a waiting head's
        // comparisons resume, `lanes`).
        let beyond = OrderKey {
            tau: i64::MAX,
            ..OrderKey::default()
        };
        assert_eq!(o.planned_below(&beyond), 0);
        let third = o.plan(2, &engine, 5).unwrap().key;
        assert_eq!((o.planned_below(&third), o.planned.get()), (2, 3));
        let planned: Vec<Plan> = (0..o.buf.len())
            .rev()
            .map(|i| o.plan(i, &engine, 5).unwrap())
            .collect();
        assert!(planned.windows(2).all(|w| w[1].key < w[0].key));
        let last = planned[0].key;
        assert_eq!(o.planned_below(&last), o.buf.len() - 1);
        for plan in planned.iter().rev() {
            let s = o.pop_front().unwrap();
            let Ok(post) = s.post else {
                assert_eq!(plan.after, engine.lane(5));
                continue;
            };
            let at = Position {
                partition: 5,
                seq: routed_seq(s.offset, s.index),
                arrival: post.input_ms,
            };
            assert_eq!(engine.order_key(at, post.created_at), plan.key);
            engine.decide(at, &post.id, post.created_at, &post.analyzed);
            assert_eq!(engine.lane(5), plan.after);
            // Deciding takes posts off the front only: the rest keep their plans.
            assert_eq!(o.planned_below(&last), o.buf.len().saturating_sub(1));
            assert_eq!(o.screens.len(), o.buf.len());
        }
        assert_eq!((o.copies.len(), copies(&o), o.planned.get()), (0, 0, 0));
    }
}
