"""Promote: freeze a checked version (and its best block size) into a kernel set, such as the
trainer's train/kernels/.

A version is promoted only after it passes, on the GPU, at every size set its user calls the
family with (the caller says which: `workbench promote` passes the trainer's, read off its
program) and at the family's test sizes. The version's file, with its kernels/common headers
inlined, is copied to <directory>/<family>.cu (<family>.<precision>.cu for other precisions than
fp32), and <directory>/manifest.json records where it came from: family, version, precision,
block size, source hash, measured time and bandwidth, GPU, date, commit. Its reader
(`read_manifest`) is the one the trainer uses to load the set and refuse a copy edited by hand.
A version bound to one GPU arch keeps the entry it replaces as its fallback (`record`).

The workbench knows nothing of the trainer: sizes and directory are arguments.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .compile import flatten
from .errors import WorkbenchError
from .family import Version
from .files import write_text_atomic
from .results import BenchRun

MANIFEST = "manifest.json"
FALLBACK = "fallback"  # an entry's "fallback": what the trainer runs where the entry's version cannot


class PromoteError(WorkbenchError):
    """A version that cannot be promoted; the message says why."""


DETERMINISTIC = "deterministic"


def entry_key(family: str, precision: str = "fp32", variant: str | None = None) -> str:
    """The manifest's key of a family's promoted version at a precision, and of a variant such as
    the deterministic stand-in for a winner whose float atomics make its bits vary:
    "encoder_backward", "encoder_backward.bf16", "encoder_backward@deterministic"."""
    return family + ("" if precision == "fp32" else f".{precision}") + (f"@{variant}" if variant else "")


def read_manifest(directory: Path) -> dict:
    path = Path(directory) / MANIFEST
    if not path.exists():
        return {"kernels": {}}
    try:
        manifest = json.loads(path.read_text())
    except ValueError as e:
        raise PromoteError(f"{path} is not valid JSON ({e}); restore it from git") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("kernels"), dict):
        raise PromoteError(f"{path} is not a promotion manifest (no \"kernels\" table)")
    return manifest


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class Promoted:
    entry: dict            # the new manifest entry
    previous: dict | None  # the entry it replaced


def promote(session, version: Version, sizes: list[dict[str, int]], directory: Path,
            block_size: int | None = None, shapes_note: dict | None = None, variant: str | None = None) -> Promoted:
    """Check `version` at every size set in `sizes` (the first is the one timed) and at the
    family's test sizes, time it, and freeze it into `directory` (as `variant` of the family's
    entry when given: "deterministic" accepts only versions without order-dependent atomics)."""
    family = version.family
    variant = variant or version.variant
    if version.variant and variant != version.variant:
        raise PromoteError(f"{version.label} is the family's {version.variant!r} variant: it is promoted as that, "
                           f"not as {variant!r}")
    if variant == DETERMINISTIC and not version.deterministic:
        raise PromoteError(f"{version.label} is not deterministic (its header says its float atomics land in "
                           f"any order); pick a version without `deterministic = false`")
    if not sizes:
        raise PromoteError(f"nothing calls {family.name} at any size, so there is nothing to promote it for")
    for s in sizes:
        unmet = version.unmet(s)
        if unmet:
            raise PromoteError(f"{version.label} cannot serve: at {family.format_sizes(s)} it "
                               f"requires {' and '.join(unmet)}")
    if block_size is not None and (why := version.unlisted_block_sizes([block_size])):
        raise PromoteError(why)
    session.options.block_sizes = [block_size] if block_size is not None else None
    row = session.run_version(version, sizes[0], extra_sizes=sizes[1:])
    if not row.passed:
        from .report import reason_line
        raise PromoteError(f"{version.label} did not pass at the sizes it would serve, so it is not promoted: "
                           f"{row.status}: {reason_line(row)}")
    chosen = block_size if block_size is not None else row.best_block_size
    timed = row.timings[chosen]
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    device = session.device()["device"]
    from .bench import git_commit
    fields = {
        "block_size": chosen, "timed_at": family.format_sizes(sizes[0]),
        "checked_at": [family.format_sizes(s) for s in sizes],
        "median_us": round(timed.median_us, 3), "gbps": round(timed.gbps, 1),
        **({"tflops": round(timed.tflops, 2)} if timed.tflops else {}),
        "gpu": device["name"], "date": datetime.date.today().isoformat(), "commit": git_commit(),
    }
    return record(directory, version, variant, fields, shapes_note)


def record(directory: Path, version: Version, variant: str | None, fields: dict,
           shapes_note: dict | None = None) -> Promoted:
    """Freeze `version` into `directory` as the entry for its family, precision and `variant`,
    with `fields` (what its check and timing measured), and rewrite the manifest.

    A version bound to one GPU arch (its header's `arch`, e.g. wgmma's sm_90a) keeps the entry it
    replaces as its fallback (<key>.fallback.cu), for the trainer to run on other GPUs and at
    sizes the version's preconditions exclude; if the replaced entry is bound to an arch too, its
    own fallback carries over. A version for any arch needs none, and a stale one is removed."""
    family = version.family
    directory = Path(directory)
    key = entry_key(family.name, version.precision, variant)
    frozen, spare = directory / f"{key}.cu", directory / f"{key}.{FALLBACK}.cu"
    manifest = read_manifest(directory)
    previous = manifest["kernels"].get(key)
    fallback = None
    if version.arch and previous is not None:
        if previous.get("arch"):
            fallback = previous.get(FALLBACK)
        else:  # the replaced version's frozen copy becomes the fallback's, before the new one overwrites it
            write_text_atomic(spare, (directory / previous["file"]).read_text())
            fallback = {**previous, "file": spare.name}
    write_text_atomic(frozen, flatten(version.path))
    entry = {
        "family": family.name, "version": version.number, "precision": version.precision, "title": version.title,
        "deterministic": version.deterministic, **({"variant": variant} if variant else {}),
        **({"arch": version.arch} if version.arch else {}),
        "file": frozen.name, "source": str(version.path.relative_to(family.project.root)),
        "sha256": sha256(frozen), **fields, **({FALLBACK: fallback} if fallback else {}),
    }
    if fallback is None and spare.exists():
        spare.unlink()
    manifest["kernels"][key] = entry
    if shapes_note:
        manifest["trainer_shapes"] = shapes_note
    write_text_atomic(directory / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return Promoted(entry, previous)


def ranked(run: BenchRun) -> dict[tuple[str, str], list[tuple[int, int | None]]]:
    """Each (family, precision)'s passing versions in a bench, fastest first:
    -> [(version, best block size)]. `promote --best` takes the first that can serve."""
    out = {}
    for fam in run.families:
        timed = sorted((r for r in fam.versions if r.passed and r.best), key=lambda r: r.best.median_us)
        if timed:
            out[fam.key] = [(r.version, r.best_block_size) for r in timed]
    return out


def promote_best(session, candidates: list[tuple[Version, int | None]], sizes: list[dict[str, int]],
                 directory: Path, shapes_note: dict | None = None, variant: str | None = None) -> Promoted:
    """The first candidate (fastest first) that passes at `sizes` and is an entry of `variant`
    (None: the family's own, from the versions without a variant); the last refusal if none does."""
    last: PromoteError | None = None
    for version, block_size in candidates:
        if variant == DETERMINISTIC and not version.deterministic:
            continue
        if variant != DETERMINISTIC and version.variant != variant:
            continue
        try:
            return promote(session, version, sizes, directory, block_size, shapes_note, variant)
        except PromoteError as e:
            last = e
    raise last or PromoteError("no candidate to promote")
