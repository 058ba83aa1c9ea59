"""modal_app.py, offline: CI has no Modal account, so nothing here talks to Modal.

The app, image and function are only defined (Modal builds and connects lazily); the remote
function's body runs here, on this checkout, for commands that need no GPU.
"""

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

modal = pytest.importorskip("modal")
import modal_app  # noqa: E402  (after the skip: it needs modal for the app itself)


@pytest.fixture(autouse=True)
def no_modal_credentials(monkeypatch, tmp_path):
    """Every test sees a machine with no Modal token."""
    for var in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-modal.toml"))
    monkeypatch.setattr(modal.config, "_user_config", {})  # read from ~/.modal.toml when modal loaded


# -- the definitions ---------------------------------------------------------------------------
def test_the_module_imports_without_credentials():
    r = subprocess.run([sys.executable, "-c", "import modal_app; print(modal_app.app.name)"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120,
                       env={**_env(), "MODAL_CONFIG_PATH": "/nonexistent.toml"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "workbench"


def test_the_image_starts_from_the_cuda_13_devel_image_with_python():
    assert modal_app.CUDA_IMAGE.startswith("nvidia/cuda:13.0.")
    assert modal_app.CUDA_IMAGE.endswith("-devel-ubuntu24.04")
    assert modal_app.PYTHON_VERSION == "3.12"
    assert isinstance(modal_app.image, modal.Image)


def test_the_image_installs_the_project_dependencies_with_the_gpu_extra():
    reqs = modal_app.requirements()
    names = [r.split(">")[0].split("=")[0].split("<")[0] for r in reqs]
    for name in ("numpy", "click", "rich", "pycuda", "nvmath-python", "tiktoken"):
        assert name in names
    assert "gpu" in modal_app.EXTRAS
    assert len(names) == len(set(names))


def test_an_unknown_extra_is_an_error_not_a_smaller_image():
    with pytest.raises(KeyError, match="nope"):
        modal_app.requirements(extras=("gpu", "nope"))


def test_every_source_folder_is_added_beside_the_app_file():
    added = dict(modal_app.source_dirs())
    for name in ("workbench", "kernels", "references"):
        assert added[ROOT / name] == modal_app.REMOTE_ROOT / name
    assert all(local.is_dir() for local in added)


def test_this_file_sits_where_the_source_folders_go_in_the_container():
    """The container finds pyproject.toml and the sources beside modal_app.py, as here."""
    entries = [e for m in modal_app.workbench_remote._spec_.mounts for e in (getattr(m, "_entries", None) or [])]
    remote = {Path(e.local_file).name: e.remote_path for e in entries if hasattr(e, "local_file")}
    assert remote["modal_app.py"] == modal_app.REMOTE_ROOT / "modal_app.py"


def test_a_missing_source_folder_is_skipped(tmp_path):
    (tmp_path / "workbench").mkdir()
    assert [local.name for local, _ in modal_app.source_dirs(tmp_path)] == ["workbench"]


def test_the_function_runs_on_an_a100_80gb_by_default_with_a_timeout_and_the_volume():
    fn = modal_app.workbench_remote
    assert modal_app.DEFAULT_GPU == "A100-80GB"
    assert fn._spec_.gpus == modal_app.GPU
    assert modal_app.FUNCTION_OPTIONS["image"] is modal_app.image
    assert list(fn._spec_.volumes) == [str(modal_app.VOLUME_PATH)]
    assert modal_app.FUNCTION_OPTIONS["volumes"] == {str(modal_app.VOLUME_PATH): modal_app.volume}
    assert modal_app.FUNCTION_OPTIONS["timeout"] == modal_app.TIMEOUT_S >= 3600
    assert modal_app.VOLUME_NAME == "workbench-data"


@pytest.mark.parametrize("env, gpu", [
    ({}, "A100-80GB"),
    ({"WORKBENCH_GPU": "H100"}, "H100"),
    ({"GPU_MEM": "40"}, "A100-40GB"),
    ({"GPU_MEM": "80GB"}, "A100-80GB"),
    ({"WORKBENCH_GPU": "L40S", "GPU_MEM": "40"}, "L40S"),
])
def test_the_gpu_type_comes_from_the_environment(env, gpu):
    assert modal_app.gpu_from_env(env) == gpu


def test_workbench_gpu_decides_the_functions_gpu_when_the_file_loads(monkeypatch):
    monkeypatch.setenv("WORKBENCH_GPU", "H100")
    monkeypatch.setenv("WORKBENCH_MODAL_TIMEOUT", "600")
    try:
        reloaded = importlib.reload(modal_app)
        assert reloaded.workbench_remote._spec_.gpus == "H100"
        assert reloaded.FUNCTION_OPTIONS["timeout"] == 600
    finally:
        monkeypatch.delenv("WORKBENCH_GPU")
        monkeypatch.delenv("WORKBENCH_MODAL_TIMEOUT")
        importlib.reload(modal_app)


def test_the_local_entrypoint_takes_command_gpu_and_out():
    import inspect
    entry = modal_app.main.info.raw_f
    params = inspect.signature(entry).parameters
    assert list(params) == ["command", "gpu", "out"]
    assert params["command"].default == "" and params["out"].default == "results.json"


# -- the entry point's arguments, mapped to workbench commands ---------------------------------
@pytest.mark.parametrize("command, out, argv, json_path", [
    ("", "results.json", ["bench", "--all"], "results.json"),
    ("run layernorm_forward 4", "results.json", ["run", "layernorm_forward", "4"], "results.json"),
    ("train -b 8 --steps 50", "results.json", ["train", "-b", "8", "--steps", "50"], None),
    ("prepro", "results.json", ["prepro"], None),
    ("list", "x.json", ["list"], None),
    ("bench softmax_forward --json h100.json", "results.json", ["bench", "softmax_forward"], "h100.json"),
    ("bench --all --json=a/b.json", "results.json", ["bench", "--all"], "a/b.json"),
    ("bench --all", "mine.json", ["bench", "--all"], "mine.json"),
    ("workbench show layernorm_forward 4", "results.json", ["show", "layernorm_forward", "4"], None),
    ("--root /p run gelu_forward 2", "r.json", ["--root", "/p", "run", "gelu_forward", "2"], "r.json"),
    ('run layernorm_forward 4 --sizes "B=4,T=2048,C=1024"', "", ["run", "layernorm_forward", "4", "--sizes", "B=4,T=2048,C=1024"], "results.json"),
])
def test_plan_maps_the_command_to_container_argv_and_a_local_json_file(command, out, argv, json_path):
    assert modal_app.plan(command, out) == (argv, json_path)


class FakeFunction:
    """Stands in for the Modal function: records how the entry point calls it."""

    def __init__(self, result):
        self.result, self.calls, self.gpu = result, [], None

    def with_options(self, **options):
        self.gpu = options.get("gpu")
        return self

    def remote(self, argv, want_json=False, columns=120, commit=None):
        self.calls.append((argv, want_json))
        self.commit = commit
        return self.result


def test_the_entry_point_with_no_arguments_benches_everything_and_writes_json_locally(monkeypatch, tmp_path, capsys):
    fake = FakeFunction({"exit_code": 0, "output": "", "json": b'{"results": []}'})
    monkeypatch.setattr(modal_app, "workbench_remote", fake)
    monkeypatch.chdir(tmp_path)
    modal_app.main(command="", gpu="", out="results.json")
    assert fake.calls == [(["bench", "--all"], True)]
    assert fake.gpu is None  # the function's own GPU
    assert (tmp_path / "results.json").read_bytes() == b'{"results": []}'
    assert "results.json" in capsys.readouterr().out


def test_the_gpu_option_overrides_the_type_for_this_run(monkeypatch, tmp_path):
    fake = FakeFunction({"exit_code": 0, "output": "", "json": None})
    monkeypatch.setattr(modal_app, "workbench_remote", fake)
    modal_app.main(command="list", gpu="H100", out=str(tmp_path / "r.json"))
    assert fake.gpu == "H100" and fake.calls == [(["list"], False)]
    assert not (tmp_path / "r.json").exists()


def test_the_checkouts_commit_travels_with_the_command(monkeypatch, tmp_path):
    """The container's tree has no .git: the local commit goes with the call, for the results."""
    from workbench.bench import git_commit
    fake = FakeFunction({"exit_code": 0, "output": "", "json": None})
    monkeypatch.setattr(modal_app, "workbench_remote", fake)
    monkeypatch.delenv("WORKBENCH_COMMIT", raising=False)
    modal_app.main(command="list", gpu="", out=str(tmp_path / "r.json"))
    assert fake.commit == git_commit() and fake.commit  # this checkout is a git clone
    monkeypatch.setenv("WORKBENCH_COMMIT", "abc1234")  # what a tree without .git is told
    modal_app.main(command="list", gpu="", out=str(tmp_path / "r.json"))
    assert fake.commit == "abc1234"


def test_a_failing_remote_command_fails_the_local_run(monkeypatch, tmp_path):
    fake = FakeFunction({"exit_code": 1, "output": "", "json": b"{}"})
    monkeypatch.setattr(modal_app, "workbench_remote", fake)
    with pytest.raises(SystemExit) as e:
        modal_app.main(command="bench --all", gpu="", out=str(tmp_path / "sub" / "r.json"))
    assert e.value.code == 1
    assert (tmp_path / "sub" / "r.json").read_bytes() == b"{}"  # what passed is kept


# -- the remote function's body, run here --------------------------------------------------------
def test_the_body_runs_a_command_that_needs_no_gpu_and_returns_its_output(capsys):
    result = modal_app.run_workbench(["list"])
    assert result["exit_code"] == 0
    assert "layernorm_forward" in result["output"] and "One thread per row" in result["output"]
    assert "\x1b[" not in result["output"]  # colour codes are for the stream, not the returned text
    assert result["json"] is None
    streamed = capsys.readouterr().out
    assert "layernorm_forward" in streamed and "\x1b[" in streamed  # rich rendered in colour


def test_the_modal_function_body_runs_locally():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "executing locally ... no access to the mounted Volume"
        result = modal_app.workbench_remote.local(["show", "layernorm_forward", "4"], columns=100)
    assert result["exit_code"] == 0
    assert "why faster" in result["output"]


def test_the_body_returns_the_commands_exit_code_and_its_error(capsys):
    result = modal_app.run_workbench(["show", "nope"], echo=False)
    assert result["exit_code"] == 2
    assert "unknown family 'nope'" in result["output"]
    assert capsys.readouterr().out == ""


def test_the_body_hands_the_command_a_json_path_and_returns_the_file(tmp_path):
    writer = ("import sys, pathlib; p = sys.argv[sys.argv.index('--json') + 1]; "
              "pathlib.Path(p).write_text('{\"ok\": true}'); print('wrote', p)")
    result = modal_app.run_workbench(["bench", "--all"], want_json=True, echo=False, root=tmp_path,
                                     program=[sys.executable, "-c", writer])
    assert result["exit_code"] == 0
    assert result["json"] == b'{"ok": true}'
    assert result["argv"][:2] == ["bench", "--all"] and result["argv"][2] == "--json"


def test_the_body_streams_partial_lines_as_they_come(tmp_path, capsys):
    script = "import sys, time; sys.stdout.write('half'); sys.stdout.flush(); time.sleep(0.2); print(' done \u2713')"
    result = modal_app.run_workbench([], echo=True, root=tmp_path, program=[sys.executable, "-c", script])
    assert result["output"] == "half done \u2713\n"
    assert capsys.readouterr().out == "half done \u2713\n"


def test_the_volume_holds_data_out_and_download_caches(tmp_path):
    root, volume = tmp_path / "root", tmp_path / "vol"
    (root / "out").mkdir(parents=True)  # a folder the project already has is left alone
    env = modal_app.attach_volume(root, volume)
    assert (root / "data").is_symlink() and (root / "data").resolve() == (volume / "data").resolve()
    assert not (root / "out").is_symlink()
    assert env["TIKTOKEN_CACHE_DIR"] == str(volume / "cache" / "tiktoken")
    assert Path(env["HF_HOME"]).is_dir()
    assert modal_app.attach_volume(root, volume) == env  # a second run finds it all in place


# -- set-up problems are messages, not tracebacks ------------------------------------------------
def test_without_a_token_the_problem_says_how_to_set_modal_up():
    problem = modal_app.setup_problem()
    assert "no token" in problem and "modal token new" in problem and "MODAL_TOKEN_ID" in problem


def test_a_token_in_the_environment_counts(monkeypatch):
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    assert modal_app.setup_problem() is None


def test_modal_run_without_a_token_prints_the_setup_not_a_traceback(tmp_path):
    modal_cli = Path(sys.executable).with_name("modal")
    if not modal_cli.exists():
        pytest.skip("the modal command is not beside this Python")
    r = subprocess.run([str(modal_cli), "run", "modal_app.py", "--command", "list"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, env={**_env(), "MODAL_CONFIG_PATH": str(tmp_path / "none.toml")})
    assert r.returncode == 1
    assert "modal token new" in r.stderr and "Traceback" not in r.stderr + r.stdout


def test_python_modal_app_without_a_token_prints_the_setup(tmp_path):
    r = subprocess.run([sys.executable, "modal_app.py"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**_env(), "MODAL_CONFIG_PATH": str(tmp_path / "none.toml")})
    assert r.returncode == 1
    assert "modal token new" in r.stderr and "Traceback" not in r.stderr


def test_without_modal_the_file_imports_and_says_how_to_install_it(tmp_path):
    """A `modal` that cannot be imported: the helpers still load, and running says what to do."""
    blocker = tmp_path / "modal.py"
    blocker.write_text("raise ImportError('No module named modal')\n")
    env = {**_env(), "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    r = subprocess.run([sys.executable, "-c", "import modal_app; print(modal_app.modal, modal_app.plan(''))"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "None (['bench', '--all'], 'results.json')" in r.stdout
    r = subprocess.run([sys.executable, "modal_app.py"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 1
    assert "Modal is not installed" in r.stderr and "pip install modal" in r.stderr and "Traceback" not in r.stderr


def _env() -> dict:
    import os
    return {k: v for k, v in os.environ.items() if not k.startswith("MODAL_TOKEN") and k != "MODAL_PROFILE"}
