"""The promoted set: provenance, integrity, and choosing winners (no GPU needed)."""

import json
import shutil

import pytest

from train.backends import KERNELS_DIR, PromotedSet
from train.config import preset
from train.errors import TrainError
from train.model import FUSED, Program, promotion_sizes
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


@pytest.mark.parametrize("family", FUSED)
def test_every_fused_family_has_the_trainers_sizes_to_be_promoted_at(family):
    """promote re-checks a fused family at the sizes the trainer calls it at, over both attention
    kinds (qkv_bias_backward only has the softmax kinds': the Program refuses it with relu)."""
    sizes = Project(ROOT).family(family).sizes
    got = promotion_sizes(family, sizes)
    assert got and all(set(s) == set(sizes) for s in got)


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
    # serves: what entry() finds; an optional (fused) family with atomics and no stand-in does not serve
    assert plain.serves("global_norm") and not det.serves("global_norm")
    assert det.serves("encoder_backward") and det.serves("layernorm_backward") and det.serves("layernorm_forward")
    assert not plain.serves("no_such_family")


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


FIELDS = {"block_size": None, "timed_at": "B=4,T=1024,NH=12,HS=64", "checked_at": [], "median_us": 1.0, "gbps": 1.0,
          "gpu": "(test: bookkeeping only)", "date": "2026-11-28", "commit": "test"}


def test_a_version_bound_to_one_arch_keeps_the_version_it_replaces_as_its_fallback(kernels):
    """attention_backward 14 (wgmma: sm_90a only, HS == 64 only) promoted over version 10 keeps
    10's entry, frozen copy and all, as its fallback; promoting another sm_90a version carries the
    same fallback over; a version for any GPU drops it."""
    from workbench.promote import record
    family = Project(ROOT).family("attention_backward")
    before = record(kernels, family.version(10), None, FIELDS).entry  # a version for any GPU: the start
    assert "fallback" not in before and not (kernels / "attention_backward.bf16.fallback.cu").exists()
    text_before = (kernels / before["file"]).read_text()
    e = record(kernels, family.version(14), None, FIELDS).entry
    assert e["version"] == 14 and e["arch"] == "sm_90a" and e["fallback"]["version"] == before["version"]
    spare = kernels / e["fallback"]["file"]
    assert spare.name == "attention_backward.bf16.fallback.cu" and spare.read_text() == text_before
    assert e["fallback"]["sha256"] == sha256(spare) and sha256(kernels / e["file"]) == e["sha256"]
    e = record(kernels, family.version(13), None, FIELDS).entry  # sm_90a too: the same fallback
    assert e["version"] == 13 and e["fallback"]["version"] == before["version"] and spare.read_text() == text_before
    e = record(kernels, family.version(10), None, FIELDS).entry  # any GPU: no fallback
    assert "fallback" not in e and "arch" not in e and not spare.exists()
    assert read_manifest(kernels)["kernels"]["attention_backward.bf16"] == e


def test_the_trainer_runs_the_fallback_off_the_arch_and_at_sizes_the_version_excludes(kernels):
    from workbench.promote import record
    family = Project(ROOT).family("attention_backward")
    fallback = record(kernels, family.version(10), None, FIELDS).entry["version"]
    record(kernels, family.version(14), None, FIELDS)
    promoted = PromotedSet(directory=kernels)
    d12, tiny = {"B": 4, "T": 1024, "NH": 12, "HS": 64}, {"B": 4, "T": 64, "NH": 4, "HS": 16}
    e, why = promoted.serving("attention_backward", "bf16", None, d12, "sm_90a")
    assert e["version"] == 14 and why is None
    e, why = promoted.serving("attention_backward", "bf16", None, d12, "sm_80")
    assert e["version"] == fallback and "needs sm_90a" in why and "sm_80" in why
    e, why = promoted.serving("attention_backward", "bf16", None, tiny, "sm_90a")
    assert e["version"] == fallback and "HS == 64" in why
    assert promoted.version_of(e).number == fallback and not promoted.version_of(e).unmet(tiny)
    # version 14 sums dQ in a fixed order: --deterministic runs it as it is, no stand-in
    e, why = PromotedSet(directory=kernels, deterministic=True).serving("attention_backward", "bf16", None, d12, "sm_90a")
    assert e["version"] == 14 and why is None


def test_the_shipped_wgmma_attention_falls_back_to_a_version_for_any_gpu():
    """The shipped bf16 attention is the wgmma pair (sm_90a, HS == 64); each keeps a frozen,
    hash-checked fallback that runs on any GPU and at the tiny preset's 16-channel heads."""
    promoted = PromotedSet()
    for family, number in (("attention_forward", 17), ("attention_backward", 15)):
        e = promoted.manifest[f"{family}.bf16"]
        assert e["arch"] == "sm_90a" and e["version"] == number
        fb = promoted.version_of(e["fallback"])
        assert fb.arch is None and not fb.unmet({"B": 4, "T": 64, "NH": 2, "HS": 16})
