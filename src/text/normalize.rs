//! Weibo-aware text normalization: the Rust twin of `normalize()` in the
//! benchmark's `bench/normalize.py`, which defines exact duplicates.
//!
//! Steps, in the reference's order: NFKC; cut the repost chain at the first
//! `//@`; strip a leading `回复@name:`; strip URLs; strip `@mentions`; strip
//! `[emoticons]`; drop `#`; drop every char of category P/S/Z/C; lowercase.
//! Each regex pass of the reference runs over the whole output of the previous
//! one, so the passes here do too (they are skipped when their anchor byte is
//! absent). Character classes follow the reference's Unicode 14.0 data.

mod chars;

use chars::{KEEP, LOWER, NAME, SPACE};
use serde::Serialize;

/// The repost-chain marker: everything from its first occurrence is dropped.
const CHAIN: &str = "//@";
/// The reference's `{1,30}` bound on mention names.
const MAX_NAME: usize = 30;
/// The reference's `{1,8}` bound on emoticon names.
const MAX_EMOTICON: usize = 8;

type Table = [u8; 0x10000];

/// What normalization removed, kept as metadata for downstream consumers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Removed {
    /// Mentioned names without `@`, from the text before the repost chain,
    /// the reply target first.
    pub mentions: Vec<String>,
    /// Text between paired `#` markers (`"话题"` from `"#话题#"`), NFKC-folded,
    /// taken after URL and mention stripping.
    pub hashtags: Vec<String>,
    /// URLs as written (after NFKC).
    pub links: Vec<String>,
    /// Stripped emoticons with their brackets, e.g. `"[哈哈]"`.
    pub emoticons: Vec<String>,
    /// A `//@` repost chain was cut.
    pub repost_chain: bool,
}

impl Removed {
    /// Empties all fields but keeps the vectors' capacity.
    fn reset(&mut self) {
        self.mentions.clear();
        self.hashtags.clear();
        self.links.clear();
        self.emoticons.clear();
        self.repost_chain = false;
    }
}

/// Reusable normalizer with scratch buffers (hot path: one per worker thread).
#[derive(Default)]
pub struct Normalizer {
    cur: String,
    next: String,
}

impl Normalizer {
    /// Creates a normalizer with empty scratch buffers.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes the normalized text into `out` (cleared first) and returns its length in chars.
    /// When `removed` is Some, fills it (cleared first); when None, skips metadata work.
    pub fn normalize_into(
        &mut self,
        raw: &str,
        out: &mut String,
        mut removed: Option<&mut Removed>,
    ) -> usize {
        out.clear();
        if let Some(m) = removed.as_deref_mut() {
            m.reset();
        }
        let table = chars::bmp_table();
        // "/" is an NFKC boundary and "//@" maps to itself, so the first chain
        // of NFKC(raw) starts no later than the first raw one: the tail after
        // that raw marker never needs normalizing.
        let head = raw.find(CHAIN).map_or(raw, |k| &raw[..k + CHAIN.len()]);
        let (mut cur, mut next) = (
            std::mem::take(&mut self.cur),
            std::mem::take(&mut self.next),
        );
        let mut text = if chars::nfkc_into(table, head, &mut cur) {
            cur.as_str()
        } else {
            head
        };
        if let Some(k) = text.find(CHAIN) {
            text = &text[..k];
            if let Some(m) = removed.as_deref_mut() {
                m.repost_chain = true;
            }
        }
        if let Some((len, name)) = reply_prefix(table, text) {
            if let Some(m) = removed.as_deref_mut() {
                m.mentions.push(name.to_owned());
            }
            text = &text[len..];
        }
        if text.contains('/') {
            strip_urls(
                text,
                &mut next,
                removed.as_deref_mut().map(|m| &mut m.links),
            );
            std::mem::swap(&mut cur, &mut next);
            text = &cur;
        }
        if text.contains('@') {
            strip_mentions(
                table,
                text,
                &mut next,
                removed.as_deref_mut().map(|m| &mut m.mentions),
            );
            std::mem::swap(&mut cur, &mut next);
            text = &cur;
        }
        let n = finish(table, text, out, removed);
        (self.cur, self.next) = (cur, next);
        n
    }
}

/// Convenience: normalized text only.
#[must_use]
pub fn normalize(raw: &str) -> String {
    let mut out = String::new();
    Normalizer::new().normalize_into(raw, &mut out, None);
    out
}

fn skip_space<'a>(table: &Table, s: &'a str) -> &'a str {
    s.trim_start_matches(|c| chars::flags(table, c) & SPACE != 0)
}

/// Byte length of the `[\w\-]{1,30}` name at the start of `s` (0 if none).
fn name_len(table: &Table, s: &str) -> usize {
    let mut end = 0;
    for c in s.chars().take(MAX_NAME) {
        if chars::flags(table, c) & NAME == 0 {
            break;
        }
        end += c.len_utf8();
    }
    end
}

/// Matches `^\s*回复\s*@[\w\-]{1,30}\s*:?`; returns (match length, name).
fn reply_prefix<'a>(table: &Table, text: &'a str) -> Option<(usize, &'a str)> {
    let s = skip_space(table, text).strip_prefix("回复")?;
    let s = skip_space(table, s).strip_prefix('@')?;
    let n = name_len(table, s);
    if n == 0 {
        return None;
    }
    let rest = skip_space(table, &s[n..]);
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    Some((text.len() - rest.len(), &s[..n]))
}

/// Python's re.I makes `[A-Za-z]` also match U+0130 and U+0131 (the other
/// case-folding extras, U+017F and U+212A, cannot survive NFKC).
fn is_url_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '\u{130}' || c == '\u{131}'
}

fn is_url_char(c: char) -> bool {
    is_url_alnum(c) || "-._~:/?#=&%+,;!$*'()".contains(c)
}

/// Byte length of the longest prefix of `s` whose chars satisfy `pred`.
fn run_len(s: &str, pred: fn(char) -> bool) -> usize {
    s.find(|c| !pred(c)).unwrap_or(s.len())
}

/// Length of a URL match at the start of `s`:
/// `https?://[url chars]+` or `t\.cn/[A-Za-z0-9]+`, case-insensitively.
fn url_len(s: &str) -> usize {
    let b = s.as_bytes();
    let (prefix, tail): (usize, fn(char) -> bool) =
        if b.len() >= 4 && b[..4].eq_ignore_ascii_case(b"http") {
            let p = if b.get(4).is_some_and(|x| x.eq_ignore_ascii_case(&b's')) {
                5
            } else {
                4
            };
            if !s[p..].starts_with("://") {
                return 0;
            }
            (p + 3, is_url_char)
        } else if b.len() >= 5 && b[..5].eq_ignore_ascii_case(b"t.cn/") {
            (5, is_url_alnum)
        } else {
            return 0;
        };
    match run_len(&s[prefix..], tail) {
        0 => 0,
        n => prefix + n,
    }
}

/// The URL pass: writes `text` minus its URLs into `out`.
fn strip_urls(text: &str, out: &mut String, mut links: Option<&mut Vec<String>>) {
    out.clear();
    let b = text.as_bytes();
    let (mut last, mut i) = (0, 0);
    while i < b.len() {
        // Matches start at ASCII bytes only, so `i` is a char boundary there.
        let len = if matches!(b[i], b'h' | b'H' | b't' | b'T') {
            url_len(&text[i..])
        } else {
            0
        };
        if len == 0 {
            i += 1;
            continue;
        }
        out.push_str(&text[last..i]);
        if let Some(l) = links.as_deref_mut() {
            l.push(text[i..i + len].to_owned());
        }
        i += len;
        last = i;
    }
    out.push_str(&text[last..]);
}

/// The mention pass: writes `text` minus `@[\w\-]{1,30}` matches into `out`.
fn strip_mentions(
    table: &Table,
    text: &str,
    out: &mut String,
    mut names: Option<&mut Vec<String>>,
) {
    out.clear();
    let (mut last, mut i) = (0, 0);
    while let Some(off) = text[i..].find('@') {
        let at = i + off;
        let n = name_len(table, &text[at + 1..]);
        i = at + 1 + n;
        if n == 0 {
            continue;
        }
        out.push_str(&text[last..at]);
        if let Some(v) = names.as_deref_mut() {
            v.push(text[at + 1..i].to_owned());
        }
        last = i;
    }
    out.push_str(&text[last..]);
}

/// Length of an emoticon `\[[^\[\]]{1,8}\]` at the start of `s` (which starts with `[`).
fn emoticon_len(s: &str) -> Option<usize> {
    let mut end = 1;
    for (n, c) in s[1..].chars().enumerate() {
        match c {
            ']' => return (n >= 1).then_some(end + 1),
            '[' => return None,
            _ if n == MAX_EMOTICON => return None,
            _ => end += c.len_utf8(),
        }
    }
    None
}

/// The last passes in one sweep: emoticons, `#` (for the metadata), the
/// category filter and lowercasing. Returns the output length in chars.
fn finish(table: &Table, text: &str, out: &mut String, mut meta: Option<&mut Removed>) -> usize {
    let (mut n, mut sigma, mut open_tag) = (0, false, None);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let at = text.len() - rest.len();
        if c == '[' {
            if let Some(len) = emoticon_len(rest) {
                if let Some(m) = meta.as_deref_mut() {
                    m.emoticons.push(rest[..len].to_owned());
                }
                rest = &rest[len..];
                continue;
            }
        }
        rest = &rest[c.len_utf8()..];
        let f = chars::flags(table, c);
        if f & KEEP == 0 {
            if let (Some(m), '#') = (meta.as_deref_mut(), c) {
                match open_tag.take() {
                    None => open_tag = Some(at + 1),
                    Some(start) if at > start => m.hashtags.push(text[start..at].to_owned()),
                    Some(_) => {}
                }
            }
        } else if f & LOWER == 0 {
            out.push(c);
            n += 1;
        } else if c == 'Σ' {
            // Final-sigma context is resolved below on the whole output.
            sigma = true;
            out.push(c);
            n += 1;
        } else {
            for l in c.to_lowercase() {
                out.push(l);
                n += 1;
            }
        }
    }
    if sigma {
        resolve_final_sigma(out);
    }
    n
}

/// Lowercases each U+03A3 in `out` by Python's `Final_Sigma` rule: `ς` when a
/// cased char precedes and none follows (case-ignorable chars skipped).
/// Lowercasing the neighbours first does not change their classes.
fn resolve_final_sigma(out: &mut String) {
    let s = std::mem::take(out);
    for (i, c) in s.char_indices() {
        if c != 'Σ' {
            out.push(c);
            continue;
        }
        let before = first_cased(s[..i].chars().rev());
        let after = first_cased(s[i + c.len_utf8()..].chars());
        out.push(if before && !after { 'ς' } else { 'σ' });
    }
}

/// True when the first char that is not case-ignorable is cased.
fn first_cased(mut it: impl Iterator<Item = char>) -> bool {
    it.find(|&d| !chars::case_ignorable(d))
        .is_some_and(chars::cased)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use unicode_general_category::get_general_category;
    use unicode_normalization::is_nfkc;

    /// (input, expected); inputs are original sentences, the expected outputs
    /// were computed with the reference `normalize()` of bench/normalize.py.
    const CASES: &[(&str, &str)] = &[
        ("今天天气不错，出去走走。", "今天天气不错出去走走"),
        ("//@小明:转发微博", ""),
        ("好文章//@张三:说得对//@李四:同意", "好文章"),
        ("看看这个／／＠王五：哈哈", "看看这个"),
        ("开头 //@甲: 中间 //@乙: 末尾", "开头"),
        ("斜杠/ /@甲 后面", "斜杠后面"),
        ("回复@阿飞:谢谢你的支持", "谢谢你的支持"),
        ("回复 @阿飞 : 明天见", "明天见"),
        ("  回复@阿飞明天见", ""),
        ("回复＠小红：收到", "收到"),
        ("\u{3000}\u{3000}回复@小王：在吗", "在吗"),
        ("回复@小王", ""),
        ("我回复@小红:好的", "我回复好的"),
        ("回复:没有名字", "回复没有名字"),
        (
            "回复@用户名字非常非常长超过三十个字符的情况下会怎么样呢我们来看看吧结尾:内容",
            "吧结尾内容",
        ),
        ("ＨＥＬＬＯ\u{3000}Ｗｏｒｌｄ１２３", "helloworld123"),
        (
            "详情见 ＨＴＴＰ://ＥＸＡＭＰＬＥ.ｃｏｍ/ａ?ｂ=1 结束",
            "详情见结束",
        ),
        ("点击http://t.cn/aBc123看视频", "点击看视频"),
        ("新链接 t.cn/Zx9 和 T.CN/Q1 完", "新链接和完"),
        ("HTTPS://Example.org/path_(1)!~ 后", "后"),
        ("只有http://没有地址", "只有http没有地址"),
        ("网址https://a.b/c@某人 看", "网址看"),
        ("链接http://ıstanbul.com/\u{130}完", "链接完"),
        ("@abcdefghijklmnopqrstuvwxyz0123456789结尾", "456789结尾"),
        ("感谢@小李-同学 和@Tom_Lee的帮助", "感谢和"),
        ("邮箱是abc@163.com", "邮箱是abccom"),
        ("@ 空格", "空格"),
        ("Hello@World_2024-ok!", "hello"),
        ("@http://t.cn/x", ""),
        ("@甲http://x.cn/y乙", ""),
        ("[哈@某人哈]", ""),
        ("[哈哈]今天真开心[good]", "今天真开心"),
        ("[一二三四五六七八]八个字", "八个字"),
        ("[一二三四五六七八九]九个字", "一二三四五六七八九九个字"),
        ("[[哈哈]]", ""),
        ("未闭合[哈哈 继续", "未闭合哈哈继续"),
        ("[]空括号", "空括号"),
        ("［哭］全角括号", "全角括号"),
        ("#周末计划# 去爬山", "周末计划去爬山"),
        ("只有一个#号", "只有一个号"),
        ("#话题1##话题2#", "话题1话题2"),
        ("看[微笑]#话题#http://t.cn/abc", "看话题"),
        (
            "emoji 👨\u{200d}👩\u{200d}👧 family ❤\u{fe0f} 测试",
            "emojifamily\u{fe0f}测试",
        ),
        ("café naïve", "cafénaïve"),
        ("cafe\u{301} with combining", "caféwithcombining"),
        ("e.\u{301}", "e\u{301}"),
        ("ÀÉÎ Straße \u{130}stanbul", "àéîstraßei\u{307}stanbul"),
        ("ΟΔΥΣΣΕΥΣ", "οδυσσευς"),
        ("Σ", "σ"),
        ("ΑΣ1", "ας1"),
        ("ǅemo Ǆ", "džemodž"),
        ("数字 ０１２３ ①②③ Ⅻ", "数字0123123xii"),
        ("日本語のテキストです。ｶﾀｶﾅ", "日本語のテキストですカタカナ"),
        ("ｶﾞｷﾞ", "ガギ"),
        ("한국어 텍스트입니다!", "한국어텍스트입니다"),
        ("ㄱㅏ", "가"),
        ("tab\u{9}new\u{a}line\u{d}\u{a}", "tabnewline"),
        ("\u{200b}零宽\u{200d}字符\u{feff}", "零宽字符"),
        ("私用区\u{e000}字符", "私用区字符"),
        ("控制\u{7}字符\u{1f}", "控制字符"),
        ("ﬁ ligature ㎏ ㈱", "filigaturekg株"),
        ("价格：￥１００元＄5", "价格100元5"),
        ("", ""),
        ("   ", ""),
        ("مرحبا بالعالم ١٢٣", "مرحبابالعالم١٢٣"),
        ("新\u{10ffff}字", "新字"),
        ("𠀀𪛖", "𠀀𪛖"),
        ("𝐀𝐁𝐂", "abc"),
        ("温度 25℃ 左右", "温度25c左右"),
        ("™ ® ©", "tm"),
    ];

    #[test]
    fn matches_reference_on_handwritten_cases() {
        let mut nz = Normalizer::new();
        let mut out = String::new();
        for &(input, expected) in CASES {
            let n = nz.normalize_into(input, &mut out, None);
            assert_eq!(out, expected, "input {input:?}");
            assert_eq!(n, expected.chars().count(), "input {input:?}");
        }
        assert!(CASES.len() >= 40);
    }

    fn removed_of(raw: &str) -> (String, Removed) {
        let mut out = String::new();
        let mut m = Removed {
            repost_chain: true,
            links: vec!["stale".into()],
            ..Removed::default()
        };
        Normalizer::new().normalize_into(raw, &mut out, Some(&mut m));
        (out, m)
    }

    #[test]
    fn metadata_lists_what_was_removed() {
        let (out, m) =
            removed_of("回复＠小王：看#新闻#[哈哈]http://t.cn/a1 @甲 [坏]//@乙:[x]#y# t.cn/zz");
        assert_eq!(out, "看新闻");
        assert_eq!(m.mentions, ["小王", "甲"]);
        assert_eq!(m.hashtags, ["新闻"]);
        assert_eq!(m.links, ["http://t.cn/a1"]);
        assert_eq!(m.emoticons, ["[哈哈]", "[坏]"]);
        assert!(m.repost_chain);
    }

    #[test]
    fn metadata_is_reset_and_edge_cases() {
        let (_, m) = removed_of("普通文本");
        assert_eq!(m, Removed::default());
        // Unpaired and empty markers make no hashtag; a URL fragment is no hashtag.
        let (_, m) = removed_of("## #一# http://a.cn/#x #三");
        assert_eq!(m.hashtags, ["一"]);
        assert_eq!(m.links, ["http://a.cn/#x"]);
        let (_, m) = removed_of("／／＠全角链");
        assert!(m.repost_chain);
        let json = serde_json::to_string(&removed_of("[赞]").1).unwrap_or_default();
        assert!(json.contains("\"emoticons\":[\"[赞]\"]"), "{json}");
    }

    #[test]
    fn scratch_reuse_does_not_leak_between_calls() {
        let mut nz = Normalizer::new();
        let mut out = String::new();
        nz.normalize_into("ＡＢＣ，http://x.cn/1 @某人 长长的一段文字", &mut out, None);
        assert_eq!(nz.normalize_into("短", &mut out, None), 1);
        assert_eq!(out, "短");
    }

    /// Text built from Weibo syntax fragments, so the passes interact.
    fn weibo_text() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "//@", "回复", "@", "[", "]", "#", "http://", "HTTPS://", "t.cn/", ":", "：", " ",
            "\u{3000}", "中文", "微博", "abc", "XYZ", "ΣΑ", "Ａ１", "İ", "ı", "-", "_", "😀",
            "\u{200d}", "\u{fe0f}",
        ]);
        prop::collection::vec(piece, 0..24).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn never_panics_and_keeps_only_letters_marks_numbers(s in any::<String>()) {
            let out = normalize(&s);
            for c in out.chars() {
                let cat = get_general_category(c).abbreviation();
                prop_assert!(!"PSZC".contains(&cat[..1]), "{:?} ({}) in {:?}", c, cat, out);
            }
        }

        #[test]
        fn weibo_syntax_is_idempotent(s in weibo_text()) {
            let once = normalize(&s);
            prop_assert_eq!(normalize(&once), once);
        }

        /// Python's normalize() is idempotent only when its output is NFKC:
        /// dropping punctuation can bring a starter and a combining mark
        /// together, which the second NFKC then composes.
        #[test]
        fn idempotent_when_output_is_nfkc(s in any::<String>()) {
            let once = normalize(&s);
            if is_nfkc(&once) {
                prop_assert_eq!(normalize(&once), once);
            }
        }

        #[test]
        fn metadata_does_not_change_text(s in weibo_text()) {
            let (out, _) = removed_of(&s);
            prop_assert_eq!(out, normalize(&s));
        }
    }
}
