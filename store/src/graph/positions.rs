//! Walks keyed by dense numbers: a session in the lineage index is its
//! position there, a session written after it (the journal tail) gets the
//! next free number when first met. The index is closed under parents, so
//! only the tail is ever hashed by id; everything inside the index is
//! bitsets and the mapped file.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::{Follow, Lineage, Node};
use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::lineage_index::LineageIndex;

/// A growable bitset over keys.
#[derive(Debug, Default)]
pub(super) struct Bits {
    words: Vec<u64>,
    len: usize,
}

impl Bits {
    pub(super) fn with_capacity(bits: usize) -> Bits {
        Bits {
            words: vec![0; bits.div_ceil(64)],
            len: 0,
        }
    }

    /// Sets `k`; whether it was clear.
    pub(super) fn insert(&mut self, k: u32) -> bool {
        let (w, b) = ((k / 64) as usize, k % 64);
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        let was = self.words[w] & (1 << b) != 0;
        self.words[w] |= 1 << b;
        if !was {
            self.len += 1;
        }
        !was
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &word)| {
            (0..64u32)
                .filter(move |b| word & (1 << b) != 0)
                .map(move |b| w as u32 * 64 + b)
        })
    }
}

const P1: u8 = 1;
const P2: u8 = 2;
const STALE: u8 = 4;
const RESULT: u8 = 8;

pub(super) struct Walker<'a, L: ?Sized> {
    lineage: &'a L,
    ix: std::sync::Arc<LineageIndex>,
    /// Keys below `n` are positions in the index.
    n: u32,
    follow: Follow,
    /// Sessions outside the index: key `n + k` is `tail[k]`.
    tail: Vec<Node>,
    tail_key: HashMap<ObjectId, u32>,
    /// Generations of tail sessions counted within the tail (0: not yet).
    tail_gen: Vec<u32>,
}

impl<'a, L: Lineage + ?Sized> Walker<'a, L> {
    pub(super) fn new(lineage: &'a L, ix: std::sync::Arc<LineageIndex>, follow: Follow) -> Self {
        Walker {
            lineage,
            n: ix.len() as u32,
            ix,
            follow,
            tail: Vec::new(),
            tail_key: HashMap::new(),
            tail_gen: Vec::new(),
        }
    }

    fn key(&mut self, id: &ObjectId) -> Result<u32> {
        if let Some(p) = self.ix.lookup(id)? {
            return Ok(p);
        }
        if let Some(k) = self.tail_key.get(id) {
            return Ok(*k);
        }
        let node = self.follow.trim(self.lineage.node(id)?);
        let k = u32::try_from(self.tail.len())
            .ok()
            .and_then(|t| self.n.checked_add(t))
            .ok_or(Error::LimitExceeded {
                what: "too many sessions for one walk",
            })?;
        self.tail.push(node);
        self.tail_gen.push(0);
        self.tail_key.insert(*id, k);
        Ok(k)
    }

    fn in_file(&self, k: u32) -> bool {
        k < self.n
    }

    fn tail_node(&self, k: u32) -> Option<&Node> {
        self.tail.get(k.checked_sub(self.n)? as usize)
    }

    pub(super) fn id(&self, k: u32) -> ObjectId {
        if self.in_file(k) {
            self.ix.id(k)
        } else {
            self.tail_node(k).map(|n| n.id)
        }
        .unwrap_or(ObjectId::from_bytes([0; 32]))
    }

    fn created_at(&self, k: u32) -> i64 {
        if self.in_file(k) {
            self.ix.created_at(k)
        } else {
            self.tail_node(k).map_or(0, |n| n.created_at)
        }
    }

    /// The followed parents of `k`, as keys, into `out`.
    fn parents(&mut self, k: u32, out: &mut Vec<u32>) -> Result<()> {
        out.clear();
        if self.in_file(k) {
            match self.follow {
                Follow::All => out.extend(self.ix.parents(k)?),
                Follow::FirstParent => out.extend(self.ix.first_parent(k)?),
            }
            return Ok(());
        }
        let parents = self
            .tail_node(k)
            .map(|n| n.parents.clone())
            .unwrap_or_default();
        for p in &parents {
            let pk = self.key(p)?;
            out.push(pk);
        }
        Ok(())
    }

    /// How many sessions the lineage index holds.
    pub(super) fn indexed(&self) -> usize {
        self.n as usize
    }

    /// The lineage index walked.
    pub(super) fn index(&self) -> &LineageIndex {
        &self.ix
    }

    /// The node of a key: its id, followed parents and creation time.
    pub(super) fn node_of(&mut self, k: u32, parents: &mut Vec<u32>) -> Result<Node> {
        self.parents(k, parents)?;
        Ok(Node {
            id: self.id(k),
            parents: parents.iter().map(|&p| self.id(p)).collect(),
            created_at: self.created_at(k),
        })
    }

    /// Every key reachable from `starts`, in log order: Kahn's algorithm
    /// over keys, the ready set ordered as [`super::TopoWalk`] orders it
    /// (newest `created_at` first, ties: the smaller id).
    pub(super) fn topo_order(&mut self, starts: &[u32]) -> Result<Vec<u32>> {
        let seen = self.reach_keys(starts)?;
        let keys: Vec<u32> = seen.iter().collect();
        let mut indegree = vec![0u32; self.n as usize + self.tail.len()];
        let mut buf = Vec::new();
        for &k in &keys {
            self.parents(k, &mut buf)?;
            // A session naming the same parent twice counts twice, and
            // is counted down twice below.
            for &p in &buf {
                indegree[p as usize] += 1;
            }
        }
        let mut ready: BinaryHeap<((i64, Reverse<ObjectId>), u32)> = keys
            .iter()
            .filter(|&&k| indegree[k as usize] == 0)
            .map(|&k| ((self.created_at(k), Reverse(self.id(k))), k))
            .collect();
        let mut out = Vec::with_capacity(keys.len());
        while let Some((_, k)) = ready.pop() {
            self.parents(k, &mut buf)?;
            for &p in &buf {
                let d = &mut indegree[p as usize];
                *d -= 1;
                if *d == 0 {
                    ready.push(((self.created_at(p), Reverse(self.id(p))), p));
                }
            }
            out.push(k);
        }
        Ok(out)
    }

    /// Every key reachable from `starts`, the starts included.
    pub(super) fn reach(&mut self, starts: &[ObjectId]) -> Result<Bits> {
        let mut keys = Vec::with_capacity(starts.len());
        for s in starts {
            keys.push(self.key(s)?);
        }
        self.reach_keys(&keys)
    }

    /// [`Walker::reach`] from keys.
    fn reach_keys(&mut self, starts: &[u32]) -> Result<Bits> {
        let mut seen = Bits::with_capacity(self.n as usize);
        let mut stack: Vec<u32> = Vec::new();
        for &k in starts {
            if seen.insert(k) {
                stack.push(k);
            }
        }
        let mut buf = Vec::new();
        while let Some(k) = stack.pop() {
            if self.in_file(k) {
                // The hot loop: no allocation, no hashing.
                match self.follow {
                    Follow::All => {
                        for p in self.ix.parents(k)? {
                            if seen.insert(p) {
                                stack.push(p);
                            }
                        }
                    }
                    Follow::FirstParent => {
                        if let Some(p) = self.ix.first_parent(k)? {
                            if seen.insert(p) {
                                stack.push(p);
                            }
                        }
                    }
                }
                continue;
            }
            self.parents(k, &mut buf)?;
            for &p in &buf {
                if seen.insert(p) {
                    stack.push(p);
                }
            }
        }
        Ok(seen)
    }

    /// Whether `to` is `from` or one of its ancestors. Sessions in the
    /// index with a generation below `to`'s cannot lead to it.
    fn reaches(&mut self, from: u32, to: u32) -> Result<bool> {
        let cut = self.in_file(to).then(|| self.ix.generation(to));
        if cut.is_some() && self.in_file(from) && self.ix.generation(from) < cut.unwrap_or(0) {
            return Ok(false);
        }
        let mut seen = Bits::default();
        seen.insert(from);
        let mut stack = vec![from];
        let mut buf = Vec::new();
        while let Some(k) = stack.pop() {
            if k == to {
                return Ok(true);
            }
            self.parents(k, &mut buf)?;
            for &p in &buf {
                if let Some(g) = cut {
                    // The index is closed under parents: once inside, a
                    // walk stays inside, and generations only fall.
                    if self.in_file(p) && self.ix.generation(p) < g {
                        continue;
                    }
                }
                if seen.insert(p) {
                    stack.push(p);
                }
            }
        }
        Ok(false)
    }

    /// `merge-base --is-ancestor a b`.
    pub(super) fn is_ancestor(&mut self, a: &ObjectId, b: &ObjectId) -> Result<bool> {
        if a == b {
            return Ok(true);
        }
        let kb = self.key(b)?;
        match self.ix.lookup(a)? {
            Some(ka) => self.reaches(kb, ka),
            // Nothing in the index has an ancestor outside it.
            None if self.in_file(kb) => Ok(false),
            None => {
                // `a` may be missing altogether: that is "no", as without
                // the index, so look it up without reading its object.
                let seen = self.reach(std::slice::from_ref(b))?;
                Ok(self
                    .tail_key
                    .get(a)
                    .is_some_and(|k| seen.iter().any(|s| s == *k)))
            }
        }
    }

    /// A tail session's generation within the tail (its parents in the
    /// index count as 0), computed once; tail sessions sort above every
    /// session of the index, which none of them can be an ancestor of.
    fn tail_generation(&mut self, k: u32) -> Result<u32> {
        let Some(t) = k.checked_sub(self.n) else {
            return Ok(0);
        };
        if self.tail_gen.get(t as usize).copied().unwrap_or(0) > 0 {
            return Ok(self.tail_gen[t as usize]);
        }
        let mut stack = vec![(k, false)];
        let mut buf = Vec::new();
        while let Some((at, expanded)) = stack.pop() {
            let ti = (at - self.n) as usize;
            if self.tail_gen[ti] > 0 {
                continue;
            }
            self.parents(at, &mut buf)?;
            let tail_parents: Vec<u32> = buf.iter().copied().filter(|p| *p >= self.n).collect();
            let pending: Vec<u32> = tail_parents
                .iter()
                .copied()
                .filter(|p| self.tail_gen[(p - self.n) as usize] == 0)
                .collect();
            if !expanded && !pending.is_empty() {
                stack.push((at, true));
                stack.extend(pending.into_iter().map(|p| (p, false)));
                continue;
            }
            // Expanded twice only through a cycle, which ids cannot form;
            // a pending parent then counts as 0.
            let g = tail_parents
                .iter()
                .map(|p| self.tail_gen[(p - self.n) as usize])
                .max()
                .unwrap_or(0);
            self.tail_gen[ti] = g.saturating_add(1);
        }
        Ok(self.tail_gen.get(t as usize).copied().unwrap_or(0))
    }

    /// The heap order: every descendant before its ancestors.
    fn rank(&mut self, k: u32) -> Result<(bool, u32)> {
        Ok(if self.in_file(k) {
            (false, self.ix.generation(k))
        } else {
            (true, self.tail_generation(k)?)
        })
    }

    /// Every best common ancestor, newest first (see `merge_bases_all`).
    /// Sessions are painted from `a` and `b` in decreasing generation, so a
    /// session's marks are final when it is taken; the walk stops once
    /// only sessions below a found common ancestor are left.
    pub(super) fn merge_bases(&mut self, a: &ObjectId, b: &ObjectId) -> Result<Vec<ObjectId>> {
        let ka = self.key(a)?;
        let kb = self.key(b)?;
        let mut flags: HashMap<u32, u8> = HashMap::new();
        // (rank, key, counted as live)
        let mut heap: BinaryHeap<((bool, u32), u32, bool)> = BinaryHeap::new();
        let mut live = 0usize;
        *flags.entry(ka).or_default() |= P1;
        *flags.entry(kb).or_default() |= P2;
        for k in [ka, kb] {
            heap.push((self.rank(k)?, k, true));
            live += 1;
        }
        let mut results: Vec<u32> = Vec::new();
        let mut buf = Vec::new();
        while live > 0 {
            let Some((_, k, counted)) = heap.pop() else {
                break;
            };
            if counted {
                live -= 1;
            }
            let mut f = flags.get(&k).copied().unwrap_or(0) & (P1 | P2 | STALE);
            if f == P1 | P2 {
                let e = flags.entry(k).or_default();
                if *e & RESULT == 0 {
                    *e |= RESULT;
                    results.push(k);
                }
                f |= STALE;
            }
            self.parents(k, &mut buf)?;
            let parents = std::mem::take(&mut buf);
            for &p in &parents {
                let e = flags.entry(p).or_default();
                if *e & f == f {
                    continue;
                }
                *e |= f;
                let is_live = *e & STALE == 0;
                heap.push((self.rank(p)?, p, is_live));
                if is_live {
                    live += 1;
                }
            }
            buf = parents;
        }
        // A candidate below another is not a best one.
        let mut best = Vec::with_capacity(results.len());
        for &r in &results {
            let mut redundant = false;
            for &other in &results {
                if other != r && self.reaches(other, r)? {
                    redundant = true;
                    break;
                }
            }
            if !redundant {
                best.push(r);
            }
        }
        best.sort_by_key(|k| Reverse((self.created_at(*k), Reverse(self.id(*k)))));
        Ok(best.into_iter().map(|k| self.id(k)).collect())
    }
}

/// Log order over keys (see [`super::TopoWalk`]): streams while the walk
/// follows one line of history, then orders what is left with
/// [`Walker::topo_order`]. Inside the lineage index a step is a few reads
/// of the mapped file and a bit set: no allocation, no hashing.
pub(super) struct KeyWalk<'a, L: ?Sized> {
    pub(super) walker: Walker<'a, L>,
    /// Streaming: keys found and not yet yielded; while there is one,
    /// nothing unseen can be its descendant.
    pending: Vec<u32>,
    seen: Bits,
    /// Once lines branch: the rest, in order.
    ordered: Option<std::vec::IntoIter<u32>>,
    buf: Vec<u32>,
}

impl<L: ?Sized> std::fmt::Debug for KeyWalk<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyWalk")
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl<'a, L: Lineage + ?Sized> KeyWalk<'a, L> {
    pub(super) fn new(
        lineage: &'a L,
        ix: std::sync::Arc<LineageIndex>,
        starts: &[ObjectId],
        follow: Follow,
    ) -> Result<Self> {
        let mut walker = Walker::new(lineage, ix, follow);
        let mut seen = Bits::with_capacity(walker.indexed());
        let mut pending = Vec::new();
        for s in starts {
            let k = walker.key(s)?;
            if seen.insert(k) {
                pending.push(k);
            }
        }
        Ok(KeyWalk {
            walker,
            pending,
            seen,
            ordered: None,
            buf: Vec::new(),
        })
    }

    /// The next key in log order.
    pub(super) fn next_key(&mut self) -> Result<Option<u32>> {
        if let Some(rest) = &mut self.ordered {
            return Ok(rest.next());
        }
        match self.pending.len() {
            0 => Ok(None),
            1 => {
                let k = self.pending.pop().expect("one pending");
                if self.walker.in_file(k) {
                    // The hot loop (a line of history inside the file): no
                    // parents buffer, no allocation, no hashing.
                    let ix = &self.walker.ix;
                    match self.walker.follow {
                        Follow::All => {
                            for q in ix.parents(k)? {
                                if self.seen.insert(q) {
                                    self.pending.push(q);
                                }
                            }
                        }
                        Follow::FirstParent => {
                            if let Some(q) = ix.first_parent(k)? {
                                if self.seen.insert(q) {
                                    self.pending.push(q);
                                }
                            }
                        }
                    }
                    return Ok(Some(k));
                }
                self.walker.parents(k, &mut self.buf)?;
                for &q in &self.buf {
                    if self.seen.insert(q) {
                        self.pending.push(q);
                    }
                }
                Ok(Some(k))
            }
            _ => {
                let from = std::mem::take(&mut self.pending);
                let mut rest = self.walker.topo_order(&from)?.into_iter();
                let first = rest.next();
                self.ordered = Some(rest);
                Ok(first)
            }
        }
    }
}
