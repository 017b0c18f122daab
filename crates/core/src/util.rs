//! Primitives every layer uses and none owns: the binary encoding ([`wire`]), ids and hashes
//! ([`id`]), who and where this process is ([`identity`]), time as the repository sees it ([`clock`]), the environment's secrets kept from programs cairn starts ([`secrets`]), text safe to print ([`text`]), shell patterns over paths as bytes ([`pattern`]), pause points for tests ([`pause`]),
//! ordered parallel work ([`parallel`]) and progress on the terminal ([`progress`]).

pub mod clock;
pub mod id;
pub mod identity;
pub mod log;
pub mod parallel;
pub mod pattern;
pub mod pause;
pub mod progress;
pub mod recycle;
pub mod secrets;
pub mod text;
pub mod wire;
