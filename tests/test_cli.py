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
    assert r.exit_code == 2 and "--all" in r.output  # a usage error, like click's own


def no_pycuda(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pycuda" else real(name, *a))


def one_error_line(r) -> str:
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in r.output, r.output
    return lines[0]


def test_every_bad_option_or_argument_exits_2_in_one_line_before_any_gpu_work(monkeypatch, tmp_path):
    no_pycuda(monkeypatch)  # had any got past the checks, PyCUDA's absence (exit 3) would be the error
    (tmp_path / "taken.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    for args, says in [
        (["bench", "layernorm_forward", "--all"], "not both"),
        (["bench", "layernorm_forward", "gelu_forward", "--sizes", "B=2"], "one family at a time"),
        (["bench", "layernorm_forward", "--resume"], "--resume needs the --json file"),
        (["bench", "layernorm_forward", "--json", str(tmp_path / "nope" / "r.json")], "does not exist"),
        (["check", "layernorm_forward", "--json", str(tmp_path / "taken.json")], "pass --force"),
        (["run", "layernorm_forward", "6", "--sweep", "Q=1..4"], "has no size Q"),
        (["run", "layernorm_forward", "6", "--sweep", "C=9..1"], "bad --sweep"),
        (["--root", str(tmp_path / "empty"), "list"], "no kernel families"),
    ]:
        r = invoke(*args)
        assert r.exit_code == 2 and says in one_error_line(r), (args, r.output)


def test_bench_resume_of_a_file_that_is_not_results_says_so_before_pycuda(monkeypatch, tmp_path):
    no_pycuda(monkeypatch)
    bad = tmp_path / "notjson.json"
    bad.write_text("not json at all")
    r = invoke("bench", "layernorm_forward", "--resume", "--json", str(bad))
    line = one_error_line(r)
    assert r.exit_code == 2 and "not JSON" in line and "PyCUDA" not in line
    assert bad.read_text() == "not json at all"


def test_sizes_no_machine_could_hold_are_refused_before_pycuda(monkeypatch):
    no_pycuda(monkeypatch)
    for args in (["bench", "layernorm_forward"], ["run", "layernorm_forward", "6"], ["check", "layernorm_forward"]):
        r = invoke(*args, "--sizes", "B=1000000000,T=1024,C=768")
        line = one_error_line(r)
        assert r.exit_code == 2 and "B=1000000000" in line and "host memory" in line and "PyCUDA" not in line
    assert invoke("check", "layernorm_forward", "--sizes", "B=2,T=3,C=8").exit_code == 3  # small sizes pass on


def test_show_never_cuts_a_source_line(monkeypatch):
    from workbench.family import Project
    from workbench.report import source_start
    source = Project(None).family("layernorm_forward").version(6).source
    code = [line.strip() for line in source[source_start(source):].splitlines() if line.strip()]
    assert max(map(len, code)) > 80, "a line longer than the console, to see it whole"
    r = invoke("show", "layernorm_forward", "6")  # CliRunner: 80 columns, not a terminal
    assert r.exit_code == 0
    shown = r.output.splitlines()
    cut = [line for line in code if not any(line in s for s in shown)]
    assert not cut, cut[:3]
    assert "128-bit loads, the row held in registers" in r.output  # the title: wrapped, not cut


def test_help_works_without_a_gpu():
    for cmd in ([], ["run"], ["bench"], ["show"], ["list"]):
        r = invoke(*cmd, "--help")
        assert r.exit_code == 0 and "Usage" in r.output


def test_the_lazy_verbs_load_when_asked_for_and_are_all_there(tmp_path):
    """diff's and the trainer's modules are not imported by a plain command's start; each lazy
    name is a command of the module it names, and every command of those modules is lazy."""
    import subprocess
    import sys

    from workbench.cli import app
    code = ("import sys; import workbench.cli; "
            "print(sorted(m for m in ('workbench.cli.diff', 'workbench.cli.trainer', 'pygments', 'train.backends') if m in sys.modules))")
    from conftest import ROOT
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    import importlib
    for module in set(app.cli.lazy.values()):
        names = {c.name for c in importlib.import_module(f"workbench.cli.{module}").commands}
        assert names == {n for n, m in app.cli.lazy.items() if m == module}
    r = CliRunner().invoke(cli, ["--help"])
    assert all(name in r.output for name in app.cli.lazy)
    r = CliRunner().invoke(cli, ["promoted", "--help"])
    assert r.exit_code == 0 and "promoted [OPTIONS]" in r.output
