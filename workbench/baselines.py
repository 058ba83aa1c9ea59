"""Baselines kept between runs: a family's PyTorch row and its plain-copy row, measured once and
reused by `workbench run` for a day (the version under edit is what changes; torch's kernel at
the same sizes on the same GPU does not, and importing torch alone was ~5 s of a 11 s run on the
H100). The key holds everything the rows depend on: the family's contract and reference files,
the sizes, the precision, the timing options, the device (name, bus, driver), and the installed
torch's version. `bench` always measures afresh; `run --fresh-baselines` too."""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import importlib.util
import json
from pathlib import Path

from .compile import CACHE_DIR
from .family import Family
from .files import write_text_atomic
from .options import Options
from .results import Row

CACHE_FILE = "baselines.json"
KEEP_HOURS = 24


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _file_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def baseline_key(family: Family, sizes: dict[str, int], precision: str, options: Options, device: dict,
                 specs: list[dict]) -> str:
    ref = family.project.references_dir / f"{family.reference_name.split(':')[0]}.py"
    parts = [family.name, _file_text(family.path / "family.toml"), _file_text(ref), precision,
             json.dumps(sorted(sizes.items())), json.dumps(specs, sort_keys=True),
             f"flush={options.flush} budget={options.budget} seed={options.seed}",
             f"{device.get('name')}|{device.get('pci')}|{device.get('driver_version')}", _torch_version()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


class BaselineCache:
    """{key: {"measured": ISO time, "rows": [Row JSON, ...]}} in CACHE_DIR/baselines.json."""

    def __init__(self, cache_dir: Path | None = None, now=datetime.datetime.now):
        self.path = (cache_dir or CACHE_DIR) / CACHE_FILE
        self.now = now

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def get(self, key: str) -> tuple[str, list[dict]] | None:
        """(when measured, the rows' JSON) if kept and younger than KEEP_HOURS."""
        hit = self._read().get(key)
        if not hit:
            return None
        try:
            measured = datetime.datetime.fromisoformat(hit["measured"])
        except (KeyError, ValueError):
            return None
        if self.now() - measured > datetime.timedelta(hours=KEEP_HOURS):
            return None
        return hit["measured"], hit["rows"]

    def put(self, key: str, rows: list[dict]) -> None:
        """Keep passed rows only (a failure is measured again next time); old entries go."""
        if not rows or any(r.get("status") != "passed" for r in rows):
            return
        limit = self.now() - datetime.timedelta(hours=KEEP_HOURS)
        known = {k: v for k, v in self._read().items()
                 if datetime.datetime.fromisoformat(v.get("measured", "1970-01-01T00:00:00")) > limit}
        known[key] = {"measured": self.now().isoformat(timespec="seconds"), "rows": rows}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps(known))


class KeptBaselines:
    """A session's view of the kept rows: used only where its options say so (`run`)."""

    def __init__(self, options: Options, device, cache: BaselineCache | None = None):
        self.options, self.device, self.cache = options, device, cache or BaselineCache()

    def _key(self, family: Family, sizes: dict[str, int], precision: str) -> str:
        specs, _ = baseline_specs(family, sizes, precision, self.options.torch)
        return baseline_key(family, sizes, precision, self.options, self.device(), specs)

    def get(self, family: Family, sizes: dict[str, int], precision: str) -> list[Row] | None:
        """The kept rows for these baselines (each marked with when it was measured), or None."""
        if not self.options.kept_baselines:
            return None
        hit = self.cache.get(self._key(family, sizes, precision))
        if hit is None:
            return None
        measured, rows_json = hit
        rows = [Row.from_json(r, family.name) for r in rows_json]
        for r in rows:
            r.extra["kept_from"] = measured
        return rows

    def put(self, family: Family, sizes: dict[str, int], precision: str, rows: list[Row]) -> None:
        if self.options.kept_baselines:
            self.cache.put(self._key(family, sizes, precision), [r.to_json() for r in rows])


def baseline_specs(family: Family, sizes: dict[str, int], precision: str,
                   torch: bool) -> tuple[list[dict], Row | None]:
    """The baselines' providers for a rows job (torch, when asked for and the family has an
    expression; a copy of its bytes unless it is compute-bound) and, where torch was asked for
    and is not installed, the torch row saying so."""
    specs = []
    torch_row = None
    if torch and family.torch_expression(precision):
        if importlib.util.find_spec("torch") is None:
            torch_row = Row("torch", family.name, title="torch", status="unavailable",
                            reason="torch is not installed")
        else:
            specs.append({"kind": "torch", "precision": precision})
    if not family.flops:
        specs.append({"kind": "copy", "bytes": family.bytes_moved(sizes, precision)})
    return specs, torch_row
