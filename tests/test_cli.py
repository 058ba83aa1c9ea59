import importlib.util

from click.testing import CliRunner

from workbench.cli import cli


def invoke(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env)


def test_list_shows_each_family_with_its_versions():
    r = invoke("list")
    assert r.exit_code == 0
    assert "layernorm_forward" in r.output and "One thread per row" in r.output


def test_show_prints_the_story_and_the_source():
    r = invoke("show", "layernorm_forward", "4")
    assert r.exit_code == 0
    assert "E[x^2]" in r.output and "why faster" in r.output
    assert "layernorm_forward4" in r.output  # the source


def test_show_a_family_lists_its_contract():
    r = invoke("show", "layernorm_forward")
    assert r.exit_code == 0 and "tolerance" in r.output and "version 6" in r.output


def test_unknown_family_names_what_exists():
    r = invoke("run", "nope", "1")
    assert r.exit_code == 2
    assert "unknown family 'nope'" in r.output and "layernorm_forward" in r.output
    assert "Traceback" not in r.output


def test_unknown_version_names_what_exists():
    r = invoke("show", "layernorm_forward", "99")
    assert r.exit_code == 2 and "versions: 1, 2, 3" in r.output


def test_bad_sizes_is_one_clear_line():
    r = invoke("run", "layernorm_forward", "1", "--sizes", "B=4,Q=3")
    assert r.exit_code == 2 and "bad --sizes entry 'Q=3'" in r.output


def test_run_refuses_sizes_its_preconditions_refuse_before_any_gpu_work(monkeypatch):
    real = importlib.util.find_spec  # no PyCUDA: had the sizes got past the CLI, that would be the error
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pycuda" else real(name, *a))
    r = invoke("run", "encoder_forward", "13", "--sizes", "C=7000")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "encoder_forward 13 refuses" in r.output and "C=7000" in r.output and "C <= 6144" in r.output
    assert "PyCUDA" not in r.output
    r = invoke("run", "encoder_forward", "13", "--sizes", "C=770")  # C % 4 != 0
    assert r.exit_code == 2 and "C % 4 == 0" in r.output and "PyCUDA" not in r.output


def test_run_refuses_a_block_size_the_header_does_not_list_before_any_gpu_work(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pycuda" else real(name, *a))
    r = invoke("run", "encoder_forward", "13", "--block-size", "256", "--block-size", "99")
    assert r.exit_code == 2 and "Traceback" not in r.output and "PyCUDA" not in r.output
    assert "does not take block size 99" in r.output and "128, 256, 512, 1024" in r.output


def test_without_pycuda_run_says_what_is_missing(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pycuda" else real(name, *a))
    r = invoke("run", "layernorm_forward", "4")
    assert r.exit_code == 3
    assert "PyCUDA is not installed" in r.output and "pip install" in r.output
    assert "Traceback" not in r.output


def test_bench_needs_families_or_all():
    r = invoke("bench")
    assert r.exit_code == 1 and "--all" in r.output


def test_help_works_without_a_gpu():
    for cmd in ([], ["run"], ["bench"], ["show"], ["list"]):
        r = invoke(*cmd, "--help")
        assert r.exit_code == 0 and "Usage" in r.output
