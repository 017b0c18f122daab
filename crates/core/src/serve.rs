//! `cairn serve`: a repository served over a pipe (ssh's, as a forced command), speaking the
//! store contract and nothing more, with the server's rules applied to every request:
//! the repositories it may open (`root`), append-only and a quota (`policy`). The client side
//! is [`crate::store::ssh`], which holds the protocol's messages (`store::ssh::frame`).

pub mod policy;
pub mod quota;
pub mod root;
pub mod server;

pub use policy::Rules;
pub use root::Restrictions;
pub use server::{serve, Options};
