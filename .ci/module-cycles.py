#!/usr/bin/env python3
"""Checks that store/src's modules import one another without a cycle.

Every `crate::a::...` path in a file of module `m` (its `use` lines and its
inline paths alike) is an edge m -> a between the library's top-level modules
(`store/src/odb/pack.rs` belongs to `odb`, `store/src/store/run.rs` to
`store`). The crate root (lib.rs) and `#[cfg(test)]`-only modules such as
`fuzzing` are left out: they sit above everything by design. The script
prints the graph's strongly connected components of more than one module
and exits 1 if there is one, so CI fails on the first cycle.

    python3 .ci/module-cycles.py [--graph]   # --graph prints every edge
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "store", "src")
# Modules that may see everything: the crate root and the fuzzing entry points.
ABOVE_ALL = {"lib", "fuzzing"}

PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\};", re.S)


def module_of(rel):
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def edges():
    graph = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            m = module_of(os.path.relpath(full, ROOT))
            graph.setdefault(m, set())
            text = strip_comments(open(full, encoding="utf-8").read())
            targets = set(PATH.findall(text))
            for group in USE_GROUP.findall(text):
                for item in re.split(r",(?![^{]*\})", group):
                    head = item.strip().split("::")[0].strip()
                    if re.fullmatch(r"[a-z_][a-z0-9_]*", head):
                        targets.add(head)
            for t in targets:
                if t != m and os.path.exists(os.path.join(ROOT, t + ".rs")) or os.path.isdir(os.path.join(ROOT, t)):
                    if t != m:
                        graph[m].add(t)
    return graph


def sccs(graph):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    graph = {m: t - ABOVE_ALL for m, t in edges().items() if m not in ABOVE_ALL}
    if "--graph" in sys.argv:
        for m in sorted(graph):
            print(f"{m} -> {', '.join(sorted(graph[m])) or '(nothing)'}")
    cycles = [c for c in sccs(graph) if len(c) > 1]
    for c in cycles:
        print(f"import cycle among {len(c)} modules: {', '.join(c)}")
        for m in c:
            inside = sorted(t for t in graph[m] if t in c)
            print(f"  {m} -> {', '.join(inside)}")
    if cycles:
        sys.exit(1)
    print(f"store/src: {len(graph)} modules, no import cycle")


if __name__ == "__main__":
    main()
