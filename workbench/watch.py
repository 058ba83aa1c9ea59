"""`run --watch`: what a version's build reads (its .cu and every local header it includes,
followed through the headers), and waiting for one of them to change.

Polling the files' (mtime, size) every POLL_S, rather than an inotify library: a handful of files,
no dependency, and it sees an editor's save-by-rename as well as a write in place. A change is
taken once the files have stayed the same for SETTLE_S (an editor writing in two steps, or a
formatter run after the save, gives one run, not two)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from .compile import INCLUDE, find_header, include_dirs

POLL_S = 0.05
SETTLE_S = 0.05

Stamp = tuple[tuple[str, int, int], ...]


def build_files(path: Path) -> list[Path]:
    """The version's file and the local headers it includes (recursively), as compile finds them."""
    path = Path(path).resolve()
    dirs = include_dirs(path)
    files, todo = [path], [path]
    while todo:
        try:
            text = todo.pop().read_text()
        except OSError:
            continue
        for name in INCLUDE.findall(text):
            cand = find_header(name, dirs)
            if cand is not None and cand.resolve() not in files:
                files.append(cand.resolve())
                todo.append(cand.resolve())
    return files


def stamp(path: Path) -> Stamp:
    """(file, mtime_ns, size) of each file the build reads; a missing file is (file, 0, -1)."""
    out = []
    for f in build_files(path):
        try:
            st = f.stat()
            out.append((str(f), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(f), 0, -1))
    return tuple(out)


def changed_files(before: Stamp, after: Stamp) -> list[str]:
    old = {f: (m, s) for f, m, s in before}
    return [f for f, m, s in after if old.get(f) != (m, s)] + [f for f in old if f not in {a[0] for a in after}]


def wait_for_change(path: Path, since: Stamp, sleep: Callable[[float], None] = time.sleep) -> tuple[Stamp, list[str]]:
    """Block until the build's files differ from `since` and have settled; (new stamp, the files
    that changed)."""
    while True:
        now = stamp(path)
        if now != since:
            while True:  # until a pause of SETTLE_S sees no further write
                sleep(SETTLE_S)
                again = stamp(path)
                if again == now:
                    return now, changed_files(since, now)
                now = again
        sleep(POLL_S)
