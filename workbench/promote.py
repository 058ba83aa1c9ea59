"""Promote: freeze a checked version (and its best block size) into the trainer's kernel set.

A version is promoted only after it passes, on the GPU, at every size the trainer calls its family
with (GPT-2 124M at B=4, T=1024, read off train/model.py's program) and at the family's test
sizes. The version's file (with local headers inlined) is copied to train/kernels/<family>.cu,
and train/kernels/manifest.json records where it came from: family, version, block size, source
hash, measured time and bandwidth, GPU, date, commit. The trainer launches the frozen copy through
the same launch description (workbench/launch.py) and refuses one whose hash no longer matches.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from pathlib import Path

from .compile import flatten
from .errors import WorkbenchError
from .family import PROJECT_ROOT, Family, Version

KERNELS_DIR = PROJECT_ROOT / "train" / "kernels"
MANIFEST = "manifest.json"
TRAINER_SHAPES = {"config": "d12", "B": 4, "T": 1024}


class PromoteError(WorkbenchError):
    """A version that cannot be promoted; the message says why."""


def trainer_sizes(family: Family) -> list[dict[str, int]]:
    """Every size set the trainer calls `family` at (both attention kinds), in the family's names."""
    from train.config import preset
    from train.model import ATTENTION, Program
    out: list[dict[str, int]] = []
    for kind in ATTENTION:
        program = Program(preset(TRAINER_SHAPES["config"]), TRAINER_SHAPES["B"], TRAINER_SHAPES["T"], kind)
        for sizes in program.family_sizes().get(family.name, []):
            own = {k: v for k, v in sizes.items() if k in family.sizes}
            if own not in out:
                out.append(own)
    return out


def read_manifest(directory: Path = KERNELS_DIR) -> dict:
    path = Path(directory) / MANIFEST
    if not path.exists():
        return {"kernels": {}}
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise PromoteError(f"{path} is not valid JSON ({e}); restore it from git") from None


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def promote(session, version: Version, block_size: int | None = None, directory: Path = KERNELS_DIR) -> dict:
    """Check `version` at the trainer's sizes and test sizes, time it, freeze it. Returns
    {"entry": new manifest entry, "previous": the entry it replaced or None, "result": the check}."""
    family = version.family
    sizes = trainer_sizes(family)
    if not sizes:
        raise PromoteError(f"the trainer does not call {family.name}; only the families it calls can be promoted")
    for s in sizes:
        unmet = version.unmet(s)
        if unmet:
            raise PromoteError(f"{version.label} cannot serve the trainer: at {family.format_sizes(s)} it "
                               f"requires {' and '.join(unmet)}")
    if block_size is not None and block_size not in version.block_sizes:
        raise PromoteError(f"{version.label} does not sweep block size {block_size} "
                           f"(its header lists {list(version.block_sizes)})")
    session.options.block_sizes = [block_size] if block_size is not None else None
    res = session.run_version(version, sizes[0], extra_sizes=sizes[1:])
    if res.get("status") != "passed":
        from .report import reason_line
        raise PromoteError(f"{version.label} did not pass at the trainer's sizes, so it is not promoted: "
                           f"{res.get('status')}: {reason_line(res)}")
    chosen = block_size if block_size is not None else res.get("best_block_size")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    frozen = directory / f"{family.name}.cu"
    _write_atomic(frozen, flatten(version.path))
    manifest = read_manifest(directory)
    previous = manifest["kernels"].get(family.name)
    best = res["timings"][str(chosen)]
    meta = session.metadata()
    entry = {
        "family": family.name, "version": version.number, "title": version.title, "file": frozen.name,
        "block_size": chosen, "source": str(version.path.relative_to(family.project.root)),
        "sha256": hashlib.sha256(frozen.read_bytes()).hexdigest(),
        "timed_at": family.format_sizes(sizes[0]), "checked_at": [family.format_sizes(s) for s in sizes],
        "median_us": round(best["median_us"], 3), "gbps": round(best["gbps"], 1),
        **({"tflops": round(best["tflops"], 2)} if "tflops" in best else {}),
        "gpu": meta["device"]["name"], "date": datetime.date.today().isoformat(), "commit": meta.get("commit"),
    }
    manifest["kernels"][family.name] = entry
    manifest["trainer_shapes"] = TRAINER_SHAPES
    _write_atomic(directory / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return {"entry": entry, "previous": previous, "result": res}


def ranked_from_results(payload: dict) -> dict[str, list[tuple[int, int | None]]]:
    """Each family's passing versions in a bench result, fastest first: family -> [(version,
    block size)]. `promote --best` takes the first that can serve the trainer's sizes."""
    out = {}
    for fam in payload.get("families", []):
        timed = [v for v in fam.get("versions", []) if v.get("status") == "passed" and v.get("best")]
        timed.sort(key=lambda v: v["best"]["median_us"])
        if timed:
            out[fam["family"]] = [(v["version"], v.get("best_block_size")) for v in timed]
    return out
