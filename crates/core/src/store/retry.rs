//! Operations over a connection that can be lost (SFTP, `cairn serve` through ssh): a lost
//! connection is reopened and the operation tried again, up to [`RETRIES`] times with a
//! growing pause; what the server answers (no such file, a refusal) is final.

use std::time::Duration;

use super::{StoreError, StoreResult};

/// Tries after the first.
pub const RETRIES: u32 = 3;

/// An operation's failure: a lost connection (worth another try) or an answer.
pub enum Fail {
    /// No connection could be made: nothing was sent, so trying again is always safe.
    Unconnected(String),
    /// The connection was lost with the request perhaps carried out.
    Connection(String),
    Store(StoreError),
}

/// Runs `attempt` (told whether an earlier try may have done its work) until it succeeds,
/// the server answers, or the connection is lost for the last time; a lost connection is
/// tried again only when the operation is `repeatable`. `pause` is the first wait, doubled
/// each time; `lost` says what failed, for the last error.
pub fn with_retries<T>(
    name: &str,
    repeatable: bool,
    pause: Duration,
    lost: &dyn Fn(&str) -> String,
    attempt: &mut dyn FnMut(bool) -> Result<T, Fail>,
) -> StoreResult<T> {
    let mut last = String::new();
    for n in 0..=RETRIES {
        if n > 0 {
            std::thread::sleep(pause * (1 << (n - 1)));
        }
        match attempt(n > 0) {
            Ok(v) => return Ok(v),
            Err(Fail::Store(e)) => return Err(e),
            Err(Fail::Unconnected(e)) => last = e,
            Err(Fail::Connection(e)) => {
                last = e;
                if !repeatable {
                    break;
                }
            }
        }
    }
    Err(StoreError::Io {
        name: name.to_string(),
        source: std::io::Error::other(lost(&last)),
    })
}
