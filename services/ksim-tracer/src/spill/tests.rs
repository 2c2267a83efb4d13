#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use super::*;
use crate::domain::export::sorting::{Fields, put_u64};

fn sorted<T: SortItem>(spill: &Spill, items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut sorter = spill.sorter();
    for item in items {
        sorter.push(item).unwrap();
    }
    sorter.sorted().unwrap().map(Result::unwrap).collect()
}

/// A deterministic shuffle of 0..n with duplicates: each value twice.
fn shuffled(n: u64) -> Vec<u64> {
    (0..2 * n).map(|i| (i * 7_919) % n).collect()
}

#[test]
fn sorts_across_runs_and_merge_levels() {
    let dir = tempfile::tempdir().unwrap();
    // 10,000 items in runs of 7: 1,429 runs, merged 32 at a time in three rounds.
    let items = shuffled(5_000);
    let mut expected = items.clone();
    expected.sort();
    assert_eq!(sorted(&Spill::new(dir.path()).run_len(7), items), expected);
}

#[test]
fn what_fits_in_one_run_never_touches_the_disk() {
    let spill = Spill::new("/nonexistent/spill").run_len(100);
    assert_eq!(sorted(&spill, [3_u64, 1, 2]), [1, 2, 3]);
}

#[test]
fn a_directory_it_cannot_write_is_named() {
    let mut sorter = Spill::new("/nonexistent/spill").run_len(2).sorter();
    sorter.push(1_u64).unwrap();
    let error = sorter.push(2_u64).unwrap_err();
    assert!(error.to_string().contains("/nonexistent/spill"), "{error}");
}

#[test]
fn leaves_nothing_in_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let spill = Spill::new(dir.path()).run_len(3);
    let mut sorter = spill.sorter();
    for item in shuffled(100) {
        sorter.push(item).unwrap();
    }
    let mut merged = sorter.sorted().unwrap();
    assert_eq!(merged.next().unwrap().unwrap(), 0);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "runs are unnamed files, gone when closed"
    );
}

/// Ordered by `key` alone, so items with equal keys are told apart by `pushed`.
#[derive(Debug, PartialEq, Eq)]
struct Tagged {
    key: u64,
    pushed: u64,
}

impl Ord for Tagged {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(&other.key)
    }
}

impl PartialOrd for Tagged {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl SortItem for Tagged {
    fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.key);
        put_u64(out, self.pushed);
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut fields = Fields::new(bytes);
        let item = Tagged {
            key: fields.u64()?,
            pushed: fields.u64()?,
        };
        fields.end()?;
        Ok(item)
    }
}

#[test]
fn equal_items_come_back_in_the_order_they_were_pushed() {
    let dir = tempfile::tempdir().unwrap();
    let items = (0..3_000).map(|pushed| Tagged {
        key: (pushed * 7_919) % 10,
        pushed,
    });
    let got = sorted(&Spill::new(dir.path()).run_len(4), items);
    assert_eq!(got.len(), 3_000);
    for pair in got.windows(2) {
        assert!(
            (pair[0].key, pair[0].pushed) < (pair[1].key, pair[1].pushed),
            "{pair:?}"
        );
    }
}

/// Like [`Tagged`], but a later item supersedes an earlier one of the same key.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Latest(Tagged);

impl SortItem for Latest {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        Tagged::decode(bytes).map(Latest)
    }

    fn supersedes(&self, earlier: &Self) -> bool {
        self.0.key == earlier.0.key
    }
}

#[test]
fn superseded_items_make_room_and_the_latest_stays() {
    let dir = tempfile::tempdir().unwrap();
    // Five pushes in a row per key, 97 keys in turn.
    let pushed: Vec<Tagged> = (0..3_000)
        .map(|pushed| Tagged {
            key: (pushed / 5) % 97,
            pushed,
        })
        .collect();
    let mut last = BTreeMap::new();
    for item in &pushed {
        last.insert(item.key, item.pushed);
    }
    let mut sorter = Spill::new(dir.path()).run_len(20).sorter();
    for item in pushed {
        sorter.push(Latest(item)).unwrap();
    }
    assert!(sorter.runs.len() > 1, "{} runs", sorter.runs.len());
    let got: Vec<Latest> = sorter.sorted().unwrap().map(Result::unwrap).collect();
    // Runs cut some series of five in two.
    assert!(got.len() < 3_000 / 4, "{} items", got.len());
    assert!(got.windows(2).all(|pair| pair[0].0 <= pair[1].0));
    let got_last: BTreeMap<u64, u64> = got.iter().map(|l| (l.0.key, l.0.pushed)).collect();
    assert_eq!(got_last, last);
}
