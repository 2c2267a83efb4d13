//! Blobs kept in ConfigMaps of the experiment's namespace: the bundle going to a Job's pods and
//! each run's report coming back. The cluster's own API carries them, so a fan-out needs no
//! object store, no shared disk and no account beyond the namespace's RBAC.
//!
//! A blob is written as pieces of at most [`bundle::CHUNK_BYTES`], one ConfigMap each, every
//! piece labelled with the experiment and the blob, and annotated with the number of pieces and
//! the whole blob's digest; a reader takes a blob only when every piece of one digest is there
//! and they join to it.

use std::collections::BTreeMap;

use k8s_openapi::{
    ByteString,
    api::core::v1::ConfigMap,
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use kube::{Api, api::ListParams, api::PostParams};

use crate::bundle;

/// A ConfigMap the store could not write or list.
#[derive(Debug, thiserror::Error)]
#[error("{action} {what}: {source}")]
pub struct StoreError {
    action: &'static str,
    what: String,
    #[source]
    source: kube::Error,
}

impl StoreError {
    fn of(action: &'static str, what: String) -> impl FnOnce(kube::Error) -> Self {
        move |source| Self {
            action,
            what,
            source,
        }
    }
}

/// Every object of an experiment carries it: `ksim.dev/experiment=<id>`.
pub const EXPERIMENT_LABEL: &str = "ksim.dev/experiment";
/// What a blob is: `bundle`, or `report-<run index>`.
pub const BLOB_LABEL: &str = "ksim.dev/blob";

/// The bundle's blob kind.
pub const BUNDLE_BLOB: &str = "bundle";

/// A run's report's blob kind.
pub fn report_blob(run: u32) -> String {
    format!("report-{run}")
}
const PIECES_ANNOTATION: &str = "ksim.dev/pieces";
const DIGEST_ANNOTATION: &str = "ksim.dev/digest";
const PIECE_KEY: &str = "piece";

/// The ConfigMaps that hold `blob` as `<name>-<n>`.
pub fn pieces(
    experiment: &str,
    name: &str,
    blob_kind: &str,
    blob: &[u8],
    owner: Option<&OwnerReference>,
) -> Vec<ConfigMap> {
    let digest = bundle::digest(blob);
    let chunks = bundle::chunks(blob);
    let count = chunks.len().to_string();
    chunks
        .iter()
        .enumerate()
        .map(|(n, piece)| ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("{name}-{n}")),
                labels: Some(BTreeMap::from([
                    ("app.kubernetes.io/name".to_owned(), "ksim".to_owned()),
                    (EXPERIMENT_LABEL.to_owned(), experiment.to_owned()),
                    (BLOB_LABEL.to_owned(), blob_kind.to_owned()),
                ])),
                annotations: Some(BTreeMap::from([
                    (PIECES_ANNOTATION.to_owned(), count.clone()),
                    (DIGEST_ANNOTATION.to_owned(), digest.clone()),
                ])),
                owner_references: owner.map(|owner| vec![owner.clone()]),
                ..ObjectMeta::default()
            },
            binary_data: Some(BTreeMap::from([(
                PIECE_KEY.to_owned(),
                ByteString(piece.to_vec()),
            )])),
            immutable: Some(true),
            ..ConfigMap::default()
        })
        .collect()
}

/// Creates every piece; one left from an earlier attempt of the same run is replaced.
pub async fn put(api: &Api<ConfigMap>, pieces: &[ConfigMap]) -> Result<(), StoreError> {
    for piece in pieces {
        let name = piece.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), piece).await {
            Ok(_) => {}
            Err(error) if ksim_kube::is_conflict(&error) => {
                // Immutable: an earlier attempt's piece is deleted, not overwritten.
                api.delete(&name, &Default::default())
                    .await
                    .map_err(StoreError::of("replacing", format!("ConfigMap {name}")))?;
                api.create(&PostParams::default(), piece)
                    .await
                    .map_err(StoreError::of("creating", format!("ConfigMap {name}")))?;
            }
            Err(error) => {
                return Err(StoreError::of("creating", format!("ConfigMap {name}"))(
                    error,
                ));
            }
        }
    }
    Ok(())
}

/// Which of an experiment's blobs to read.
#[derive(Debug, Clone, Copy)]
pub enum Blobs {
    /// The bundle (a run's pod).
    Bundle,
    /// The reports (the CLI, every few seconds: never the bundle's pieces again).
    Reports,
}

/// Every complete blob of `experiment` among its ConfigMaps, by blob kind.
pub async fn complete(
    api: &Api<ConfigMap>,
    experiment: &str,
    which: Blobs,
) -> Result<BTreeMap<String, Vec<u8>>, StoreError> {
    let kind = match which {
        Blobs::Bundle => "=",
        Blobs::Reports => "!=",
    };
    let selector = format!("{EXPERIMENT_LABEL}={experiment},{BLOB_LABEL}{kind}{BUNDLE_BLOB}");
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(StoreError::of(
            "listing",
            format!("the ConfigMaps of experiment {experiment}"),
        ))?;
    Ok(join(&list.items))
}

/// The blobs whose pieces are all among `maps`, each joined and checked against its digest.
pub fn join(maps: &[ConfigMap]) -> BTreeMap<String, Vec<u8>> {
    /// One blob's pieces so far: how many it has, and each by its number.
    type Pieces<'a> = (usize, BTreeMap<usize, &'a [u8]>);
    // kind -> digest -> pieces
    let mut found: BTreeMap<&str, BTreeMap<&str, Pieces<'_>>> = BTreeMap::new();
    for map in maps {
        let meta = &map.metadata;
        let label = |key: &str| meta.labels.as_ref()?.get(key).map(String::as_str);
        let annotation = |key: &str| meta.annotations.as_ref()?.get(key).map(String::as_str);
        let (Some(kind), Some(digest), Some(count), Some(name), Some(piece)) = (
            label(BLOB_LABEL),
            annotation(DIGEST_ANNOTATION),
            annotation(PIECES_ANNOTATION).and_then(|n| n.parse::<usize>().ok()),
            meta.name.as_deref(),
            map.binary_data
                .as_ref()
                .and_then(|data| data.get(PIECE_KEY)),
        ) else {
            continue;
        };
        let Some(n) = name
            .rsplit_once('-')
            .and_then(|(_, n)| n.parse::<usize>().ok())
        else {
            continue;
        };
        let entry = found
            .entry(kind)
            .or_default()
            .entry(digest)
            .or_insert((count, BTreeMap::new()));
        if entry.0 == count && n < count {
            entry.1.insert(n, piece.0.as_slice());
        }
    }
    let mut blobs = BTreeMap::new();
    for (kind, digests) in found {
        for (digest, (count, pieces)) in digests {
            if pieces.len() != count {
                continue;
            }
            let blob: Vec<u8> = pieces.into_values().flatten().copied().collect();
            if bundle::digest(&blob) == digest {
                blobs.insert(kind.to_owned(), blob);
            }
        }
    }
    blobs
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_is_taken_only_when_every_piece_of_one_digest_is_there() {
        let blob: Vec<u8> = (0..bundle::CHUNK_BYTES + 10)
            .map(|i| (i % 7) as u8)
            .collect();
        let maps = pieces("exp-1", "ksim-exp-1-report-3", "report-3", &blob, None);
        assert_eq!(maps.len(), 2);
        assert_eq!(join(&maps)["report-3"], blob);
        // Half a blob is not a blob.
        assert!(join(&maps[..1]).is_empty());
        // A piece of an earlier attempt (another digest) is not joined with this one's.
        let earlier = pieces("exp-1", "ksim-exp-1-report-3", "report-3", b"earlier", None);
        let mixed = [earlier[0].clone(), maps[1].clone()];
        assert_eq!(join(&mixed)["report-3"], b"earlier");
        // A piece whose bytes were changed fails the digest.
        let mut tampered = maps.clone();
        tampered[1]
            .binary_data
            .as_mut()
            .unwrap()
            .get_mut(PIECE_KEY)
            .unwrap()
            .0[0] ^= 1;
        assert!(join(&tampered).is_empty());
    }
}
