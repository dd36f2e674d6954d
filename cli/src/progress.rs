//! Progress bars for long commands (import, clone, push, pull, gc, repack,
//! fsck, reindex): the library reports phases and counts through
//! `sessctl_store::progress::Progress`, and this draws them on stderr with
//! `indicatif`: `import: reading files [=====>    ] 120/400 35/s 2s`, or
//! when the total is not known a spinner, the count so far and its rate. When
//! stderr is not a terminal nothing is drawn at all, so pipes and scripts
//! see exactly what they always did. A line wider than the terminal wraps
//! (nothing cuts it); the bar is cleared when the command ends.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sessctl_store::progress::Progress;

/// A progress display for one command; see the module's documentation.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
    command: &'static str,
}

impl Bar {
    /// A bar for `command` ("import"), drawn only when stderr is a terminal.
    pub fn new(command: &'static str) -> Bar {
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(None, target).with_style(uncounted());
        bar.set_prefix(command);
        Bar { bar, command }
    }

    /// A bar for a command whose counts come from elsewhere (fsck's
    /// callback): `done` of `total`.
    pub fn set(&self, done: u64, total: u64) {
        if self.bar.length() != Some(total) {
            self.bar.set_style(counted());
            self.bar.set_length(total);
        }
        self.bar.set_position(done);
    }
}

/// `1,234/s`: a whole number of units a second.
fn rate(state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = write!(w, "{}/s", indicatif::HumanCount(state.per_sec() as u64));
}

fn counted() -> ProgressStyle {
    ProgressStyle::with_template("{prefix} [{bar:30}] {human_pos}/{human_len} {rate} {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key("rate", rate)
        .progress_chars("=> ")
}

fn uncounted() -> ProgressStyle {
    // The count, once there is one, is the message (see `advance`): a
    // phase that counts nothing as it goes shows no "0".
    ProgressStyle::with_template("{prefix} {spinner} {msg} {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

impl Progress for Bar {
    fn phase(&self, name: &str, total: Option<u64>) {
        // Style, length and count first: the next draw shows the new phase
        // whole, never the old count under the new name.
        self.bar.reset();
        self.bar.set_message("");
        match total {
            Some(n) => {
                self.bar.disable_steady_tick();
                self.bar.set_style(counted());
                self.bar.set_length(n);
            }
            None => {
                self.bar.set_style(uncounted());
                self.bar.unset_length();
                self.bar.enable_steady_tick(Duration::from_millis(120));
            }
        }
        self.bar.set_prefix(format!("{}: {name}", self.command));
    }

    fn advance(&self, n: u64) {
        self.bar.inc(n);
        if self.bar.length().is_none() {
            self.bar.set_message(format!(
                "{} {}/s",
                indicatif::HumanCount(self.bar.position()),
                indicatif::HumanCount(self.bar.per_sec() as u64)
            ));
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
