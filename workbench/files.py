"""Files the workbench writes (results, manifests, caches, scaffolds): always whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to a temporary file beside `path`, then rename it over `path`: a crash
    mid-write leaves the old file (or none), never half of a new one; a failed write leaves no
    temporary file behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def unwritable_folder(folder: str | os.PathLike, create: bool = True) -> str | None:
    """Why no file can be made in `folder` (the system's reason, or that a file is in the way), or
    None when one can (a probe file is made and removed).
    create=True makes the folder (and its parents) first; create=False probes its nearest existing
    ancestor instead, leaving the disk as it was. The caller turns the reason into its one line."""
    probe_in = Path(folder)
    if not create:
        while not probe_in.exists() and probe_in.parent != probe_in:
            probe_in = probe_in.parent
    if probe_in.exists() and not probe_in.is_dir():
        return f"{probe_in} is a file, not a folder"
    try:
        if create:
            probe_in.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=probe_in, prefix=".probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return str(e.strerror or e)
    return None
