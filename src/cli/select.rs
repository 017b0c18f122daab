//! The paths a restoring command picks from an archive, as its arguments give them (`extract`,
//! `export-tar`, `dump`).

use std::path::Path;

use crate::cli::args::ReshapeArgs;
use crate::error::Result;
use crate::ops::create::stored_path;
use crate::ops::extract::Selection;

/// The paths and patterns given (as typed), and the selection they make with `--exclude`
/// and `--strip-components`: shared by extract and export-tar.
pub fn selection(
    paths: &[std::path::PathBuf],
    reshape: &ReshapeArgs,
) -> Result<(Vec<String>, Selection)> {
    let given: Vec<String> = paths
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let selection = Selection::new(&given, |p| stored_path(Path::new(p)))?
        .excluding(&reshape.exclude)?
        .stripping(reshape.strip_components as usize);
    Ok((given, selection))
}
