//! Single-pass field extraction: walks one JSON object with serde_json and keeps only the values
//! found at a fixed set of dotted paths, borrowing strings from the line where they contain no
//! escapes. Everything else is skipped without building a `serde_json::Value` tree.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// How many distinct paths one decoder can watch. The presets need at most 15.
pub(crate) const MAX_SLOTS: usize = 16;

/// A JSON value found at a watched path, reduced to what decoding needs.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Scalar<'de> {
    Str(Cow<'de, str>),
    U64(u64),
    I64(i64),
    F64(f64),
    /// An integer too large for 64 bits, as its decimal text (id paths only, see
    /// `PathSet::add_id`).
    BigInt(&'de str),
    Bool(bool),
    Null,
    /// An object or an array; its contents are not kept here.
    Compound,
}

/// The values found for one line, indexed by slot; `None` means the path was absent.
pub(crate) type Slots<'de> = [Option<Scalar<'de>>; MAX_SLOTS];

/// An empty set of slots.
pub(crate) fn empty_slots<'de>() -> Slots<'de> {
    [const { None }; MAX_SLOTS]
}

#[derive(Clone, Debug)]
struct Node {
    key: Box<str>,
    children: Vec<u32>,
    slot: Option<usize>,
    /// Numbers here are read from their text, so integers past 64 bits stay exact.
    exact_ints: bool,
}

/// The watched paths as a trie of object keys; node 0 is the top-level object.
#[derive(Clone, Debug)]
pub(crate) struct PathSet {
    nodes: Vec<Node>,
    slots: usize,
}

impl PathSet {
    /// A set watching nothing.
    pub(crate) fn new() -> Self {
        PathSet {
            nodes: vec![Node {
                key: "".into(),
                children: Vec::new(),
                slot: None,
                exact_ints: false,
            }],
            slots: 0,
        }
    }

    /// Watches a dotted path (`user.idstr`) and returns its slot; the same path always gets the
    /// same slot. Keys that themselves contain a dot cannot be addressed.
    ///
    /// Past [`MAX_SLOTS`] the returned slot is out of range and reads as absent, which keeps
    /// construction infallible; the fixed presets stay well below the limit.
    pub(crate) fn add(&mut self, path: &str) -> usize {
        let mut node = 0usize;
        for key in path.split('.') {
            node = match self.child(node, key) {
                Some(child) => child,
                None => self.push_child(node, key),
            };
        }
        if let Some(slot) = self.nodes[node].slot {
            return slot;
        }
        let slot = self.slots;
        self.slots += 1;
        self.nodes[node].slot = Some(slot);
        slot
    }

    /// Like `add`, for an id: an integer too large for 64 bits is kept as its decimal text
    /// ([`Scalar::BigInt`]) instead of being rounded to a float.
    pub(crate) fn add_id(&mut self, path: &str) -> usize {
        let slot = self.add(path);
        if let Some(n) = self.nodes.iter_mut().find(|n| n.slot == Some(slot)) {
            n.exact_ints = true;
        }
        slot
    }

    fn push_child(&mut self, parent: usize, key: &str) -> usize {
        let index = self.nodes.len();
        self.nodes.push(Node {
            key: key.into(),
            children: Vec::new(),
            slot: None,
            exact_ints: false,
        });
        // node counts stay tiny (a few dozen at most), far below u32::MAX
        self.nodes[parent].children.push(index as u32);
        index
    }

    fn child(&self, node: usize, key: &str) -> Option<usize> {
        let children = &self.nodes[node].children;
        children
            .iter()
            .map(|&c| c as usize)
            .find(|&c| &*self.nodes[c].key == key)
    }

    /// Parses `json`, which must be exactly one JSON object, filling `slots` for watched paths.
    /// When a key repeats, the last occurrence wins, as with `serde_json::Value`.
    pub(crate) fn extract<'de>(
        &self,
        json: &'de str,
        slots: &mut Slots<'de>,
    ) -> serde_json::Result<()> {
        let mut de = serde_json::Deserializer::from_str(json);
        (&mut de).deserialize_map(NodeVisitor {
            paths: self,
            node: 0,
            slots,
        })?;
        de.end()
    }
}

/// Reads the value at one trie node: stores scalars into the node's slot and descends into
/// objects through the node's children.
struct NodeVisitor<'a, 'de> {
    paths: &'a PathSet,
    node: usize,
    slots: &'a mut Slots<'de>,
}

impl<'de> NodeVisitor<'_, 'de> {
    fn put(&mut self, value: Scalar<'de>) {
        if let Some(slot) = self.paths.nodes[self.node].slot {
            if let Some(cell) = self.slots.get_mut(slot) {
                *cell = Some(value);
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for NodeVisitor<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeVisitor<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_borrowed_str<E>(mut self, v: &'de str) -> Result<(), E> {
        self.put(Scalar::Str(Cow::Borrowed(v)));
        Ok(())
    }

    fn visit_str<E>(mut self, v: &str) -> Result<(), E> {
        self.put(Scalar::Str(Cow::Owned(v.to_string())));
        Ok(())
    }

    fn visit_string<E>(mut self, v: String) -> Result<(), E> {
        self.put(Scalar::Str(Cow::Owned(v)));
        Ok(())
    }

    fn visit_u64<E>(mut self, v: u64) -> Result<(), E> {
        self.put(Scalar::U64(v));
        Ok(())
    }

    fn visit_i64<E>(mut self, v: i64) -> Result<(), E> {
        self.put(Scalar::I64(v));
        Ok(())
    }

    fn visit_f64<E>(mut self, v: f64) -> Result<(), E> {
        self.put(Scalar::F64(v));
        Ok(())
    }

    fn visit_bool<E>(mut self, v: bool) -> Result<(), E> {
        self.put(Scalar::Bool(v));
        Ok(())
    }

    fn visit_unit<E>(mut self) -> Result<(), E> {
        self.put(Scalar::Null);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.put(Scalar::Compound);
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.put(Scalar::Compound);
        let NodeVisitor { paths, node, slots } = self;
        if paths.nodes[node].children.is_empty() {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        while let Some(child) = map.next_key_seed(KeySeed { paths, node })? {
            match child {
                Some(child) if paths.nodes[child].exact_ints => {
                    let raw: &'de serde_json::value::RawValue = map.next_value()?;
                    let text = raw.get();
                    let digits = text.strip_prefix('-').unwrap_or(text);
                    let big = !digits.is_empty()
                        && digits.bytes().all(|b| b.is_ascii_digit())
                        && text.parse::<i64>().is_err()
                        && text.parse::<u64>().is_err();
                    let mut v = NodeVisitor {
                        paths,
                        node: child,
                        slots: &mut *slots,
                    };
                    if big {
                        v.put(Scalar::BigInt(text));
                    } else {
                        let mut de = serde_json::Deserializer::from_str(text);
                        serde::de::DeserializeSeed::deserialize(v, &mut de)
                            .map_err(serde::de::Error::custom)?;
                    }
                }
                Some(child) => map.next_value_seed(NodeVisitor {
                    paths,
                    node: child,
                    slots: &mut *slots,
                })?,
                None => map.next_value::<IgnoredAny>().map(drop)?,
            }
        }
        Ok(())
    }
}

/// Looks an object key up among a node's children without allocating, even for escaped keys.
struct KeySeed<'a> {
    paths: &'a PathSet,
    node: usize,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<usize>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.paths.child(self.node, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<'de>(paths: &PathSet, json: &'de str) -> Slots<'de> {
        let mut slots = empty_slots();
        if let Err(e) = paths.extract(json, &mut slots) {
            panic!("{json}: {e}");
        }
        slots
    }

    #[test]
    fn same_path_same_slot() {
        let mut p = PathSet::new();
        let a = p.add("user.id");
        let b = p.add("user");
        assert_eq!(p.add("user.id"), a);
        assert_ne!(a, b);
    }

    #[test]
    fn nested_and_borrowed() {
        let mut p = PathSet::new();
        let deep = p.add("a.b.c");
        let user = p.add("user");
        let user_id = p.add("user.id");
        let s = run(
            &p,
            r#"{"x":[1,{"a":2}],"a":{"b":{"c":"v","d":1}},"user":{"id":7,"n":"q"}}"#,
        );
        assert!(matches!(&s[deep], Some(Scalar::Str(Cow::Borrowed("v")))));
        assert_eq!(s[user], Some(Scalar::Compound));
        assert_eq!(s[user_id], Some(Scalar::U64(7)));
    }

    #[test]
    fn escapes_and_types() {
        let mut p = PathSet::new();
        let [t, k, n, f, b, z, arr] = ["t", "k\"ey", "n", "f", "b", "z", "arr"].map(|k| p.add(k));
        let s = run(
            &p,
            r#"{"t":"\u4f60\u597d","k\"ey":1,"n":-3,"f":1.5,"b":true,"z":null,"arr":[[]]}"#,
        );
        assert!(matches!(&s[t], Some(Scalar::Str(Cow::Owned(v))) if v == "你好"));
        assert_eq!(s[k], Some(Scalar::U64(1)));
        assert_eq!(s[n], Some(Scalar::I64(-3)));
        assert_eq!(s[f], Some(Scalar::F64(1.5)));
        assert_eq!(s[b], Some(Scalar::Bool(true)));
        assert_eq!(s[z], Some(Scalar::Null));
        assert_eq!(s[arr], Some(Scalar::Compound));
    }

    #[test]
    fn last_duplicate_wins_and_scalar_parent_is_skipped() {
        let mut p = PathSet::new();
        let id = p.add("id");
        let deep = p.add("a.b");
        let s = run(&p, r#"{"id":1,"id":2,"a":"flat"}"#);
        assert_eq!(s[id], Some(Scalar::U64(2)));
        assert_eq!(s[deep], None);
    }

    #[test]
    fn rejects_non_objects_and_trailing_data() {
        let mut p = PathSet::new();
        p.add("id");
        for bad in [
            "",
            "[]",
            "1",
            "null",
            "\"s\"",
            "{} {}",
            "{\"id\":1",
            "{\"id\":1}x",
        ] {
            assert!(p.extract(bad, &mut empty_slots()).is_err(), "{bad}");
        }
    }

    #[test]
    fn slots_past_the_limit_read_as_absent() {
        let mut p = PathSet::new();
        let slots: Vec<usize> = (0..MAX_SLOTS + 2)
            .map(|i| p.add(&format!("k{i}")))
            .collect();
        let s = run(&p, r#"{"k17":1}"#);
        assert_eq!(slots[MAX_SLOTS + 1], MAX_SLOTS + 1);
        assert!(s.iter().all(Option::is_none));
    }

    #[test]
    fn deep_nesting_is_handled_without_crashing() {
        let mut p = PathSet::new();
        let slot = p.add("a.a.a");
        // skipped values are walked iteratively by serde_json, so any depth is fine there
        let json = format!("{{\"a\":{}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(p.extract(&json, &mut empty_slots()).is_ok());
        let json = format!("{}1{}", "{\"a\":".repeat(50_000), "}".repeat(50_000));
        let mut slots = empty_slots();
        assert!(p.extract(&json, &mut slots).is_ok());
        assert_eq!(slots[slot], Some(Scalar::Compound));
        // a watched path deeper than serde_json's recursion limit fails cleanly
        let mut deep = PathSet::new();
        deep.add(&vec!["a"; 300].join("."));
        assert!(deep.extract(&json, &mut empty_slots()).is_err());
    }
}
