//! The checkpoint: the state that folded-away segments leave behind.
//!
//! `checkpoint.zst` is a zstd stream of frames (see `frame`): first a header naming the as-of
//! time, the last segment folded in and how many records follow, then one frame per live object
//! (a `TraceObject`, in key order), then one per open lifecycle (a `PodLifecycle`, in key order),
//! then the newest cluster sample if there is one (a `ClusterSample`), then one per live node (a
//! `RecordedNode`, by name). The counts let a reader tell a complete checkpoint from a cut-short
//! one; a checkpoint written before cluster state was recorded counts 0 of both.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use ksim_proto::ksim::trace::v1 as pb;
use pb::trace_record::Record;
use prost::Message;

use super::files::{CHECKPOINT_FILE, sync_dir, tmp_path};
use super::frame::{self, FrameReader};
use super::{Base, LogError};

/// Name of the checkpoint file in the log directory.
pub(crate) const FILE_NAME: &str = CHECKPOINT_FILE;
/// Name a damaged checkpoint is moved to, so it is kept for inspection but no longer used.
pub(crate) const CORRUPT_NAME: &str = "checkpoint.zst.corrupt";
const VERSION: u32 = 1;

#[derive(Clone, PartialEq, Message)]
struct Header {
    #[prost(uint32, tag = "1")]
    version: u32,
    #[prost(int64, optional, tag = "2")]
    as_of_ms: Option<i64>,
    #[prost(uint64, tag = "3")]
    last_seq: u64,
    #[prost(uint64, tag = "4")]
    objects: u64,
    #[prost(uint64, tag = "5")]
    lifecycles: u64,
    #[prost(uint64, tag = "6")]
    samples: u64,
    #[prost(uint64, tag = "7")]
    nodes: u64,
}

/// What the log remembers about the checkpoint between compactions.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CheckpointInfo {
    /// Newest entry timestamp folded in.
    pub as_of_ms: Option<i64>,
    /// Highest segment number folded in; segments up to it are leftovers of a compaction that
    /// crashed before deleting them.
    pub last_seq: u64,
    /// Size of the file.
    pub bytes: u64,
}

/// Objects are keyed without their version, so an apply through another API version replaces.
type ObjectKey = (String, String, String, String);
/// Lifecycles are keyed by owner kind (with group), owner namespace and name, and pod name.
type LifecycleKey = (String, String, String, String, String);

/// Folded state. Bounded by the live objects and open lifecycles, not by the events seen.
#[derive(Debug, Default)]
pub(crate) struct State {
    objects: BTreeMap<ObjectKey, pb::TraceObject>,
    lifecycles: BTreeMap<LifecycleKey, pb::PodLifecycle>,
    sample: Option<pb::ClusterSample>,
    nodes: BTreeMap<String, pb::RecordedNode>,
    pub as_of_ms: Option<i64>,
    pub last_seq: u64,
}

fn object_key(o: &pb::TraceObject) -> ObjectKey {
    let (group, kind) = o
        .gvk
        .as_ref()
        .map(|g| (g.group.clone(), g.kind.clone()))
        .unwrap_or_default();
    (group, kind, o.namespace.clone(), o.name.clone())
}

fn lifecycle_key(l: &pb::PodLifecycle) -> LifecycleKey {
    let (group, kind) = l
        .owner_gvk
        .as_ref()
        .map(|g| (g.group.clone(), g.kind.clone()))
        .unwrap_or_default();
    (
        group,
        kind,
        l.owner_namespace.clone(),
        l.owner_name.clone(),
        l.pod_name.clone(),
    )
}

impl State {
    /// Applies one log record: an applied object replaces, a deleted one removes (applies in an
    /// event come before its deletes), an open lifecycle is added, an ended one removes.
    pub(crate) fn apply(&mut self, record: pb::TraceRecord) {
        match record.record {
            Some(Record::Event(event)) => {
                for obj in event.applied {
                    self.objects.insert(object_key(&obj), obj);
                }
                for obj in &event.deleted {
                    self.objects.remove(&object_key(obj));
                }
            }
            Some(Record::Lifecycle(lifecycle)) => {
                let key = lifecycle_key(&lifecycle);
                if lifecycle.end_ms == 0 {
                    self.lifecycles.insert(key, lifecycle);
                } else {
                    self.lifecycles.remove(&key);
                }
            }
            Some(Record::Sample(sample)) => self.sample = Some(sample),
            Some(Record::Node(node)) => {
                if node.deleted_ms == 0 {
                    self.nodes.insert(node.name.clone(), node);
                } else {
                    self.nodes.remove(&node.name);
                }
            }
            // Usage is not state: a checkpoint keeps none.
            Some(Record::Usage(_) | Record::Header(_) | Record::Trailer(_)) | None => {}
        }
    }
}

/// The callbacks [`read`] hands a checkpoint's records to, in file order.
struct Sink<'a> {
    object: &'a mut dyn FnMut(pb::TraceObject),
    lifecycle: &'a mut dyn FnMut(pb::PodLifecycle),
    sample: &'a mut dyn FnMut(pb::ClusterSample),
    node: &'a mut dyn FnMut(pb::RecordedNode),
}

/// Reads a checkpoint stream, handing each record to the sink in file order.
fn read(stream: impl Read, path: &Path, sink: Sink<'_>) -> Result<Header, LogError> {
    let decoder = zstd::Decoder::new(stream).map_err(LogError::io("decompressing", path))?;
    let mut frames = FrameReader::new(BufReader::with_capacity(128 << 10, decoder));
    let corrupt = |offset, reason: String| LogError::corrupt(path, offset, reason);
    let next = |frames: &mut FrameReader<_>| {
        frames
            .next_frame()
            .map_err(|fault| fault.into_error(path))
            .map(|f| f.map(|f| (f.offset, f.payload.to_vec())))
    };
    let (_, payload) =
        next(&mut frames)?.ok_or_else(|| corrupt(0, "checkpoint is empty".into()))?;
    let header = Header::decode(payload.as_slice())
        .map_err(|e| corrupt(0, format!("undecodable checkpoint header: {e}")))?;
    if header.version != VERSION {
        return Err(corrupt(
            0,
            format!("unsupported checkpoint version {}", header.version),
        ));
    }
    let missing = |what: &str, i: u64, total: u64| {
        format!("checkpoint cut short: {what} {i} of {total} missing")
    };
    let mut end = 0;
    for i in 0..header.objects {
        let (offset, payload) =
            next(&mut frames)?.ok_or_else(|| corrupt(end, missing("object", i, header.objects)))?;
        let obj = pb::TraceObject::decode(payload.as_slice())
            .map_err(|e| corrupt(offset, format!("undecodable object: {e}")))?;
        (sink.object)(obj);
        end = offset;
    }
    for i in 0..header.lifecycles {
        let (offset, payload) = next(&mut frames)?
            .ok_or_else(|| corrupt(end, missing("lifecycle", i, header.lifecycles)))?;
        let lifecycle = pb::PodLifecycle::decode(payload.as_slice())
            .map_err(|e| corrupt(offset, format!("undecodable lifecycle: {e}")))?;
        (sink.lifecycle)(lifecycle);
        end = offset;
    }
    for i in 0..header.samples {
        let (offset, payload) = next(&mut frames)?
            .ok_or_else(|| corrupt(end, missing("cluster sample", i, header.samples)))?;
        let sample = pb::ClusterSample::decode(payload.as_slice())
            .map_err(|e| corrupt(offset, format!("undecodable cluster sample: {e}")))?;
        (sink.sample)(sample);
        end = offset;
    }
    for i in 0..header.nodes {
        let (offset, payload) =
            next(&mut frames)?.ok_or_else(|| corrupt(end, missing("node", i, header.nodes)))?;
        let node = pb::RecordedNode::decode(payload.as_slice())
            .map_err(|e| corrupt(offset, format!("undecodable node: {e}")))?;
        (sink.node)(node);
        end = offset;
    }
    if let Some((offset, _)) = next(&mut frames)? {
        return Err(corrupt(
            offset,
            "unexpected data after the last record".into(),
        ));
    }
    Ok(header)
}

/// Reads a whole checkpoint into a `Base`.
pub(crate) fn read_base(stream: impl Read, path: &Path) -> Result<Base, LogError> {
    let mut base = Base::default();
    let header = read(
        stream,
        path,
        Sink {
            object: &mut |o| base.objects.push(o),
            lifecycle: &mut |l| base.open_lifecycles.push(l),
            sample: &mut |s| base.sample = Some(s),
            node: &mut |n| base.nodes.push(n),
        },
    )?;
    base.as_of_ms = header.as_of_ms;
    Ok(base)
}

/// Reads a whole checkpoint into foldable state.
pub(crate) fn load(path: &Path) -> Result<State, LogError> {
    let file = File::open(path).map_err(LogError::io("opening", path))?;
    let mut state = State::default();
    let mut objects = Vec::new();
    let mut lifecycles = Vec::new();
    let mut nodes = Vec::new();
    let header = read(
        file,
        path,
        Sink {
            object: &mut |o| objects.push(o),
            lifecycle: &mut |l| lifecycles.push(l),
            sample: &mut |s| state.sample = Some(s),
            node: &mut |n| nodes.push(n),
        },
    )?;
    state.nodes = nodes.into_iter().map(|n| (n.name.clone(), n)).collect();
    // Files are written in key order, so these collect without re-sorting work.
    state.objects = objects.into_iter().map(|o| (object_key(&o), o)).collect();
    state.lifecycles = lifecycles
        .into_iter()
        .map(|l| (lifecycle_key(&l), l))
        .collect();
    state.as_of_ms = header.as_of_ms;
    state.last_seq = header.last_seq;
    Ok(state)
}

/// Reads a checkpoint through without keeping its records, to check it and learn its header.
pub(crate) fn verify(path: &Path) -> Result<CheckpointInfo, LogError> {
    let file = File::open(path).map_err(LogError::io("opening", path))?;
    let bytes = file.metadata().map_err(LogError::io("stat", path))?.len();
    let header = read(
        file,
        path,
        Sink {
            object: &mut |_| {},
            lifecycle: &mut |_| {},
            sample: &mut |_| {},
            node: &mut |_| {},
        },
    )?;
    Ok(CheckpointInfo {
        as_of_ms: header.as_of_ms,
        last_seq: header.last_seq,
        bytes,
    })
}

/// Moves a damaged checkpoint aside; returns where it went.
pub(crate) fn quarantine(dir: &Path) -> Result<PathBuf, LogError> {
    let to = dir.join(CORRUPT_NAME);
    fs::rename(dir.join(FILE_NAME), &to).map_err(LogError::io("moving aside", &to))?;
    Ok(to)
}

/// Writes `state` as the checkpoint atomically: temporary file, fsync, rename, fsync directory.
pub(crate) fn write(dir: &Path, state: State, level: i32) -> Result<CheckpointInfo, LogError> {
    let path = dir.join(FILE_NAME);
    let tmp = tmp_path(&path);
    let info = match write_tmp(&tmp, state, level) {
        Ok(info) => info,
        Err(e) => {
            // Best effort: a leftover is removed on the next open anyway.
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    fs::rename(&tmp, &path).map_err(LogError::io("renaming into place", &path))?;
    sync_dir(dir)?;
    Ok(info)
}

fn write_tmp(tmp: &Path, state: State, level: i32) -> Result<CheckpointInfo, LogError> {
    let err = LogError::io("writing", tmp);
    let file = File::create(tmp).map_err(LogError::io("creating", tmp))?;
    let mut encoder = zstd::Encoder::new(BufWriter::with_capacity(256 << 10, file), level)
        .and_then(|mut e| e.include_checksum(true).map(|()| e))
        .map_err(LogError::io("starting compression of", tmp))?;
    let ts = state.as_of_ms.unwrap_or(0);
    let header = Header {
        version: VERSION,
        as_of_ms: state.as_of_ms,
        last_seq: state.last_seq,
        objects: state.objects.len() as u64,
        lifecycles: state.lifecycles.len() as u64,
        samples: u64::from(state.sample.is_some()),
        nodes: state.nodes.len() as u64,
    };
    let mut buf = Vec::with_capacity(64 << 10);
    frame::encode(&mut buf, ts, &header)?;
    let mut flush = |buf: &mut Vec<u8>, force: bool| -> Result<(), LogError> {
        if force || buf.len() >= 64 << 10 {
            encoder
                .write_all(buf)
                .map_err(LogError::io("writing", tmp))?;
            buf.clear();
        }
        Ok(())
    };
    for obj in state.objects.values() {
        frame::encode(&mut buf, ts, obj)?;
        flush(&mut buf, false)?;
    }
    for lifecycle in state.lifecycles.values() {
        frame::encode(&mut buf, ts, lifecycle)?;
        flush(&mut buf, false)?;
    }
    if let Some(sample) = &state.sample {
        frame::encode(&mut buf, ts, sample)?;
    }
    for node in state.nodes.values() {
        frame::encode(&mut buf, ts, node)?;
        flush(&mut buf, false)?;
    }
    flush(&mut buf, true)?;
    let file = encoder
        .finish()
        .and_then(|mut w| w.flush().map(|()| w))
        .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
        .map_err(err)?;
    file.sync_all().map_err(LogError::io("syncing", tmp))?;
    let bytes = file.metadata().map_err(LogError::io("stat", tmp))?.len();
    Ok(CheckpointInfo {
        as_of_ms: state.as_of_ms,
        last_seq: state.last_seq,
        bytes,
    })
}
