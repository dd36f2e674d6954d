//! `--summarizer COMMAND`: a summarizer that is a shell command. The
//! library only declares [`Summarizer`]; running a program, feeding it the
//! history and killing it on timeout is the command line's business.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use sessctl_store::compact::{Summarizer, Summary};
use sessctl_store::object::Blob;

/// A summarizer that is a shell command: `sh -c COMMAND` reads the history
/// as a JSON array on stdin and prints the summary as JSON on stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSummarizer {
    pub command: String,
    /// The command is killed (with its process group) after this long.
    pub timeout: Duration,
}

impl CommandSummarizer {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

    #[cfg(test)]
    pub fn new(command: impl Into<String>) -> Self {
        CommandSummarizer {
            command: command.into(),
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }
}

/// How much of a summarizer's output an error quotes.
const EXCERPT_BYTES: usize = 200;

/// The first bytes of some output, on one line, quoted.
fn excerpt(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(EXCERPT_BYTES)];
    let text: String = String::from_utf8_lossy(cut)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("{:?}", text.trim())
}

fn read_all(r: Option<impl Read + Send + 'static>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut r) = r {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    } else {
        let _ = tx.send(Vec::new());
    }
    rx
}

/// Kills the command and whatever it started (it leads its own group).
fn kill_tree(child: &mut std::process::Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

impl Summarizer for CommandSummarizer {
    fn summarize(&self, history: &[Value]) -> std::result::Result<Summary, String> {
        let input = serde_json::to_vec(history).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(&self.command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            // Its own process group, so a timeout kills what it started too.
            cmd.process_group(0);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run the summarizer (sh -c): {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A command that does not read its input closes the pipe; that
            // is its business.
            std::thread::spawn(move || {
                let _ = stdin.write_all(&input);
            });
        }
        let stdout = read_all(child.stdout.take());
        let stderr = read_all(child.stderr.take());
        let deadline = Instant::now() + self.timeout;
        let timed_out = |child: &mut std::process::Child| {
            kill_tree(child);
            format!(
                "the summarizer timed out after {} s",
                self.timeout.as_secs_f64()
            )
        };
        let mut pause = Duration::from_millis(1);
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => {}
                Err(e) => {
                    kill_tree(&mut child);
                    return Err(format!("waiting for the summarizer: {e}"));
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(timed_out(&mut child));
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(20));
        };
        // Something it started in the background may hold its output open.
        let collect = |rx: &mpsc::Receiver<Vec<u8>>| {
            let left = deadline.saturating_duration_since(Instant::now());
            rx.recv_timeout(left).ok()
        };
        let (Some(out), Some(err)) = (collect(&stdout), collect(&stderr)) else {
            return Err(timed_out(&mut child));
        };
        if !status.success() {
            let how = match status.code() {
                Some(c) => format!("exited with status {c}"),
                None => {
                    #[cfg(unix)]
                    {
                        use std::os::unix::process::ExitStatusExt;
                        format!("was killed by signal {}", status.signal().unwrap_or(0))
                    }
                    #[cfg(not(unix))]
                    {
                        "was killed".to_owned()
                    }
                }
            };
            let said = if !err.iter().all(u8::is_ascii_whitespace) {
                format!("; stderr: {}", excerpt(&err))
            } else if !out.iter().all(u8::is_ascii_whitespace) {
                format!("; stdout: {}", excerpt(&out))
            } else {
                String::new()
            };
            return Err(format!("the summarizer {how}{said}"));
        }
        if out.iter().all(u8::is_ascii_whitespace) {
            return Err("the summarizer printed nothing".into());
        }
        let value = Blob::from_json_slice(&out)
            .map_err(|e| {
                format!(
                    "the summarizer's output is not JSON ({e}); stdout: {}",
                    excerpt(&out)
                )
            })?
            .into_value();
        Summary::from_value(value).map_err(|e| {
            format!(
                "the summarizer's output is neither a checkpoint object nor an array of \
                 messages: {e}; stdout: {}",
                excerpt(&out)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;
    use serde_json::json;
    use sessctl_store::compact::compact;
    use sessctl_store::{Durability, Error, Messages, ObjectId, RefName, Store, Turn};

    fn msg(role: &str, content: &str) -> Value {
        json!({"role": role, "content": content})
    }

    fn added(msgs: Vec<Value>) -> Turn {
        Turn {
            messages: Messages::Added(msgs),
            ..Turn::default()
        }
    }

    /// A conversation "c" of 6 messages in 3 sessions.
    fn conversation(store: &Store) -> ObjectId {
        store
            .create(
                Some("c"),
                added(vec![
                    msg("user", "fix the test"),
                    msg("assistant", "looking"),
                ]),
                Durability::Sync,
            )
            .unwrap();
        store
            .commit(
                "c",
                None,
                added(vec![msg("user", "and?"), msg("assistant", "found it")]),
                Durability::Sync,
            )
            .unwrap();
        store
            .commit(
                "c",
                None,
                added(vec![msg("user", "fix it"), msg("assistant", "fixed")]),
                Durability::Sync,
            )
            .unwrap()
    }

    fn head(store: &Store, name: &str) -> ObjectId {
        store.conversation(name).unwrap().unwrap().head.unwrap()
    }

    fn assert_unchanged(store: &Store, old: ObjectId, err: &Error, wanted: &str) {
        assert!(err.to_string().contains(wanted), "{err}");
        assert_eq!(head(store, "c"), old);
        assert_eq!(
            store
                .resolve_ref(&RefName::conversation("c").unwrap())
                .unwrap(),
            Some(old)
        );
    }

    #[test]
    fn a_failing_or_garbage_command_changes_nothing() {
        let store = Store::in_memory().unwrap();
        let old = conversation(&store);
        let ops = store.reflog_entries().unwrap().len();
        let cases: &[(&str, &str)] = &[
            (
                "cat >/dev/null; echo boom >&2; exit 3",
                "the summarizer exited with status 3; stderr: \"boom\"",
            ),
            ("echo nope", "the summarizer's output is not JSON"),
            ("echo nope", "stdout: \"nope\""),
            ("true", "the summarizer printed nothing"),
            (
                "echo '{\"completed\": [\"x\"], \"mood\": []}'",
                "unknown checkpoint key \"mood\"",
            ),
            ("echo '{\"completed\": [1]}'", "must be an array of strings"),
            ("echo '[]'", "an empty array of summary messages"),
            (
                "echo '[{\"role\":\"user\"}, 3]'",
                "summary message 2 is not",
            ),
            ("echo 42", "neither a checkpoint object nor an array"),
        ];
        for (cmd, wanted) in cases {
            let err = compact(&store, "c", &CommandSummarizer::new(*cmd), 2).unwrap_err();
            assert_unchanged(&store, old, &err, wanted);
        }
        assert_eq!(store.reflog_entries().unwrap().len(), ops);

        // A summarizer that hangs (and leaves a child behind) is killed in time.
        let slow = CommandSummarizer {
            command: "sleep 30 & sleep 30".into(),
            timeout: Duration::from_millis(300),
        };
        let t0 = Instant::now();
        let err = compact(&store, "c", &slow, 2).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(10));
        assert_unchanged(&store, old, &err, "the summarizer timed out after 0.3 s");
    }

    #[test]
    fn the_command_summarizer_reads_the_history_on_stdin() {
        let store = Store::in_memory().unwrap();
        let old = conversation(&store);
        // Echoes the number of messages it was given, as a decision.
        let cmd =
            r#"n=$(grep -o '"role"' | wc -l | tr -d ' '); printf '{"decisions": ["saw %s"]}' "$n""#;
        let id = compact(&store, "c", &CommandSummarizer::new(cmd), 2).unwrap();
        let s = store.odb().session(&id).unwrap();
        let c = s.compaction.unwrap();
        assert_eq!((c.session, c.messages), (old, 4));
        assert_eq!(
            store.odb().blob(&c.summary).unwrap()["decisions"],
            json!(["saw 4"])
        );
    }
}
