//! The paths a restoring command picks from an archive, as its arguments give them (`extract`,
//! `export-tar`, `dump`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::cli::args::ReshapeArgs;
use crate::error::Result;
use crate::ops::create::stored_path;
use crate::ops::extract::Selection;

/// The selection the paths and patterns given (as typed, as bytes) make with `--exclude`
/// and `--strip-components`: shared by extract and export-tar.
pub fn selection(paths: &[std::path::PathBuf], reshape: &ReshapeArgs) -> Result<Selection> {
    let given: Vec<&[u8]> = paths.iter().map(|p| p.as_os_str().as_bytes()).collect();
    let selection = Selection::new(&given, |p| stored_path(Path::new(OsStr::from_bytes(p))))?
        .excluding(&reshape.exclude)?
        .stripping(reshape.strip_components as usize);
    Ok(selection)
}
