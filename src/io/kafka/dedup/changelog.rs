//! Changelog replication for the dedup worker: applying the changelog (index entries, progress
//! markers, sync records) to the local index, sending this worker's entries in batches, its
//! progress markers and sync records, and re-reading the log from its start.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::super::client::{self, Tag};
use super::super::gate::Bound;
use super::super::outbox::{send, Out};
use super::super::wire::{
    decode_changelog, encode_changelog, ChangelogRead, ChangelogRecord, Marker,
};
use super::super::KafkaError;
use super::clients::METADATA_TIMEOUT;
use super::{Clients, Worker};
use crate::clock::now_millis;
use crate::index::OrderKey;
use crate::metrics;

/// Index entries per changelog record, at most.
pub(super) const CHANGELOG_BATCH: usize = 512;

/// Changelog records applied per call of `read_changelog`, at most (the worker goes back to
/// deciding in between).
const CHANGELOG_POLL_BATCH: usize = 10_000;

/// Partition number of sync records on the changelog (no routed partition has it).
const SYNC_PARTITION: u32 = u32::MAX;

/// Points the reader at `from` on the changelog (`topic`, partition 0); it fetches from then on.
/// The reader learns the changelog's leader first: librdkafka looks up a logical offset (the
/// log's start) only once it knows the leader, and a lookup asked before that is tried again
/// 500 ms later, however soon the leader is known. A worker without local state caught up an
/// empty changelog in 0.51 s that way, and 0.06 s once it asked for the metadata first.
pub(super) fn assign(
    reader: &BaseConsumer<client::QuietContext>,
    topic: &str,
    from: Offset,
) -> Result<(), KafkaError> {
    if let Err(e) = reader.fetch_metadata(Some(topic), METADATA_TIMEOUT) {
        // Not fatal: the lookup is then only later (and a missing topic is reported by fetching).
        tracing::debug!(error = %e, topic, "changelog metadata");
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, from)?;
    reader.assign(&tpl)?;
    // A partition kept across assignments may keep librdkafka's pause (`pace_reader`).
    reader.resume(&tpl)?;
    Ok(())
}

/// Whether a worker's changelog reader may stop fetching: the worker owns every routed
/// partition (`owned` of `partitions`), has read back its sync record (`sync_pending`), and
/// keeps no local state (`local`: its checkpoints record the worker's own entries as they come
/// back). The changelog then holds nothing the worker needs, only its own entries and markers
/// coming back, and each fetch of it costs the broker: tansu holds every fetch for the whole
/// `fetch.wait.max.ms` (5 ms for the reader) and spends CPU on each.
pub(super) fn reader_may_pause(
    owned: usize,
    partitions: u32,
    sync_pending: bool,
    local: bool,
) -> bool {
    owned == partitions as usize && !sync_pending && !local
}

impl Worker<'_> {
    /// Applies changelog records; returns true when the reader reached the end of the log.
    pub(super) fn read_changelog(
        &mut self,
        reader: &BaseConsumer<client::QuietContext>,
        first_wait: Duration,
        until_eof: bool,
    ) -> bool {
        let mut wait = first_wait;
        for _ in 0..CHANGELOG_POLL_BATCH {
            let Some(m) = reader.poll(wait) else {
                return false;
            };
            wait = Duration::ZERO;
            let m = match m {
                Ok(m) => m,
                Err(RdError::PartitionEOF(_)) => return true,
                Err(e) => {
                    tracing::warn!(error = %e, "changelog read error");
                    return false;
                }
            };
            match decode_changelog(m.payload().unwrap_or_default()) {
                Ok(ChangelogRead::Entries(entries)) => {
                    for (gen, view) in entries {
                        self.stats.applied += 1;
                        // An entry the index holds already (this worker's own, echoed) is not
                        // decoded whole.
                        let admitted = self.engine.admits(gen, &view.key, view.text_hash());
                        match self.local.as_mut() {
                            Some(l) => {
                                // This worker's own entry, back from the changelog, is recorded
                                // now; another's when the index gains it.
                                if l.confirm(gen, &view.key) {
                                    if admitted {
                                        self.engine.apply(gen, view.to_entry());
                                    }
                                } else if admitted {
                                    let entry = view.to_entry();
                                    let kept = entry.clone();
                                    if self.engine.apply(gen, entry) {
                                        l.record(gen, kept);
                                    }
                                }
                            }
                            None if admitted => {
                                self.engine.apply(gen, view.to_entry());
                            }
                            None => {}
                        }
                    }
                }
                Ok(ChangelogRead::Marker(mk)) => {
                    // Timed while deciding, not while catching up on the log (old markers).
                    let other = !until_eof
                        && mk.partition != SYNC_PARTITION
                        && !self.owned.contains_key(&mk.partition);
                    if let Some(written) = m.timestamp().to_millis().filter(|_| other) {
                        metrics::global().observe_marker_delay(written, now_millis());
                    }
                    self.note_marker(mk)
                }
                Err(e) => {
                    tracing::warn!(error = %e, offset = m.offset(), "skipping malformed changelog record")
                }
            }
            if let Some(l) = self.local.as_mut() {
                l.read_to(m.offset());
            }
        }
        !until_eof
    }

    /// Pauses the changelog reader while `reader_may_pause`, and resumes it when that ends (a
    /// rebalance shares the partitions, or a sync record is awaited): reading then goes on
    /// where it stopped, through what this worker wrote meanwhile (its own entries, which the
    /// index holds already, are not decoded whole).
    pub(super) fn pace_reader(&mut self, c: &Clients) -> Result<(), KafkaError> {
        let pause = reader_may_pause(
            self.owned.len(),
            self.partitions,
            self.sync_nonce.is_some(),
            self.local.is_some(),
        );
        if pause == self.reader_paused {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.k.changelog_topic, 0);
        if pause {
            c.reader.pause(&tpl)?;
        } else {
            c.reader.resume(&tpl)?;
        }
        self.reader_paused = pause;
        tracing::debug!(paused = pause, "changelog reader");
        Ok(())
    }

    /// Applies a progress marker (or ends the wait for this worker's sync record).
    fn note_marker(&mut self, m: Marker) {
        if m.partition == SYNC_PARTITION {
            if self.sync_nonce == Some(m.lower_bound.seq) {
                self.sync_nonce = None;
            }
            return;
        }
        self.progress
            .note(m.partition, m.lower_bound, m.idle, m.last);
    }

    /// Empties the index and applies the changelog again from its start (the partitions' new
    /// watermarks decide what is live). Everything this worker decided is delivered first, so
    /// the log holds it.
    pub(super) fn rebuild_index(
        &mut self,
        c: &Clients,
        stop: &AtomicBool,
    ) -> Result<(), KafkaError> {
        self.flush_changelog(c)?;
        c.flush(Duration::from_millis(self.k.shutdown_timeout_ms))?;
        self.settle(c)?;
        self.engine.clear_index();
        // Entries added ahead of their owners are gone with the index.
        self.lookahead.forget_resolved();
        if let Some(l) = self.local.as_mut() {
            l.clear()?;
        }
        self.read_changelog_from(
            &c.reader,
            Offset::Beginning,
            stop,
            "replicated index rebuilt",
        )
    }

    /// Points the reader at `from` on the changelog (its start, or where the local state left
    /// off) and applies it to its end (or until `stop`), then logs `done` with the entry count
    /// and the time it took.
    pub(super) fn read_changelog_from(
        &mut self,
        reader: &BaseConsumer<client::QuietContext>,
        from: Offset,
        stop: &AtomicBool,
        done: &str,
    ) -> Result<(), KafkaError> {
        let t = Instant::now();
        assign(reader, &self.k.changelog_topic, from)?;
        self.reader_paused = false;
        self.catch_up_changelog(reader, t, stop, done);
        Ok(())
    }

    /// Applies the changelog from where the reader is assigned to its end (or until `stop`),
    /// then logs `done` with the entry count and the time since `t`.
    pub(super) fn catch_up_changelog(
        &mut self,
        reader: &BaseConsumer<client::QuietContext>,
        t: Instant,
        stop: &AtomicBool,
        done: &str,
    ) {
        while !stop.load(Ordering::Relaxed)
            && !self.read_changelog(reader, Duration::from_millis(200), true)
        {}
        tracing::info!(
            entries = self.engine.index().len(),
            secs = t.elapsed().as_secs_f64(),
            "{done}"
        );
    }

    /// Writes a sync record to the changelog; see `sync_nonce`.
    pub(super) fn send_sync(&mut self, c: &Clients) -> Result<(), KafkaError> {
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 32;
        self.sync_nonce = Some(nonce);
        let m = Marker {
            partition: SYNC_PARTITION,
            lower_bound: OrderKey {
                tau: 0,
                arrival: 0,
                partition: SYNC_PARTITION,
                seq: nonce,
            },
            idle: true,
            waiting: false,
            last: None,
        };
        let value = encode_changelog(&ChangelogRecord::Marker(m));
        let tag = Tag::Marker {
            partition: SYNC_PARTITION,
            last_offset: None,
        };
        send(
            c.changelog(),
            &c.deliveries,
            &mut self.acks,
            Out {
                topic: &self.k.changelog_topic,
                partition: Some(0),
                key: &[],
                payload: &value,
                tag,
            },
        )
    }

    /// Sends the unsent index entries as one changelog record.
    pub(super) fn flush_changelog(&mut self, c: &Clients) -> Result<(), KafkaError> {
        if self.unsent.is_empty() {
            return Ok(());
        }
        let value = encode_changelog(&ChangelogRecord::Entries(std::mem::take(&mut self.unsent)));
        let out = Out {
            topic: &self.k.changelog_topic,
            partition: Some(0),
            key: &[],
            payload: &value,
            tag: Tag::Changelog,
        };
        send(c.changelog(), &c.deliveries, &mut self.acks, out)
    }

    /// Publishes a progress marker for each owned partition whose bound changed, or whether this
    /// worker, catching up, waits on another's partition (`held_by_other`), at most every
    /// `marker_interval_ms`; at once when this worker is waiting (`now`), or in a hurry
    /// (`Worker::hurry`). Entries go first: a marker vouches for every entry before it on the
    /// changelog.
    pub(super) fn publish_markers(&mut self, c: &Clients, now: bool) -> Result<(), KafkaError> {
        self.flush_changelog(c)?;
        let interval = Duration::from_millis(self.k.marker_interval_ms);
        let now = now || self.hurry();
        let held = self.held_by_other && self.catching_up();
        let parts: Vec<u32> = self.owned.keys().copied().collect();
        for p in parts {
            let bound = self.bound(p);
            let Some(o) = self.owned.get(&p) else {
                continue;
            };
            let waiting = held && bound != Bound::Idle;
            let state = (bound, o.last, waiting);
            if o.sent == Some(state)
                || (!now && o.sent_at.elapsed() < interval)
                || bound == Bound::Unknown
            {
                continue;
            }
            let (lower_bound, idle) = match bound {
                Bound::Key(k) => (k, false),
                _ => (OrderKey::default(), true),
            };
            let m = Marker {
                partition: p,
                lower_bound,
                idle,
                waiting,
                last: o.last,
            };
            let value = encode_changelog(&ChangelogRecord::Marker(m));
            let tag = Tag::Marker {
                partition: p,
                last_offset: o.last.map(|(off, _, _)| off),
            };
            let out = Out {
                topic: &self.k.changelog_topic,
                partition: Some(0),
                key: &[],
                payload: &value,
                tag,
            };
            send(c.changelog(), &c.deliveries, &mut self.acks, out)?;
            if let Some(o) = self.owned.get_mut(&p) {
                o.sent = Some(state);
                o.sent_at = Instant::now();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::reader_may_pause;

    #[test]
    fn the_reader_pauses_only_for_a_lone_owner_without_local_state_and_nothing_awaited() {
        assert!(reader_may_pause(8, 8, false, false));
        // Another worker owns a partition: its markers are needed.
        assert!(!reader_may_pause(7, 8, false, false));
        assert!(!reader_may_pause(0, 8, false, false));
        // A sync record is awaited.
        assert!(!reader_may_pause(8, 8, true, false));
        // Local state records this worker's entries as they come back.
        assert!(!reader_may_pause(8, 8, false, true));
    }
}
