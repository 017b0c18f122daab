//! The files being backed up, as the file system has them: their metadata (stat, xattrs,
//! ACLs, inode flags: [`fsmeta`]), which of them to leave out ([`exclude`]), and what the last
//! backup saw of them ([`files_cache`]).

pub mod exclude;
pub mod files_cache;
pub mod fsmeta;
