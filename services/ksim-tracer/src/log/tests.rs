#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ksim_proto::ksim::trace::v1 as pb;
use pb::trace_record::Record;
use tempfile::TempDir;

use super::*;

// ---- fixtures ----

fn gvk(group: &str, version: &str, kind: &str) -> pb::GroupVersionKind {
    pb::GroupVersionKind {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
    }
}

fn object(kind: &pb::GroupVersionKind, ns: &str, name: &str, body: &str) -> pb::TraceObject {
    pb::TraceObject {
        gvk: Some(kind.clone()),
        namespace: ns.into(),
        name: name.into(),
        object_json: body.as_bytes().to_vec(),
    }
}

fn event(ts: i64, applied: Vec<pb::TraceObject>, deleted: Vec<pb::TraceObject>) -> LogEntry {
    LogEntry {
        timestamp_ms: ts,
        record: pb::TraceRecord {
            record: Some(Record::Event(pb::TraceEvent {
                timestamp_ms: ts,
                applied,
                deleted,
            })),
        },
    }
}

fn lifecycle(ts: i64, owner: &str, pod: &str, end_ms: i64) -> LogEntry {
    LogEntry {
        timestamp_ms: ts,
        record: pb::TraceRecord {
            record: Some(Record::Lifecycle(pb::PodLifecycle {
                owner_gvk: Some(gvk("apps", "v1", "Deployment")),
                owner_namespace: "default".into(),
                owner_name: owner.into(),
                pod_spec_hash: 7,
                launch_index: 0,
                start_ms: ts,
                end_ms,
                outcome: if end_ms == 0 {
                    pb::PodOutcome::Running as i32
                } else {
                    pb::PodOutcome::Succeeded as i32
                },
                pod_name: pod.into(),
                ..Default::default()
            })),
        },
    }
}

fn sample(ts: i64, ready: u32) -> LogEntry {
    LogEntry {
        timestamp_ms: ts,
        record: pb::TraceRecord {
            record: Some(Record::Sample(pb::ClusterSample {
                timestamp_ms: ts,
                ready_nodes: [("m5".to_owned(), ready)].into(),
                pods: Default::default(),
            })),
        },
    }
}

fn node(ts: i64, name: &str, deleted: bool) -> LogEntry {
    LogEntry {
        timestamp_ms: ts,
        record: pb::TraceRecord {
            record: Some(Record::Node(pb::RecordedNode {
                timestamp_ms: ts,
                name: name.into(),
                group: "m5".into(),
                ready: true,
                deleted_ms: if deleted { ts } else { 0 },
                ..Default::default()
            })),
        },
    }
}

/// A deterministic mix of applies, deletes, opening/closing lifecycles, cluster samples and
/// node records over small pools of names, so state keeps changing while the set of live
/// objects stays bounded.
fn workload(n: usize, start_ts: i64, step_ms: i64) -> Vec<LogEntry> {
    let kinds = [
        gvk("", "v1", "Pod"),
        gvk("apps", "v1", "Deployment"),
        gvk("", "v1", "ConfigMap"),
    ];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x >> 33
    };
    let mut ts = start_ts;
    (0..n)
        .map(|i| {
            // Some entries share a timestamp: equal timestamps are allowed.
            if next() % 4 != 0 {
                ts += step_ms;
            }
            let r = next();
            let kind = &kinds[(r % 3) as usize];
            let name = format!("obj-{}", next() % 30);
            let ns = if r % 2 == 0 { "default" } else { "kube-system" };
            match next() % 12 {
                0..=5 => {
                    let mut applied = vec![object(kind, ns, &name, &format!("{{\"i\":{i}}}"))];
                    if r % 5 == 0 {
                        let other = format!("obj-{}", next() % 30);
                        applied.push(object(&kinds[0], "default", &other, &format!("[{i}]")));
                    }
                    event(ts, applied, vec![])
                }
                6 | 7 => event(ts, vec![], vec![object(kind, ns, &name, "")]),
                8 => lifecycle(
                    ts,
                    &format!("web-{}", r % 5),
                    &format!("pod-{}", next() % 20),
                    0,
                ),
                9 => lifecycle(
                    ts,
                    &format!("web-{}", r % 5),
                    &format!("pod-{}", next() % 20),
                    ts,
                ),
                10 => sample(ts, (r % 7) as u32),
                _ => node(ts, &format!("node-{}", r % 6), next() % 3 == 0),
            }
        })
        .collect()
}

/// A configuration that never drops anything unless a test says so.
fn config(dir: &Path, segment_max_bytes: u64, fsync: FsyncPolicy) -> LogConfig {
    LogConfig {
        segment_max_bytes,
        fsync,
        retention: Retention {
            max_age: None,
            max_bytes: None,
        },
        ..LogConfig::new(dir)
    }
}

fn open(config: &LogConfig) -> (Log, Recovery) {
    Log::open(config.clone()).unwrap()
}

fn read_all(log: &Log) -> Vec<LogEntry> {
    read_snapshot(&log.snapshot().unwrap(), i64::MIN)
}

fn read_snapshot(snapshot: &LogSnapshot, from_ms: i64) -> Vec<LogEntry> {
    snapshot
        .entries(from_ms)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

/// Appends in batches of varying size (1, 2, ... 7 entries).
fn append_batches(log: &mut Log, entries: &[LogEntry]) {
    let mut rest = entries;
    let mut size = 1;
    while !rest.is_empty() {
        let (batch, tail) = rest.split_at(size.min(rest.len()));
        log.append(batch).unwrap();
        rest = tail;
        size = size % 7 + 1;
    }
}

fn files_with_suffix(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "LOCK" {
            fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// The state after `entries`, folded independently of the checkpoint code: a hash map per
/// identity, sorted at the end.
fn reference_base(entries: &[LogEntry]) -> Base {
    let mut objects: HashMap<(String, String, String, String), pb::TraceObject> = HashMap::new();
    let mut open: HashMap<(String, String, String, String), pb::PodLifecycle> = HashMap::new();
    let mut last_sample = None;
    let mut nodes: HashMap<String, pb::RecordedNode> = HashMap::new();
    let id = |o: &pb::TraceObject| {
        let g = o.gvk.clone().unwrap_or_default();
        (g.group, g.kind, o.namespace.clone(), o.name.clone())
    };
    for entry in entries {
        match entry.record.record.clone() {
            Some(Record::Event(e)) => {
                for o in e.applied {
                    objects.insert(id(&o), o);
                }
                for o in e.deleted {
                    objects.remove(&id(&o));
                }
            }
            Some(Record::Lifecycle(l)) => {
                let owner = l.owner_gvk.clone().unwrap_or_default();
                let key = (
                    owner.kind,
                    l.owner_namespace.clone(),
                    l.owner_name.clone(),
                    l.pod_name.clone(),
                );
                if l.end_ms == 0 {
                    open.insert(key, l);
                } else {
                    open.remove(&key);
                }
            }
            Some(Record::Sample(s)) => last_sample = Some(s),
            Some(Record::Node(n)) => {
                if n.deleted_ms == 0 {
                    nodes.insert(n.name.clone(), n);
                } else {
                    nodes.remove(&n.name);
                }
            }
            _ => panic!("unexpected record"),
        }
    }
    let mut nodes: Vec<_> = nodes.into_values().collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut objects: Vec<_> = objects.into_iter().collect();
    objects.sort_by(|a, b| a.0.cmp(&b.0));
    let mut open: Vec<_> = open.into_iter().collect();
    open.sort_by(|a, b| a.0.cmp(&b.0));
    Base {
        as_of_ms: None,
        objects: objects.into_iter().map(|(_, o)| o).collect(),
        open_lifecycles: open.into_iter().map(|(_, l)| l).collect(),
        sample: last_sample,
        nodes,
    }
}

/// Checks that what the log holds (base + retained entries) is exactly `appended`: the retained
/// entries are its suffix, and the base is the fold of the rest as of its last timestamp.
/// Returns how many entries were folded away.
fn assert_base_matches(log: &Log, appended: &[LogEntry]) -> usize {
    let snapshot = log.snapshot().unwrap();
    let retained = read_snapshot(&snapshot, i64::MIN);
    let folded = appended.len() - retained.len();
    assert_eq!(
        retained,
        appended[folded..],
        "retained entries are a suffix"
    );
    let base = snapshot.base().unwrap();
    let mut expected = reference_base(&appended[..folded]);
    expected.as_of_ms = appended[..folded].last().map(|e| e.timestamp_ms);
    assert_eq!(base.as_of_ms, expected.as_of_ms);
    assert_eq!(base, expected);
    assert_eq!(log.stats().edge_ms, expected.as_of_ms);
    folded
}

fn expected_stats(entries: &[LogEntry]) -> (u64, u64, u64, BTreeMap<String, KindTotals>) {
    let (mut events, mut objects, mut lifecycles) = (0, 0, 0);
    let mut kinds: BTreeMap<String, KindTotals> = BTreeMap::new();
    let key = |g: &Option<pb::GroupVersionKind>| {
        let g = g.clone().unwrap();
        if g.group.is_empty() {
            format!("{}.{}", g.version, g.kind)
        } else {
            format!("{}/{}.{}", g.group, g.version, g.kind)
        }
    };
    for entry in entries {
        match &entry.record.record {
            Some(Record::Event(e)) => {
                events += 1;
                objects += (e.applied.len() + e.deleted.len()) as u64;
                for o in &e.applied {
                    kinds.entry(key(&o.gvk)).or_default().applies += 1;
                }
                for o in &e.deleted {
                    kinds.entry(key(&o.gvk)).or_default().deletes += 1;
                }
            }
            Some(Record::Lifecycle(l)) => {
                lifecycles += 1;
                kinds.entry(key(&l.owner_gvk)).or_default().lifecycles += 1;
            }
            Some(Record::Sample(_) | Record::Node(_)) => {}
            _ => unreachable!(),
        }
    }
    (events, objects, lifecycles, kinds)
}

// ---- round trip ----

#[test]
fn round_trip_across_sealed_segments_keeps_order_and_counts() {
    let tmp = TempDir::new().unwrap();
    let cfg = config(tmp.path(), 2048, FsyncPolicy::Always);
    let (mut log, recovery) = open(&cfg);
    assert_eq!(recovery.entries, 0);
    assert!(recovery.warnings.is_empty());

    let entries = workload(600, 1_000, 10);
    append_batches(&mut log, &entries);

    let sealed = files_with_suffix(tmp.path(), ".seg.zst");
    assert!(
        sealed.len() >= 5,
        "expected several sealed segments, got {}",
        sealed.len()
    );
    assert_eq!(
        files_with_suffix(tmp.path(), ".meta.json").len(),
        sealed.len()
    );
    assert_eq!(
        files_with_suffix(tmp.path(), ".seg").len(),
        1,
        "one raw active segment"
    );
    assert_eq!(read_all(&log), entries);

    let stats = log.stats();
    let (events, objects, lifecycles, kinds) = expected_stats(&entries);
    assert_eq!(stats.events, events);
    assert_eq!(stats.objects, objects);
    assert_eq!(stats.lifecycles, lifecycles);
    assert_eq!(stats.kinds, kinds);
    assert!(stats.kinds.contains_key("v1.Pod") && stats.kinds.contains_key("apps/v1.Deployment"));
    assert_eq!(stats.segments, sealed.len() as u64 + 1);
    assert_eq!(stats.oldest_ms, Some(entries[0].timestamp_ms));
    assert_eq!(stats.newest_ms, entries.last().map(|e| e.timestamp_ms));
    assert_eq!(stats.edge_ms, None);
    let on_disk: u64 = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert_eq!(stats.bytes_on_disk, on_disk);
    assert_eq!(log.snapshot().unwrap().newest_ms(), stats.newest_ms);
    assert_eq!(log.snapshot().unwrap().base().unwrap(), Base::default());
}

#[test]
fn entries_from_skips_whole_older_segments() {
    let tmp = TempDir::new().unwrap();
    let (mut log, _) = open(&config(tmp.path(), 1024, FsyncPolicy::Never));
    let entries = workload(400, 0, 100);
    append_batches(&mut log, &entries);
    let snapshot = log.snapshot().unwrap();

    let from = entries[300].timestamp_ms;
    let got = read_snapshot(&snapshot, from);
    assert!(
        got.len() < entries.len() - 250,
        "older segments skipped ({} read)",
        got.len()
    );
    assert_eq!(
        got[..],
        entries[entries.len() - got.len()..],
        "a suffix, in order"
    );
    let wanted = entries.iter().filter(|e| e.timestamp_ms >= from).count();
    assert!(got.iter().filter(|e| e.timestamp_ms >= from).count() == wanted);

    assert!(read_snapshot(&snapshot, i64::MAX).is_empty());
    assert_eq!(read_snapshot(&snapshot, i64::MIN), entries);
}

#[test]
fn reopen_after_clean_close_sees_everything_and_continues() {
    let tmp = TempDir::new().unwrap();
    let cfg = config(
        tmp.path(),
        4096,
        FsyncPolicy::Interval(Duration::from_secs(3600)),
    );
    let entries = workload(300, 0, 5);
    {
        let (mut log, _) = open(&cfg);
        append_batches(&mut log, &entries[..250]);
        log.sync().unwrap();
    }
    let (mut log, recovery) = open(&cfg);
    assert_eq!(recovery.entries, 250);
    assert_eq!(recovery.truncated_bytes, 0);
    assert!(recovery.warnings.is_empty(), "{:?}", recovery.warnings);
    assert_eq!(recovery.segments as u64, log.stats().segments);
    assert_eq!(read_all(&log), entries[..250]);

    // The newest timestamp survives the restart.
    let err = log.append(&[event(-1, vec![], vec![])]).unwrap_err();
    assert!(matches!(err, LogError::InvalidRecord(_)), "{err}");

    append_batches(&mut log, &entries[250..]);
    log.sync().unwrap();
    drop(log);
    let (log, recovery) = open(&cfg);
    assert_eq!(recovery.entries, 300);
    assert_eq!(read_all(&log), entries);
}

#[test]
fn second_writer_is_refused() {
    let tmp = TempDir::new().unwrap();
    let cfg = config(tmp.path(), 4096, FsyncPolicy::Never);
    let (_log, _) = open(&cfg);
    assert!(matches!(Log::open(cfg), Err(LogError::Locked { .. })));
}

// ---- validation ----

#[test]
fn append_refuses_older_timestamps_and_foreign_records() {
    let tmp = TempDir::new().unwrap();
    let (mut log, _) = open(&config(tmp.path(), 4096, FsyncPolicy::Never));
    log.append(&[lifecycle(100, "a", "p", 0)]).unwrap();

    let err = log
        .append(&[event(99, vec![], vec![])])
        .unwrap_err()
        .to_string();
    assert!(err.contains("99") && err.contains("100"), "{err}");

    // Within a call too, and then nothing of the call is written.
    let err = log
        .append(&[event(150, vec![], vec![]), event(120, vec![], vec![])])
        .unwrap_err();
    assert!(
        matches!(err, LogError::InvalidRecord(ref m) if m.contains("120") && m.contains("150"))
    );

    for record in [
        Some(Record::Header(pb::TraceHeader::default())),
        Some(Record::Trailer(pb::TraceTrailer::default())),
        None,
    ] {
        let entry = LogEntry {
            timestamp_ms: 200,
            record: pb::TraceRecord { record },
        };
        assert!(matches!(
            log.append(&[entry]),
            Err(LogError::InvalidRecord(_))
        ));
    }
    assert_eq!(read_all(&log), vec![lifecycle(100, "a", "p", 0)]);
    // Equal timestamps are fine.
    log.append(&[event(100, vec![], vec![])]).unwrap();
    assert_eq!(log.stats().events, 1);

    // Any other kind is loggable, usage samples included, and reads back as written.
    let usage = LogEntry {
        timestamp_ms: 300,
        record: pb::TraceRecord {
            record: Some(Record::Usage(pb::UsageSample {
                timestamp_ms: 290,
                pod: "web-1".into(),
                ..Default::default()
            })),
        },
    };
    log.append(std::slice::from_ref(&usage)).unwrap();
    assert_eq!(read_all(&log).last(), Some(&usage));
}

#[test]
fn config_is_validated() {
    let tmp = TempDir::new().unwrap();
    let mut cfg = LogConfig::new(tmp.path());
    assert_eq!(cfg.segment_max_bytes, 16 << 20);
    assert_eq!(cfg.retention, Retention::default());
    cfg.segment_max_bytes = 0;
    assert!(matches!(Log::open(cfg), Err(LogError::InvalidConfig(_))));
}

// ---- crash recovery ----

#[test]
fn torn_tail_at_every_offset_is_cut_and_appending_continues() {
    let tmp = TempDir::new().unwrap();
    let src = tmp.path().join("src");
    let cfg = config(&src, 1 << 20, FsyncPolicy::Never);
    let entries = workload(20, 0, 10);
    let extra = event(
        10_000,
        vec![object(&gvk("", "v1", "Pod"), "x", "y", "{}")],
        vec![],
    );
    let (mut log, _) = open(&cfg);
    log.append(&entries[..19]).unwrap();
    let raw = files_with_suffix(&src, ".seg").pop().unwrap();
    let last_start = fs::metadata(&raw).unwrap().len();
    log.append(&entries[19..]).unwrap();
    drop(log);
    let full = fs::read(&raw).unwrap();
    assert!(full.len() as u64 > last_start + 16);

    for keep in last_start..full.len() as u64 {
        let dir = tmp.path().join(format!("cut-{keep}"));
        copy_dir(&src, &dir);
        fs::write(dir.join(raw.file_name().unwrap()), &full[..keep as usize]).unwrap();
        let cfg = config(&dir, 1 << 20, FsyncPolicy::Never);
        let (mut log, recovery) = open(&cfg);
        assert_eq!(recovery.truncated_bytes, keep - last_start, "keep {keep}");
        assert_eq!(recovery.entries, 19);
        assert_eq!(recovery.warnings.is_empty(), keep == last_start);
        assert_eq!(read_all(&log), entries[..19], "keep {keep}");
        log.append(std::slice::from_ref(&extra)).unwrap();
        drop(log);
        let (log, recovery) = open(&cfg);
        assert_eq!(recovery.truncated_bytes, 0);
        let mut want = entries[..19].to_vec();
        want.push(extra.clone());
        assert_eq!(read_all(&log), want, "keep {keep}");
        drop(log);
        fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn garbage_after_the_last_frame_is_cut() {
    let tmp = TempDir::new().unwrap();
    let src = tmp.path().join("src");
    let entries = workload(30, 0, 10);
    let (mut log, _) = open(&config(&src, 1 << 20, FsyncPolicy::Never));
    log.append(&entries).unwrap();
    drop(log);
    let raw_name = files_with_suffix(&src, ".seg").pop().unwrap();
    let raw_name = raw_name.file_name().unwrap();

    // Zeros (what some file systems show after a crash), then arbitrary bytes.
    let garbages: [Vec<u8>; 2] = [vec![0; 4096], (0..=255u8).cycle().take(1000).collect()];
    for (i, garbage) in garbages.iter().enumerate() {
        let dir = tmp.path().join(format!("g{i}"));
        copy_dir(&src, &dir);
        let raw = dir.join(raw_name);
        let mut bytes = fs::read(&raw).unwrap();
        bytes.extend_from_slice(garbage);
        fs::write(&raw, &bytes).unwrap();

        let cfg = config(&dir, 1 << 20, FsyncPolicy::Never);
        let (mut log, recovery) = open(&cfg);
        assert_eq!(recovery.truncated_bytes, garbage.len() as u64);
        assert_eq!(recovery.warnings.len(), 1, "{:?}", recovery.warnings);
        assert_eq!(read_all(&log), entries);
        let extra = event(1_000_000, vec![], vec![]);
        log.append(std::slice::from_ref(&extra)).unwrap();
        drop(log);
        let (log, recovery) = open(&cfg);
        assert_eq!(recovery.truncated_bytes, 0);
        let mut want = entries.clone();
        want.push(extra);
        assert_eq!(read_all(&log), want);
    }
}

#[test]
fn flipped_bytes_in_sealed_segments_are_reported_never_misread() {
    let tmp = TempDir::new().unwrap();
    let cfg = config(tmp.path(), 1024, FsyncPolicy::Always);
    let entries = workload(200, 0, 10);
    let (mut log, _) = open(&cfg);
    append_batches(&mut log, &entries);
    let target = files_with_suffix(tmp.path(), ".seg.zst")[2].clone();
    let original = fs::read(&target).unwrap();

    let mut detected = 0;
    for pos in 0..original.len() {
        let mut bytes = original.clone();
        bytes[pos] ^= 0x10;
        fs::write(&target, &bytes).unwrap();
        let results: Vec<_> = log.snapshot().unwrap().entries(i64::MIN).unwrap().collect();
        let ok: Vec<LogEntry> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        assert_eq!(
            ok[..],
            entries[..ok.len()],
            "flip at {pos} yielded wrong entries"
        );
        match results.last().unwrap() {
            Err(LogError::Corrupt { file, .. }) => {
                assert_eq!(file, &target);
                detected += 1;
            }
            Err(e) => panic!("flip at {pos}: unexpected error {e}"),
            // Some bits change nothing zstd decodes (an unused header bit, a larger window
            // size): harmless, as long as the content is exactly right.
            Ok(_) => assert_eq!(ok, entries, "flip at {pos} lost entries silently"),
        }
    }
    assert!(
        detected * 100 >= original.len() * 95,
        "only {detected} of {} flips detected",
        original.len()
    );

    // With its sidecar gone the damaged segment is rescanned on open: a warning, no panic, and
    // the entries before the damage still count.
    let mut bytes = original.clone();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&target, &bytes).unwrap();
    drop(log);
    fs::remove_file(target.with_extension("").with_extension("meta.json")).unwrap();
    let (log, recovery) = open(&cfg);
    let name = target.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        recovery.warnings.iter().any(|w| w.contains(&name)),
        "{:?}",
        recovery.warnings
    );
    assert!(log.stats().events < expected_stats(&entries).0);
    let err = log
        .snapshot()
        .unwrap()
        .entries(i64::MIN)
        .unwrap()
        .find_map(Result::err)
        .unwrap();
    assert!(
        matches!(err, LogError::Corrupt { ref file, .. } if file == &target),
        "{err}"
    );
    assert!(err.to_string().contains(&name) && err.to_string().contains("offset"));
}

#[test]
fn missing_or_unreadable_sidecars_are_rebuilt() {
    let tmp = TempDir::new().unwrap();
    let cfg = config(tmp.path(), 1024, FsyncPolicy::Never);
    let entries = workload(150, 0, 10);
    let (mut log, _) = open(&cfg);
    append_batches(&mut log, &entries);
    let before = log.stats();
    drop(log);
    let sidecars = files_with_suffix(tmp.path(), ".meta.json");
    fs::remove_file(&sidecars[0]).unwrap();
    fs::write(&sidecars[1], b"{ not json").unwrap();

    let (log, recovery) = open(&cfg);
    assert_eq!(recovery.warnings.len(), 1, "{:?}", recovery.warnings);
    assert!(recovery.warnings[0].contains("rebuilding"));
    assert_eq!(files_with_suffix(tmp.path(), ".meta.json"), sidecars);
    let after = log.stats();
    assert_eq!(
        (after.events, after.objects, after.lifecycles, &after.kinds),
        (
            before.events,
            before.objects,
            before.lifecycles,
            &before.kinds
        )
    );
    assert_eq!(after.bytes_on_disk, before.bytes_on_disk);
    assert_eq!(read_all(&log), entries);
}

#[test]
fn interrupted_seals_and_leftover_files_are_finished_on_open() {
    let tmp = TempDir::new().unwrap();
    let cfg = config(tmp.path(), 1024, FsyncPolicy::Never);
    let entries = workload(120, 0, 10);
    let (mut log, _) = open(&cfg);
    append_batches(&mut log, &entries);
    drop(log);
    let sealed = files_with_suffix(tmp.path(), ".seg.zst");
    assert!(sealed.len() >= 3);
    let raw_of = |p: &Path| PathBuf::from(p.to_string_lossy().trim_end_matches(".zst"));
    let sidecar_of =
        |p: &Path| PathBuf::from(p.to_string_lossy().replace(".seg.zst", ".meta.json"));

    // Segment 0: crash after the rename, before the raw file was removed.
    let raw0 = zstd::decode_all(File::open(&sealed[0]).unwrap()).unwrap();
    fs::write(raw_of(&sealed[0]), &raw0).unwrap();
    // Segment 1: crash before the compressed copy was renamed into place.
    let raw1 = zstd::decode_all(File::open(&sealed[1]).unwrap()).unwrap();
    fs::write(raw_of(&sealed[1]), &raw1).unwrap();
    fs::rename(&sealed[1], format!("{}.tmp", sealed[1].display())).unwrap();
    fs::remove_file(sidecar_of(&sealed[1])).unwrap();
    fs::write(tmp.path().join("checkpoint.zst.tmp"), b"partial").unwrap();

    let (log, recovery) = open(&cfg);
    assert_eq!(recovery.truncated_bytes, 0);
    let joined = recovery.warnings.join("\n");
    assert!(joined.contains("already sealed"), "{joined}");
    assert!(joined.contains("interrupted roll"), "{joined}");
    assert!(joined.contains("checkpoint.zst.tmp"), "{joined}");
    assert_eq!(files_with_suffix(tmp.path(), ".seg").len(), 1);
    assert_eq!(files_with_suffix(tmp.path(), ".seg.zst"), sealed);
    assert!(files_with_suffix(tmp.path(), ".tmp").is_empty());
    assert!(sidecar_of(&sealed[1]).exists());
    assert_eq!(read_all(&log), entries);
}

// ---- durability ----

#[test]
fn interval_policy_shows_only_synced_entries() {
    let tmp = TempDir::new().unwrap();
    let cfg = config(
        tmp.path(),
        1 << 20,
        FsyncPolicy::Interval(Duration::from_secs(3600)),
    );
    let entries = workload(15, 0, 10);
    let (mut log, _) = open(&cfg);
    log.append(&entries[..10]).unwrap();
    assert!(read_all(&log).is_empty());
    assert_eq!(log.stats().events + log.stats().lifecycles, 0);
    assert_eq!(log.stats().bytes_on_disk, 0);
    log.sync().unwrap();
    log.append(&entries[10..]).unwrap();

    let snapshot = log.snapshot().unwrap();
    assert_eq!(read_snapshot(&snapshot, i64::MIN), entries[..10]);
    assert_eq!(snapshot.newest_ms(), Some(entries[9].timestamp_ms));
    let stats = log.stats();
    let (events, _, lifecycles, _) = expected_stats(&entries[..10]);
    assert_eq!((stats.events, stats.lifecycles), (events, lifecycles));
    assert_eq!(stats.newest_ms, Some(entries[9].timestamp_ms));

    // Interval not yet due: maintain does not sync.
    log.maintain(0).unwrap();
    assert_eq!(read_all(&log).len(), 10);
    log.sync().unwrap();
    assert_eq!(read_all(&log), entries);
    // The earlier snapshot still stops where it was taken.
    assert_eq!(read_snapshot(&snapshot, i64::MIN).len(), 10);
}

#[test]
fn interval_policy_syncs_in_maintain_when_due() {
    let tmp = TempDir::new().unwrap();
    let cfg = config(
        tmp.path(),
        1 << 20,
        FsyncPolicy::Interval(Duration::from_millis(20)),
    );
    let (mut log, _) = open(&cfg);
    log.append(&workload(5, 0, 10)).unwrap();
    assert_eq!(read_all(&log).len(), 0);
    std::thread::sleep(Duration::from_millis(30));
    log.maintain(0).unwrap();
    assert_eq!(read_all(&log).len(), 5);
}

#[test]
fn always_and_never_policies_show_entries_at_once() {
    for policy in [FsyncPolicy::Always, FsyncPolicy::Never] {
        let tmp = TempDir::new().unwrap();
        let (mut log, _) = open(&config(tmp.path(), 1 << 20, policy));
        let entries = workload(5, 0, 10);
        log.append(&entries).unwrap();
        assert_eq!(read_all(&log), entries, "{policy:?}");
    }
}

// ---- sealing and retention ----

#[test]
fn maintain_seals_an_old_active_segment() {
    let tmp = TempDir::new().unwrap();
    let mut cfg = config(tmp.path(), 1 << 20, FsyncPolicy::Never);
    cfg.segment_max_age = Duration::from_secs(60);
    let (mut log, _) = open(&cfg);
    assert_eq!(
        log.maintain(1_000_000).unwrap().sealed,
        0,
        "nothing to seal"
    );
    let entries = workload(10, 1_000, 10);
    log.append(&entries).unwrap();
    assert_eq!(log.maintain(1_000 + 59_000).unwrap().sealed, 0, "young");
    assert_eq!(log.maintain(1_010 + 60_000).unwrap().sealed, 1, "old");
    assert_eq!(files_with_suffix(tmp.path(), ".seg.zst").len(), 1);
    assert_eq!(
        log.maintain(10_000_000).unwrap().sealed,
        0,
        "new active is empty"
    );
    assert_eq!(read_all(&log), entries);
}

#[test]
fn retention_by_bytes_folds_oldest_segments_into_the_base() {
    let tmp = TempDir::new().unwrap();
    let mut cfg = config(tmp.path(), 2048, FsyncPolicy::Never);
    cfg.retention.max_bytes = Some(6 * 1024);
    let (mut log, _) = open(&cfg);
    let entries = workload(3000, 0, 10);
    let mut dropped = 0;
    for (i, chunk) in entries.chunks(100).enumerate() {
        log.append(chunk).unwrap();
        let m = log.maintain(0).unwrap();
        assert!(m.warnings.is_empty());
        dropped += m.dropped_entries;
        // The budget holds after every maintain, up to the active segment's overshoot.
        assert!(
            log.stats().bytes_on_disk <= 6 * 1024 + 4096,
            "round {i}: {:?}",
            log.stats()
        );
    }
    assert!(dropped > 2000, "dropped {dropped}");
    let folded = assert_base_matches(&log, &entries);
    assert_eq!(folded as u64, dropped);
    let base = log.snapshot().unwrap().base().unwrap();
    assert!(!base.objects.is_empty() && !base.open_lifecycles.is_empty());

    // The stats cover the retained entries only.
    let (events, objects, lifecycles, kinds) = expected_stats(&entries[folded..]);
    let stats = log.stats();
    assert_eq!(
        (stats.events, stats.objects, stats.lifecycles),
        (events, objects, lifecycles)
    );
    assert_eq!(stats.kinds, kinds);
    assert_eq!(stats.oldest_ms, Some(entries[folded].timestamp_ms));

    // The base survives a restart.
    drop(log);
    let (log, recovery) = open(&cfg);
    assert!(recovery.warnings.is_empty(), "{:?}", recovery.warnings);
    assert_eq!(assert_base_matches(&log, &entries), folded);
}

#[test]
fn retention_by_age_drops_segments_older_than_max_age() {
    let tmp = TempDir::new().unwrap();
    let mut cfg = config(tmp.path(), 1024, FsyncPolicy::Never);
    cfg.retention.max_age = Some(Duration::from_secs(10));
    let (mut log, _) = open(&cfg);
    let entries = workload(1000, 0, 100);
    append_batches(&mut log, &entries);
    let now = entries.last().unwrap().timestamp_ms;
    let cutoff = now - 10_000;
    let before = log.stats().segments;

    let m = log.maintain(now).unwrap();
    assert!(m.dropped_segments > 0);
    assert_eq!(log.stats().segments, before - m.dropped_segments as u64);
    let folded = assert_base_matches(&log, &entries);
    assert_eq!(folded as u64, m.dropped_entries);
    // Exactly the segments whose newest entry is older than the cutoff went.
    assert!(entries[folded - 1].timestamp_ms < cutoff);
    let retained = read_all(&log);
    let first_segment_last = {
        let snapshot = log.snapshot().unwrap();
        snapshot.segments[0].last_ms.unwrap()
    };
    assert!(first_segment_last >= cutoff);
    assert!(retained[0].timestamp_ms <= first_segment_last);
    assert_eq!(log.maintain(now).unwrap().dropped_segments, 0, "idempotent");
}

#[test]
fn index_stays_bounded_while_many_entries_pass() {
    let tmp = TempDir::new().unwrap();
    let mut cfg = config(tmp.path(), 16 << 10, FsyncPolicy::Never);
    cfg.retention.max_bytes = Some(128 << 10);
    let (mut log, _) = open(&cfg);
    let total = 120_000;
    let entries = workload(total, 0, 1);
    let mut max_index = 0;
    let mut dropped = 0;
    for chunk in entries.chunks(1000) {
        log.append(chunk).unwrap();
        dropped += log.maintain(0).unwrap().dropped_entries;
        max_index = max_index.max(log.index_len());
    }
    let retained = total as u64 - dropped;
    assert!(max_index <= 64, "index grew to {max_index}");
    assert!(total > 1000 * max_index, "entries far exceed the index");
    assert!(retained < total as u64 / 10, "retained {retained}");
    assert_eq!(assert_base_matches(&log, &entries) as u64, dropped);
}

#[test]
fn crash_between_checkpoint_write_and_segment_delete_loses_nothing() {
    let tmp = TempDir::new().unwrap();
    let saved = TempDir::new().unwrap();
    let cfg = config(tmp.path(), 1024, FsyncPolicy::Never);
    let entries = workload(400, 0, 10);
    let (mut log, _) = open(&cfg);
    append_batches(&mut log, &entries[..200]);
    // A first compaction, so the interrupted one builds on an existing checkpoint.
    log.config.retention.max_bytes = Some(log.stats().bytes_on_disk - 1);
    assert!(log.maintain(0).unwrap().dropped_segments > 0);
    append_batches(&mut log, &entries[200..]);
    copy_dir(tmp.path(), saved.path());

    log.config.retention.max_bytes = Some(log.stats().bytes_on_disk / 2);
    let m = log.maintain(0).unwrap();
    assert!(m.dropped_segments >= 2);
    let stats = log.stats();
    let snapshot = log.snapshot().unwrap();
    let (base, retained) = (snapshot.base().unwrap(), read_snapshot(&snapshot, i64::MIN));
    drop(snapshot);
    drop(log);

    // Put the deleted segments back, as if the crash came right after the checkpoint's rename.
    let mut restored = 0;
    for saved_file in files_with_suffix(saved.path(), "") {
        let path = tmp.path().join(saved_file.file_name().unwrap());
        if !path.exists() {
            fs::copy(&saved_file, &path).unwrap();
            restored += 1;
        }
    }
    assert_eq!(restored, 2 * m.dropped_segments, "segments and sidecars");

    let (log, recovery) = open(&cfg);
    let removed = recovery
        .warnings
        .iter()
        .filter(|w| w.contains("already holds"))
        .count();
    assert_eq!(removed, m.dropped_segments, "{:?}", recovery.warnings);
    let snapshot = log.snapshot().unwrap();
    assert_eq!(snapshot.base().unwrap(), base);
    assert_eq!(read_snapshot(&snapshot, i64::MIN), retained);
    let after = log.stats();
    assert_eq!(
        (
            after.events,
            after.segments,
            after.edge_ms,
            after.bytes_on_disk
        ),
        (
            stats.events,
            stats.segments,
            stats.edge_ms,
            stats.bytes_on_disk
        )
    );
    assert_eq!(
        assert_base_matches(&log, &entries),
        entries.len() - retained.len()
    );
}

#[test]
fn snapshot_reads_segments_that_retention_and_sealing_remove_later() {
    let tmp = TempDir::new().unwrap();
    let cfg = config(tmp.path(), 1024, FsyncPolicy::Never);
    let entries = workload(300, 0, 10);
    let (mut log, _) = open(&cfg);
    append_batches(&mut log, &entries[..200]);
    let snapshot = log.snapshot().unwrap();
    let base_before = snapshot.base().unwrap();
    let sealed_before = files_with_suffix(tmp.path(), ".seg.zst");
    let active_before = files_with_suffix(tmp.path(), ".seg");

    // Seal the active segment and fold everything sealed away.
    append_batches(&mut log, &entries[200..]);
    log.config.retention.max_bytes = Some(1);
    let m = log.maintain(i64::MAX).unwrap();
    assert_eq!(m.sealed, 1);
    assert!(m.dropped_segments > sealed_before.len());
    assert!(!active_before[0].exists(), "the raw file was sealed away");
    // Files the snapshot pins are kept until it goes.
    assert!(sealed_before.iter().all(|p| p.exists()));

    let clone = snapshot.clone();
    drop(snapshot);
    fn send_static<T: Send + 'static>(_: &T) {}
    send_static(&clone.entries(0).unwrap());
    let handle = std::thread::spawn(move || read_snapshot(&clone, i64::MIN));
    assert_eq!(handle.join().unwrap(), entries[..200]);
    assert_eq!(base_before, Base::default());

    log.maintain(i64::MAX).unwrap();
    assert!(
        sealed_before.iter().all(|p| !p.exists()),
        "deleted once unpinned"
    );
    assert_eq!(assert_base_matches(&log, &entries), 300);
}

#[test]
fn corrupt_checkpoint_is_moved_aside_with_a_warning() {
    let tmp = TempDir::new().unwrap();
    let mut cfg = config(tmp.path(), 1024, FsyncPolicy::Never);
    cfg.retention.max_bytes = Some(1);
    let (mut log, _) = open(&cfg);
    append_batches(&mut log, &workload(200, 0, 10));
    log.maintain(0).unwrap();
    drop(log);
    let path = tmp.path().join("checkpoint.zst");
    let mut bytes = fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    fs::write(&path, bytes).unwrap();

    let (log, recovery) = open(&cfg);
    assert!(
        recovery
            .warnings
            .iter()
            .any(|w| w.contains("checkpoint.zst")),
        "{:?}",
        recovery.warnings
    );
    assert!(tmp.path().join("checkpoint.zst.corrupt").exists());
    assert_eq!(log.snapshot().unwrap().base().unwrap(), Base::default());
    assert_eq!(log.stats().edge_ms, None);
}
