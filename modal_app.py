"""Run workbench on a rented GPU with Modal (https://modal.com): `modal run modal_app.py`.

    modal run modal_app.py                                      workbench bench --all on an A100 80GB,
                                                                results written to ./results.json
    modal run modal_app.py --gpu H100                           the same on an H100
    modal run modal_app.py --command "run layernorm_forward 4"  any workbench command line
    modal run modal_app.py --command "train -b 8 --steps 50"
    modal run modal_app.py --out h100.json                      where the JSON results land locally

The container is NVIDIA's CUDA 13.0 *devel* image (nvcc and headers: PyCUDA builds against it and
compiles the kernels with it at run time) plus Python and the project's dependencies with its
`gpu` extra. The source folders are added when a container starts, so editing a kernel needs no
image rebuild. A Modal Volume keeps data/ (datasets), out/ (checkpoints) and the tokenizer and
Hugging Face downloads between runs, so `prepro` runs once.

Environment, read when this file is loaded:
    WORKBENCH_GPU            Modal GPU type, e.g. A100-80GB (default), A100-40GB, H100, H200, L40S
    GPU_MEM=40|80            the older switch: an A100 with that much memory (WORKBENCH_GPU wins)
    WORKBENCH_MODAL_TIMEOUT  seconds one run may take before Modal stops it (default 7200)

`python modal_app.py [--command ...] [--gpu ...] [--out ...]` does the same as `modal run`.
"""

import argparse
import codecs
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath

try:
    import modal
except ImportError:  # the helpers below still work; running needs `pip install modal`
    modal = None

HERE = Path(__file__).resolve().parent

APP_NAME = "workbench"
CUDA_IMAGE = "nvidia/cuda:13.0.2-devel-ubuntu24.04"  # the toolkit the project targets (CUDA 13.0)
CUDA_HOME = "/usr/local/cuda"
PYTHON_VERSION = "3.12"
EXTRAS = ("gpu", "hf")  # hf brings PyTorch: the baseline column in run and bench
DEFAULT_GPU = "A100-80GB"
DEFAULT_TIMEOUT_S = 2 * 60 * 60
DEFAULT_COMMAND = "bench --all"
DEFAULT_OUT = "results.json"
JSON_COMMANDS = ("bench", "run")  # the commands that write JSON results with --json

REMOTE_ROOT = PurePosixPath("/root")  # the source folders sit beside this file there, as here
SOURCE_DIRS = ("workbench", "kernels", "references", "train")
IGNORE = ["**/__pycache__", "**/*.pyc"]

VOLUME_NAME = "workbench-data"
VOLUME_PATH = PurePosixPath("/vol")
VOLUME_LINKS = ("data", "out")  # project folders that live on the volume
VOLUME_CACHES = {"TIKTOKEN_CACHE_DIR": "cache/tiktoken", "HF_HOME": "cache/huggingface"}

SETUP_HELP = """\
Set Modal up once (an account at https://modal.com, then on this machine):
    pip install modal        (or: pip install -e '.[modal]')
    modal token new          (signs in through the browser and stores a token in ~/.modal.toml;
                              or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET)
then run: modal run modal_app.py"""


# -- configuration, decided when the file is loaded ------------------------------------------------
def gpu_from_env(environ=os.environ) -> str:
    """The Modal GPU type: WORKBENCH_GPU, else the old GPU_MEM=40|80 switch (an A100), else the default."""
    gpu = environ.get("WORKBENCH_GPU", "").strip()
    if gpu:
        return gpu
    mem = environ.get("GPU_MEM", "").strip().upper().removesuffix("GB")
    if mem in ("40", "80"):
        return f"A100-{mem}GB"
    return DEFAULT_GPU


def timeout_from_env(environ=os.environ) -> int:
    value = environ.get("WORKBENCH_MODAL_TIMEOUT", "").strip()
    return int(value) if value else DEFAULT_TIMEOUT_S


def requirements(root: Path = HERE, extras=EXTRAS) -> list[str]:
    """The project's dependencies plus those of the given extras, from its pyproject.toml."""
    try:
        from tomllib import loads
    except ImportError:  # Python 3.10: tomli, or the toml that modal depends on
        try:
            from tomli import loads
        except ImportError:
            from toml import loads
    project = loads((root / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise KeyError(f"pyproject.toml has no extra {', '.join(unknown)}")
    reqs = list(project.get("dependencies", []))
    for extra in extras:
        reqs += optional[extra]
    return list(dict.fromkeys(reqs))


def source_dirs(root: Path = HERE) -> list[tuple[Path, PurePosixPath]]:
    """(local folder, container folder) for each source folder present: a fresh clone may lack train/."""
    return [(root / d, REMOTE_ROOT / d) for d in SOURCE_DIRS if (root / d).is_dir()]


def local_commit() -> str | None:
    """This checkout's commit, as the workbench records it (the container gets the tree without its
    .git, so its results would say none): passed on as WORKBENCH_COMMIT. None without the project's
    package or git here."""
    try:
        from workbench.bench import git_commit
    except ImportError:
        return None
    return git_commit()


GPU = gpu_from_env()
TIMEOUT_S = timeout_from_env()


# -- the command line: what runs in the container, and where its JSON goes -------------------------
def workbench_argv(command: str) -> list[str]:
    """Split a workbench command line ("" is the default, bench --all); a leading "workbench" is dropped."""
    argv = shlex.split(command or DEFAULT_COMMAND)
    if argv and argv[0] == "workbench":
        argv = argv[1:]
    return argv or shlex.split(DEFAULT_COMMAND)


def subcommand(argv: list[str]) -> str | None:
    """The workbench command in argv, past the group's own options (--root DIR)."""
    it = iter(argv)
    for arg in it:
        if arg == "--root":
            next(it, None)
        elif not arg.startswith("-"):
            return arg
    return None


def take_json(argv: list[str]) -> tuple[list[str], str | None]:
    """argv without its --json PATH (or --json=PATH), and that PATH."""
    rest, path = [], None
    it = iter(argv)
    for arg in it:
        if arg == "--":
            rest += [arg, *it]
        elif arg == "--json":
            path = next(it, None)
        elif arg.startswith("--json="):
            path = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return rest, path


def plan(command: str = "", out: str = "") -> tuple[list[str], str | None]:
    """The argv to run in the container, and the local file its JSON results go to (None: no JSON).

    A --json PATH in the command names the local file; otherwise bench and run write to `out`
    (results.json). The container writes its own copy, which comes back with the output.
    """
    argv, path = take_json(workbench_argv(command))
    if path is None and subcommand(argv) in JSON_COMMANDS:
        path = out or DEFAULT_OUT
    return argv, path


# -- the body of the remote function: plain code, runnable anywhere --------------------------------
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def attach_volume(root: Path, volume: Path) -> dict[str, str]:
    """Point the project's data/ and out/ at the volume and put download caches there.

    Returns the environment variables to run with. Folders the project already has are left alone.
    """
    for name in VOLUME_LINKS:
        target = volume / name
        target.mkdir(parents=True, exist_ok=True)
        link = root / name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(target, target_is_directory=True)
    env = {}
    for var, sub in VOLUME_CACHES.items():
        (volume / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(volume / sub)
    return env


def run_workbench(argv: list[str], *, want_json: bool = False, root: Path = HERE, columns: int | None = None,
                  env: dict[str, str] | None = None, echo: bool = True, program: list[str] | None = None) -> dict:
    """Run `workbench ARGV` in `root`, echoing its output as it comes, and gather what it produced.

    rich draws colour and tables as on a terminal (FORCE_COLOR) but no live spinners, which a log
    stream cannot redraw (TTY_INTERACTIVE=0); stderr is merged into stdout so they keep their order.
    Returns {"argv", "exit_code", "output" (without colour codes), "json" (bytes, or None)}.
    """
    program = program or [sys.executable, "-m", "workbench"]
    child_env = {**os.environ, **(env or {}), "FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "0",
                 "PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8", "COLUMNS": str(columns or 120)}
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="workbench-modal-") as tmp:
        json_path = Path(tmp) / "results.json"
        full = [*argv, "--json", str(json_path)] if want_json else list(argv)
        proc = subprocess.Popen([*program, *full], cwd=root, env=child_env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pieces = []
        while True:
            chunk = os.read(proc.stdout.fileno(), 65536)  # whatever is there: partial lines too
            text = decoder.decode(chunk, final=not chunk)
            if text:
                pieces.append(text)
                if echo:
                    sys.stdout.write(text)
                    sys.stdout.flush()
            if not chunk:
                break
        proc.stdout.close()
        code = proc.wait()
        produced = json_path.read_bytes() if want_json and json_path.exists() else None
    return {"argv": full, "exit_code": code, "output": strip_ansi("".join(pieces)), "json": produced}


def deliver(result: dict, json_path: str | None) -> int:
    """On this machine: write the JSON that came back, say where, and return the command's exit code."""
    if json_path:
        if result.get("json") is not None:
            path = Path(json_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(result["json"])
            print(f"results copied from the container to {path}")
        else:
            print(f"no results came back for {json_path}: the command wrote none", file=sys.stderr)
    return result["exit_code"]


def terminal_columns() -> int:
    return shutil.get_terminal_size((120, 40)).columns


# -- Modal: is it usable here? ---------------------------------------------------------------------
def has_credentials() -> bool:
    """Whether Modal has a token (or OAuth credentials) configured: ~/.modal.toml or MODAL_TOKEN_*."""
    from modal.config import config
    try:
        if config.get("token_id") and config.get("token_secret"):
            return True
        return bool(config.get("oauth_refresh_token"))
    except KeyError:  # a Modal without these settings: let it judge for itself
        return True


def setup_problem() -> str | None:
    """Why Modal cannot run here, with how to fix it; None when it can."""
    if modal is None:
        return "Modal is not installed.\n" + SETUP_HELP
    if not has_credentials():
        return "Modal has no token on this machine.\n" + SETUP_HELP
    return None


def under_modal_cli(argv=sys.argv) -> bool:
    """Loaded by the `modal` command (modal run/deploy/shell ...) rather than imported by a program."""
    first = Path(argv[0]) if argv else Path()
    return first.name == "modal" or (first.name == "__main__.py" and first.parent.name == "modal")


if modal is not None and modal.is_local() and under_modal_cli():
    _problem = setup_problem()
    if _problem:  # say how to set it up instead of a failed connection
        print(f"modal_app.py: {_problem}", file=sys.stderr)
        raise SystemExit(1)


# -- the Modal app ---------------------------------------------------------------------------------
if modal is not None:
    app = modal.App(APP_NAME)

    image = (
        modal.Image.from_registry(CUDA_IMAGE, add_python=PYTHON_VERSION)
        .apt_install("build-essential", env={"DEBIAN_FRONTEND": "noninteractive"})  # the host compiler for nvcc, PyCUDA
        .env({
            "CUDA_HOME": CUDA_HOME,
            "CUDA_ROOT": CUDA_HOME,
            "PATH": f"{CUDA_HOME}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LIBRARY_PATH": f"{CUDA_HOME}/lib64/stubs",  # libcuda to link PyCUDA against; the driver's at run time
        })
        # Loaded here and again in the container (where pyproject.toml is added beside this file).
        .pip_install(*(requirements() if (HERE / "pyproject.toml").exists() else []))
        .env({"PYTHONUNBUFFERED": "1"})
        .add_local_file(HERE / "pyproject.toml", str(REMOTE_ROOT / "pyproject.toml"))
    )
    for _local, _remote in source_dirs():
        image = image.add_local_dir(_local, str(_remote), ignore=IGNORE)

    volume = modal.Volume.from_name(VOLUME_NAME, create_if_missing=True)

    FUNCTION_OPTIONS = {"image": image, "gpu": GPU, "timeout": TIMEOUT_S, "volumes": {str(VOLUME_PATH): volume}}

    @app.function(**FUNCTION_OPTIONS)
    def workbench_remote(argv: list[str], want_json: bool = False, columns: int = 120, commit: str | None = None) -> dict:
        """Run one workbench command in the container: its output streams back as it runs. `commit`:
        the local checkout's, for the results to record."""
        if modal.is_local():  # .local(): this checkout, no volume
            return run_workbench(argv, want_json=want_json, columns=columns)
        env = attach_volume(Path(REMOTE_ROOT), Path(VOLUME_PATH))
        if commit:
            env["WORKBENCH_COMMIT"] = commit
        try:
            return run_workbench(argv, want_json=want_json, root=Path(REMOTE_ROOT), columns=columns, env=env)
        finally:
            volume.commit()  # datasets and checkpoints persist for the next run

    def launch(command: str = "", gpu: str = "", out: str = DEFAULT_OUT) -> int:
        argv, json_path = plan(command, out)
        gpu = gpu.strip()
        fn = workbench_remote if not gpu or gpu.upper() == GPU.upper() else workbench_remote.with_options(gpu=gpu)
        print(f"workbench {shlex.join(argv)}  on Modal, {gpu or GPU}")
        result = fn.remote(argv, want_json=json_path is not None, columns=terminal_columns(), commit=local_commit())
        return deliver(result, json_path)

    @app.local_entrypoint()
    def main(command: str = "", gpu: str = "", out: str = DEFAULT_OUT):
        """--command "WORKBENCH ARGS" (default: bench --all), --gpu TYPE (default: WORKBENCH_GPU or A100-80GB),
        --out FILE (where bench/run JSON results land; default results.json)."""
        code = launch(command, gpu, out)
        if code:
            sys.exit(code)


def cli_main(args: list[str] | None = None) -> int:
    """`python modal_app.py`: the same options as `modal run modal_app.py`."""
    parser = argparse.ArgumentParser(prog="python modal_app.py", description="Run workbench on a Modal GPU.")
    parser.add_argument("--command", default="", help=f"workbench command line (default: {DEFAULT_COMMAND})")
    parser.add_argument("--gpu", default="", help=f"Modal GPU type (default: {GPU})")
    parser.add_argument("--out", default=DEFAULT_OUT, help="where bench/run JSON results land locally")
    ns = parser.parse_args(args)
    problem = setup_problem()
    if problem:
        print(f"modal_app.py: {problem}", file=sys.stderr)
        return 1
    with modal.enable_output(), app.run():
        return launch(ns.command, ns.gpu, ns.out)


if __name__ == "__main__":
    sys.exit(cli_main())
