"""Files the workbench writes (results, manifests, caches, scaffolds): always whole or not at all."""

from __future__ import annotations

import os
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
