"""The promoted set: provenance, integrity, and choosing winners (no GPU needed)."""

import json
import shutil

import pytest

from workbench.errors import TrainError
from workbench.family import Project
from workbench.promote import ranked_from_results, read_manifest, trainer_sizes
from train.model import Program
from train.config import preset
from train.ops import KERNELS_DIR, PromotedSet, sha256

from conftest import FIXTURES, ROOT


@pytest.fixture
def kernels(tmp_path):
    shutil.copytree(KERNELS_DIR, tmp_path / "kernels")
    return tmp_path / "kernels"


def test_the_shipped_set_covers_every_family_the_trainer_calls():
    manifest = read_manifest()["kernels"]
    needed = {c.family for kind in ("softmax", "relu") for c in Program(preset("d12"), 4, 1024, kind).calls}
    assert needed <= set(manifest)
    promoted = PromotedSet()
    for family in needed:
        e = manifest[family]
        assert e["sha256"] == sha256(KERNELS_DIR / e["file"]) and e["gpu"] and e["median_us"] > 0
        v = promoted.version(family)
        assert not any(v.unmet(s) for s in trainer_sizes(v.family)), f"{family}: preconditions exclude the trainer"


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
    assert trainer_sizes(fam) == [{"B": 4, "T": 1024, "V": 50257, "Vp": 50304}]
    assert trainer_sizes(Project(ROOT).family("softmax_forward")) == []  # a course family


def test_promote_best_ranks_passing_versions_fastest_first():
    payload = json.loads((FIXTURES / "results" / "bench_faulty.json").read_text())
    assert ranked_from_results(payload) == {"scale": [(1, 128)]}  # the faulty ones are not candidates
    payload = json.loads((ROOT / "results" / "h100-bench.json").read_text())
    ranked = ranked_from_results(payload)
    assert ranked["attention_forward"][0][0] == 5
    times = {v["version"]: v["best"]["median_us"] for f in payload["families"] if f["family"] == "layernorm_forward"
             for v in f["versions"]}
    order = [v for v, _ in ranked["layernorm_forward"]]
    assert [times[v] for v in order] == sorted(times[v] for v in order)
