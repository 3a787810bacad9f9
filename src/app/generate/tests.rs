//! Load generator tests: determinism, mix proportions, decodability and the copy kinds.

use std::collections::HashMap;

use super::*;
use crate::input::{Decoder, InputConfig};
use crate::text::normalize::normalize;

fn cfg(seed: u64) -> GenConfig {
    GenConfig {
        seed,
        mix: "unique=0.6,exact=0.1,format=0.15,light=0.1,heavy=0.05"
            .parse()
            .unwrap(),
        delay: Delay::Exp(600.0),
        start_secs: 1_700_000_000,
        event_rate: 20.0,
    }
}

fn posts(seed: u64, n: usize) -> Vec<Post> {
    Generator::new(cfg(seed)).take(n).collect()
}

#[test]
fn same_seed_same_posts_other_seed_other_posts() {
    let a: Vec<String> = posts(7, 2000).iter().map(Post::to_json).collect();
    let b: Vec<String> = posts(7, 2000).iter().map(Post::to_json).collect();
    let c: Vec<String> = posts(8, 2000).iter().map(Post::to_json).collect();
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn mix_proportions_within_tolerance() {
    let ps = posts(3, 20_000);
    let mut count: HashMap<Kind, usize> = HashMap::new();
    for p in &ps {
        *count.entry(p.kind).or_default() += 1;
    }
    let want = cfg(3).mix.0;
    for (k, share) in Kind::ALL.iter().zip(want) {
        let got = count.get(k).copied().unwrap_or(0) as f64 / ps.len() as f64;
        assert!(
            (got - share).abs() < 0.01,
            "{}: got {got:.4}, want {share}",
            k.as_str()
        );
    }
}

#[test]
fn every_line_decodes_with_the_default_input_preset() {
    let decoder = Decoder::new(&InputConfig::default());
    for p in posts(5, 5000) {
        let d = decoder.decode(p.to_json().as_bytes()).unwrap();
        assert_eq!(d.id.as_str(), p.id);
        assert_eq!(d.text, p.text);
        assert_eq!(d.created_at.map(|t| t.0), Some(p.created_at));
        assert_eq!(d.user.as_deref(), Some(p.user.as_str()));
        let t: serde_json::Value = serde_json::from_str(&p.truth_json()).unwrap();
        assert_eq!(t["id"], p.id.as_str());
        assert_eq!(t["kind"], p.kind.as_str());
    }
}

#[test]
fn copies_follow_their_original_and_kinds_hold() {
    let ps = posts(11, 10_000);
    let by_id: HashMap<&str, &Post> = ps.iter().map(|p| (p.id.as_str(), p)).collect();
    let mut seen_unique = std::collections::HashSet::new();
    let mut lengths = Vec::new();
    for (i, p) in ps.iter().enumerate() {
        lengths.push(p.text.chars().count());
        if p.kind == Kind::Unique {
            if !p.empty {
                assert!(
                    seen_unique.insert(normalize(&p.text)),
                    "unique repeats: {}",
                    p.text
                );
            }
            continue;
        }
        let o = by_id[p.cluster.as_str()];
        let pos = ps.iter().position(|x| x.id == o.id).unwrap();
        assert!(pos < i && o.created_at <= p.created_at);
        match p.kind {
            Kind::Exact => assert_eq!(p.text, o.text),
            Kind::Format => {
                assert_ne!(p.text, o.text);
                assert_eq!(
                    normalize(&p.text),
                    normalize(&o.text),
                    "{} / {}",
                    o.text,
                    p.text
                );
            }
            _ => assert_ne!(normalize(&p.text), normalize(&o.text)),
        }
    }
    lengths.sort_unstable();
    let short = lengths.iter().filter(|&&l| l < 15).count() as f64 / lengths.len() as f64;
    assert!(lengths[0] >= 1 && *lengths.last().unwrap() <= 200);
    assert!((0.1..0.45).contains(&short), "short share {short}");
}

#[test]
fn mix_and_delay_parse_errors_are_clear() {
    assert!("unique=1,bogus=2"
        .parse::<Mix>()
        .unwrap_err()
        .contains("bogus"));
    assert!("exact=1".parse::<Mix>().is_err());
    assert_eq!("unique=2,exact=2".parse::<Mix>().unwrap().0[1], 0.5);
    assert_eq!(
        "uniform:1:5".parse::<Delay>().unwrap(),
        Delay::Uniform(1.0, 5.0)
    );
    assert!("uniform:5:1".parse::<Delay>().is_err());
    assert!("gauss:3".parse::<Delay>().is_err());
}
