"""The promoted set: provenance, integrity, and choosing winners (no GPU needed)."""

import json
import shutil

import pytest

from train.backends import KERNELS_DIR, PromotedSet
from train.config import preset
from train.errors import TrainError
from train.model import Program, promotion_sizes
from workbench.family import Project
from workbench.promote import ranked, read_manifest, sha256
from workbench.results import load

from conftest import FIXTURES, ROOT


@pytest.fixture
def kernels(tmp_path):
    shutil.copytree(KERNELS_DIR, tmp_path / "kernels")
    return tmp_path / "kernels"


def test_the_shipped_set_covers_every_family_the_trainer_calls():
    manifest = read_manifest(KERNELS_DIR)["kernels"]
    needed = {c.family for kind in ("softmax", "relu") for c in Program(preset("d12"), 4, 1024, kind).calls}
    assert needed <= set(manifest)
    promoted = PromotedSet()
    for family in needed:
        e = manifest[family]
        assert e["sha256"] == sha256(KERNELS_DIR / e["file"]) and e["gpu"] and e["median_us"] > 0
        v = promoted.version(family)
        assert not any(v.unmet(s) for s in promotion_sizes(family, v.family.sizes)), f"{family}: preconditions exclude the trainer"


def test_a_hand_edited_frozen_copy_is_refused(kernels):
    path = kernels / "layernorm_forward.cu"
    path.write_text(path.read_text() + "\n// tweaked by hand\n")
    with pytest.raises(TrainError, match="layernorm_forward.cu was edited after it was promoted"):
        PromotedSet(directory=kernels).version("layernorm_forward")


def test_a_missing_frozen_copy_or_family_is_named(kernels):
    (kernels / "gelu_forward.cu").unlink()
    with pytest.raises(TrainError, match="gelu_forward.cu is missing"):
        PromotedSet(directory=kernels).version("gelu_forward")
    manifest = json.loads((kernels / "manifest.json").read_text())
    del manifest["kernels"]["adamw"]
    (kernels / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TrainError, match="no version of it is promoted"):
        PromotedSet(directory=kernels).version("adamw")


def test_no_manifest_says_how_to_make_one(tmp_path):
    with pytest.raises(TrainError, match="promote"):
        PromotedSet(directory=tmp_path)


def test_trainer_sizes_are_the_programs_calls_in_the_familys_names():
    fam = Project(ROOT).family("fused_classifier")
    assert promotion_sizes(fam.name, fam.sizes) == [{"B": 4, "T": 1024, "V": 50257, "Vp": 50304}]
    softmax = Project(ROOT).family("softmax_forward")
    assert promotion_sizes(softmax.name, softmax.sizes) == []  # a course family


def test_promote_best_ranks_passing_versions_fastest_first():
    assert ranked(load(FIXTURES / "results" / "bench_faulty.json")) == {("scale", "fp32"): [(1, 128)]}  # the faulty ones are not candidates
    run = load(ROOT / "results" / "h100-bench.json")
    best = ranked(run)
    assert best[("attention_forward", "fp32")][0][0] == 5
    times = {r.version: r.best.median_us for r in run.family("layernorm_forward").versions}
    order = [v for v, _ in best[("layernorm_forward", "fp32")]]
    assert [times[v] for v in order] == sorted(times[v] for v in order)


def test_deterministic_runs_use_the_promoted_stand_in_of_a_family_with_atomics(kernels):
    manifest = json.loads((kernels / "manifest.json").read_text())
    entries = manifest["kernels"]
    for family in ("encoder_backward", "layernorm_forward"):
        entries[family].pop("deterministic", None)  # as promoted before the field existed: the family decides
    main = entries["encoder_backward"]["version"]
    stand_in = dict(entries["encoder_backward"], version=3, deterministic=True, variant="deterministic")
    entries["encoder_backward@deterministic"] = stand_in
    entries.pop("global_norm@deterministic", None)  # a family with atomics and no stand-in, below
    (kernels / "manifest.json").write_text(json.dumps(manifest))
    plain, det = PromotedSet(directory=kernels), PromotedSet(directory=kernels, deterministic=True)
    assert plain.entry("encoder_backward")["version"] == main and det.entry("encoder_backward")["version"] == 3
    assert det.entry("layernorm_forward") is det.manifest["layernorm_forward"]  # no atomics: its own
    assert det.stand_ins(["encoder_backward", "layernorm_forward"]) == {"encoder_backward": stand_in}
    # a version whose header says deterministic = false is replaced whatever its family
    assert not entries["layernorm_backward"]["deterministic"]
    assert det.entry("layernorm_backward") is det.manifest["layernorm_backward@deterministic"]
    with pytest.raises(TrainError, match="--deterministic: the promoted global_norm .* run `workbench promote "
                                         "global_norm 3 --deterministic`"):
        det.entry("global_norm")


@pytest.mark.parametrize("precision, attention", [("bf16", "flash"), ("bf16", "cudnn"), ("fp32", "flash")])
def test_the_shipped_set_serves_every_precision_and_attention_the_trainer_offers(precision, attention):
    program = Program(preset("d12"), 4, 1024, attention, precision=precision)
    promoted = PromotedSet()
    for call in program.calls:
        v = promoted.version(call.family, call.precision, call.variant)
        assert v.precision == precision and v.variant == call.variant, call.label
        assert not v.unmet(promotion_sizes(call.family, v.family.sizes)[0])


def test_promoted_is_readable_at_80_columns():
    """CliRunner's console is 80 columns: every header word whole, no cell cut with an ellipsis,
    and each title whole (wrapped on words)."""
    from click.testing import CliRunner
    from workbench.cli import cli
    r = CliRunner().invoke(cli, ["promoted"])
    assert r.exit_code == 0, r.output
    assert "…" not in r.output and max(len(line) for line in r.output.splitlines()) <= 80
    words = r.output.split()
    for header in ("family", "v", "title", "block", "time"):
        assert header in words, header
    rows = [line.split("│") for line in r.output.splitlines() if line.startswith("│")]
    column = " ".join(" ".join(row[3] for row in rows).split())  # the titles, wrapped lines joined
    for entry in read_manifest(KERNELS_DIR)["kernels"].values():
        assert " ".join(entry["title"].split()) in column, entry["title"]
        assert entry["sha256"][:12] in words
