//! Edit-distance algorithms for the edit rule: a character-count lower bound, the scalar banded
//! DP and Myers' bit-parallel DP, and the choice between them by cost under a `Budget`.

use super::{Budget, Exhausted};

/// Levenshtein distance if it is at most `max`, else `None`. Its cost follows the band: at most
/// `O(len * (2 max + 1))` cells, or `O(len * len / 64)` bit-parallel steps when that is cheaper.
pub fn levenshtein_bounded(a: &[char], b: &[char], max: usize) -> Option<usize> {
    edit_distance_within(a, b, max, &mut Budget::unlimited()).unwrap_or(None)
}

/// Unbounded Levenshtein distance (for reports and `explain`).
pub fn levenshtein(a: &[char], b: &[char]) -> usize {
    let max = a.len().max(b.len());
    levenshtein_bounded(a, b, max).unwrap_or(max)
}

/// Weight of one 64-row bit-parallel step against one scalar banded cell when choosing between
/// them (an estimate, not measured: the band's simple loop wins for short posts, the bit-parallel
/// DP for long ones whose band is wider than 32 cells per 64 rows).
const CELLS_PER_WORD_STEP: u64 = 32;

/// `levenshtein_bounded` charging the DP cells it computes to `budget`.
pub(super) fn edit_distance_within(
    a: &[char],
    b: &[char],
    max: usize,
    budget: &mut Budget,
) -> Result<Option<usize>, Exhausted> {
    if a.len().abs_diff(b.len()) > max {
        return Ok(None);
    }
    // A common prefix or suffix never changes the distance.
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (a, b) = (&a[pre..], &b[pre..]);
    let suf = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (a, b) = (&a[..a.len() - suf], &b[..b.len() - suf]);
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if short.is_empty() {
        return Ok((long.len() <= max).then_some(long.len()));
    }
    let (n, m) = (long.len() as u64, short.len() as u64);
    if m > 64 {
        budget.charge(n + m)?;
        if count_bound(short, long) > max {
            return Ok(None);
        }
    }
    let band = n * (2 * max.min(long.len()) as u64 + 1);
    let words = m.div_ceil(64);
    let bitpar = n * words * 64;
    if band <= n * words * CELLS_PER_WORD_STEP {
        budget.charge(band)?;
        Ok(banded(short, long, max))
    } else {
        budget.charge(bitpar)?;
        Ok(myers(short, long, max))
    }
}

/// A lower bound of the edit distance from character counts: an edit fixes at most one surplus
/// character on each side. Characters share 64 buckets, which only loosens the bound.
pub(super) fn count_bound(a: &[char], b: &[char]) -> usize {
    let mut h = [0i32; 64];
    for c in a {
        h[*c as usize & 63] += 1;
    }
    for c in b {
        h[*c as usize & 63] -= 1;
    }
    let diff: usize = h.iter().map(|x| x.unsigned_abs() as usize).sum();
    let common = (a.len() + b.len() - diff) / 2;
    a.len().max(b.len()) - common
}

/// Scalar banded DP: only the cells with `|i - j| <= max` are computed. Short texts use rows
/// on the stack (no allocation per candidate).
pub(super) fn banded(a: &[char], b: &[char], max: usize) -> Option<usize> {
    const STACK: usize = 130;
    if b.len() + 2 <= STACK {
        let (mut prev, mut cur) = ([0usize; STACK], [0usize; STACK]);
        banded_rows(a, b, max, &mut prev, &mut cur)
    } else {
        let (mut prev, mut cur) = (vec![0; b.len() + 2], vec![0; b.len() + 2]);
        banded_rows(a, b, max, &mut prev, &mut cur)
    }
}

fn banded_rows(
    a: &[char],
    b: &[char],
    max: usize,
    prev: &mut [usize],
    cur: &mut [usize],
) -> Option<usize> {
    let (n, m) = (a.len(), b.len());
    const INF: usize = usize::MAX / 2;
    prev[..m + 2].fill(INF);
    cur[..m + 2].fill(INF);
    let (mut prev, mut cur) = (prev, cur);
    for (j, p) in prev.iter_mut().enumerate().take(max.min(m) + 1) {
        *p = j;
    }
    for i in 1..=n {
        let lo = i.saturating_sub(max).max(1);
        let hi = (i + max).min(m);
        // The cell left of the band must read as INF, not as a value left over from two rows
        // ago (cells right of the previous row's band were never written: still INF).
        cur[lo - 1] = if lo == 1 && i <= max { i } else { INF };
        let mut row_min = if lo == 1 { cur[0] } else { INF };
        for j in lo..=hi {
            let sub = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let v = sub.min(prev[j] + 1).min(cur[j - 1] + 1);
            cur[j] = v;
            row_min = row_min.min(v);
        }
        if row_min > max {
            return None;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    (prev[m] <= max).then_some(prev[m])
}

/// Myers' algorithm for a pattern of at most 64 characters: one word, tables on the stack.
fn myers64(p: &[char], t: &[char], max: usize) -> Option<usize> {
    let m = p.len();
    let (mut keys, mut masks, mut k) = (['\0'; 64], [0u64; 64], 0usize);
    for (i, c) in p.iter().enumerate() {
        match keys[..k].binary_search(c) {
            Ok(x) => masks[x] |= 1u64 << i,
            Err(x) => {
                keys.copy_within(x..k, x + 1);
                masks.copy_within(x..k, x + 1);
                keys[x] = *c;
                masks[x] = 1u64 << i;
                k += 1;
            }
        }
    }
    let (mut vp, mut vn) = (!0u64, 0u64);
    let last = 1u64 << (m - 1);
    let mut dist = m;
    let n = t.len();
    for (j, c) in t.iter().enumerate() {
        let x = keys[..k].binary_search(c).map_or(0, |x| masks[x]);
        let d0 = ((x & vp).wrapping_add(vp) ^ vp) | x | vn;
        let hp = vn | !(d0 | vp);
        let hn = d0 & vp;
        dist = dist + usize::from(hp & last != 0) - usize::from(hn & last != 0);
        let hp = (hp << 1) | 1;
        let hn = hn << 1;
        vp = hn | !(d0 | hp);
        vn = hp & d0;
        if dist > max + (n - j - 1) {
            return None;
        }
    }
    (dist <= max).then_some(dist)
}

/// Myers' bit-parallel edit distance (Myers 1999, Hyyrö's block formulation): `p` is cut into
/// 64-row words, one step per word and character of `t`. Stops once even a run of matches to
/// the end could not bring the distance back to `max`.
pub(super) fn myers(p: &[char], t: &[char], max: usize) -> Option<usize> {
    let m = p.len();
    if m <= 64 {
        return myers64(p, t, max);
    }
    let words = m.div_ceil(64);
    let mut keys: Vec<char> = p.to_vec();
    keys.sort_unstable();
    keys.dedup();
    let mut peq = vec![0u64; keys.len() * words];
    for (i, c) in p.iter().enumerate() {
        if let Ok(k) = keys.binary_search(c) {
            peq[k * words + i / 64] |= 1u64 << (i % 64);
        }
    }
    let mut vp = vec![!0u64; words];
    let mut vn = vec![0u64; words];
    let last = 1u64 << ((m - 1) % 64);
    let zeros = vec![0u64; words];
    let mut dist = m;
    let n = t.len();
    for (j, c) in t.iter().enumerate() {
        let row = match keys.binary_search(c) {
            Ok(k) => &peq[k * words..(k + 1) * words],
            Err(_) => &zeros[..],
        };
        // Row 0 of the DP is 0, 1, 2, ...: every column enters with a +1 horizontal delta.
        let (mut hp_carry, mut hn_carry) = (1u64, 0u64);
        for w in 0..words {
            let (v_p, v_n) = (vp[w], vn[w]);
            let x = row[w] | hn_carry;
            let d0 = ((x & v_p).wrapping_add(v_p) ^ v_p) | x | v_n;
            let hp = v_n | !(d0 | v_p);
            let hn = d0 & v_p;
            let (hp_in, hn_in) = (hp_carry, hn_carry);
            if w + 1 < words {
                hp_carry = hp >> 63;
                hn_carry = hn >> 63;
            } else {
                hp_carry = u64::from(hp & last != 0);
                hn_carry = u64::from(hn & last != 0);
            }
            let hp = (hp << 1) | hp_in;
            let hn = (hn << 1) | hn_in;
            vp[w] = hn | !(d0 | hp);
            vn[w] = hp & d0;
        }
        dist = dist + hp_carry as usize - hn_carry as usize;
        // The last row falls by at most one per remaining column.
        if dist > max + (n - j - 1) {
            return None;
        }
    }
    (dist <= max).then_some(dist)
}
