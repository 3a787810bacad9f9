//! Tests of the metrics registry and its rendering.

use super::*;
use crate::engine::{Analyzed, Analyzer, EmptyPolicy, EngineConfig, Position};
use crate::text::tokenize::{Tokenizer, Weighting};
use crate::types::{EventTime, PostId, Rejection};

fn line<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

#[test]
fn counters_and_rejections_by_reason_are_exposed() {
    let m = Metrics::new();
    for _ in 0..3 {
        m.post_in();
    }
    m.verdict(&Verdict::Unique {
        empty: false,
        late: false,
    });
    m.rejected(RejectReason::BadTime);
    m.verdict(&Verdict::Rejected(Rejection::new(RejectReason::Empty, "")));
    m.rebalance("assign");
    m.consumer_lag("posts", &[(0, Some(7)), (1, None)]);
    let text = m.render();
    assert!(text.contains("\nsimdedup_posts_in_total 3\n"), "{text}");
    assert!(text.contains("\nsimdedup_posts_unique_total 1\n"));
    assert!(text.contains("\nsimdedup_posts_duplicate_total 0\n"));
    assert!(text.contains("simdedup_posts_rejected_total{reason=\"bad_time\"} 1\n"));
    assert!(text.contains("simdedup_posts_rejected_total{reason=\"empty\"} 1\n"));
    // Every reason is there from the start, so rate() and sums see no gaps.
    assert_eq!(
        line(&text, "simdedup_posts_rejected_total{").len(),
        RejectReason::ALL.len()
    );
    assert!(text.contains("simdedup_rebalances_total{kind=\"assign\"} 1\n"));
    let lag = line(&text, "simdedup_consumer_lag{");
    assert_eq!(lag.len(), 1, "{lag:?}");
    assert!(lag[0].contains("partition=\"0\"") && lag[0].ends_with(" 7"));
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn histograms_have_cumulative_buckets_sum_and_count() {
    let m = Metrics::new();
    m.observe_stage(Stage::Decide, Duration::from_micros(3));
    m.observe_stage(Stage::Decide, Duration::from_millis(2));
    let text = m.render();
    let dec: Vec<&str> = line(&text, "simdedup_stage_latency_seconds_bucket")
        .into_iter()
        .filter(|l| l.contains("stage=\"decide\""))
        .collect();
    let value = |le: &str| -> u64 {
        let l = dec
            .iter()
            .find(|l| l.contains(&format!("le=\"{le}\"")))
            .unwrap_or_else(|| panic!("no bucket le={le} in {dec:?}"));
        l.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(value("0.000001"), 0);
    assert_eq!(value("0.000005"), 1);
    assert_eq!(value("0.0025"), 2);
    assert_eq!(value("+Inf"), 2);
    assert!(text.contains("simdedup_stage_latency_seconds_count{stage=\"decide\"} 2\n"));
    assert!(text.contains("# TYPE simdedup_stage_latency_seconds histogram\n"));
    // End-to-end latency in milliseconds, served in seconds; a negative skew counts as 0.
    for (input, now) in [(1_000, 1_400), (1_000, 1_600), (2_000, 1_000)] {
        m.observe_end_to_end(input, now);
    }
    let text = m.render();
    let e2e = line(&text, "simdedup_end_to_end_latency_seconds_bucket");
    let has = |s: &str| e2e.iter().any(|l| l.ends_with(s));
    assert!(has("le=\"0.001\"} 1") && has("le=\"0.5\"} 2") && has("le=\"0.75\"} 3"));
    assert!(text.contains("simdedup_end_to_end_latency_seconds_sum 1.0\n"));
    m.observe_received(true, 1_000, 1_250);
    m.observe_received(false, 1_000, 1_010);
    let text = m.render();
    assert!(text.contains("simdedup_received_latency_seconds_sum{stage=\"dedup\"} 0.25\n"));
    assert!(text.contains("simdedup_received_latency_seconds_sum{stage=\"route\"} 0.01\n"));
    m.observe_post_wait(Duration::from_millis(150));
    m.observe_post_wait(Duration::from_millis(30));
    let text = m.render();
    assert!(text.contains("simdedup_post_wait_seconds_count 2\n"));
    assert!(text.contains("simdedup_post_wait_seconds_sum 0.18\n"));
    m.observe_marker_delay(2_000, 2_008);
    m.observe_marker_delay(2_000, 1_990);
    let text = m.render();
    assert!(text.contains("simdedup_marker_delay_seconds_count 2\n"));
    assert!(text.contains("simdedup_marker_delay_seconds_sum 0.008\n"));
}

#[test]
fn engine_figures_come_from_the_published_snapshot() {
    let m = Metrics::new();
    assert!(
        !m.render().contains("simdedup_index_entries"),
        "no engine yet"
    );
    let tok = Tokenizer::new(Weighting::Tf, "");
    let mut e = Engine::new(&EngineConfig {
        index: Default::default(),
        verify: Default::default(),
        window: Default::default(),
        empty_posts: EmptyPolicy::Pass,
        visibility: Default::default(),
    })
    .unwrap();
    let mut a = Analyzed::default();
    Analyzer::new(&tok).analyze("今天早上地铁二号线又停运了上班的朋友们记得绕行", &mut a);
    let t = crate::clock::now_secs() - 60;
    for (i, id) in ["a", "b"].iter().enumerate() {
        let at = Position::new(0, i as u64);
        e.decide(at, &PostId(id.to_string()), Some(EventTime(t)), &a);
    }
    m.publish_engine(&e);
    let text = m.render();
    assert!(text.contains("\nsimdedup_index_entries 1\n"), "{text}");
    assert!(text.contains("# TYPE simdedup_bucket_size histogram\n"));
    // The first post found nothing, the second one exact candidate.
    assert!(
        text.contains("simdedup_candidates_per_query_bucket{le=\"0.0\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("simdedup_candidates_per_query_bucket{le=\"1.0\"} 2\n"));
    let lag = line(&text, "simdedup_window_lag_seconds ")[0];
    let lag: i64 = lag.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((60..120).contains(&lag), "{lag}");
}

#[test]
fn health_is_ready_only_when_every_component_is() {
    let m = Metrics::new();
    assert_eq!(m.health().as_deref(), Some("starting"));
    m.set_health("route", Ok(()));
    m.set_health("dedup", Err("catching up".into()));
    assert_eq!(m.health().as_deref(), Some("dedup: catching up"));
    m.set_health("dedup", Ok(()));
    assert_eq!(m.health(), None);
}
