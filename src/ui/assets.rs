//! The page of `cairn ui`, built into the binary (one file still installs cairn): one HTML
//! page, one script and one style sheet, written by hand: no framework and no build step, so
//! what is served is what is in the repository, and the page loads in one round trip.

/// The page; `{{TOKEN}}` is replaced by the token when it is served.
pub const PAGE: &str = include_str!("assets/index.html");
pub const SCRIPT: &str = include_str!("assets/app.js");
pub const STYLE: &str = include_str!("assets/app.css");
