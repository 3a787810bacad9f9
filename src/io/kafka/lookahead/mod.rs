//! Looking ahead into routed partitions other workers own, as plain logic. A dedup worker may
//! decide a post before another partition has decided everything the post sees, when it has
//! read that partition's routed records beyond the post's horizon and none of the posts still
//! undecided there could match it: then their verdicts cannot change this one, and waiting for
//! them (a progress-marker round trip per switch of owner) would buy nothing. Keys are computed
//! exactly as the partition's owner will compute them (`engine::next_order_key`), starting from
//! a progress marker's watermark and arrival. No Kafka here: the worker feeds records and
//! markers in and asks `clears`.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::engine::{next_order_key, Position};
use crate::index::{OrderKey, Visibility};
use crate::verify::{self, Bits, Gates, Screen, Screened, Sketch, VerifyConfig, VerifyMode};

use super::gate::{frontier, Bound};
use super::wire::{routed_seq, RoutedSketch};

/// Without a screen, a check compares a post with at most this many undecided posts of one
/// partition (of its class: a post only an identical text can match is looked up by its text
/// hash); past that it waits for the partition to move on, as in the strict order. The
/// comparisons a post makes grow with how far its worker runs ahead, and spent on every head in
/// turn they cost more than the wait: a second worker's CPU per post halved, and two workers
/// drained a backlog 1.15x as fast (`scripts/bench-backlog.sh 2`, README *Measured results*).
pub(crate) const MAX_SCAN: usize = 512;

/// What `MAX_SCAN` is for posts compared through the screen (`verify::Screen`, eight at a
/// time where the CPU has AVX-512), at about a third of the cost per pair: every check except
/// with `mode = "simhash_only"`, which has no screen (`Lookahead::scan_limit`).
pub(crate) const MAX_SCREENED: usize = 4096;

/// A post read ahead, not yet known to be decided: what verification reads of it, and no more
/// (a whole analysis, with its SimHash accumulator, normalized string and bigrams, is several
/// times larger; a worker may hold tens of thousands of such posts).
struct Pending {
    key: OrderKey,
    gates: Gates,
    post: RoutedSketch,
    /// Its entry is in the index already, ahead of its owner (`Lookahead::resolve`).
    resolved: bool,
}

/// One partition followed ahead: where reading continues and the watermark and arrival there.
/// Its undecided posts are kept in two classes: a post only an identical text can match
/// (`verify::exact_only`: short, few tokens; most microblog posts are) can match no post of the
/// other class, since identical texts fall in the same class. A post of the first class is
/// compared with those of its text hash only, one of the second with the second class only.
struct Ahead {
    next_offset: u64,
    watermark: Option<i64>,
    arrival: i64,
    /// Undecided posts another text may match, in key order.
    posts: VecDeque<Pending>,
    /// What `verify::Screen` reads of each of `posts`, in the same order: a check scans these
    /// 32-byte records and meets the gates only for those the screen lets through.
    screens: VecDeque<Screened>,
    /// Undecided posts only an identical text can match, in key order.
    exact: VecDeque<Pending>,
    /// The keys of `exact` by text hash, in key order.
    by_hash: HashMap<u32, VecDeque<OrderKey>>,
}

impl Ahead {
    fn new(next_offset: u64, mark: Option<(i64, i64)>) -> Self {
        Ahead {
            next_offset,
            watermark: mark.map(|m| m.0),
            arrival: mark.map_or(0, |m| m.1),
            posts: VecDeque::new(),
            screens: VecDeque::new(),
            exact: VecDeque::new(),
            by_hash: HashMap::new(),
        }
    }

    /// Every post not read yet gets a key at least this.
    fn frontier(&self, partition: u32) -> OrderKey {
        frontier(partition, self.next_offset, self.watermark, self.arrival)
    }

    fn push(&mut self, p: Pending, exact_only: bool, cfg: &VerifyConfig) {
        if exact_only {
            let hash = p.gates.text_hash.unwrap_or_default();
            self.by_hash.entry(hash).or_default().push_back(p.key);
            self.exact.push_back(p);
        } else {
            self.screens.push_back(Screened::of(&p.gates, cfg));
            self.posts.push_back(p);
        }
    }

    /// Forgets the posts with keys below `bound`.
    fn forget_below(&mut self, bound: &OrderKey) {
        while self.posts.front().is_some_and(|p| p.key < *bound) {
            self.posts.pop_front();
            self.screens.pop_front();
        }
        while let Some(p) = self.exact.front().filter(|p| p.key < *bound) {
            let hash = p.gates.text_hash.unwrap_or_default();
            if let Some(keys) = self.by_hash.get_mut(&hash) {
                keys.pop_front();
                if keys.is_empty() {
                    self.by_hash.remove(&hash);
                }
            }
            self.exact.pop_front();
        }
    }

    /// Where the undecided post with key `key` is: whether in `exact`, and its index there.
    fn position(&self, key: &OrderKey) -> Option<(bool, usize)> {
        let at = |q: &VecDeque<Pending>| {
            let i = q.partition_point(|p| p.key < *key);
            q.get(i).filter(|p| p.key == *key).map(|_| i)
        };
        at(&self.posts)
            .map(|i| (false, i))
            .or_else(|| at(&self.exact).map(|i| (true, i)))
    }

    fn find_mut(&mut self, key: &OrderKey) -> Option<&mut Pending> {
        match self.position(key)? {
            (true, i) => self.exact.get_mut(i),
            (false, i) => self.posts.get_mut(i),
        }
    }

    fn clear(&mut self) {
        self.posts.clear();
        self.screens.clear();
        self.exact.clear();
        self.by_hash.clear();
    }
}

/// What verification's gates need of a post, `None` for an empty text (it matches nothing).
pub(crate) fn gates_of(s: &Sketch<'_>) -> Option<Gates> {
    (!s.chars.is_empty()).then(|| Gates::of(s))
}

/// The first index of `range` in `records` that `screen` lets through and `may` accepts
/// (`verify::Screen::find` over the deque's two slices); without a screen, the first that `may`
/// accepts.
pub(crate) fn screen_range(
    screen: Option<&Screen>,
    records: &VecDeque<Screened>,
    range: std::ops::Range<usize>,
    mut may: impl FnMut(usize) -> bool,
) -> Option<usize> {
    let Some(screen) = screen else {
        return range.into_iter().find(|&i| may(i));
    };
    let (head, tail) = records.as_slices();
    let split = head.len();
    let in_head = range.start.min(split)..range.end.min(split);
    let in_tail = range.start.max(split) - split..range.end.max(split) - split;
    screen
        .find(&head[in_head.clone()], |i| may(in_head.start + i))
        .map(|i| in_head.start + i)
        .or_else(|| {
            screen
                .find(&tail[in_tail.clone()], |i| may(split + in_tail.start + i))
                .map(|i| split + in_tail.start + i)
        })
}

/// Whether `chars` and `tokens` are both below `bounds` (`Lookahead::exact_below`).
fn is_below(bounds: (usize, usize), chars: usize, tokens: usize) -> bool {
    chars < bounds.0 && tokens < bounds.1
}

/// What `Lookahead::check` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Nothing there can change the post's verdict.
    Clear,
    /// The partition is not followed.
    NotFollowed,
    /// Records the post may see have not been read yet.
    Unread,
    /// An undecided post there may match it.
    MayMatch,
    /// It sees more undecided posts there than one check compares (`MAX_SCAN`,
    /// `MAX_SCREENED`).
    Far,
}

/// The partitions followed ahead and their undecided posts.
pub(crate) struct Lookahead {
    parts: BTreeMap<u32, Ahead>,
    visibility: Visibility,
    verify: VerifyConfig,
    /// With `verify.mode = simhash_only` any fingerprint within this distance matches.
    max_distance: u32,
    /// A post with fewer characters and tokens than these can match only an identical text
    /// (`verify::exact_only_below`; none with `mode = "simhash_only"`).
    exact_below: (usize, usize),
}

impl Lookahead {
    pub(crate) fn new(visibility: Visibility, verify: VerifyConfig, max_distance: u32) -> Self {
        let exact_below = match verify.mode {
            VerifyMode::SimhashOnly => (0, 0),
            _ => verify::exact_only_below(&verify),
        };
        Lookahead {
            parts: BTreeMap::new(),
            visibility,
            verify,
            max_distance,
            exact_below,
        }
    }

    /// Follows `partition` from `offset`, where its watermark and arrival are `mark` (none at
    /// the partition's start), forgetting what was read of it before.
    pub(crate) fn start(&mut self, partition: u32, offset: u64, mark: Option<(i64, i64)>) {
        self.parts.insert(partition, Ahead::new(offset, mark));
    }

    /// Stops following `partition`.
    pub(crate) fn stop(&mut self, partition: u32) {
        self.parts.remove(&partition);
    }

    /// The partitions followed, with the offset reading continues at.
    pub(crate) fn followed(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.parts.iter().map(|(p, a)| (*p, a.next_offset))
    }

    /// Whether `partition` is followed.
    pub(crate) fn follows(&self, partition: u32) -> bool {
        self.parts.contains_key(&partition)
    }

    /// The undecided post of `partition` with key `key`, if it is read and not resolved.
    pub(crate) fn awaited(&self, partition: u32, key: &OrderKey) -> Option<&RoutedSketch> {
        self.find(partition, key)
            .filter(|p| !p.resolved)
            .map(|p| &p.post)
    }

    /// Notes that what the undecided post of `partition` with key `key` stores is in the index
    /// ahead of its owner's decision, its entry or nothing (`Engine::decide_ahead`): a post it
    /// may match need not wait for it any more.
    pub(crate) fn resolve(&mut self, partition: u32, key: &OrderKey) {
        if let Some(p) = self.parts.get_mut(&partition).and_then(|a| a.find_mut(key)) {
            p.resolved = true;
        }
    }

    /// Forgets which posts were resolved (their entries left the index).
    pub(crate) fn forget_resolved(&mut self) {
        for a in self.parts.values_mut() {
            a.posts
                .iter_mut()
                .chain(a.exact.iter_mut())
                .for_each(|p| p.resolved = false);
        }
    }

    fn find(&self, partition: u32, key: &OrderKey) -> Option<&Pending> {
        let a = self.parts.get(&partition)?;
        let (exact, i) = a.position(key)?;
        if exact {
            a.exact.get(i)
        } else {
            a.posts.get(i)
        }
    }

    /// Posts of `partition` read and not known to be decided.
    pub(crate) fn pending(&self, partition: u32) -> usize {
        self.parts
            .get(&partition)
            .map_or(0, |a| a.posts.len() + a.exact.len())
    }

    /// Reads the routed record at `offset` of `partition` (its posts, or `None` when it does not
    /// decode: its owner will reject it, which changes no watermark). A record before the
    /// reading point was read already. After a gap the keys of what follows are unknown (the
    /// watermark may have moved in between): the partition is no longer followed, and `false`
    /// says so.
    pub(crate) fn read(
        &mut self,
        partition: u32,
        offset: u64,
        posts: Option<Vec<RoutedSketch>>,
    ) -> bool {
        let exact_below = self.exact_below;
        let Some(a) = self.parts.get_mut(&partition) else {
            return true;
        };
        if offset < a.next_offset {
            return true;
        }
        if offset > a.next_offset {
            self.parts.remove(&partition);
            return false;
        }
        a.next_offset = offset + 1;
        for (index, post) in posts.into_iter().flatten().enumerate() {
            let at = Position {
                partition,
                seq: routed_seq(offset, index as u32),
                arrival: post.input_ms,
            };
            let key = next_order_key(
                a.watermark,
                a.arrival,
                at,
                post.created_at,
                &self.visibility,
            );
            a.watermark = Some(key.tau);
            if key.arrival != 0 {
                a.arrival = key.arrival;
            }
            let Some(gates) = gates_of(&post.sketch()) else {
                continue;
            };
            let exact = is_below(exact_below, gates.chars, gates.tokens);
            let pending = Pending {
                key,
                gates,
                post,
                resolved: false,
            };
            a.push(pending, exact, &self.verify);
        }
        true
    }

    /// Forgets the posts of `partition` that its owner has decided: those below `bound`, what
    /// the owner's latest progress marker says (their index entries are applied by then).
    pub(crate) fn decided(&mut self, partition: u32, bound: Bound) {
        let Some(a) = self.parts.get_mut(&partition) else {
            return;
        };
        match bound {
            Bound::Idle => a.clear(),
            Bound::Key(b) => a.forget_below(&b),
            Bound::Unknown => {}
        }
    }

    /// Whether a post with key `key` and sketch `post` (of another partition) may be decided
    /// without waiting for `partition` (`Check::Clear`): everything of `partition` it sees has
    /// been read, and no post read and not yet decided there that it sees could match it (at
    /// most `scan_limit` of them compared: `Check::Far` past that; a post only an identical text
    /// can match is compared with the undecided copies of its text alone).
    /// The undecided posts with keys below `*checked` were compared with it before and cannot
    /// match it; `*checked` moves past those found not to match this time. (A waiting post is
    /// checked again after every decision of another lane: without this, each check compared
    /// every undecided post again, a third of a worker's CPU with two workers.)
    pub(crate) fn check_resuming(
        &self,
        partition: u32,
        key: &OrderKey,
        post: &Sketch<'_>,
        bits: &Bits,
        checked: &mut Option<OrderKey>,
    ) -> Check {
        let Some(a) = self.parts.get(&partition) else {
            return Check::NotFollowed;
        };
        let v = &self.visibility;
        if key.sees(&a.frontier(partition), v) {
            return Check::Unread;
        }
        if self.exact_only(post.chars.len(), post.tokens.len()) {
            // Only undecided copies of its text could match it, found by its hash.
            let Some(keys) = a.by_hash.get(&(post.text_hash as u32)) else {
                return Check::Clear;
            };
            let from = checked.map_or(0, |c| keys.partition_point(|k| *k < c));
            for k in keys.range(from..).take_while(|k| key.sees(k, v)) {
                let p = &a.exact[a.exact.partition_point(|p| p.key < *k)];
                if !p.resolved && self.may_match(post, bits, &p.gates, || p.post.sketch()) {
                    *checked = Some(*k);
                    return Check::MayMatch;
                }
            }
            return Check::Clear;
        }
        let from = checked.map_or(0, |k| a.posts.partition_point(|p| p.key < k));
        // The posts are in key order, and a key sees those of another partition up to a point.
        let to = a.posts.partition_point(|p| key.sees(&p.key, v));
        if to.saturating_sub(from) > self.scan_limit() {
            return Check::Far;
        }
        if let Some(p) = self.first_may_match(a, from..to.max(from), post, bits) {
            *checked = Some(p.key);
            return Check::MayMatch;
        }
        // Every undecided post before the first one it does not see was compared (all of them
        // when it sees the last: what is read later comes after it).
        let unseen = a.posts.get(to).map(|p| p.key);
        *checked = unseen.or(a.posts.back().map(|p| p.key)).max(*checked);
        Check::Clear
    }

    /// The first undecided post of `a.posts[range]` that `post` may match: the screen first
    /// (`verify::Screen`), then `may_match`.
    fn first_may_match<'a>(
        &self,
        a: &'a Ahead,
        range: std::ops::Range<usize>,
        post: &Sketch<'_>,
        bits: &Bits,
    ) -> Option<&'a Pending> {
        let may = |i: usize| {
            let p = &a.posts[i];
            !p.resolved && self.may_match(post, bits, &p.gates, || p.post.sketch())
        };
        let screen = self.screen(post, bits);
        screen_range(screen.as_ref(), &a.screens, range, may).map(|i| &a.posts[i])
    }

    /// How many undecided posts of one partition a check compares at most: `MAX_SCREENED`
    /// through the screen, `MAX_SCAN` without one.
    pub(crate) fn scan_limit(&self) -> usize {
        if self.screens() {
            MAX_SCREENED
        } else {
            MAX_SCAN
        }
    }

    /// Whether checks compare through a screen: in every verification mode but `simhash_only`.
    fn screens(&self) -> bool {
        self.verify.mode != VerifyMode::SimhashOnly
    }

    /// The screen `post` (whose `Bits` are `bits`) is compared through, if verification has
    /// one (none with `mode = "simhash_only"`, which compares fingerprints alone).
    pub(crate) fn screen(&self, post: &Sketch<'_>, bits: &Bits) -> Option<Screen> {
        self.screens()
            .then(|| Screen::new(post, bits, &self.verify))
    }

    /// What `Screen` reads of a post with gates `g`, as verification is configured here.
    pub(crate) fn screened(&self, g: &Gates) -> Screened {
        Screened::of(g, &self.verify)
    }

    /// Whether a post of `chars` characters and `tokens` tokens can match only an identical
    /// text (as `verify` is configured here).
    pub(crate) fn exact_only(&self, chars: usize, tokens: usize) -> bool {
        is_below(self.exact_below, chars, tokens)
    }

    /// Whether a post (`exact`: whether it can match only an identical text; `text_hash`: the
    /// low 32 bits of its text hash) and a post with gates `g` are of one class, which any
    /// match needs: copies of one text if only an identical text can match it, else two posts
    /// that other texts can match.
    pub(crate) fn same_class(&self, exact: bool, text_hash: u32, g: &Gates) -> bool {
        if exact {
            g.text_hash == Some(text_hash)
        } else {
            !self.exact_only(g.chars, g.tokens)
        }
    }

    /// Whether `post` (whose `Bits` are `bits`) may match another post (whose gates are
    /// `gates` and whose sketch `other` gives) by any rule of verification: the cheap gates
    /// first, then `verify` itself.
    pub(crate) fn may_match<'o>(
        &self,
        post: &Sketch<'_>,
        bits: &Bits,
        gates: &Gates,
        other: impl FnOnce() -> Sketch<'o>,
    ) -> bool {
        if self.verify.mode == VerifyMode::SimhashOnly {
            return post.fingerprint.hamming(gates.fingerprint) <= self.max_distance;
        }
        verify::may_accept(post, bits, gates, &self.verify)
            && verify::verify(post, &other(), &self.verify).is_some()
    }
}

#[cfg(test)]
pub(crate) mod tests;
