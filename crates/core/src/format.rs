//! On-disk building blocks shared by every object the repository holds: the encrypted
//! envelope of a blob ([`blob`]) and the compression byte inside it ([`compress`]), the archive
//! object ([`archive`]) and the items of its stream ([`item`]).

pub mod archive;
pub mod blob;
pub mod compress;
pub mod item;
