//! `simdedup explain A B`: why the engine calls post B a duplicate of post A, or not. Both texts
//! go through the real analyzer; the figures come from `verify`'s own functions and the verdict
//! from a real `Engine` holding only A.

use serde::Serialize;

use crate::app::common::{
    build_tokenizer, load_config, read_text_arg, usage, CmdResult, ConfigArgs, EXIT_FAILURE,
    EXIT_OK,
};
use crate::app::config::Config;
use crate::app::view::{render_verdict, sources_label, VerdictView};
use crate::engine::{Analyzed, Analyzer, Engine, Position};
use crate::index::{OrderKey, Query, Sources};
use crate::text::normalize::Removed;
use crate::text::tokenize::Tokenizer;
use crate::types::{Fingerprint, PostId};
use crate::verify::{effective_len, jaccard, levenshtein, max_edits, VerifyConfig};

/// `--help` epilogue.
pub const HELP: &str = "Examples:
  simdedup explain '今天早上地铁二号线又停运了，上班的朋友们记得绕行' '今天早上地铁二号线又停运了，上班的朋友们要记得绕行'
  simdedup explain @a.txt @b.txt --json
  echo '转发微博 //@某人: 原文' | simdedup explain - '原文'

A and B go through the configured analysis; B is then decided by a real engine whose index holds
only A (without times, so the window plays no part). Each rule is also evaluated on its own; the
engine takes the first that accepts, in the order shown, if the candidate search finds A at all.
`@FILE` reads a file when FILE exists (otherwise the text is taken literally); `-` reads stdin.

Exit codes: 0 done (whatever the verdict); 1 runtime failure; 2 usage or configuration error.";

/// `explain` options.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// Post A, stored first.
    pub a: String,
    /// Post B, decided against an index holding only A.
    pub b: String,
    /// Print the explanation as JSON.
    #[arg(long)]
    pub json: bool,
    /// Configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Runs `explain`.
pub fn run(args: ExplainArgs) -> CmdResult {
    let cfg = load_config(&args.config).map_err(usage)?;
    if args.a == "-" && args.b == "-" {
        return Err(usage("only one of A and B can be read from stdin"));
    }
    let a = read_text_arg(&args.a).map_err(usage)?;
    let b = read_text_arg(&args.b).map_err(usage)?;
    let tokenizer = build_tokenizer(&cfg).map_err(usage)?;
    let e = explain(&a, &b, &cfg, &tokenizer).map_err(usage)?;
    if args.json {
        let text = serde_json::to_string_pretty(&e).map_err(|e| (EXIT_FAILURE, e.to_string()))?;
        println!("{text}");
    } else {
        print!("{}", render(&e));
    }
    Ok(EXIT_OK)
}

/// One side of the comparison.
#[derive(Debug, Serialize)]
pub struct Side {
    /// The text as given.
    pub raw: String,
    /// After normalization.
    pub normalized: String,
    /// Characters of the normalized text.
    pub chars: usize,
    /// What normalization removed.
    pub removed: Removed,
    /// Distinct tokens with their weights, in order of first occurrence.
    pub tokens: Vec<(String, f32)>,
    /// Fingerprint, 16 hex digits.
    pub fingerprint: String,
    /// Fingerprint bits by table block, highest block first (concatenated they are the binary
    /// form of the hex).
    pub blocks: Vec<String>,
}

/// One verification rule, evaluated on its own.
#[derive(Debug, Serialize)]
pub struct RuleCheck {
    /// `exact`, `edit`, `containment` or `simhash`.
    pub rule: &'static str,
    /// Whether this rule alone accepts the pair.
    pub accepts: bool,
    /// The figures behind it.
    pub why: String,
}

/// Everything `explain` prints.
#[derive(Debug, Serialize)]
pub struct Explanation {
    /// Post A (stored first).
    pub a: Side,
    /// Post B (decided against an index holding only A).
    pub b: Side,
    /// Hamming distance of the fingerprints.
    pub distance: u32,
    /// Blocks on which the fingerprints agree, of `blocks`.
    pub shared_blocks: usize,
    /// Blocks b of the table layout.
    pub blocks: usize,
    /// Distance k the block tables guarantee to find.
    pub max_distance: u32,
    /// Tokens both posts have.
    pub shared_tokens: Vec<String>,
    /// Token-set Jaccard (Zhou's Dup).
    pub overlap: f32,
    /// Zhou's `Sim = 1/(H+1) + K*Dup`.
    pub similarity: f32,
    /// K.
    pub sim_k: f32,
    /// The simhash rule's threshold.
    pub sim_threshold: f32,
    /// Levenshtein distance of the normalized texts (characters).
    pub levenshtein: usize,
    /// `1 - levenshtein / longer length`.
    pub edit_similarity: f32,
    /// The shorter normalized text occurs in the longer one.
    pub contained: bool,
    /// Each rule on its own; the engine takes the first that accepts, in this order.
    pub rules: Vec<RuleCheck>,
    /// Which candidate sources surface A for B (none: B is never compared with A).
    pub candidate: Option<Sources>,
    /// B's verdict from an engine holding only A.
    pub verdict: VerdictView,
}

/// Analyzes both texts and runs the engine: A is decided first (and stored if unique), then B.
pub fn explain(
    raw_a: &str,
    raw_b: &str,
    cfg: &Config,
    tokenizer: &Tokenizer,
) -> Result<Explanation, String> {
    let mut engine = Engine::new(&cfg.engine()).map_err(|e| e.to_string())?;
    let mut analyzer = Analyzer::new(tokenizer);
    let (mut a, mut b) = (Analyzed::default(), Analyzed::default());
    analyzer.analyze(raw_a, &mut a);
    analyzer.analyze(raw_b, &mut b);
    let blocks = cfg.index.blocks.clamp(1, 64);
    let (id_a, id_b) = (PostId("A".into()), PostId("B".into()));
    engine.decide(Position::new(0, 0), &id_a, None, &a);
    let query = Query {
        id: &id_b,
        before: OrderKey {
            tau: i64::MAX,
            arrival: i64::MAX,
            partition: u32::MAX,
            seq: u64::MAX,
        },
        visibility: Default::default(),
        min_gen: i64::MIN,
        max_gen: i64::MAX,
        sketch: b.sketch(),
        grams: &b.grams,
    };
    let candidate = engine
        .index()
        .candidate_sources(&query)
        .first()
        .map(|(_, s)| *s);
    let verdict = engine.decide(Position::new(0, 1), &id_b, None, &b);
    let v = &cfg.verify;
    let (fa, fb) = (a.fingerprint(), b.fingerprint());
    let distance = fa.hamming(fb);
    let overlap = jaccard(&a.token_set, &b.token_set);
    let longer = a.chars.len().max(b.chars.len());
    let lev = levenshtein(&a.chars, &b.chars);
    Ok(Explanation {
        distance,
        shared_blocks: (0..blocks)
            .filter(|&i| block_bits(fa, i, blocks) == block_bits(fb, i, blocks))
            .count(),
        blocks,
        max_distance: cfg.index.max_distance,
        shared_tokens: a
            .tokens
            .iter()
            .filter(|t| b.tokens.iter().any(|u| u.hash == t.hash))
            .map(|t| t.word.clone())
            .collect(),
        overlap,
        similarity: 1.0 / (distance as f32 + 1.0) + v.sim_k * overlap,
        sim_k: v.sim_k,
        sim_threshold: v.sim_threshold,
        levenshtein: lev,
        edit_similarity: if longer == 0 {
            1.0
        } else {
            1.0 - lev as f32 / longer as f32
        },
        contained: contains(&a.chars, &b.chars),
        rules: rule_checks(&a, &b, v),
        candidate,
        verdict: VerdictView::of(&verdict),
        a: side(raw_a, &a, blocks),
        b: side(raw_b, &b, blocks),
    })
}

fn side(raw: &str, a: &Analyzed, blocks: usize) -> Side {
    let fp = a.fingerprint();
    Side {
        raw: raw.to_string(),
        normalized: a.normalized.clone(),
        chars: a.chars.len(),
        removed: a.removed.clone(),
        tokens: a
            .tokens
            .iter()
            .map(|t| (t.word.clone(), t.weight))
            .collect(),
        fingerprint: fp.to_string(),
        blocks: (0..blocks)
            .rev()
            .map(|i| {
                let (lo, hi) = block_range(i, blocks);
                let bits = block_bits(fp, i, blocks);
                format!("{bits:0w$b}", w = hi - lo)
            })
            .collect(),
    }
}

/// Bits [lo, hi) of block i, as `TableLayout` cuts them.
fn block_range(i: usize, blocks: usize) -> (usize, usize) {
    (i * 64 / blocks, (i + 1) * 64 / blocks)
}

fn block_bits(fp: Fingerprint, i: usize, blocks: usize) -> u64 {
    let (lo, hi) = block_range(i, blocks);
    let width = hi - lo;
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    (fp.0 >> lo) & mask
}

fn contains(a: &[char], b: &[char]) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    !short.is_empty() && long.windows(short.len()).any(|w| w == short)
}

/// Each rule of `verify::verify` evaluated on its own, with the numbers that decide it.
fn rule_checks(a: &Analyzed, b: &Analyzed, v: &VerifyConfig) -> Vec<RuleCheck> {
    let (short, long) = if a.chars.len() <= b.chars.len() {
        (&a.chars, &b.chars)
    } else {
        (&b.chars, &a.chars)
    };
    let exact = a.text_hash == b.text_hash && a.chars == b.chars;
    let lev = levenshtein(short, long);
    let edit_sim = if long.is_empty() {
        1.0
    } else {
        1.0 - lev as f32 / long.len() as f32
    };
    let max_edits = max_edits(long.len(), v);
    let edit = !short.is_empty() && long.len() >= v.edit_min_chars && lev <= max_edits;
    // `+ 0.0` turns a negative zero (no characters) into 0, which prints as "0.0", not "-0.0".
    let eff = effective_len(short, v) + 0.0;
    let ratio = if long.is_empty() {
        0.0
    } else {
        short.len() as f32 / long.len() as f32
    };
    let sub = contains(short, long);
    let contained = v.containment
        && eff >= v.containment_min_chars as f32
        && ratio >= v.containment_min_ratio
        && sub;
    let dist = a.fingerprint().hamming(b.fingerprint());
    let sim = 1.0 / (dist as f32 + 1.0) + v.sim_k * jaccard(&a.token_set, &b.token_set);
    let ntok = a.token_set.len().min(b.token_set.len());
    let simhash = ntok >= v.simhash_min_tokens && sim >= v.sim_threshold;
    vec![
        RuleCheck {
            rule: "exact",
            accepts: exact,
            why: if exact {
                "identical normalized text".into()
            } else {
                "normalized texts differ".into()
            },
        },
        RuleCheck {
            rule: "edit",
            accepts: edit,
            why: if long.len() < v.edit_min_chars {
                format!(
                    "longer text has {} chars < edit_min_chars {} (short texts only match exactly)",
                    long.len(),
                    v.edit_min_chars
                )
            } else {
                format!(
                    "edit similarity {edit_sim:.3} ({} over {} chars) {} {}",
                    count(lev, "edit", "edits"),
                    long.len(),
                    ge(edit),
                    v.edit_similarity
                )
            },
        },
        RuleCheck {
            rule: "containment",
            accepts: contained,
            why: if !v.containment {
                "disabled (verify.containment = false)".into()
            } else {
                format!(
                    "shorter text {} in the longer; effective length {eff:.1} {} {}; length ratio {ratio:.3} {} {}",
                    if sub { "occurs" } else { "does not occur" },
                    ge(eff >= v.containment_min_chars as f32), v.containment_min_chars,
                    ge(ratio >= v.containment_min_ratio), v.containment_min_ratio
                )
            },
        },
        RuleCheck {
            rule: "simhash",
            accepts: simhash,
            why: format!(
                "tokens {}/{} (need {} each); Sim {sim:.3} {} {}",
                a.token_set.len(),
                b.token_set.len(),
                v.simhash_min_tokens,
                ge(sim >= v.sim_threshold),
                v.sim_threshold
            ),
        },
    ]
}

fn ge(ok: bool) -> &'static str {
    if ok {
        ">="
    } else {
        "<"
    }
}

/// The plain-text rendering.
pub fn render(e: &Explanation) -> String {
    let mut o = String::new();
    for (name, s) in [("A", &e.a), ("B", &e.b)] {
        o += &format!("{name} raw:         {}\n", s.raw);
        o += &format!("{name} normalized:  {} ({} chars)\n", s.normalized, s.chars);
        let toks: Vec<String> = s.tokens.iter().map(|(w, x)| format!("{w}:{x}")).collect();
        o += &format!("{name} tokens ({}): {}\n", s.tokens.len(), toks.join(" "));
        o += &format!(
            "{name} fingerprint: {}  {}\n",
            s.fingerprint,
            s.blocks.join(" ")
        );
    }
    o += &format!(
        "hamming distance: {} ({} of {} blocks shared; tables find <= {})\n",
        e.distance, e.shared_blocks, e.blocks, e.max_distance
    );
    o += &format!(
        "token overlap (Dup): {:.3}  shared: {}\n",
        e.overlap,
        e.shared_tokens.join(" ")
    );
    o += &format!(
        "Sim = 1/(H+1) + {}*Dup = {:.3}  (threshold {})\n",
        e.sim_k, e.similarity, e.sim_threshold
    );
    o += &format!(
        "edit similarity: {:.3} ({})  containment: {}\n",
        e.edit_similarity,
        count(e.levenshtein, "edit", "edits"),
        if e.contained { "yes" } else { "no" }
    );
    for r in &e.rules {
        o += &format!(
            "  rule {:<11} {:<7} {}\n",
            r.rule,
            if r.accepts { "accepts" } else { "no" },
            r.why
        );
    }
    o += &match e.candidate {
        Some(s) => format!("candidate: A is found for B by {}\n", sources_label(s)),
        None => "candidate: A is not found for B by any candidate source (exact map, block tables, bigrams)\n".into(),
    };
    o += &render_verdict(&e.verdict);
    o
}

/// `n` and the noun, singular for 1: "1 edit", "2 edits".
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::tokenize::{Weighting, DEFAULT_STOPWORDS};

    fn run(a: &str, b: &str) -> Explanation {
        let tok = Tokenizer::new(Weighting::Tf, DEFAULT_STOPWORDS);
        explain(a, b, &Config::default(), &tok).unwrap()
    }

    #[test]
    fn identical_texts_are_exact_duplicates_at_distance_zero() {
        let t = "今天早上地铁二号线又停运了，上班的朋友们记得绕行，真是服了这条线路";
        let e = run(t, t);
        assert_eq!(e.distance, 0);
        assert_eq!(e.shared_blocks, e.blocks);
        assert!(e.similarity >= e.sim_threshold, "Sim {}", e.similarity);
        assert_eq!(e.verdict.kind, "duplicate");
        assert_eq!(e.verdict.method, Some("exact"));
        assert_eq!(e.verdict.cluster.as_deref(), Some("A"));
        assert!(e.candidate.is_some_and(|s| s.exact));
        assert!(render(&e).contains("verdict: duplicate of A by exact"));
    }

    #[test]
    fn unrelated_texts_are_unique_and_every_rule_says_why() {
        let e = run(
            "今天早上地铁二号线又停运了上班的朋友们记得绕行",
            "新开的那家面馆味道一般价格倒是挺实惠的",
        );
        assert_eq!(e.verdict.kind, "unique");
        assert!(e.rules.iter().all(|r| !r.accepts));
        assert!(e.similarity < e.sim_threshold);
        assert!(e.distance > 0);
    }

    #[test]
    fn first_accepting_rule_is_the_engines_method() {
        // Repost chain and punctuation differ: exact after normalization; an added word: edit;
        // a truncation: containment.
        let base = "今天早上地铁二号线又停运了，上班的朋友们记得绕行";
        for (b, want) in [
            (
                "今天早上地铁二号线又停运了！上班的朋友们记得绕行//@小王:太惨了",
                "exact",
            ),
            ("今天早上地铁二号线又停运了，上班的朋友们要记得绕行", "edit"),
            ("今天早上地铁二号线又停运了，上班的", "containment"),
        ] {
            let e = run(base, b);
            let first = e.rules.iter().find(|r| r.accepts).map(|r| r.rule);
            assert_eq!(first, Some(want), "{b}");
            assert_eq!(e.verdict.method, Some(want), "{b}");
        }
    }

    #[test]
    fn blocks_concatenate_to_the_fingerprint() {
        let e = run("去北京的火车票怎么买", "去上海的火车票怎么买");
        let bits: String = e.a.blocks.concat();
        assert_eq!(bits.len(), 64);
        assert_eq!(
            u64::from_str_radix(&bits, 2).ok(),
            u64::from_str_radix(&e.a.fingerprint, 16).ok()
        );
    }
}
