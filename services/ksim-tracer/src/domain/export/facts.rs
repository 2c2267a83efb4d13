//! What the scan learns of a window, as items to sort. The scan meets objects, owners and pod
//! lifetimes in log order; the cut needs them joined by key. Sorting them by key brings a key's
//! facts together, so one walk over the sorted facts does the join.
//!
//! The join needs a key's items together, not the keys in name order: facts and occurrences
//! sort by a hash of their key first, so most comparisons end before comparing names.

use std::cmp::Ordering;

use ksim_proto::ksim::trace::v1 as pb;
use xxhash_rust::xxh3::Xxh3;

use super::sorting::{DecodeError, Fields, SortItem, put_message, put_str, put_u64};
use crate::domain::key::ObjectKey;

/// Where an object was met: in the state at the window start (its index among those objects)
/// or in the window (its position among the window's applied and deleted objects, in log order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum At {
    Start(u64),
    Window(u64),
}

/// One thing the window says about an object key.
#[derive(Debug)]
pub struct Fact {
    pub key: ObjectKey,
    pub about: About,
    key_hash: u64,
}

impl Fact {
    pub fn new(key: ObjectKey, about: About) -> Self {
        Self {
            key_hash: key_hash(&key),
            key,
            about,
        }
    }
}

/// Sorted within a key in this order: whether the key is exported is known before anything
/// that depends on it.
#[derive(Debug)]
pub enum About {
    /// The key is exported: kept by the filter, and in the window or at its start.
    Exported,
    /// A recorded lifetime of a pod the key owns; `seq` is the record's place in the log, so a
    /// pod's records sort oldest first.
    Lifetime {
        seq: u64,
        lifecycle: pb::PodLifecycle,
    },
    /// `object`, met `at`, names the key as its owner (or the key is the cluster-scoped reading
    /// of the owner it names).
    OwnerOf { at: At, object: ObjectKey },
}

impl About {
    fn rank(&self) -> u64 {
        match self {
            About::Exported => 0,
            About::Lifetime { .. } => 1,
            About::OwnerOf { .. } => 2,
        }
    }
}

impl Ord for Fact {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.key_hash, &self.key)
            .cmp(&(other.key_hash, &other.key))
            .then_with(|| match (&self.about, &other.about) {
                (
                    About::Lifetime { seq, lifecycle },
                    About::Lifetime {
                        seq: other_seq,
                        lifecycle: other_lifecycle,
                    },
                ) => (&lifecycle.pod_name, seq).cmp(&(&other_lifecycle.pod_name, other_seq)),
                (
                    About::OwnerOf { at, object },
                    About::OwnerOf {
                        at: other_at,
                        object: other_object,
                    },
                ) => (at, object).cmp(&(other_at, other_object)),
                (about, other) => about.rank().cmp(&other.rank()),
            })
    }
}

impl PartialOrd for Fact {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Fact {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Fact {}

impl SortItem for Fact {
    fn encode(&self, out: &mut Vec<u8>) {
        put_key(out, &self.key);
        put_u64(out, self.about.rank());
        match &self.about {
            About::Exported => {}
            About::Lifetime { seq, lifecycle } => {
                put_u64(out, *seq);
                put_message(out, lifecycle);
            }
            About::OwnerOf { at, object } => {
                put_at(out, *at);
                put_key(out, object);
            }
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut fields = Fields::new(bytes);
        let key = read_key(&mut fields)?;
        let about = match fields.u64()? {
            0 => About::Exported,
            1 => About::Lifetime {
                seq: fields.u64()?,
                lifecycle: fields.message()?,
            },
            2 => About::OwnerOf {
                at: read_at(&mut fields)?,
                object: read_key(&mut fields)?,
            },
            tag => return Err(DecodeError::UnknownTag(tag)),
        };
        fields.end()?;
        Ok(Fact::new(key, about))
    }

    fn supersedes(&self, earlier: &Self) -> bool {
        self.key == earlier.key
            && match (&self.about, &earlier.about) {
                (About::Exported, About::Exported) => true,
                // Sorted after it, the record of the same pod is the later one, which wins.
                (
                    About::Lifetime { lifecycle, .. },
                    About::Lifetime {
                        lifecycle: before, ..
                    },
                ) => lifecycle.pod_name == before.pod_name,
                (
                    About::OwnerOf { at, object },
                    About::OwnerOf {
                        at: before,
                        object: of,
                    },
                ) => at == before && object == of,
                _ => false,
            }
    }
}

/// An object of the window by key, so that a delete can follow its apply out of the export.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Occurrence {
    // First, so the derived order compares it first.
    key_hash: u64,
    pub key: ObjectKey,
    pub position: u64,
    pub what: Occurred,
}

impl Occurrence {
    pub fn new(key: ObjectKey, position: u64, what: Occurred) -> Self {
        Self {
            key_hash: key_hash(&key),
            key,
            position,
            what,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Occurred {
    /// Applied, and left out because its owner is exported.
    DroppedApply,
    Deleted,
}

impl SortItem for Occurrence {
    fn encode(&self, out: &mut Vec<u8>) {
        put_key(out, &self.key);
        put_u64(out, self.position);
        put_u64(out, self.what as u64);
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut fields = Fields::new(bytes);
        let key = read_key(&mut fields)?;
        let position = fields.u64()?;
        let what = match fields.u64()? {
            0 => Occurred::DroppedApply,
            1 => Occurred::Deleted,
            tag => return Err(DecodeError::UnknownTag(tag)),
        };
        fields.end()?;
        Ok(Occurrence::new(key, position, what))
    }
}

/// An exported lifetime, in the order replay numbers them: by owner, spec hash, start and pod.
#[derive(Debug)]
pub struct Launch {
    pub owner: ObjectKey,
    pub lifecycle: pb::PodLifecycle,
}

impl Launch {
    pub fn new(lifecycle: pb::PodLifecycle) -> Self {
        Self {
            owner: lifetime_owner(&lifecycle),
            lifecycle,
        }
    }
}

impl Ord for Launch {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (&self.lifecycle, &other.lifecycle);
        (&self.owner, a.pod_spec_hash, a.start_ms, &a.pod_name).cmp(&(
            &other.owner,
            b.pod_spec_hash,
            b.start_ms,
            &b.pod_name,
        ))
    }
}

impl PartialOrd for Launch {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Launch {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Launch {}

impl SortItem for Launch {
    fn encode(&self, out: &mut Vec<u8>) {
        // The owner is read off the lifetime again.
        put_message(out, &self.lifecycle);
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut fields = Fields::new(bytes);
        let lifecycle = fields.message()?;
        fields.end()?;
        Ok(Launch::new(lifecycle))
    }
}

/// The object a pod lifetime belongs to.
pub fn lifetime_owner(lifecycle: &pb::PodLifecycle) -> ObjectKey {
    let gvk = lifecycle.owner_gvk.as_ref();
    ObjectKey {
        group: gvk.map(|g| g.group.clone()).unwrap_or_default(),
        kind: gvk.map(|g| g.kind.clone()).unwrap_or_default(),
        namespace: lifecycle.owner_namespace.clone(),
        name: lifecycle.owner_name.clone(),
    }
}

fn key_hash(key: &ObjectKey) -> u64 {
    let mut hash = Xxh3::new();
    for part in [&key.group, &key.kind, &key.namespace, &key.name] {
        // Each part's length first, so no two keys feed the same bytes.
        hash.update(&(part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    hash.digest()
}

fn put_key(out: &mut Vec<u8>, key: &ObjectKey) {
    for part in [&key.group, &key.kind, &key.namespace, &key.name] {
        put_str(out, part);
    }
}

fn read_key(fields: &mut Fields<'_>) -> Result<ObjectKey, DecodeError> {
    Ok(ObjectKey {
        group: fields.str()?,
        kind: fields.str()?,
        namespace: fields.str()?,
        name: fields.str()?,
    })
}

fn put_at(out: &mut Vec<u8>, at: At) {
    let (tag, index) = match at {
        At::Start(index) => (0, index),
        At::Window(position) => (1, position),
    };
    put_u64(out, tag);
    put_u64(out, index);
}

fn read_at(fields: &mut Fields<'_>) -> Result<At, DecodeError> {
    let tag = fields.u64()?;
    let index = fields.u64()?;
    match tag {
        0 => Ok(At::Start(index)),
        1 => Ok(At::Window(index)),
        tag => Err(DecodeError::UnknownTag(tag)),
    }
}
