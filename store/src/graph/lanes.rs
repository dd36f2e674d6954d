//! The lane drawing of `log --graph`, in the manner of `git log --graph`.
//!
//! Each lane is a column waiting for one session: `*` marks the session
//! shown, `|` a lane passing by, `\` a lane splitting off to the right (a
//! merge's other parents), `/` a lane joining one to its left, and `_` a
//! lane crossing others to reach a lane further left (`|_|/`). Lanes always
//! wait for distinct sessions: when two lines of history reach the same
//! parent, the right one joins the left one right away. Columns are two
//! characters wide: lane `k` is at character `2k`.
//!
//! Every picture can be read without doubt: after a session's row its lane
//! first splits into one lane per parent while the lanes to its right move
//! over (everything moves the same way, so nothing crosses); then lanes
//! bound for a lane further left join it, each in one row, never drawing
//! over a line bound elsewhere nor landing where one waits.
//! `store/tests/graph.rs` follows the lines of random graphs back to check
//! that each session's lines reach exactly its parents.

use crate::hash::ObjectId;

/// The lanes between one shown session and the next.
#[derive(Debug, Default, Clone)]
pub struct Lanes {
    cols: Vec<ObjectId>,
    /// The lane of the last session shown, when it had no parents and
    /// nothing was drawn below it.
    open_root: Option<usize>,
}

/// What to draw for one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneRows {
    /// Rows before the session's: a gap, so that a new line of history
    /// starting right under a root does not read as its parent.
    pub before: Vec<String>,
    /// The session's row: `*` in its lane, `|` in the others.
    pub commit: String,
    /// The prefix of any further line of the same entry.
    pub padding: String,
    /// Rows after the entry, where lanes split, join or end; often none.
    pub after: Vec<String>,
}

/// An edge in transit from one row of lanes to the next.
#[derive(Debug, Clone, Copy)]
struct Edge {
    pos: usize,
    target: usize,
}

impl Lanes {
    pub fn new() -> Lanes {
        Lanes::default()
    }

    /// A row of the lanes as they stand: `|` in each.
    pub fn passing(&self) -> String {
        row(self.cols.iter().map(|_| '|'))
    }

    /// Draws `id` (with the parents the walk follows) and moves the lanes on
    /// to its parents. Sessions must come in an order where every child
    /// comes before its parents.
    pub fn next(&mut self, id: ObjectId, parents: &[ObjectId]) -> LaneRows {
        let mut before = Vec::new();
        let i = match self.cols.iter().position(|c| *c == id) {
            Some(i) => i,
            None => {
                if self.open_root == Some(self.cols.len()) {
                    before.push(row(self.cols.iter().map(|_| '|')));
                }
                self.cols.push(id);
                self.cols.len() - 1
            }
        };
        let commit = row((0..self.cols.len()).map(|k| if k == i { '*' } else { '|' }));
        let padding = row((0..self.cols.len()).map(|k| {
            if k != i || !parents.is_empty() {
                '|'
            } else {
                ' '
            }
        }));
        // First the session's lane becomes one lane per parent, lanes to
        // its right moving over (all in one direction, so nothing crosses).
        // A parent other than the first that a lane to the left waits for
        // already gets no lane: its edge joins that one directly.
        let left = &self.cols[..i];
        let kept: Vec<ObjectId> = parents
            .iter()
            .enumerate()
            .filter(|(j, p)| *j == 0 || !left.contains(p))
            .map(|(_, p)| *p)
            .collect();
        let joining: Vec<ObjectId> = parents
            .iter()
            .skip(1)
            .filter(|p| left.contains(p))
            .copied()
            .collect();
        let mut expanded: Vec<ObjectId> = Vec::with_capacity(self.cols.len() + kept.len());
        expanded.extend_from_slice(left);
        expanded.extend_from_slice(&kept);
        expanded.extend_from_slice(&self.cols[i + 1..]);
        let mut edges = Vec::with_capacity(expanded.len() + joining.len());
        for k in 0..self.cols.len() {
            if k == i {
                // Joining edges wait in the session's lane for now.
                let spread_to = (0..kept.len()).chain(std::iter::repeat_n(0, joining.len()));
                edges.extend(spread_to.map(|j| Edge {
                    pos: i,
                    target: i + j,
                }));
            } else {
                let target = if k < i { k } else { k + kept.len() - 1 };
                edges.push(Edge { pos: k, target });
            }
        }
        let mut after = spread(&mut edges);
        // Then a session waited for in several lanes keeps the leftmost.
        let mut next: Vec<ObjectId> = Vec::with_capacity(expanded.len());
        for x in &expanded {
            if !next.contains(x) {
                next.push(*x);
            }
        }
        let mut edges: Vec<Edge> = expanded
            .iter()
            .enumerate()
            .map(|(k, x)| Edge {
                pos: k,
                target: next
                    .iter()
                    .position(|n| n == x)
                    .expect("every id is laid out"),
            })
            .collect();
        edges.extend(joining.iter().map(|p| {
            Edge {
                pos: i,
                target: next
                    .iter()
                    .position(|n| n == p)
                    .expect("a lane waits for it"),
            }
        }));
        after.extend(collapse(&mut edges));
        self.open_root = (parents.is_empty() && after.is_empty()).then_some(i);
        self.cols = next;
        LaneRows {
            before,
            commit,
            padding,
            after,
        }
    }
}

/// One row from lane characters, two columns a lane, no trailing blanks.
fn row(chars: impl Iterator<Item = char>) -> String {
    let mut s = String::new();
    for c in chars {
        s.push(c);
        s.push(' ');
    }
    s.trim_end().to_owned()
}

fn width(edges: &[Edge]) -> usize {
    edges
        .iter()
        .map(|e| e.pos.max(e.target) + 1)
        .max()
        .unwrap_or(0)
}

fn text(cells: Vec<char>) -> String {
    cells.into_iter().collect::<String>().trim_end().to_owned()
}

/// Moves edges whose order is kept (a lane splitting, lanes moving over)
/// one column a row, all at once: `\` right, `/` left.
fn spread(edges: &mut [Edge]) -> Vec<String> {
    let w = width(edges);
    let mut rows = Vec::new();
    while edges.iter().any(|e| e.pos != e.target) {
        let mut cells = vec![' '; 2 * w];
        for e in edges.iter_mut() {
            if e.target > e.pos {
                cells[2 * e.pos + 1] = '\\';
                e.pos += 1;
            } else if e.target < e.pos {
                cells[2 * e.pos - 1] = '/';
                e.pos -= 1;
            } else {
                cells[2 * e.pos] = '|';
            }
        }
        rows.push(text(cells));
    }
    rows
}

/// Moves edges left into the lanes they join, each in one row: `/` out of
/// its lane, then `_` under the lanes it crosses (`|_|/`). An edge waits
/// (`|`) while its path would touch another's, or while a waiting edge
/// bound elsewhere sits where it would land, so that every line can be
/// followed without doubt. The leftmost edge still to move always can,
/// so this ends.
fn collapse(edges: &mut [Edge]) -> Vec<String> {
    let w = width(edges);
    let mut rows = Vec::new();
    while edges.iter().any(|e| e.pos != e.target) {
        edges.sort_by_key(|e| (e.pos, e.target));
        let mut cells = vec![' '; 2 * w];
        // Which target's edge drew each cell between lanes: only edges bound
        // for the same lane may share one.
        let mut owner: Vec<Option<usize>> = vec![None; 2 * w];
        // (column, target) of the edges decided this row.
        let mut ends: Vec<(usize, usize)> = Vec::with_capacity(edges.len());
        let mut crossed: Vec<std::ops::Range<usize>> = Vec::new();
        for e in edges.iter_mut() {
            if e.pos != e.target {
                let mut claims = vec![(2 * e.pos - 1, '/')];
                claims.extend((e.target..e.pos - 1).map(|k| (2 * k + 1, '_')));
                let free = claims.iter().all(|(c, ch)| {
                    cells[*c] == ' ' || (cells[*c] == *ch && owner[*c] == Some(e.target))
                });
                let clear = ends
                    .iter()
                    .all(|(col, t)| *col != e.target || *t == e.target);
                if free && clear {
                    for (c, ch) in claims {
                        cells[c] = ch;
                        owner[c] = Some(e.target);
                    }
                    crossed.push((e.target + 1)..e.pos);
                    e.pos = e.target;
                    ends.push((e.pos, e.target));
                    continue;
                }
            }
            cells[2 * e.pos] = '|';
            ends.push((e.pos, e.target));
        }
        // A line crossing a lane that is empty in this row runs on under it,
        // so that the run reads as one line (no line can land there).
        for k in crossed.into_iter().flatten() {
            if cells[2 * k] == ' ' {
                cells[2 * k] = '_';
            }
        }
        rows.push(text(cells));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId::from_bytes([n; 32])
    }

    /// Draws (session, parents) rows the way `log --graph --oneline` does.
    fn draw(rows: &[(u8, &[u8])]) -> String {
        let mut lanes = Lanes::new();
        let mut out = String::new();
        for (n, parents) in rows {
            let parents: Vec<ObjectId> = parents.iter().map(|p| id(*p)).collect();
            let r = lanes.next(id(*n), &parents);
            out.push_str(&format!("{} {n}\n", r.commit));
            for a in r.after {
                out.push_str(&a);
                out.push('\n');
            }
        }
        out
    }

    #[test]
    fn a_merge_splits_and_joins() {
        assert_eq!(
            draw(&[(4, &[2, 3]), (3, &[1]), (2, &[1]), (1, &[])]),
            "* 4\n|\\\n| * 3\n* | 2\n|/\n* 1\n"
        );
    }

    #[test]
    fn a_fork_shows_as_two_tips_joining() {
        assert_eq!(
            draw(&[(3, &[1]), (2, &[1]), (1, &[])]),
            "* 3\n| * 2\n|/\n* 1\n"
        );
    }

    #[test]
    fn a_lane_crosses_others_to_join_further_left() {
        // Tips 5, 6, 7: 5 and 7 continue from 1, 6 from 2.
        assert_eq!(
            draw(&[(5, &[1]), (6, &[2]), (7, &[1]), (2, &[1]), (1, &[])]),
            "* 5\n| * 6\n| | * 7\n|_|/\n| * 2\n|/\n* 1\n"
        );
    }

    #[test]
    fn an_octopus_and_lanes_to_its_right_move_over() {
        assert_eq!(
            draw(&[(9, &[1]), (8, &[3, 2, 1]), (3, &[1]), (2, &[1]), (1, &[])]),
            "* 9\n| * 8\n| |\\\n|/| |\n| * | 3\n|/ /\n| * 2\n|/\n* 1\n"
        );
    }
}
