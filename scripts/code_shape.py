#!/usr/bin/env python3
"""The shape of the Python code: the longest functions, and each class of a module with its size.

    python3 scripts/code_shape.py [--top 10] [--classes FILE ...] [DIR ...]

Lines are counted from a function's ``def`` (or its first decorator) to its last line, as
``ast`` reports them, so nested functions count inside their parent and on their own. Used
for issue 28's before/after figures (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def _span(node: ast.AST) -> int:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return node.end_lineno - first + 1


def functions(root: Path) -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((_span(node), f"{path}:{node.lineno} {node.name}"))
    return found


def classes(path: Path) -> list[tuple[int, int, str]]:
    """(lines, methods, name) of each top-level class of ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        (
            _span(node),
            sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in node.body),
            node.name,
        )
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", default=["src"], metavar="DIR")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--classes", nargs="*", default=[], metavar="FILE")
    args = parser.parse_args(argv)
    for name in args.classes:
        path = Path(name)
        if not path.is_file():
            parser.error(f"--classes: {name}: no such file")
        total = len(path.read_text().splitlines())
        print(f"{path}: {total} lines")
        for lines, methods, cls in classes(path):
            print(f"  class {cls}: {lines} lines, {methods} methods")
    every = [f for root in args.roots for f in functions(Path(root))]
    print(f"{args.top} longest functions of {len(every)} in {' '.join(args.roots)}:")
    for lines, where in sorted(every, reverse=True)[: args.top]:
        print(f"  {lines:4d}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
