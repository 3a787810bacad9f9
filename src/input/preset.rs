//! Field presets: which JSON paths each preset watches and how it picks the id, text, time and
//! user among them for one record.

use super::extract::{PathSet, Scalar, Slots};
use super::{InputConfig, Preset};

/// Slots chosen for one record; `None` means no candidate path was present.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Chosen {
    pub id: Option<usize>,
    pub text: Option<usize>,
    pub time: Option<usize>,
    pub user: Option<usize>,
}

/// Where a preset looks, precomputed as slots of a [`PathSet`].
#[derive(Clone, Debug)]
pub(super) enum Plan {
    Generic(GenericPlan),
    Weibo(WeiboPlan),
    Twitter(TwitterPlan),
}

#[derive(Clone, Debug)]
pub(super) struct GenericPlan {
    id: usize,
    text: usize,
    time: usize,
    user: usize,
}

/// Sina Weibo API status object.
#[derive(Clone, Debug)]
pub(super) struct WeiboPlan {
    ids: [usize; 3],
    is_long: usize,
    long_text: usize,
    text: usize,
    time: usize,
    users: [usize; 3],
}

/// Twitter API v1.1 tweets, v2 `{"data": {...}}` responses and bare v2 `data` objects.
#[derive(Clone, Debug)]
pub(super) struct TwitterPlan {
    ids: [usize; 2],
    texts: [usize; 4],
    time: usize,
    users: [usize; 3],
    data_id: usize,
    data_texts: [usize; 2],
    data_time: usize,
    data_user: usize,
}

/// Human-readable names of the fields a plan reads, for rejection details.
#[derive(Clone, Debug)]
pub(super) struct Labels {
    pub id: String,
    pub text: String,
}

impl Plan {
    /// Registers the preset's paths in `paths` and returns the plan plus its field labels.
    pub(super) fn new(cfg: &InputConfig, paths: &mut PathSet) -> (Plan, Labels) {
        match cfg.preset {
            Preset::Generic => {
                let plan = GenericPlan {
                    id: paths.add_id(&cfg.id_field),
                    text: paths.add(&cfg.text_field),
                    time: paths.add(&cfg.time_field),
                    user: paths.add(&cfg.user_field),
                };
                let labels = Labels {
                    id: quoted(&cfg.id_field),
                    text: quoted(&cfg.text_field),
                };
                (Plan::Generic(plan), labels)
            }
            Preset::Weibo => {
                let plan = WeiboPlan {
                    ids: ["idstr", "mid", "id"].map(|p| paths.add_id(p)),
                    is_long: paths.add("isLongText"),
                    long_text: paths.add("longText.longTextContent"),
                    text: paths.add("text"),
                    time: paths.add("created_at"),
                    users: ["user.idstr", "user.id", "user"].map(|p| paths.add(p)),
                };
                let labels = labels("idstr, mid or id", "text or longText.longTextContent");
                (Plan::Weibo(plan), labels)
            }
            Preset::Twitter => (Plan::Twitter(TwitterPlan::new(paths)), twitter_labels()),
        }
    }

    /// Picks the slots to read for one record.
    pub(super) fn choose(&self, slots: &Slots<'_>) -> Chosen {
        match self {
            Plan::Generic(p) => Chosen {
                id: present(slots, p.id),
                text: present(slots, p.text),
                time: present(slots, p.time),
                user: present(slots, p.user),
            },
            Plan::Weibo(p) => p.choose(slots),
            Plan::Twitter(p) => p.choose(slots),
        }
    }
}

impl WeiboPlan {
    fn choose(&self, slots: &Slots<'_>) -> Chosen {
        let is_long = matches!(get(slots, self.is_long), Some(Scalar::Bool(true)));
        let long_ok = matches!(get(slots, self.long_text), Some(Scalar::Str(s)) if !s.is_empty());
        Chosen {
            id: first(slots, &self.ids),
            // the post's own text (with its `//@` repost chain) is what gets deduplicated;
            // `retweeted_status` is never read
            text: if is_long && long_ok {
                Some(self.long_text)
            } else {
                present(slots, self.text)
            },
            time: present(slots, self.time),
            user: first(slots, &self.users),
        }
    }
}

impl TwitterPlan {
    fn new(paths: &mut PathSet) -> Self {
        let texts = [
            "note_tweet.text",
            "extended_tweet.full_text",
            "full_text",
            "text",
        ];
        TwitterPlan {
            ids: ["id_str", "id"].map(|p| paths.add(p)),
            texts: texts.map(|p| paths.add(p)),
            time: paths.add("created_at"),
            users: ["user.id_str", "user.id", "author_id"].map(|p| paths.add(p)),
            data_id: paths.add("data.id"),
            data_texts: ["data.note_tweet.text", "data.text"].map(|p| paths.add(p)),
            data_time: paths.add("data.created_at"),
            data_user: paths.add("data.author_id"),
        }
    }

    fn choose(&self, slots: &Slots<'_>) -> Chosen {
        let wrapped =
            present(slots, self.data_id).is_some() || first(slots, &self.data_texts).is_some();
        if wrapped {
            Chosen {
                id: present(slots, self.data_id),
                text: first(slots, &self.data_texts),
                time: present(slots, self.data_time),
                user: present(slots, self.data_user),
            }
        } else {
            Chosen {
                id: first(slots, &self.ids),
                text: first(slots, &self.texts),
                time: present(slots, self.time),
                user: first(slots, &self.users),
            }
        }
    }
}

fn twitter_labels() -> Labels {
    labels(
        "id_str, id or data.id",
        "note_tweet.text, extended_tweet.full_text, full_text, text or data.text",
    )
}

fn labels(id: &str, text: &str) -> Labels {
    Labels {
        id: id.to_string(),
        text: text.to_string(),
    }
}

fn quoted(path: &str) -> String {
    format!("{path:?}")
}

fn get<'s, 'de>(slots: &'s Slots<'de>, slot: usize) -> Option<&'s Scalar<'de>> {
    slots.get(slot).and_then(Option::as_ref)
}

fn present(slots: &Slots<'_>, slot: usize) -> Option<usize> {
    get(slots, slot).map(|_| slot)
}

/// The first candidate that is present and not null; failing that, the first present one (a
/// null), so the caller can tell "null" from "missing".
fn first(slots: &Slots<'_>, candidates: &[usize]) -> Option<usize> {
    let mut null = None;
    for &slot in candidates {
        match get(slots, slot) {
            Some(Scalar::Null) => null = null.or(Some(slot)),
            Some(_) => return Some(slot),
            None => {}
        }
    }
    null
}

#[cfg(test)]
mod tests {
    use super::super::extract::MAX_SLOTS;
    use super::super::tests::{ok, preset, reason};
    use super::super::{InputConfig, Preset};
    use super::{PathSet, Plan};
    use crate::types::{EventTime, RejectReason};

    const WEIBO_STATUS: &str = r#"{"created_at":"Tue May 31 17:46:55 +0800 2011","id":3350040253028385,"idstr":"3350040253028385","mid":"3350040253028385","text":"太对了 //@李开复:创业者要学会倾听","source":"<a href=\"http://weibo.com/\" rel=\"nofollow\">新浪微博</a>","favorited":false,"truncated":false,"isLongText":false,"geo":null,"reposts_count":12,"comments_count":3,"attitudes_count":0,"user":{"id":1760369714,"idstr":"1760369714","screen_name":"小明","location":"北京 海淀区","followers_count":312},"retweeted_status":{"created_at":"Tue May 31 09:12:03 +0800 2011","id":3350000000000001,"idstr":"3350000000000001","text":"创业者要学会倾听用户的声音。","user":{"id":1197161814,"idstr":"1197161814","screen_name":"李开复"}}}"#;

    #[test]
    fn weibo_status_with_retweet_keeps_own_text() {
        let post = ok(&preset(Preset::Weibo), WEIBO_STATUS);
        assert_eq!(post.id.as_str(), "3350040253028385");
        assert_eq!(post.text, "太对了 //@李开复:创业者要学会倾听");
        assert_eq!(post.created_at, Some(EventTime(1306835215)));
        assert_eq!(post.user.as_deref(), Some("1760369714"));
    }

    #[test]
    fn weibo_long_text_and_fallbacks() {
        let d = preset(Preset::Weibo);
        let long = r#"{"idstr":"1","text":"截断的…全文","isLongText":true,"longText":{"longTextContent":"完整的长微博正文"}}"#;
        assert_eq!(ok(&d, long).text, "完整的长微博正文");
        let not_long =
            r#"{"idstr":"1","text":"短","isLongText":false,"longText":{"longTextContent":"长"}}"#;
        assert_eq!(ok(&d, not_long).text, "短");
        let no_content = r#"{"idstr":"1","text":"短","isLongText":true}"#;
        assert_eq!(ok(&d, no_content).text, "短");
        assert_eq!(
            ok(&d, r#"{"mid":"5608068867871836930","id":1,"text":"t"}"#)
                .id
                .as_str(),
            "5608068867871836930"
        );
        assert_eq!(
            ok(&d, r#"{"idstr":null,"id":5608068867871836930,"text":"t"}"#)
                .id
                .as_str(),
            "5608068867871836930"
        );
        assert_eq!(
            ok(&d, r#"{"id":1,"text":"t","user":{"id":99}}"#)
                .user
                .as_deref(),
            Some("99")
        );
        assert_eq!(
            ok(&d, r#"{"id":1,"text":"t","user":"plain"}"#)
                .user
                .as_deref(),
            Some("plain")
        );
        assert_eq!(
            ok(&d, r#"{"id":1,"text":"t","user":7}"#).user.as_deref(),
            Some("7")
        );
        assert_eq!(
            ok(&d, r#"{"id":1,"text":"t","user":{"name":"x"}}"#).user,
            None
        );
        assert_eq!(
            reason(&d, br#"{"idstr":null,"text":"t"}"#),
            RejectReason::EmptyId
        );
        assert_eq!(
            reason(&d, br#"{"user":{"id":1},"text":"t"}"#),
            RejectReason::MissingId
        );
        assert_eq!(
            reason(&d, br#"{"id":1,"retweeted_status":{"text":"t"}}"#),
            RejectReason::MissingText
        );
    }

    const TWEET_V1: &str = r#"{"created_at":"Wed Oct 10 20:19:24 +0000 2018","id":1050118621198921728,"id_str":"1050118621198921728","text":"To make room for more expression, we will now count all emojis as equal—including those with gender… https://t.co/MkGjXf9aXm","truncated":true,"entities":{"hashtags":[],"urls":[{"url":"https://t.co/MkGjXf9aXm","indices":[117,140]}]},"user":{"id":6253282,"id_str":"6253282","name":"Twitter API","screen_name":"TwitterAPI"},"extended_tweet":{"full_text":"To make room for more expression, we will now count all emojis as equal—including those with gender and skin tone modifiers 👍🏻👍🏽👍🏿.","display_text_range":[0,133]},"lang":"en"}"#;

    #[test]
    fn tweet_v1_prefers_extended_text() {
        let post = ok(&preset(Preset::Twitter), TWEET_V1);
        assert_eq!(post.id.as_str(), "1050118621198921728");
        assert!(post.text.ends_with("modifiers 👍🏻👍🏽👍🏿."), "{}", post.text);
        assert_eq!(post.created_at, Some(EventTime(1539202764)));
        assert_eq!(post.user.as_deref(), Some("6253282"));
        let d = preset(Preset::Twitter);
        assert_eq!(ok(&d, r#"{"id":1,"full_text":"f","text":"t"}"#).text, "f");
        assert_eq!(
            ok(&d, r#"{"id":1,"text":"t","user":{"id":5}}"#)
                .user
                .as_deref(),
            Some("5")
        );
    }

    const TWEET_V2: &str = r#"{"data":{"id":"1445880548472328192","text":"Short version…","created_at":"2021-10-06T23:30:23.000Z","author_id":"2244994945","edit_history_tweet_ids":["1445880548472328192"],"note_tweet":{"text":"The full long version of the note tweet."}},"includes":{"users":[{"id":"2244994945","username":"TwitterDev"}]}}"#;

    #[test]
    fn tweet_v2_wrapped_and_flat() {
        let d = preset(Preset::Twitter);
        let post = ok(&d, TWEET_V2);
        assert_eq!(post.id.as_str(), "1445880548472328192");
        assert_eq!(post.text, "The full long version of the note tweet.");
        assert_eq!(post.created_at, Some(EventTime(1633563023)));
        assert_eq!(post.user.as_deref(), Some("2244994945"));
        let flat = r#"{"id":"1445880548472328192","text":"hello","created_at":"2021-10-06T23:30:23.000Z","author_id":"2244994945"}"#;
        let post = ok(&d, flat);
        assert_eq!(
            (post.text.as_str(), post.user.as_deref()),
            ("hello", Some("2244994945"))
        );
        assert_eq!(
            reason(&d, br#"{"data":{"text":"t"}}"#),
            RejectReason::MissingId
        );
        assert_eq!(
            reason(&d, br#"{"data":{"id":"1"}}"#),
            RejectReason::MissingText
        );
    }

    #[test]
    fn presets_fit_the_slot_limit() {
        for p in Preset::ALL {
            let mut paths = PathSet::new();
            let _ = Plan::new(
                &InputConfig {
                    preset: p,
                    ..InputConfig::default()
                },
                &mut paths,
            );
            assert!(paths.add("probe.fresh.path") < MAX_SLOTS, "{p}");
        }
    }
}
