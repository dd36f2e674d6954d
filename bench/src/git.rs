//! The git anchor, driven through its own commands as a user would script
//! it: `git fast-import` for bulk history, plumbing (`hash-object -w`,
//! `mktree`, `commit-tree`, `update-ref`) for one commit at a time. Every
//! command runs with no user or system config and fixed identities and
//! dates, so runs are repeatable. Never times anything itself.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::R;

/// `git --version`'s line, or `None` when git cannot be run.
pub fn version() -> Option<String> {
    let o = Command::new("git").arg("--version").output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

/// A bare repository in a directory of its own.
#[derive(Debug, Clone)]
pub struct Repo {
    pub dir: PathBuf,
}

impl Repo {
    pub fn init(dir: &Path) -> R<Repo> {
        let repo = Repo {
            dir: dir.to_path_buf(),
        };
        std::fs::create_dir_all(dir)?;
        repo.run(&["init", "-q", "--bare", "-b", "main"])?;
        // No automatic gc in the middle of a measurement.
        repo.run(&["config", "gc.auto", "0"])?;
        Ok(repo)
    }

    /// A git command in this repository, with no user or system config.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("git");
        c.arg("--git-dir")
            .arg(&self.dir)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "bench")
            .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
            .env("GIT_COMMITTER_NAME", "bench")
            .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
            .env("GIT_AUTHOR_DATE", "1763000000 +0000")
            .env("GIT_COMMITTER_DATE", "1763000000 +0000");
        c
    }

    /// Runs a command that must succeed; returns its stdout, trimmed.
    pub fn run(&self, args: &[&str]) -> R<String> {
        let o = self.cmd(args).output()?;
        check(args, &o)?;
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned())
    }

    /// Runs a command feeding it `input`; returns its stdout, trimmed.
    pub fn run_with(&self, args: &[&str], input: &[u8]) -> R<String> {
        let mut child = self
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().ok_or("git's stdin is not piped")?;
        // Written from another thread: git may fill its stdout pipe before
        // it has read all of its input.
        let input = input.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let o = child.wait_with_output()?;
        writer.join().map_err(|_| "the writer thread panicked")??;
        check(args, &o)?;
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned())
    }

    /// Runs `git fast-import` on the stream `write` produces; with `marks`,
    /// exports the marks to that file.
    pub fn fast_import(
        &self,
        marks: Option<&Path>,
        write: impl FnOnce(&mut dyn Write) -> R<()>,
    ) -> R<()> {
        let mut args = vec!["fast-import".to_owned(), "--quiet".into(), "--done".into()];
        if let Some(m) = marks {
            args.push(format!("--export-marks={}", m.display()));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = self
            .cmd(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("git's stdin is not piped")?;
        let mut w = BufWriter::with_capacity(1 << 20, stdin);
        let wrote = write(&mut w).and_then(|()| {
            w.write_all(b"done\n")?;
            w.flush()?;
            Ok(())
        });
        drop(w);
        let o = child.wait_with_output()?;
        check(&args, &o)?;
        wrote
    }

    /// Bytes of every file under `objects/`.
    pub fn objects_bytes(&self) -> R<u64> {
        crate::dir_size(&self.dir.join("objects"))
    }

    /// `git count-objects -v`: (loose, in packs).
    pub fn count_objects(&self) -> R<(u64, u64)> {
        let text = self.run(&["count-objects", "-v"])?;
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        Ok((field("count:"), field("in-pack:")))
    }
}

fn check(args: &[&str], o: &Output) -> R<()> {
    if o.status.success() {
        return Ok(());
    }
    Err(format!(
        "git {} failed ({}): {}",
        args.join(" "),
        o.status,
        String::from_utf8_lossy(&o.stderr).trim()
    )
    .into())
}

/// One fast-import `data` command.
pub fn data(w: &mut dyn Write, bytes: &[u8]) -> R<()> {
    writeln!(w, "data {}", bytes.len())?;
    w.write_all(bytes)?;
    w.write_all(b"\n")?;
    Ok(())
}

/// The `committer` line of a fast-import commit at `secs` since the epoch.
pub fn committer(w: &mut dyn Write, secs: i64) -> R<()> {
    writeln!(w, "committer bench <bench@example.invalid> {secs} +0000")?;
    Ok(())
}

/// One commit by plumbing, as a script would make it: the turn's message
/// as a blob, a tree holding it, a commit on the parent, the ref moved with
/// the parent as its expected value. Four processes; `durable` sets
/// `core.fsync=all` (objects, refs and all), else `core.fsync=none`.
pub fn plumbing_commit(
    repo: &Repo,
    message: &[u8],
    parent: Option<&str>,
    durable: bool,
) -> R<String> {
    let fsync = if durable {
        ["-c", "core.fsync=all", "-c", "core.fsyncMethod=fsync"]
    } else {
        ["-c", "core.fsync=none", "-c", "core.fsyncMethod=fsync"]
    };
    let with = |rest: &[&str]| -> Vec<String> {
        fsync.iter().chain(rest).map(|s| (*s).to_owned()).collect()
    };
    let blob = repo.run_with(&strs(&with(&["hash-object", "-w", "--stdin"])), message)?;
    let tree = repo.run_with(
        &strs(&with(&["mktree"])),
        format!("100644 blob {blob}\tmessage.json\n").as_bytes(),
    )?;
    let mut args = with(&["commit-tree", &tree, "-m", "turn"]);
    if let Some(p) = parent {
        args.extend(["-p".to_owned(), p.to_owned()]);
    }
    let commit = repo.run(&strs(&args))?;
    let mut args = with(&["update-ref", "refs/heads/main", &commit]);
    if let Some(p) = parent {
        args.push(p.to_owned());
    }
    repo.run(&strs(&args))?;
    Ok(commit)
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
