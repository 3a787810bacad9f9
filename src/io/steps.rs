//! The per-record steps every front end shares, so the file pipeline, `eval`, the route stage
//! and `replay` treat a record alike: `Admission` (decode, then the time checks) and
//! `PostRouter` (analyze, then pick the partition by the dominant fingerprint block).

use crate::clock::now_secs;
use crate::engine::{Analyzed, Analyzer};
use crate::input::{Decoded, Decoder};
use crate::io::config::StageConfig;
use crate::routing::{Route, Router, RoutingConfig};
use crate::text::tokenize::Tokenizer;
use crate::types::{EventTime, PostId, RejectReason, Rejection};

/// A record turned away at admission, with the post id when decoding got that far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// Why.
    pub rejection: Rejection,
    /// The post id whenever it could be read (also for a record that failed to decode).
    pub id: Option<PostId>,
}

/// Decoding and the time checks, against the wall clock read once at start.
#[derive(Clone, Debug)]
pub struct Admission {
    decoder: Decoder,
    now: i64,
    max_future_secs: i64,
}

impl Admission {
    /// Admission under `cfg`'s input and window settings.
    pub fn new(cfg: &StageConfig) -> Admission {
        Admission {
            decoder: Decoder::new(&cfg.input),
            now: now_secs(),
            max_future_secs: cfg.max_future_secs(),
        }
    }

    /// Decodes `line` and checks its time.
    pub fn admit(&self, line: &[u8]) -> Result<Decoded, Rejected> {
        let post = self.decoder.decode(line).map_err(|rejection| Rejected {
            rejection,
            id: self.decoder.id_of_rejected(line),
        })?;
        match future_time(post.created_at, self.now, self.max_future_secs) {
            Some(rejection) => Err(Rejected {
                rejection,
                id: Some(post.id),
            }),
            None => Ok(post),
        }
    }

    /// `admit`, timed as the decode stage (`metrics::Stage::Decode`), keeping only the
    /// rejection: how the Kafka stages admit a raw record.
    pub fn admit_timed(&self, line: &[u8]) -> Result<Decoded, Rejection> {
        let t = crate::metrics::global().timer();
        let post = self.admit(line).map_err(|r| r.rejection);
        crate::metrics::global().observe_since(crate::metrics::Stage::Decode, t);
        post
    }
}

/// The `future_time` rejection of a post dated more than `max_future_secs` after `now`.
fn future_time(t: Option<EventTime>, now: i64, max_future_secs: i64) -> Option<Rejection> {
    let t = t?;
    (max_future_secs > 0 && t.0 > now + max_future_secs).then(|| {
        Rejection::new(
            RejectReason::FutureTime,
            format!("created_at {} is ahead of the clock", t.0),
        )
    })
}

/// Analysis of a post and its routed partition.
pub struct PostRouter<'t> {
    analyzer: Analyzer<'t>,
    router: Router,
}

impl<'t> PostRouter<'t> {
    /// A router over `partitions` partitions (at least 1).
    pub fn new(tokenizer: &'t Tokenizer, partitions: u32, cfg: &RoutingConfig) -> Self {
        PostRouter {
            analyzer: Analyzer::new(tokenizer),
            router: Router::new(partitions, cfg.clone()),
        }
    }

    /// The number of partitions.
    pub fn partitions(&self) -> u32 {
        self.router.partitions()
    }

    /// Analyzes `text` into `a`; returns the partition that decides it (0 without a
    /// fingerprint).
    pub fn analyze(&mut self, text: &str, a: &mut Analyzed) -> u32 {
        self.analyzer.analyze(text, a);
        a.simhash.as_ref().map_or(0, |sh| self.router.primary(sh))
    }

    /// Analyzes `text` into `a`; returns its full route, replicas included (`eval --partitions`
    /// models them; the Kafka stages decide on the primary alone).
    pub fn analyze_with_replicas(&mut self, text: &str, a: &mut Analyzed) -> Route {
        self.analyzer.analyze(text, a);
        let weight: f32 = a.tokens.iter().map(|t| t.weight).sum();
        a.simhash.as_ref().map_or(
            Route {
                primary: 0,
                replicas: Vec::new(),
            },
            |sh| self.router.route(sh, weight),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::tokenize::{Weighting, DEFAULT_STOPWORDS};

    fn stages() -> StageConfig {
        StageConfig::defaults_for_tests()
    }

    #[test]
    fn a_post_from_the_future_is_rejected_with_its_id() {
        let a = Admission::new(&stages());
        let t = now_secs() + 10 * 86_400;
        let line = format!(r#"{{"id":"7","text":"x","created_at":{t}}}"#);
        let r = a.admit(line.as_bytes()).unwrap_err();
        assert_eq!(r.rejection.reason, RejectReason::FutureTime);
        assert_eq!(r.id, Some(PostId("7".into())));
        assert!(a
            .admit(br#"{"id":"8","text":"x","created_at":1700000000}"#)
            .is_ok());
        assert_eq!(a.admit(b"not json").unwrap_err().id, None);
    }

    #[test]
    fn the_primary_partition_is_the_route_primary() {
        let tok = Tokenizer::new(Weighting::Tf, DEFAULT_STOPWORDS);
        let mut r = PostRouter::new(&tok, 8, &RoutingConfig::default());
        let mut a = Analyzed::default();
        for text in ["今天早上地铁二号线又停运了", "新开的那家面馆味道一般", ""]
        {
            let p = r.analyze(text, &mut a);
            assert_eq!(r.analyze_with_replicas(text, &mut a).primary, p, "{text}");
            assert!(p < 8);
        }
    }
}
