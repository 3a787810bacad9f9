//! Long-post benchmark: N posts of 5,200 CJK characters that share a 4,000-character prefix and
//! end in random 1,200-character suffixes (deterministic seed), decided one after another through
//! `Analyzer` and `Engine::decide` with the default configuration. Every pair is a candidate (same
//! prefix), none is within the edit threshold, so this measures what verification costs on long
//! texts. Prints posts/s and the verdict counts (they must not change with an optimization).
//!
//! `cargo bench --bench longposts -- 200 50` (post counts; default 200); `cells=N` sets
//! `verify.max_verify_cells_per_post` (0 = unlimited).

/// The allocator of the `simdedup` binary: large blocks on transparent huge pages.
#[global_allocator]
static ALLOC: simdedup::app::alloc::HugePages = simdedup::app::alloc::HugePages;

use std::time::Instant;

use simdedup::app::config::Config;
use simdedup::engine::{Analyzed, Analyzer, Engine, Position, Verdict};
use simdedup::text::tokenize::{Tokenizer, DEFAULT_STOPWORDS};
use simdedup::types::{EventTime, PostId};

const CHARS: &str = "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴切";

const PREFIX_CHARS: usize = 4_000;
const SUFFIX_CHARS: usize = 1_200;

fn posts(n: usize) -> Vec<String> {
    let chars: Vec<char> = CHARS.chars().collect();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chars[(state % chars.len() as u64) as usize]
    };
    let prefix: String = (0..PREFIX_CHARS).map(|_| next()).collect();
    (0..n)
        .map(|_| {
            let mut s = prefix.clone();
            s.extend((0..SUFFIX_CHARS).map(|_| next()));
            s
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let counts: Vec<usize> = args
        .iter()
        .filter_map(|a| a.replace('_', "").parse().ok())
        .collect();
    let counts = if counts.is_empty() { vec![200] } else { counts };
    let mut cfg = Config::default();
    for a in &args {
        if let Some(n) = a.strip_prefix("cells=").and_then(|n| n.parse().ok()) {
            cfg.verify.max_verify_cells_per_post = n;
        }
    }
    let tokenizer = Tokenizer::new(cfg.text.weighting, DEFAULT_STOPWORDS);
    for n in counts {
        let texts = posts(n);
        let mut analyzer = Analyzer::new(&tokenizer);
        let mut engine = Engine::new(&cfg.engine()).expect("default config is valid");
        let mut a = Analyzed::default();
        let (mut unique, mut dups) = (0usize, 0usize);
        let mut analysis = 0.0;
        let t0 = Instant::now();
        for (i, text) in texts.iter().enumerate() {
            let ta = Instant::now();
            analyzer.analyze(text, &mut a);
            analysis += ta.elapsed().as_secs_f64();
            let at = Position::new(0, i as u64);
            let id = PostId(format!("long-{i}"));
            match engine.decide(at, &id, Some(EventTime(1_300_000_000 + i as i64)), &a) {
                Verdict::Duplicate(_) => dups += 1,
                _ => unique += 1,
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let q = &engine.stats().query;
        println!(
            "longposts n={n} chars={} secs={secs:.3} (analysis {analysis:.3}) posts_per_sec={:.1} \
             unique={unique} duplicates={dups} candidates={} budget_exhausted={} unverified={}",
            PREFIX_CHARS + SUFFIX_CHARS,
            n as f64 / secs,
            q.candidates,
            q.verify_budget_exhausted,
            q.candidates_unverified,
        );
    }
}
