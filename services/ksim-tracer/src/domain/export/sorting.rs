//! Sorting that need not fit in memory. A window can hold millions of objects and pod lifetimes;
//! the export learns them in log order and needs them by owner, so it sorts them. The domain
//! only pushes items and reads them back in order: the exporter's sorter spills to disk (see
//! `crate::spill`), tests use [`InMemory`].

use std::{convert::Infallible, fmt::Debug};

use prost::{
    Message,
    bytes::Buf,
    encoding::{decode_varint, encode_varint},
};
use thiserror::Error;

/// Something a [`Sorter`] can hold: ordered, and written as bytes when it is spilled.
pub trait SortItem: Ord + Debug + Sized {
    /// Appends the item to `out`; [`SortItem::decode`] reads it back from exactly those bytes.
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError>;

    /// Whether this item, sorted right after `earlier`, makes `earlier` redundant. A sorter may
    /// then drop `earlier`, for fewer runs; readers cannot count on it.
    fn supersedes(&self, _earlier: &Self) -> bool {
        false
    }
}

/// Collects items, then yields them in order. Equal items come back in the order they were
/// pushed, so a sorter's output does not depend on where it cut its runs.
pub trait Sorter<T> {
    type Error;
    type Sorted: Iterator<Item = Result<T, Self::Error>> + Debug;

    fn push(&mut self, item: T) -> Result<(), Self::Error>;
    fn sorted(self) -> Result<Self::Sorted, Self::Error>;
}

/// Makes sorters: one per kind of item the export sorts.
pub trait Sorting {
    type Error;
    type Sorter<T: SortItem>: Sorter<T, Error = Self::Error> + Debug;

    fn sorter<T: SortItem>(&self) -> Self::Sorter<T>;
}

/// The sorted items of a [`Sorting`]'s sorter.
pub type Sorted<S, T> = <<S as Sorting>::Sorter<T> as Sorter<T>>::Sorted;

/// Sorts in memory: for tests and small inputs, where the whole input fits.
#[derive(Debug, Clone, Copy, Default)]
pub struct InMemory;

#[derive(Debug)]
pub struct InMemorySorter<T>(Vec<T>);

impl Sorting for InMemory {
    type Error = Infallible;
    type Sorter<T: SortItem> = InMemorySorter<T>;

    fn sorter<T: SortItem>(&self) -> InMemorySorter<T> {
        InMemorySorter(Vec::new())
    }
}

impl<T: Ord + Debug> Sorter<T> for InMemorySorter<T> {
    type Error = Infallible;
    type Sorted = InMemorySorted<T>;

    fn push(&mut self, item: T) -> Result<(), Infallible> {
        self.0.push(item);
        Ok(())
    }

    fn sorted(mut self) -> Result<InMemorySorted<T>, Infallible> {
        // Stable, as the trait promises.
        self.0.sort();
        Ok(InMemorySorted(self.0.into_iter()))
    }
}

#[derive(Debug)]
pub struct InMemorySorted<T>(std::vec::IntoIter<T>);

impl<T> Iterator for InMemorySorted<T> {
    type Item = Result<T, Infallible>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(Ok)
    }
}

/// Numbers sort as themselves (the cut sorts window positions).
impl SortItem for u64 {
    fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, *self);
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut fields = Fields::new(bytes);
        let value = fields.u64()?;
        fields.end()?;
        Ok(value)
    }
}

/// Bytes that are not an item this build wrote: a damaged spill file.
#[derive(Debug, Error)]
pub enum DecodeError {
    #[error("a spilled item ends early")]
    Truncated,
    #[error("a spilled item has {0} bytes left over")]
    TrailingBytes(usize),
    #[error("a spilled item has a string that is not UTF-8")]
    NotUtf8,
    #[error("a spilled item has an unknown tag {0}")]
    UnknownTag(u64),
    #[error("a spilled item's message does not decode: {0}")]
    Message(#[from] prost::DecodeError),
}

/// Writes the fields of an item; [`Fields`] reads them back in the same order.
pub fn put_u64(out: &mut Vec<u8>, value: u64) {
    encode_varint(value, out);
}

pub fn put_str(out: &mut Vec<u8>, value: &str) {
    encode_varint(value.len() as u64, out);
    out.extend_from_slice(value.as_bytes());
}

pub fn put_message(out: &mut Vec<u8>, message: &impl Message) {
    // Encoding fails only when the buffer has no room left, and a Vec grows.
    let _ = message.encode_length_delimited(out);
}

/// Reads an item's fields in the order they were put.
#[derive(Debug)]
pub struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self(bytes)
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        decode_varint(&mut self.0).map_err(|_| DecodeError::Truncated)
    }

    pub fn str(&mut self) -> Result<String, DecodeError> {
        let len = usize::try_from(self.u64()?).map_err(|_| DecodeError::Truncated)?;
        if len > self.0.len() {
            return Err(DecodeError::Truncated);
        }
        let (text, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8(text.to_vec()).map_err(|_| DecodeError::NotUtf8)
    }

    pub fn message<M: Message + Default>(&mut self) -> Result<M, DecodeError> {
        Ok(M::decode_length_delimited(&mut self.0)?)
    }

    /// Ends reading: every byte must have been a field.
    pub fn end(self) -> Result<(), DecodeError> {
        match self.0.remaining() {
            0 => Ok(()),
            left => Err(DecodeError::TrailingBytes(left)),
        }
    }
}
