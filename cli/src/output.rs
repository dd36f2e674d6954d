//! Writing to stdout: a closed pipe (`sessctl ... | head`) ends the command
//! quietly instead of failing it. (Progress is drawn by `progress.rs`.)

use std::io::{self, Write};

use crate::{CmdResult, CommandError};

/// Writes all of `text` to stdout (or the pager); a broken pipe (or a
/// pager quit early) is success.
pub fn print(text: &str) -> CmdResult {
    let mut out = crate::pager::Sink;
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CommandError::Failed(format!("writing to stdout: {e}"))),
    }
}
