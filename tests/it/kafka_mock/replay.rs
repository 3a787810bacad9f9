//! `simdedup replay` on the mock broker.

use simdedup::app::config::Config;
use simdedup::io::kafka::{replay, tools};
use simdedup::text::tokenize::{Tokenizer, Weighting, DEFAULT_STOPWORDS};

use super::{exported, file_verdicts, mock_cluster};
use crate::common::write_stream;

// A replay streams its range: each raw partition is read while fewer than 4,096 of its records
// wait to be merged, and a post is decided once every routed partition has one waiting. 440
// rounds of the sample's 23 posts (10,120 records, about 5,000 in each of the two raw
// partitions) are decided as the file pipeline decides them, as a replay holding the whole range
// would.
#[test]
fn a_replay_larger_than_its_buffers_matches_the_file_pipeline() {
    let (_cluster, k) = mock_cluster(2_000);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("stream.jsonl");
    write_stream(&input, 440);
    let n = tools::produce(&k, &k.input_topic, None, input.to_str().unwrap()).unwrap();
    assert_eq!(n, 440 * 23);
    let cfg = Config {
        kafka: k.clone(),
        ..Config::default()
    }
    .stages();
    let tokenizer = Tokenizer::new(Weighting::Tf, DEFAULT_STOPWORDS);
    let st = replay::run(&k, &cfg, &tokenizer, &replay::ReplayRange::default()).unwrap();
    assert_eq!(st.records, n);
    let got = exported(&k);
    let want = file_verdicts(dir.path(), &input);
    let differ = want
        .iter()
        .filter(|(id, v)| got.get(*id) != Some(v))
        .count();
    assert_eq!(got.len(), want.len());
    assert_eq!(
        differ, 0,
        "{differ} verdicts differ from the file pipeline's"
    );
}
