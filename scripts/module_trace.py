"""Which rbplab modules a command passes through, and how often it comes back to each.

Runs an `rbplab` command line in this process under a profiler that sees only rbplab's own
functions, from the command's start until the first call of a function named STOP (by default
`write_shard`: the first shard written). Every rbplab module is imported before the profiler
starts, so module bodies (imports) are not part of the trace.

The trace is read the way one reads the code: as a calling-context tree whose nodes are
(caller node, call site line, callee function), so a call site inside a loop counts once however
many times the loop runs, and a function reached from two places counts in each. Walking the tree
depth first, a module is *entered* each time the walk moves into it from another module: by a call,
or by a return to a caller in it (a return to a module already left). Library frames are opaque; a
callback from a library into rbplab is a call from the nearest rbplab caller. Threads (the shard
writer) are walked after the main thread, each from its first rbplab function.

Usage: python scripts/module_trace.py [--stop NAME] -- extract -m micro-1-25K -c prose --max-tokens 300
       python scripts/module_trace.py --stop '' -- extract ...        (the whole command)
       python scripts/module_trace.py --python 'from rbplab import load_study; ...'
       python scripts/module_trace.py --setup 'view = ...' --python 'view.set_k(10)'
Prints, per module, how many times it was entered (by calls and returns) and by calls alone, then
the totals: modules passed, entries, and returns to a module already left (entries beyond the
first of each module); and last the machine's count: the rbplab files any of whose functions ran
(module bodies excluded), in every thread, whatever the call tree.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any


@dataclass
class Node:
    module: str
    children: dict[tuple[int, Any], Node] = field(default_factory=dict)


def import_everything(package: Any) -> Path:
    """Import every module of `package` (those that fail on a missing extra are skipped)."""
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:
            continue
    return Path(package.__file__).resolve().parent


class Tracer:
    """Calling-context trees of rbplab frames, one per thread, until `stop` is first called."""

    def __init__(self, root: Path, stop: str) -> None:
        self.root = root
        self.stop = stop
        self.stopped = False
        self.trees: dict[int, Node] = {}  # thread id -> root node, in the order threads appeared
        self.stacks: dict[int, list[tuple[FrameType, Node]]] = {}
        self.lock = threading.Lock()
        self.modules: dict[str, str | None] = {}  # file name -> rbplab module (None: not rbplab's)
        self.ran: set[str] = set()  # modules any of whose functions were called

    def module_of(self, frame: FrameType) -> str | None:
        if frame.f_code.co_name == "<module>":
            return None
        name = frame.f_code.co_filename
        if name not in self.modules:
            path = Path(name)
            try:
                # inside the package folder only: a virtualenv beside it (.venv/) is not rbplab's
                inside = path.is_absolute() and path.resolve().is_relative_to(self.root)
                relative = path.resolve().relative_to(self.root.parent) if inside else None
            except ValueError:
                relative = None
            self.modules[name] = None if relative is None else str(relative.with_suffix("")).replace("/", ".")
        return self.modules[name]

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if self.stopped or event not in ("call", "return"):
            return
        module = self.module_of(frame)
        if module is None:
            return
        self.ran.add(module)
        thread = threading.get_ident()
        with self.lock:
            stack = self.stacks.setdefault(thread, [])
            if event == "return":
                if stack and stack[-1][0] is frame:
                    stack.pop()
                return
            if thread not in self.trees:
                self.trees[thread] = Node("")
            # the nearest rbplab frame still running on this thread is the caller
            while stack and not _is_running(stack[-1][0], frame):
                stack.pop()
            parent_frame, parent = stack[-1] if stack else (None, self.trees[thread])
            site = parent_frame.f_lineno if parent_frame is not None else 0
            node = parent.children.setdefault((site, frame.f_code), Node(module))
            stack.append((frame, node))
            if self.stop and frame.f_code.co_name == self.stop:
                self.stopped = True


def _is_running(candidate: FrameType, frame: FrameType) -> bool:
    """Whether `candidate` is `frame` or one of its callers."""
    current: FrameType | None = frame.f_back
    while current is not None:
        if current is candidate:
            return True
        current = current.f_back
    return False


def entries(trees: list[Node]) -> list[tuple[str, str]]:
    """(module, "call" or "return") for every move of the depth-first walk into another module."""
    walk: list[tuple[str, str]] = []

    def visit(node: Node) -> None:
        for child in node.children.values():
            if not walk or walk[-1][0] != child.module:
                walk.append((child.module, "call"))
            visit(child)
            if node.module and walk[-1][0] != node.module:
                walk.append((node.module, "return"))  # back in the caller's module

    for tree in trees:
        visit(tree)
    return walk


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stop", default="write_shard", help="function name that ends the trace ('': none, the whole run)"
    )
    parser.add_argument("--python", help="trace this Python code instead of an rbplab command line")
    parser.add_argument("--setup", default="", help="Python run untraced before --python, in its namespace")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="rbplab command line (after --)")
    args = parser.parse_args(argv)
    command = [a for a in args.command if a != "--"] if args.command[:1] == ["--"] else args.command

    import rbplab
    from rbplab.cli import app

    namespace: dict = {}
    if args.setup:
        exec(compile(args.setup, "<--setup>", "exec"), namespace)  # noqa: S102 - the user's own snippet
    tracer = Tracer(import_everything(rbplab), args.stop)
    threading.setprofile(tracer)
    sys.setprofile(tracer)
    try:
        if args.python is not None:
            exec(compile(args.python, "<--python>", "exec"), namespace)  # noqa: S102 - the user's own snippet
            status = 0
        else:
            status = app.main(command)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    walk = entries(list(tracer.trees.values()))
    counts = Counter(module for module, _ in walk)
    calls = Counter(module for module, how in walk if how == "call")
    print("entries  calls  module")
    for module, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        print(f"{count:7d}  {calls[module]:5d}  {module}")
    returns = len(walk) - len(counts)
    print(f"{len(counts)} modules, {len(walk)} entries, {returns} returns to a module already left")
    if args.stop:
        print(f"reached {args.stop}: {tracer.stopped}; command exit status {status}")
    else:
        print(f"command exit status {status}")
    ran = sorted({module for module in tracer.modules.values() if module} & tracer.ran)
    print(f"files whose functions ran: {len(ran)} ({', '.join(ran)})")
    return 0 if tracer.stopped else 1


if __name__ == "__main__":
    sys.exit(main())
