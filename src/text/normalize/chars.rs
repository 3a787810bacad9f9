//! Per-character classes used by the normalizer (the parent module), pinned to the Unicode
//! 14.0 data of the reference (Python 3.11 `unicodedata`), plus a fast NFKC.
//!
//! The Rust crates ship newer Unicode data (general category 16.0,
//! normalization 18.0). Code points that are unassigned in 14.0 but that the
//! crates treat as letters, marks, digits or as NFKC-active are listed in
//! [`PY14_UNASSIGNED`] and handled the way Python handles unassigned code
//! points: dropped, not part of `\w`, and left untouched by NFKC.

use std::sync::OnceLock;
use unicode_general_category::{get_general_category, GeneralCategory as Gc};
use unicode_normalization::char::{canonical_combining_class, decompose_compatible};
use unicode_normalization::{is_nfkc_quick, IsNormalized, UnicodeNormalization};

/// Survives step 8: general category L*, M* or N*.
pub(crate) const KEEP: u8 = 1;
/// In the mention-name class `[\w\-]` (Python `\w`: category L* or N*, or `_`).
pub(crate) const NAME: u8 = 2;
/// Python `str.isspace()`, which is also `re`'s `\s`.
pub(crate) const SPACE: u8 = 4;
/// NFKC leaves it alone, and NFKC may be split just before it.
pub(crate) const STABLE: u8 = 8;
/// NFKC changes it, but only into STABLE chars, and may be split before it.
pub(crate) const SIMPLE: u8 = 16;
/// `str.lower()` changes it.
pub(crate) const LOWER: u8 = 32;

/// Code points unassigned in Unicode 14.0 that newer data makes letters,
/// marks, digits or NFKC-active (found by comparing a per-code-point dump of
/// Python 3.11 `unicodedata` with these crates).
/// Gaps between ranges are merged when they were unassigned in 14.0 too.
static PY14_UNASSIGNED: &[(u32, u32)] = &[
    (0x558, 0x558),
    (0x58B, 0x58C),
    (0x5C8, 0x5C9),
    (0x897, 0x897),
    (0xCF3, 0xCF3),
    (0xECE, 0xECE),
    (0x1ACF, 0x1AF0),
    (0x1C89, 0x1C8A),
    (0x209D, 0x209F),
    (0xA7CB, 0xA7CD),
    (0xA7DA, 0xA7F1),
    (0x105C0, 0x105F3),
    (0x107BB, 0x107BF),
    (0x10D40, 0x10D85),
    (0x10EC2, 0x10EFF),
    (0x1123F, 0x11241),
    (0x11380, 0x113E2),
    (0x116D0, 0x116E3),
    (0x11BC0, 0x11BF9),
    (0x11F00, 0x11F5A),
    (0x1342F, 0x1342F),
    (0x13440, 0x143FA),
    (0x16100, 0x16139),
    (0x16D40, 0x16D79),
    (0x18CFF, 0x18CFF),
    (0x1B123, 0x1B132),
    (0x1B155, 0x1B155),
    (0x1CCD6, 0x1CCF9),
    (0x1D127, 0x1D128),
    (0x1D250, 0x1D2D3),
    (0x1D6A6, 0x1D6A6),
    (0x1DF25, 0x1DFFF),
    (0x1E030, 0x1E08F),
    (0x1E4D0, 0x1E6F5),
    (0x2B739, 0x2B739),
    (0x2EBF0, 0x2EE5D),
    (0x31350, 0x323AF),
];

/// True for code points the reference treats as unassigned (see module doc).
pub(crate) fn py14_unassigned(c: char) -> bool {
    let u = c as u32;
    u >= 0x558
        && PY14_UNASSIGNED
            .binary_search_by(|&(lo, hi)| {
                if hi < u {
                    std::cmp::Ordering::Less
                } else if lo > u {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
}

/// Python's `str.isspace()` set (Unicode 14.0; includes U+001C..U+001F).
fn py_space(c: char) -> bool {
    matches!(c as u32,
        0x09..=0x0D | 0x1C..=0x20 | 0x85 | 0xA0 | 0x1680 | 0x2000..=0x200A
        | 0x2028 | 0x2029 | 0x202F | 0x205F | 0x3000)
}

/// ccc 0 and NFKC quick-check Yes according to the normalization crate.
fn nfkc_inert(c: char) -> bool {
    canonical_combining_class(c) == 0 && is_nfkc_quick(std::iter::once(c)) == IsNormalized::Yes
}

/// NFKC(x + c) == NFKC(x) + NFKC(c) for any x: the compatibility
/// decomposition of `c` starts with a starter that never composes backwards.
fn boundary_before(c: char) -> bool {
    let mut first = None;
    decompose_compatible(c, |d| {
        first.get_or_insert(d);
    });
    first.is_some_and(nfkc_inert)
}

/// Computes the class bits of one char from the Unicode crates.
pub(crate) fn compute_flags(c: char) -> u8 {
    if py14_unassigned(c) {
        return STABLE;
    }
    let mut f = match get_general_category(c) {
        Gc::UppercaseLetter
        | Gc::LowercaseLetter
        | Gc::TitlecaseLetter
        | Gc::ModifierLetter
        | Gc::OtherLetter
        | Gc::DecimalNumber
        | Gc::LetterNumber
        | Gc::OtherNumber => KEEP | NAME,
        Gc::NonspacingMark | Gc::SpacingMark | Gc::EnclosingMark => KEEP,
        _ => 0,
    };
    if c == '_' || c == '-' {
        f |= NAME;
    }
    if py_space(c) {
        f |= SPACE;
    }
    if boundary_before(c) {
        if nfkc_inert(c) {
            f |= STABLE;
        } else if std::iter::once(c)
            .nfkc()
            .all(|d| !py14_unassigned(d) && nfkc_inert(d))
        {
            f |= SIMPLE;
        }
    }
    let mut lower = c.to_lowercase();
    if !(lower.len() == 1 && lower.next() == Some(c)) {
        f |= LOWER;
    }
    f
}

/// Class bits of every BMP code point, built once.
pub(crate) fn bmp_table() -> &'static [u8; 0x10000] {
    static TABLE: OnceLock<[u8; 0x10000]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0u8; 0x10000];
        for (u, slot) in (0u32..).zip(t.iter_mut()) {
            // Surrogates have no char and keep flags 0; they never occur in a str.
            if let Some(c) = char::from_u32(u) {
                *slot = compute_flags(c);
            }
        }
        t
    })
}

/// Class bits of `c`: a table load for the BMP, computed otherwise.
#[inline]
pub(crate) fn flags(table: &[u8; 0x10000], c: char) -> u8 {
    let u = c as u32;
    if u < 0x10000 {
        table[u as usize]
    } else {
        compute_flags(c)
    }
}

/// Python's `Case_Ignorable`, for chars that survive the filter (L*, M*, N*).
pub(crate) fn case_ignorable(c: char) -> bool {
    // U+1171E was still Mn in Unicode 14.0.
    c == '\u{1171E}'
        || matches!(
            get_general_category(c),
            Gc::NonspacingMark | Gc::EnclosingMark | Gc::ModifierLetter
        )
}

/// Python's `Cased`, for chars that survive the filter (L*, M*, N*).
pub(crate) fn cased(c: char) -> bool {
    // U+0295 was Ll, hence cased, in Unicode 14.0.
    c == '\u{295}'
        || c.is_lowercase()
        || c.is_uppercase()
        || get_general_category(c) == Gc::TitlecaseLetter
}

/// Writes NFKC(`s`) (as Python 3.11 computes it) into `out` and returns true,
/// or returns false without touching `out` when `s` is already normalized.
pub(crate) fn nfkc_into(table: &[u8; 0x10000], s: &str, out: &mut String) -> bool {
    let Some(first) = s
        .char_indices()
        .find(|&(_, c)| flags(table, c) & STABLE == 0)
    else {
        return false;
    };
    out.clear();
    out.push_str(&s[..first.0]);
    // Every char is STABLE or SIMPLE => NFKC works char by char.
    for c in s[first.0..].chars() {
        let f = flags(table, c);
        if f & STABLE != 0 {
            out.push(c);
        } else if f & SIMPLE != 0 {
            push_simple(c, out);
        } else {
            out.clear();
            nfkc_segmented(s, out);
            return true;
        }
    }
    true
}

fn push_simple(c: char, out: &mut String) {
    match c as u32 {
        // Full-width ASCII and the ideographic space dominate Chinese text.
        u @ 0xFF01..=0xFF5E => out.extend(char::from_u32(u - 0xFEE0)),
        0x3000 => out.push(' '),
        _ => out.extend(std::iter::once(c).nfkc()),
    }
}

/// Full NFKC, keeping 14.0-unassigned code points out of the normalizer:
/// for Python they are inert starters, so splitting around them is exact.
fn nfkc_segmented(s: &str, out: &mut String) {
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if py14_unassigned(c) {
            out.extend(s[start..i].nfkc());
            out.push(c);
            start = i + c.len_utf8();
        }
    }
    out.extend(s[start..].nfkc());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_and_cjk_classes() {
        let t = bmp_table();
        assert_eq!(flags(t, 'a'), KEEP | NAME | STABLE);
        assert_eq!(flags(t, 'A'), KEEP | NAME | STABLE | LOWER);
        assert_eq!(flags(t, '中'), KEEP | NAME | STABLE);
        assert_eq!(flags(t, '_'), NAME | STABLE);
        assert_eq!(flags(t, '\u{3000}'), SPACE | SIMPLE);
        assert_eq!(flags(t, '\u{1c}'), SPACE | STABLE);
        assert_eq!(flags(t, '\u{301}') & (KEEP | NAME | STABLE), KEEP);
        assert_eq!(flags(t, '\u{558}'), STABLE);
        assert_eq!(flags(t, '\u{1E030}'), STABLE);
    }

    #[test]
    fn fast_nfkc_matches_crate_outside_unassigned() {
        let t = bmp_table();
        let s = "ＡＢ，中文\u{3000}ｶﾞ①…e\u{301}가\u{11a8}ﬁ";
        let mut out = String::new();
        assert!(nfkc_into(t, s, &mut out));
        assert_eq!(out, s.nfkc().collect::<String>());
        assert!(!nfkc_into(t, "already 规范", &mut out));
    }

    #[test]
    fn unassigned_ranges_are_sorted_and_disjoint() {
        assert!(PY14_UNASSIGNED.iter().all(|&(lo, hi)| lo <= hi));
        assert!(PY14_UNASSIGNED.windows(2).all(|w| w[0].1 < w[1].0));
        assert!(py14_unassigned('\u{31350}') && py14_unassigned('\u{323AF}'));
        assert!(!py14_unassigned('\u{557}') && !py14_unassigned('\u{323B0}'));
    }

    #[test]
    fn case_classes_pinned_to_unicode_14() {
        assert!(cased('\u{295}') && cased('a') && cased('\u{1C5}') && !cased('中'));
        assert!(case_ignorable('\u{1171E}') && case_ignorable('\u{301}'));
        assert!(!case_ignorable('a'));
    }

    #[test]
    fn simple_chars_normalize_independently_of_neighbours() {
        // The fast NFKC maps SIMPLE chars one by one; check that next to
        // STABLE chars that compose with followers ('a', a Hangul LV).
        let t = bmp_table();
        for c in (0u32..0x10000).filter_map(char::from_u32) {
            if flags(t, c) & SIMPLE != 0 {
                let joined: String = format!("{c}a{c}\u{ac00}{c}").nfkc().collect();
                let parts: String = [c, 'a', c, '\u{ac00}', c]
                    .iter()
                    .flat_map(|&x| std::iter::once(x).nfkc())
                    .collect();
                assert_eq!(joined, parts, "U+{:04X}", c as u32);
            }
        }
    }
}
