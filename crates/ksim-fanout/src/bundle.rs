//! An experiment and every file it names, as one blob a Job's pods can fetch through the
//! cluster's API: the experiment file's bytes unchanged, then each named file under the path
//! the experiment writes for it. Also the chunking that fits a blob into ConfigMaps.
//!
//! The framing is length-prefixed (names are UTF-8, contents any bytes), compressed with zstd;
//! a blob read back is untrusted, so every length is checked against what is left and a total.

use std::collections::BTreeMap;

/// The first bytes of a bundle (before compression): what it is and the framing's version.
const MAGIC: &[u8] = b"ksim-experiment-bundle/1\n";

/// The most a bundle or report unpacks to: a trace the driver would take in one request
/// (16 MiB by default) with room for the rest; a larger trace belongs in the tracer store.
pub const MAX_UNPACKED_BYTES: usize = 256 << 20;

/// An experiment file and the files it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The experiment file's own name (its last path component), for messages.
    pub name: String,
    /// The experiment file as the user wrote it.
    pub experiment: Vec<u8>,
    /// Each file the experiment names, keyed by the path as written in it.
    pub files: BTreeMap<String, Vec<u8>>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BundleError {
    #[error("not an experiment bundle (wrong header)")]
    Header,
    #[error("the bundle is cut short at byte {0}")]
    Truncated(usize),
    #[error("the bundle unpacks past its limit of {MAX_UNPACKED_BYTES} bytes")]
    TooLarge,
    #[error("a name in the bundle is not UTF-8")]
    Name,
    #[error("the bundle names {0:?} twice")]
    Duplicate(String),
    #[error("decompressing the bundle: {0}")]
    Zstd(String),
}

impl Bundle {
    /// The framed, compressed bytes.
    pub fn encode(&self) -> std::io::Result<Vec<u8>> {
        let mut raw = Vec::with_capacity(
            MAGIC.len() + self.experiment.len() + self.files.values().map(Vec::len).sum::<usize>(),
        );
        raw.extend_from_slice(MAGIC);
        put(&mut raw, self.name.as_bytes());
        put(&mut raw, &self.experiment);
        put(&mut raw, &(self.files.len() as u64).to_le_bytes());
        for (name, content) in &self.files {
            put(&mut raw, name.as_bytes());
            put(&mut raw, content);
        }
        compress(&raw)
    }

    /// A bundle read back from [`Bundle::encode`]'s bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, BundleError> {
        let raw = decompress(bytes)?;
        let rest = raw.strip_prefix(MAGIC).ok_or(BundleError::Header)?;
        let mut reader = Reader {
            rest,
            at: MAGIC.len(),
        };
        let name = reader.text()?;
        let experiment = reader.bytes()?.to_vec();
        let count = reader.bytes()?;
        let count = <[u8; 8]>::try_from(count)
            .map(u64::from_le_bytes)
            .map_err(|_| BundleError::Truncated(reader.at))?;
        let mut files = BTreeMap::new();
        for _ in 0..count {
            let name = reader.text()?;
            let content = reader.bytes()?.to_vec();
            if files.insert(name.clone(), content).is_some() {
                return Err(BundleError::Duplicate(name));
            }
        }
        if !reader.rest.is_empty() {
            return Err(BundleError::Truncated(reader.at));
        }
        Ok(Self {
            name,
            experiment,
            files,
        })
    }
}

/// zstd at its default level: traces compress well, and the pods decompress once.
pub fn compress(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd::bulk::compress(raw, 0)
}

/// Bytes [`compress`] made, refused past [`MAX_UNPACKED_BYTES`].
pub fn decompress(bytes: &[u8]) -> Result<Vec<u8>, BundleError> {
    use std::io::Read;
    let decoder = zstd::stream::read::Decoder::new(bytes)
        .map_err(|error| BundleError::Zstd(error.to_string()))?;
    let mut raw = Vec::new();
    decoder
        .take(MAX_UNPACKED_BYTES as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(|error| BundleError::Zstd(error.to_string()))?;
    if raw.len() > MAX_UNPACKED_BYTES {
        return Err(BundleError::TooLarge);
    }
    Ok(raw)
}

/// A field: its length (8 bytes, little-endian), then its bytes.
fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    rest: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self) -> Result<&'a [u8], BundleError> {
        let (len, rest) = self
            .rest
            .split_first_chunk::<8>()
            .ok_or(BundleError::Truncated(self.at))?;
        let len = usize::try_from(u64::from_le_bytes(*len))
            .ok()
            .filter(|len| *len <= rest.len())
            .ok_or(BundleError::Truncated(self.at))?;
        let (field, rest) = rest.split_at(len);
        self.rest = rest;
        self.at += 8 + len;
        Ok(field)
    }

    fn text(&mut self) -> Result<String, BundleError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| BundleError::Name)
    }
}

/// The largest piece of a blob one ConfigMap holds: the apiserver refuses a ConfigMap whose
/// data passes 1 MiB, and the object's metadata needs room too.
pub const CHUNK_BYTES: usize = 900 << 10;

/// `blob` in pieces of at most [`CHUNK_BYTES`] (at least one piece, even when empty).
pub fn chunks(blob: &[u8]) -> Vec<&[u8]> {
    if blob.is_empty() {
        return vec![blob];
    }
    blob.chunks(CHUNK_BYTES).collect()
}

/// A stable digest of a blob, in hex: the pieces of one blob carry it, so pieces of another
/// (an earlier attempt's) are never joined with them.
pub fn digest(blob: &[u8]) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(blob))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample() -> Bundle {
        Bundle {
            name: "day.yaml".to_owned(),
            experiment: b"trace: ../day.ktrace\nvariants: [{name: a}]\n".to_vec(),
            files: BTreeMap::from([
                (
                    "../day.ktrace".to_owned(),
                    (0..=255u8).cycle().take(5000).collect(),
                ),
                ("empty.yaml".to_owned(), Vec::new()),
            ]),
        }
    }

    #[test]
    fn a_bundle_reads_back_as_written() {
        let bundle = sample();
        assert_eq!(Bundle::decode(&bundle.encode().unwrap()).unwrap(), bundle);
    }

    #[test]
    fn a_cut_or_foreign_blob_is_refused_not_misread() {
        let raw = decompress(&sample().encode().unwrap()).unwrap();
        for cut in [raw.len() - 1, raw.len() - 300, MAGIC.len() + 3] {
            let error = Bundle::decode(&compress(&raw[..cut]).unwrap()).unwrap_err();
            assert!(matches!(error, BundleError::Truncated(_)), "{cut}: {error}");
        }
        let mut longer = raw.clone();
        longer.push(0);
        assert!(matches!(
            Bundle::decode(&compress(&longer).unwrap()),
            Err(BundleError::Truncated(_))
        ));
        assert_eq!(
            Bundle::decode(&compress(b"something else").unwrap()),
            Err(BundleError::Header)
        );
        assert!(matches!(
            Bundle::decode(b"not zstd"),
            Err(BundleError::Zstd(_))
        ));
        // A length that claims more than is left is refused, not allocated.
        let mut lying = MAGIC.to_vec();
        lying.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            Bundle::decode(&compress(&lying).unwrap()),
            Err(BundleError::Truncated(_))
        ));
    }

    #[test]
    fn chunks_join_back_to_the_blob_and_each_fits_a_config_map() {
        let blob: Vec<u8> = (0..CHUNK_BYTES * 2 + 7).map(|i| (i % 251) as u8).collect();
        let pieces = chunks(&blob);
        assert_eq!(pieces.len(), 3);
        assert!(pieces.iter().all(|piece| piece.len() <= CHUNK_BYTES));
        assert_eq!(pieces.concat(), blob);
        assert_eq!(chunks(b"").len(), 1);
        assert_ne!(digest(&blob), digest(&blob[1..]));
    }
}
