"""Run a version's launch plan on the CPU SIMT emulator (emu.h) and compare with the reference.

`emulate(version, sizes)` draws the case as the checker does (make_case, at the version's
precision), builds a C++ driver that #includes the version's .cu file after the emulated
bf16/mma headers, evaluates the header's launch steps (grid, block, shared, args, scratch) with
the workbench's own expression evaluator, runs every block of every launch, and compares each
output with workbench.check.compare at the version's tolerance. Only kernel and memset steps are
supported (no library calls). Small sizes only: each CUDA thread is a fiber.
"""

from __future__ import annotations

import hashlib
import re
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from workbench import expr
from workbench.check import compare, from_storage, make_case, poison
from workbench.compile import flatten
from workbench.family import ARG_TYPES, BUFFER_OFFSET, EmulatorCases, EmulatorRun, Version
from workbench.launch import ITEMSIZE

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("WORKBENCH_EMU_CACHE", Path(tempfile.gettempdir()) / "workbench_emu"))
SMS = 132  # as on an H100: only launch expressions that ask for it see it
BUILD_S = 600  # one driver's g++ build may take this long
RUN_S = 900    # one emulated case may run this long (a hang in a kernel's barriers is then a failure)


SHARED_DECL = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w:]*)\s+"
                         r"(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_]\w*)\s*\[\s*\]")


def _shared_aliases(source: str) -> str:
    """Every extern __shared__ array name but `smem`, as an alias of the emulator's array (`source`
    flattened: a header's kernel body declares its own)."""
    out = []
    for typ, name in sorted(set(SHARED_DECL.findall(source))):
        if name != "smem":
            out.append(f'extern {typ} {name}[] __attribute__((alias("smem")));')
    return "\n".join(out)


STATIC_SHARED = re.compile(r"(?<!extern )\b__shared__\b")


def _emulated_source(source: str) -> str:
    """A version's flattened source as the emulator compiles it. A static __shared__ array (one
    declared without extern, e.g. reduce.cuh's slots) becomes a C++ static: one array that every
    thread of the block sees, as on the GPU (blocks run one at a time here, so one array serves
    them all in turn; unlike the dynamic shared memory it is not poisoned between blocks). emu.h
    defines __shared__ as nothing, which alone would give every emulated thread its own copy.
    Inline PTX becomes the emulator's model of it (PTX, below), or a build error if unmodelled."""
    source = re.sub(r"\bextern\s+__shared__\b", "extern __shared__", source)
    return _emulated_asm(STATIC_SHARED.sub("static", source))


# ---- inline PTX ---------------------------------------------------------------------------------
# The asm statements the emulator models, outside the wrappers whose whole headers it replaces
# (emu_mma.h): the instruction (its template, whitespace collapsed) -> the operands' constraints
# in order (outputs, then inputs) and the C++ statement it becomes, operand k as {k}. The
# functions are emu_bf16.h's. A statement that matches none (another instruction, other
# constraints, clobbers) becomes a call to a function that g++ rejects wherever the call is
# compiled into the driver (GCC's error attribute, with the asm's text in the message): as on the
# GPU, asm in a branch the preprocessor drops (#if __CUDA_ARCH__) or in a function nothing calls
# costs nothing.
PTX = {
    "cvt.rn.bf16x2.f32 %0, %1, %2;": (("=r", "f", "f"), "{0} = emu_cvt_rn_bf16x2_f32({1}, {2});"),
    "max.bf16x2 %0, %1, %2;": (("=r", "r", "r"), "{0} = emu_max_bf16x2({1}, {2});"),
}

# What the scan over a source steps over whole: comments, string and character literals; and the
# asm keyword, the start of a statement to rewrite.
_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|'
                    r'(?P<asm>\b(?:asm|__asm__)(?:\s+(?:volatile|__volatile__))?\s*\()', re.S)
_PAREN_OR_TOKEN = re.compile(r'[()]|//|/\*|"|\'')
_STRING = re.compile(r'"((?:\\.|[^"\\])*)"')


def _asm_end(source: str, start: int) -> int:
    """The index just past the `)` that closes the `(` before `start` (literals and comments
    skipped)."""
    depth, i = 1, start
    while depth:
        m = _PAREN_OR_TOKEN.search(source, i)
        if m is None:
            raise ValueError(f"unbalanced asm statement at offset {start}")
        if m.group() in ("(", ")"):
            depth += 1 if m.group() == "(" else -1
            i = m.end()
        else:
            t = _TOKEN.match(source, m.start())
            i = t.end() if t else m.end()
    return i


def _split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside brackets and literals."""
    parts, depth, cur, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            t = _TOKEN.match(text, i)
            i = t.end() if t else i + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:  # "::" (no outputs) is two separators
            parts.append(text[cur:i])
            cur = i + 1
        i += 1
    parts.append(text[cur:])
    return parts


def _asm_model(inside: str) -> str | None:
    """The C++ statement for the asm statement whose parenthesised part is `inside`, or None."""
    sections = _split_top(inside, ":")
    if not 2 <= len(sections) <= 3:  # template, outputs, inputs; no clobbers, no basic asm
        return None
    template = "".join(bytes(m, "ascii").decode("unicode_escape") for m in _STRING.findall(sections[0]))
    if _STRING.sub("", sections[0]).strip():
        return None
    model = PTX.get(" ".join(template.split()))
    if model is None:
        return None
    constraints, statement = model
    operands = []
    for section in sections[1:]:
        for op in filter(str.strip, _split_top(section, ",")):
            m = re.fullmatch(r'\s*"([^"]*)"\s*\((.*)\)\s*', op, re.S)
            if m is None:
                return None
            operands.append((m.group(1), m.group(2).strip()))
    if tuple(c for c, _ in operands) != constraints:
        return None
    return statement.format(*(f"({e})" for _, e in operands))


def _emulated_asm(source: str) -> str:
    """`source` with every asm statement rewritten: a modelled one to its model, any other to a
    call that fails the build if it is compiled (each site its own function, declared first, whose
    error message quotes the statement). Line breaks (and a macro's continuations) are kept."""
    out, unknown, i = [], [], 0
    while (m := _TOKEN.search(source, i)) is not None:
        if not m.group("asm"):  # a comment or a literal
            out.append(source[i:m.end()])
            i = m.end()
            continue
        end = _asm_end(source, m.end())
        semi = re.compile(r"\s*;").match(source, end)
        stmt_end = semi.end() if semi else end
        text = source[m.start():stmt_end]
        model = _asm_model(source[m.end():end - 1]) if semi else None
        if model is None:
            message = " ".join(text.split()).replace("\\", "\\\\").replace('"', '\\"')
            unknown.append(f'[[gnu::error("inline PTX the emulator does not model (tests/gpu_emu/runner.py PTX): '
                           f'{message}")]] void emu_unmodelled_asm_{len(unknown)}();')
            model = f"emu_unmodelled_asm_{len(unknown) - 1}();"
        out.append(source[i:m.start()] + model + "".join(re.findall(r"\\?\n", text)))  # a macro's too
        i = stmt_end
    out.append(source[i:])
    return "\n".join(unknown) + ("\n" if unknown else "") + "".join(out)


def _driver_source(version: Version, arities: dict[str, int], extra: str = "") -> str:
    source = flatten(version.path)
    calls = []
    for name, n in sorted(arities.items()):
        args = ", ".join(f"a[{i}]" for i in range(n))
        calls.append(f'    if (name == "{name}") {{ emu_launch(grid, block, shared, [&] {{ {name}({args}); }}, seed); return; }}')
    return f"""
#include "emu.h"
#include "emu_bf16.h"
#include "emu_mma.h"
{extra}
{_shared_aliases(source)}
// ---- {version.path}, its local headers inlined ----
{_emulated_source(source)}
#include <fstream>
#include <sstream>
#include <string>

struct Arg {{
    void* p = nullptr;
    long long i = 0;
    double f = 0;
    template <class T> operator T*() const {{ return static_cast<T*>(p); }}
    operator int() const {{ return int(i); }}
    operator float() const {{ return float(f); }}
}};

static void run_kernel(const std::string& name, dim3 grid, dim3 block, size_t shared, const std::vector<Arg>& a, unsigned seed) {{
{chr(10).join(calls)}
    emu_fail(("unknown kernel " + name).c_str());
}}

int main(int argc, char** argv) {{
    std::ifstream plan(argv[1]);
    std::string outdir = argv[2];
    emu.cp_mode = CpAsyncMode(std::atoi(argv[3]));
    emu.sched = SchedMode(std::atoi(argv[5]));
    if (argc > 6) emu.block_order = unsigned(std::atoi(argv[6]));
    unsigned seed = unsigned(std::atoi(argv[4]));
    int nbuf;
    plan >> nbuf;
    std::vector<unsigned char*> bufs(nbuf);
    std::vector<size_t> sizes(nbuf);
    std::vector<std::string> names(nbuf), files(nbuf);
    for (int b = 0; b < nbuf; b++) {{
        std::string fill;
        plan >> names[b] >> sizes[b] >> fill >> files[b];
        void* p = nullptr;
        if (posix_memalign(&p, 256, sizes[b] ? sizes[b] : 1)) emu_fail("out of memory");
        bufs[b] = static_cast<unsigned char*>(p);
        if (files[b] != "-") {{
            std::ifstream in(files[b], std::ios::binary);
            in.read(reinterpret_cast<char*>(bufs[b]), sizes[b]);
        }} else if (fill == "bf16nan") {{
            for (size_t k = 0; k + 1 < sizes[b]; k += 2) {{ bufs[b][k] = 0xC0; bufs[b][k + 1] = 0x7F; }}
        }} else {{
            std::memset(bufs[b], 0xFF, sizes[b]);  // float NaN (scratch is garbage on a GPU)
        }}
        emu_buffers.push_back({{bufs[b], sizes[b]}});
    }}
    int nsteps;
    plan >> nsteps;
    for (int s = 0; s < nsteps; s++) {{
        std::string kind;
        plan >> kind;
        if (kind == "memset") {{
            int b; unsigned long long bits; int width;
            plan >> b >> bits >> width;
            for (size_t k = 0; k + width <= sizes[b]; k += width) std::memcpy(bufs[b] + k, &bits, width);
            continue;
        }}
        std::string name;
        dim3 grid, block;
        size_t shared;
        int nargs;
        plan >> name >> grid.x >> grid.y >> grid.z >> block.x >> block.y >> block.z >> shared >> nargs;
        std::vector<Arg> a(nargs);
        for (int k = 0; k < nargs; k++) {{
            std::string t;
            plan >> t;
            if (t == "P") {{ int b; size_t off; plan >> b >> off; a[k].p = bufs[b] + off; }}
            else if (t == "I") plan >> a[k].i;
            else plan >> a[k].f;
        }}
        run_kernel(name, grid, block, shared, a, seed + 7919u * s);
    }}
    for (int b = 0; b < nbuf; b++) {{
        std::ofstream out(outdir + "/" + names[b] + ".bin", std::ios::binary);
        out.write(reinterpret_cast<const char*>(bufs[b]), sizes[b]);
    }}
    return 0;
}}
"""


def build(version: Version, sanitize: bool = True, extra: str = "") -> Path:
    """Compile the driver for `version` (cached on the sources' contents); `extra` is code placed
    after the emulator's headers and before the version (definitions a test adds, #defines)."""
    arities: dict[str, int] = {}
    for st in version.steps:
        if st.kind == "kernel":
            arities[st.name] = len(st.args)
        elif st.kind == "library":
            raise NotImplementedError(f"{version.label}: library calls are not emulated")
    src = _driver_source(version, arities, extra)
    common = version.path.parent.parent / "common"
    key_parts = [src, version.path.read_text(), str(sanitize)]
    key_parts += [p.read_text() for p in sorted(HERE.glob("*.h"))]
    key_parts += [p.read_text() for p in sorted(common.glob("*.cuh"))]
    key_parts += [p.read_text() for p in sorted(version.path.parent.glob("*.cuh"))]  # the family's own
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:24]
    exe = CACHE / f"{version.family.name}_{version.number}_{key}"
    if exe.exists():
        return exe
    CACHE.mkdir(parents=True, exist_ok=True)
    # Built under names of this process's own and renamed into place: parallel test workers
    # (pytest -n) may build the same driver at once, and none may run a half-written one.
    mine = f".{os.getpid()}.tmp"
    cpp, out = exe.with_name(exe.name + mine + ".cpp"), exe.with_name(exe.name + mine)
    cpp.write_text(src)
    cmd = [shutil.which("g++") or "g++", "-std=c++20", "-O1", "-g", "-w", f"-I{HERE}", f"-I{common}",
           f"-I{version.path.parent}", "-x", "c++", str(cpp), "-o", str(out)]
    if sanitize:
        cmd[4:4] = ["-fsanitize=address", "-fno-omit-frame-pointer"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_S)
        if proc.returncode:
            raise RuntimeError(f"emulator build failed:\n{proc.stderr[-6000:]}")
        os.replace(out, exe)
    finally:
        cpp.unlink(missing_ok=True)
        out.unlink(missing_ok=True)
    return exe


def _plan(version: Version, sizes: dict, block_size, case) -> tuple[list, list, dict]:
    fam = version.family
    env = fam.env(sizes, block_size)
    env["SMS"] = SMS
    for name, text in version.derived.items():
        env[name] = expr.evaluate(text, env)
    buffers = []  # (name, bytes, fill, file, dtype, role)
    index = {}
    for a in version.args:
        shape = fam.shape(a, sizes)
        nbytes = int(np.prod(shape)) * ITEMSIZE[a.dtype]
        index[a.name] = len(buffers)
        buffers.append([a.name, nbytes, "bf16nan" if a.dtype == "bf16" else "nan", a])
    for s in version.scratch:
        nbytes = max(4, expr.evaluate_int(s.size, env, f"scratch {s.name}") * ITEMSIZE[s.dtype])
        index[s.name] = len(buffers)
        buffers.append([s.name, nbytes, "nan", s])
    steps = []
    for st in version.steps:
        if st.when is not None and not expr.evaluate(st.when, env):
            continue
        if st.kind == "memset":
            dtype = buffers[index[st.name]][3].dtype
            value = expr.evaluate(st.value, env)
            import struct
            if dtype == "bf16":
                bits, width = struct.unpack("<I", struct.pack("<f", float(value)))[0] >> 16, 2
            elif dtype == "f32":
                bits, width = struct.unpack("<I", struct.pack("<f", float(value)))[0], 4
            else:
                bits, width = int(value) & 0xFFFFFFFF, 4
            steps.append(f"memset {index[st.name]} {bits} {width}")
            continue
        dims = lambda texts: [expr.evaluate_int(t, env, "dim") for t in texts] + [1] * (3 - len(texts))
        grid, block = dims(st.grid), dims(st.block)
        shared = expr.evaluate_int(st.shared, env, "shared")
        args = []
        for text in st.args:
            s = str(text).strip()
            m = BUFFER_OFFSET.match(s)
            if s in index:
                args.append(f"P {index[s]} 0")
            elif m and m.group(1) in index:
                b = buffers[index[m.group(1)]]
                off = expr.evaluate_int(m.group(2), env, "offset") * ITEMSIZE[b[3].dtype]
                assert 0 <= off <= b[1]
                args.append(f"P {index[m.group(1)]} {off}")
            else:
                prefix, colon, rest = s.partition(":")
                if colon and prefix in ARG_TYPES:
                    v = expr.evaluate(rest, env)
                    args.append(f"F {float(v)!r}" if ARG_TYPES[prefix] in "fd" else f"I {int(v)}")
                else:
                    v = expr.evaluate(s, env)
                    args.append(f"I {int(v)}" if isinstance(v, (int, bool)) else f"F {float(v)!r}")
        if min(grid) == 0:
            continue
        steps.append(f"kernel {st.name} {grid[0]} {grid[1]} {grid[2]} {block[0]} {block[1]} {block[2]} "
                     f"{shared} {len(args)} " + " ".join(args))
    return buffers, steps, index


def emulate(version: Version, sizes: dict, seed: int = 0, block_size=None, mode: str = "LATE",
            sched: str = "PRIORITY", sched_seed: int = 1, sanitize: bool = True, case=None,
            block_order: int = 0, outputs: dict | None = None, extra_source: str = "",
            inputs_after: dict | None = None) -> list:
    """Run the version on the emulator; returns workbench.check.ArgReport per output.
    mode: when cp.async copies land (EARLY: at issue; LATE: at the covering wait).
    sched: SHUFFLE (warps in step) or PRIORITY (one warp races ahead: exposes missing barriers).
    block_order: 0 runs a launch's blocks in index order; any other value is a seed for a shuffled
    order (blocks still run one at a time). outputs: if a dict, it receives each output's values.
    extra_source: code the driver places before the version (see build). inputs_after: if a dict,
    it receives each input's raw contents after the run (a kernel that must leave one as it was)."""
    fam = version.family
    if block_size is None:
        block_size = version.block_sizes[0]
    case = case or make_case(fam, sizes, seed, version.precision)
    exe = build(version, sanitize, extra_source)
    buffers, steps, index = _plan(version, sizes, block_size, case)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        lines = [str(len(buffers))]
        for name, nbytes, fill, obj in buffers:
            f = "-"
            if name in case.inputs:
                f = str(tmp / f"in_{name}.bin")
                arr = np.ascontiguousarray(case.inputs[name])
                assert arr.nbytes == nbytes, (name, arr.nbytes, nbytes)
                arr.tofile(f)
            lines.append(f"{name} {nbytes} {fill} {f}")
        lines.append(str(len(steps)))
        lines += steps
        (tmp / "plan.txt").write_text("\n".join(lines) + "\n")
        out = tmp / "out"
        out.mkdir()
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:detect_stack_use_after_return=0")
        proc = subprocess.run([str(exe), str(tmp / "plan.txt"), str(out), str({"EARLY": 0, "LATE": 1}[mode]),
                               str(sched_seed), str({"SHUFFLE": 0, "PRIORITY": 1}[sched]), str(block_order)],
                              capture_output=True, text=True, env=env, timeout=RUN_S)
        if proc.returncode:
            raise RuntimeError(f"emulated run failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
        if inputs_after is not None:
            for name in case.inputs:
                inputs_after[name] = np.fromfile(out / f"{name}.bin", dtype=np.asarray(case.inputs[name]).dtype)
        reports = []
        for a in version.args:
            if not a.is_output:
                continue
            raw = np.fromfile(out / f"{a.name}.bin", dtype=a.np_dtype)
            got = from_storage(raw, a.dtype)
            if outputs is not None:
                outputs[a.name] = got
            reports.append(compare(a, case.expected[a.name], got, *version.tolerance(a, case.sizes)))
        return reports


def cases(version: Version) -> list[tuple[dict, EmulatorRun]]:
    """The version's header's [[emulate]] cases (kernels/README.md): (sizes, run) for each run of
    each table at each of its sizes (the family's test sizes the version takes, where "test" is
    listed, and the sizes listed) where the table's `when` holds."""
    return [(sizes, run) for sizes, run, _table in table_cases(version)]


def table_cases(version: Version) -> list[tuple[dict, EmulatorRun, EmulatorCases]]:
    """cases(), each with the [[emulate]] table it comes from (whose `slow` says where it runs)."""
    fam = version.family
    out = []
    for table in version.emulate:
        every = [*(s for s in fam.test_sizes if not version.unmet(s) and table.test_sizes), *table.sizes]
        for sizes in every:
            if table.when is None or expr.evaluate(table.when, fam.env(sizes)):
                out += [(dict(sizes), run, table) for run in table.runs]
    return out


def case_id(version: Version, sizes: dict, run: EmulatorRun) -> str:
    """e.g. layernorm_backward-12-B=1,T=37,C=768-bs128-seed0-LATE-PRIORITY-sms1 (conftest.py reads
    the sizes in it: large ones are `slow`)."""
    parts = [version.family.name, str(version.number), version.family.format_sizes(sizes)]
    if run.block_size is not None:
        parts.append(f"bs{run.block_size}")
    parts += [f"seed{run.seed}", run.mode, run.sched]
    parts += [f"{k}{v}" for k, v, default in (("order", run.order, 0), ("sms", run.sms, SMS),
                                              ("sched_seed", run.sched_seed, 1)) if v != default]
    return "-".join(parts)


def run_case(version: Version, sizes: dict, run: EmulatorRun, **kw) -> list:
    """emulate() with a header's run (its SMS as the launch expressions' multiprocessor count)."""
    global SMS
    saved, SMS = SMS, run.sms
    try:
        return emulate(version, sizes, seed=run.seed, block_size=run.block_size, mode=run.mode, sched=run.sched,
                       sched_seed=run.sched_seed, block_order=run.order, **kw)
    finally:
        SMS = saved
