#!/usr/bin/env python3
"""The package's layers: which part of socketlab imports which, drawn from the code itself.

    python3 scripts/layers.py [--check]

A part is a subpackage or a top-level module of src/socketlab. Every import of one part by
another (module level or inside a function) is an arrow. Parts are put in layers: layer 0
imports no other part, layer n imports only parts below it. An arrow within a layer or upwards
is a cycle, which `--check` refuses (exit 1). docs/architecture.md carries the printed picture.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "socketlab"


def part_of(module: str) -> str | None:
    """'socketlab.report.compare' -> 'report'; None outside the package."""
    bits = module.split(".")
    return bits[1] if bits[0] == "socketlab" and len(bits) > 1 else None


def imports(path: Path) -> set[str]:
    """Dotted names of the socketlab modules ``path`` imports, relative imports resolved."""
    # the package a relative import starts from: the folder, for __init__.py and modules alike
    package = list(path.relative_to(SRC.parent).parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return {m for m in found if m.startswith("socketlab.")}


def graph() -> dict[str, set[str]]:
    """Part -> the other parts it imports."""
    parts = [p.stem for p in SRC.glob("*.py")] + [p.parent.name for p in SRC.glob("*/__init__.py")]
    edges: dict[str, set[str]] = {p: set() for p in parts if not p.startswith("_")}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        me = rel.parts[0].removesuffix(".py")
        if me not in edges:
            continue
        for module in imports(path):
            other = part_of(module)
            if other in edges and other != me:
                edges[me].add(other)
    return edges


def layers(edges: dict[str, set[str]]) -> tuple[list[list[str]], set[str]]:
    """Parts by layer (lowest first), and the parts left over because they sit in a cycle."""
    placed: dict[str, int] = {}
    left = set(edges)
    out: list[list[str]] = []
    while left:
        ready = sorted(p for p in left if edges[p] <= set(placed))
        if not ready:
            break
        for p in ready:
            placed[p] = len(out)
        out.append(ready)
        left -= set(ready)
    return out, left


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if any import cycle exists")
    args = ap.parse_args()
    edges = graph()
    by_layer, cyclic = layers(edges)
    arrows = sum(len(v) for v in edges.values())
    print(f"{len(edges)} parts, {arrows} arrows (an arrow: the part imports that one)")
    for n, parts in reversed(list(enumerate(by_layer))):
        print(f"layer {n}:")
        for p in parts:
            down = ", ".join(sorted(edges[p])) or "-"
            print(f"  {p:<11} -> {down}")
    if cyclic:
        loops = defaultdict(set)
        for p in cyclic:
            loops[p] = edges[p] & cyclic
        print("in a cycle (an arrow within or up the layers):")
        for p in sorted(loops):
            print(f"  {p:<11} -> {', '.join(sorted(loops[p]))}")
    return 1 if args.check and cyclic else 0


if __name__ == "__main__":
    sys.exit(main())
