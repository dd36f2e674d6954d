//! The pager for `log`, `show` and `diff` on a terminal, as git runs one:
//! `$SESSCTL_PAGER`, else `$PAGER`, else `less -FRX` when less is on PATH
//! (it quits when the text fits one screen, passes colour through, and
//! leaves the screen as it was);
//! an empty value or `cat` means none. It is run with `sh -c`, with
//! `LESS=FRX` and `LV=-c` unless already set.
//!
//! The pager starts at the first byte written ([`Sink`]), so that a
//! command that fails before printing anything shows its error without
//! one; [`finish`] closes its input and waits for the person to quit it.
//!
//! Once the pager runs, Ctrl-C (SIGINT) and SIGQUIT no longer end sessctl,
//! as git does: the pager owns the terminal and takes them itself, and a
//! sessctl that died would leave it behind. sessctl stops writing instead,
//! closes the pager's input, waits for it to exit, and exits 130.

use std::io::{self, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The pager's state in this process.
enum State {
    /// No pager for this command (a pipe, `--no-pager`, another command).
    Off,
    /// A pager is wanted; it starts at the first write.
    Wanted(String),
    /// Running: its input, and the child to wait for.
    Running(ChildStdin, Child),
    /// It could not start, or was finished: write to stdout.
    Done,
}

static STATE: Mutex<State> = Mutex::new(State::Off);

/// Set when SIGINT or SIGQUIT arrived while the pager ran.
static INTERRUPTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Whether an interrupt arrived while the pager ran: the command's output
/// was cut short, and sessctl exits 130 once the pager is gone.
pub fn interrupted() -> bool {
    INTERRUPTED.get().is_some_and(|f| f.load(Ordering::Relaxed))
}

/// From now on SIGINT and SIGQUIT only set [`INTERRUPTED`].
/// Returns what to unregister should the pager not start after all.
fn catch_interrupts() -> Vec<signal_hook::SigId> {
    let flag = INTERRUPTED.get_or_init(|| Arc::new(AtomicBool::new(false)));
    let mut ids = Vec::new();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGQUIT] {
        match signal_hook::flag::register(sig, Arc::clone(flag)) {
            Ok(id) => ids.push(id),
            Err(e) => eprintln!("sessctl: warning: cannot catch signal {sig}: {e}"),
        }
    }
    ids
}

/// The pager command to run, or None for none: `SESSCTL_PAGER`, `PAGER`,
/// `less -FRX`.
pub fn command() -> Option<String> {
    let cmd = match std::env::var("SESSCTL_PAGER").or_else(|_| std::env::var("PAGER")) {
        Ok(c) => c,
        // Without less on PATH the default would swallow the output.
        Err(_) if !on_path("less") => return None,
        Err(_) => "less -FRX".to_owned(),
    };
    let trimmed = cmd.trim();
    (!trimmed.is_empty() && trimmed != "cat").then(|| trimmed.to_owned())
}

/// Whether `program` is a file in one of PATH's directories.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Asks for a pager for this command's output.
pub fn want(cmd: String) {
    if let Ok(mut s) = STATE.lock() {
        *s = State::Wanted(cmd);
    }
}

fn spawn(cmd: &str) -> io::Result<(ChildStdin, Child)> {
    let mut c = Command::new("sh");
    c.arg("-c").arg(cmd).stdin(Stdio::piped());
    if std::env::var_os("LESS").is_none() {
        c.env("LESS", "FRX");
    }
    if std::env::var_os("LV").is_none() {
        c.env("LV", "-c");
    }
    let mut child = c.spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("the pager has no input"))?;
    Ok((stdin, child))
}

/// Closes the pager's input and waits until it exits (the person quit it).
pub fn finish() {
    let state = match STATE.lock() {
        Ok(mut s) => std::mem::replace(&mut *s, State::Done),
        Err(_) => return,
    };
    if let State::Running(stdin, mut child) = state {
        drop(stdin);
        let _ = child.wait();
    }
}

/// Standard output, or the pager's input once one is wanted.
#[derive(Debug, Default)]
pub struct Sink;

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut state = STATE
            .lock()
            .map_err(|_| io::Error::other("the pager's state is poisoned"))?;
        if let State::Wanted(cmd) = &*state {
            // Caught before the pager starts: it may send the terminal's
            // foreground (sessctl too) an interrupt as soon as it runs.
            let caught = catch_interrupts();
            *state = match spawn(cmd) {
                Ok((stdin, child)) => State::Running(stdin, child),
                Err(e) => {
                    for id in caught {
                        signal_hook::low_level::unregister(id);
                    }
                    eprintln!("sessctl: warning: cannot run the pager '{cmd}': {e}");
                    State::Done
                }
            };
        }
        match &mut *state {
            // Interrupted: write nothing more, as a pager that quit would.
            State::Running(..) if interrupted() => Err(io::ErrorKind::BrokenPipe.into()),
            State::Running(stdin, _) => stdin.write(buf),
            _ => io::stdout().lock().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut state = STATE
            .lock()
            .map_err(|_| io::Error::other("the pager's state is poisoned"))?;
        match &mut *state {
            State::Running(stdin, _) => stdin.flush(),
            _ => io::stdout().lock().flush(),
        }
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Off => "Off",
            State::Wanted(_) => "Wanted",
            State::Running(..) => "Running",
            State::Done => "Done",
        })
    }
}
