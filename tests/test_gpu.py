"""On the GPU (marked gpu; skipped without one): every version passes, the L2 flush matters,
and a faulty version is reported without stopping the bench."""

import json

import numpy as np
import pytest

from workbench.family import Project
from workbench.bench import Options, Session

from conftest import FIXTURES, ROOT

pytestmark = pytest.mark.gpu

PROJECT = Project(ROOT)
VERSIONS = [(fam.name, v.number) for fam in PROJECT.families() for v in fam.versions]


@pytest.fixture(scope="module")
def check_session(request):
    # the families this run's selection of the test below asks for (all of them unless -k says less)
    wanted = {item.callspec.params["family"] for item in request.session.items
              if item.originalname == "test_every_version_passes_at_default_and_test_sizes"}
    families = [fam for fam in PROJECT.families() if fam.name in wanted]
    with Session(PROJECT, Options(time=False, seeds=3, timeout=300)) as s:
        # as bench does: the families' references and their versions' compiles in the background,
        # in the order the tests ask for them (one at a time, the suite outlasted 10 minutes)
        s.store.prepare([(fam, p) for fam in families for p in fam.precision_names()
                         if any(v.precision == p for v in fam.versions)])
        s.start_compiles([v for fam in families for v in fam.versions])
        yield s


@pytest.mark.parametrize("family, number", VERSIONS, ids=[f"{f}-{n}" for f, n in VERSIONS])
def test_every_version_passes_at_default_and_test_sizes(check_session, family, number):
    v = PROJECT.family(family).version(number)
    done = [f for f in {c[0] for c in check_session.store._cases} if f != family]
    for name in done:  # the tests go family by family: a finished family's cases leave the disk
        check_session.store.drop(PROJECT.family(name))
    row = check_session.run_version(v)
    assert row.status == "passed", f"{v.label}: {row.status}: {row.reason} {row.failures[:1]}"
    assert len(row.check.sizes) >= 2, "checked at the default and at least one test size"
    assert row.check.seeds == [0, 1, 2]


def test_the_l2_flush_makes_a_measurable_difference():
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    from pycuda.compiler import SourceModule

    from workbench.timing import L2Flush, measure
    # 16 MiB read: fits the L2 of an A100 or H100, so without a flush it is served from L2.
    n = 4 * 1024 * 1024
    mod = SourceModule(r'''
    extern "C" __global__ void total(const float* x, float* out, int n) {
        float s = 0.0f;
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += x[i];
        if (s == 12345.0f) out[0] = s;  // keeps the loads alive
    }''', no_extern_c=True)
    fn = mod.get_function("total")
    fn.prepare("PPi")
    x = drv.to_device(np.ones(n, dtype=np.float32))
    out = drv.mem_alloc(4)
    stream = drv.Stream()
    launch = lambda s: fn.prepared_async_call((2048, 1, 1), (256, 1, 1), s, np.uintp(int(x)), np.uintp(int(out)), np.int32(n))
    warm = measure(launch, stream, None, budget_s=0.3, min_reps=50)
    cold = measure(launch, stream, L2Flush(), budget_s=0.3, min_reps=50)
    assert cold.median_us > 1.2 * warm.median_us, (cold, warm)


def test_a_front_runners_measurement_adds_to_its_screening_samples():
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv

    from workbench.timing import L2Flush, measure
    a, b = drv.mem_alloc(1 << 24), drv.mem_alloc(1 << 24)
    stream = drv.Stream()
    launch = lambda s: drv.memcpy_dtod_async(b, a, 1 << 24, s)
    carry: dict = {}
    first = measure(launch, stream, L2Flush(), budget_s=0.02, min_reps=9, carry=carry)
    second = measure(launch, stream, L2Flush(), budget_s=0.05, carry=carry)
    assert first.reps >= 9 and second.reps > first.reps, "the second measurement goes on from the first"
    assert len(carry["drained"]) == second.reps


def test_a_faulty_version_is_reported_and_the_bench_goes_on():
    project = Project(FIXTURES / "project")
    with Session(project, Options(timeout=20, torch=False, budget=0.1)) as s:
        fam = s.bench_family(project.family("scale"))
    row = {r.version: r for r in fam.versions}
    assert row[1].status == "passed" and row[1].best.median_us > 0
    # the fault's wording depends on what lies 1 GiB past the buffer: unmapped memory ("an illegal
    # memory access was encountered") or, since the staged cases are mapped in, another mapping
    # ("operation not supported on global/shared address space"); either way the context is lost
    assert row[2].status == "crashed" and any(w in row[2].reason for w in ("illegal memory access", "address space"))
    assert row[3].status == "timed_out" and "timed out after 20 s" in row[3].reason
    assert row[4].status == "failed"
    first = row[4].failures[0]["args"][0]["first"][0]
    assert np.isnan(first["got"]), "the unwritten tail still holds the poison"
    assert row[5].status == "failed"
    assert row[6].status == "failed"
    assert fam.copy is not None and fam.copy.passed, "the copy baseline is a row like any other"


def test_run_writes_its_json_for_a_version_that_crashed_before_its_first_check(tmp_path):
    """A crash in the check leaves the row without sizes of its own; --json still gets the row (at
    the sizes asked for) and the exit status is 1, not a one-line error about the sizes."""
    from click.testing import CliRunner
    from workbench.cli import cli
    out = tmp_path / "r.json"
    res = CliRunner().invoke(cli, ["--root", str(FIXTURES / "project"), "run", "scale", "2", "--no-torch",
                                   "--json", str(out)])
    assert res.exit_code == 1, res.output
    assert "unknown name" not in res.output
    fam = json.loads(out.read_text())["families"][0]
    assert fam["versions"][0]["status"] == "crashed" and fam["sizes"], fam


def test_the_copy_baseline_checks_every_word_of_the_ramp_it_writes_on_the_device():
    """The copy's source and expected output are one ramp written on the device; a copy one word
    short fails at exactly that word, listed against the host's ramp (the same rounding above
    2^24, where float32 skips integers)."""
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    from workbench.options import RowJob
    from workbench.providers import CopyProvider, run_row
    from workbench.results import Row

    class OneWordShort(CopyProvider):
        def prepare(self, bufs, config):
            dst, src, n = bufs.buffers["dst"].ptr, bufs.buffers["src"].ptr, self.words * 4 - 4
            return (lambda stream: drv.memcpy_dtod_async(dst, src, n, stream)), None

    words = (1 << 24) + 5
    rows = {}
    for provider in (CopyProvider(8 * words), OneWordShort(8 * words)):
        case, shapes = provider.case()
        try:
            check_only = RowJob(time=False, flush=True, budget=0.3, screen=False, bytes=8 * words, flops=None,
                                ceiling_gbps=1.0)
            rows[type(provider).__name__] = run_row(provider, "copy", [case], lambda c, s=shapes: s, check_only,
                                                    lambda text: None, Row("copy", "copy"))
        finally:
            provider.close()
    assert rows["CopyProvider"].status == "passed"
    short = rows["OneWordShort"]
    assert short.status == "failed"
    report = short.failures[0]["args"][0]
    assert report["bad"] == 1 and report["total"] == words
    assert report["first"][0]["index"] == [words - 1]
    assert report["first"][0]["expected"] == float(np.float32(words - 1)) and np.isnan(report["first"][0]["got"])


def test_a_version_that_changes_the_shared_staged_case_fails_and_the_case_is_restored():
    """Versions open the family's cases, staged once on the device, through IPC handles: one that
    writes into them must not pass, nor leave the next version a corrupted case."""
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    from workbench.results import Row
    from workbench.staging import Opened
    project = Project(FIXTURES / "project")
    family = project.family("scale")
    with Session(project, Options(timeout=60, torch=False)) as s:
        paths = s.store.cases(family, s.sizes_for(family))
        staged = s.staging.share(family, "fp32", paths)
        assert staged is not None and set(staged["cases"]) == set(paths)
        clean = Row("version", "scale", 1, status="passed")
        s.staging.verify(paths, clean)
        assert clean.status == "passed", clean.reason
        opened = Opened({"bundles": staged["bundles"], "cases": {paths[0]: staged["cases"][paths[0]]}})
        (ptr, nbytes), = opened.pointers[paths[0]]["in"].values()
        drv.memset_d32(ptr, 0x12345678, 1)  # one word of the pristine input, as a stray write would
        drv.Context.synchronize()
        opened.close()
        culprit = Row("version", "scale", 2, status="passed")
        s.staging.verify(paths, culprit)
        assert culprit.status == "failed" and "changed the shared reference case" in culprit.reason
        after = Row("version", "scale", 1, status="passed")
        s.staging.verify(paths, after)
        assert after.status == "passed", "the owner uploaded the case again, in place"
        row = s.run_version(family.version(1))
        assert row.status == "passed", (row.reason, row.failures[:1])
        assert not s.staging_misses, "the version's child opened the staged case instead of uploading it"


@pytest.mark.parametrize("op", ["gemm", "gemm_lt"])
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False)])
def test_library_gemm_is_row_major_and_batched(op, trans_a, trans_b):
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv

    from workbench import library_calls
    rng = np.random.default_rng(0)
    batch, m, n, k = 3, 37, 29, 19
    A = rng.normal(size=(batch, k, m) if trans_a else (batch, m, k)).astype(np.float32)
    B = rng.normal(size=(batch, n, k) if trans_b else (batch, k, n)).astype(np.float32)
    bias = rng.normal(size=n).astype(np.float32)
    a, b, bb = drv.to_device(A), drv.to_device(B), drv.to_device(bias)
    d = drv.mem_alloc(batch * m * n * 4)
    kw = dict(m=m, n=n, k=k, trans_a=trans_a, trans_b=trans_b, batch=batch,
              stride_a=m * k, stride_b=k * n)
    if op == "gemm":
        call = library_calls.gemm(a=int(a), b=int(b), c=int(d), stride_c=m * n, **kw)
    else:
        call = library_calls.gemm_lt(a=int(a), b=int(b), d=int(d), stride_d=m * n, bias=int(bb), **kw)
    stream = drv.Stream()
    call(stream)
    stream.synchronize()
    got = drv.from_device(d, (batch, m, n), np.float32)
    opa = A.transpose(0, 2, 1) if trans_a else A
    opb = B.transpose(0, 2, 1) if trans_b else B
    want = opa.astype(np.float64) @ opb + (bias if op == "gemm_lt" else 0)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("trans_a, beta", [(False, 0.0), (True, 1.0)])
def test_library_gemm_lt_without_a_workspace_puts_no_memset_before_its_kernel(trans_a, beta):
    """workspace = 0 (matmul_forward 7, matmul_backward 3 and 4): the same product (beta = 1 adds
    into D, as a weight gradient does), and a captured call is kernels alone, where with a
    workspace cuBLASLt may put a memset (its kernels' counter) in front."""
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    from cuda.bindings import driver as cu

    from train.backends import Graph
    from workbench import library_calls
    from workbench.check import from_storage, to_storage
    rng = np.random.default_rng(1)
    m, n, k = (768, 768, 4096) if trans_a else (4096, 768, 768)
    A = to_storage(rng.normal(size=(k, m) if trans_a else (m, k)), "bf16")
    B = to_storage(rng.normal(0, 0.05, size=(k, n)), "bf16")
    D0 = to_storage(rng.normal(size=(m, n)), "bf16")
    a, b = drv.to_device(A), drv.to_device(B)
    opa = from_storage(A, "bf16").astype(np.float64)
    want = (opa.T if trans_a else opa) @ from_storage(B, "bf16") + beta * from_storage(D0, "bf16")
    stream = drv.Stream()
    for workspace in (library_calls.WORKSPACE, 0):
        d = drv.to_device(D0)
        call = library_calls.gemm_lt(a=int(a), b=int(b), d=int(d), m=m, n=n, k=k, trans_a=trans_a, beta=beta,
                                     dtype="bf16", workspace=workspace)
        graph = Graph(stream, call)
        _, nodes, _ = cu.cuGraphGetNodes(graph.graph, graph.nodes)
        kinds = [cu.cuGraphNodeGetType(x)[1] for x in nodes]
        graph.launch(stream)
        stream.synchronize()
        graph.destroy()
        got = from_storage(drv.from_device(d, (m, n), np.uint16), "bf16")
        np.testing.assert_allclose(got, want, atol=2e-2, rtol=1e-2)
        if workspace == 0:
            assert kinds and all(t == cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL for t in kinds), kinds


@pytest.mark.parametrize("epilogue", ["beta", "gelu_aux_bias"])
def test_library_gemm_lt_tune_times_on_scratch_and_remembers_its_pick(tmp_path, monkeypatch, epilogue):
    """tune = n (matmul_forward 8, matmul_forward_gelu 5, matmul_backward 5, matmul_backward_dgelu
    6): the candidates are timed on scratch, so planning a beta = 1 call leaves its D (a gradient)
    untouched and the epilogue's bias and aux pointers are the call's again afterwards; the pick
    lands in gemm_tune.json and a second planning, in this process or the next, times nothing."""
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv

    from references.gelu_forward import gelu_forward
    from workbench import gemm_tuning, library_calls
    from workbench.check import from_storage, to_storage
    monkeypatch.setattr(gemm_tuning, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(gemm_tuning, "_PICKS", {})
    rng = np.random.default_rng(2)
    trans_a = epilogue == "beta"
    m, n, k = (768, 3072, 2048) if trans_a else (2048, 3072, 768)
    A = to_storage(rng.normal(size=(k, m) if trans_a else (m, k)), "bf16")
    B = to_storage(rng.normal(0, 0.05, size=(k, n)), "bf16")
    D0 = to_storage(rng.normal(size=(m, n)), "bf16")
    bias = to_storage(rng.normal(0, 0.1, size=n), "bf16")
    a, b, d, bb = drv.to_device(A), drv.to_device(B), drv.to_device(D0), drv.to_device(bias)
    aux = drv.mem_alloc(m * n * 2)
    opa = from_storage(A, "bf16").astype(np.float64)
    pre = (opa.T if trans_a else opa) @ from_storage(B, "bf16")
    kw = dict(m=m, n=n, k=k, trans_a=trans_a, dtype="bf16", tune=8)
    kw.update(beta=1.0) if trans_a else kw.update(bias=int(bb), gelu=True, aux=int(aux), workspace=0)

    def plan():
        return library_calls.gemm_lt(a=int(a), b=int(b), d=int(d), **kw)
    call = plan()
    np.testing.assert_array_equal(drv.from_device(d, (m, n), np.uint16), D0)  # tuning wrote elsewhere
    (device,) = json.loads((tmp_path / "gemm_tune.json").read_text()).values()
    (entry,) = device.values()
    assert 0 <= entry["pick"] < entry["candidates"] and str(entry["pick"]) in entry["median_us"]
    assert entry["candidates"] > 1, "the heuristic offered one algorithm: nothing was timed"
    stream = drv.Stream()
    call(stream)
    stream.synchronize()
    got = from_storage(drv.from_device(d, (m, n), np.uint16), "bf16")
    if trans_a:
        np.testing.assert_allclose(got, pre + from_storage(D0, "bf16"), atol=2e-2, rtol=1e-2)
    else:
        pre = pre + from_storage(bias, "bf16")
        np.testing.assert_allclose(from_storage(drv.from_device(aux, (m, n), np.uint16), "bf16"), pre,
                                   atol=2e-2, rtol=1e-2)
        np.testing.assert_allclose(got, gelu_forward(pre)["out"], atol=2e-2, rtol=1e-2)

    def no_timing(*_):
        raise AssertionError("timed again: the pick was not remembered")
    monkeypatch.setattr(gemm_tuning, "random_fill", no_timing)
    plan()                                   # this process: from memory
    monkeypatch.setattr(gemm_tuning, "_PICKS", {})
    plan()                                   # the next process: from gemm_tune.json


def test_library_gelu_epilogues_keep_the_gelu_input_and_sum_the_gelu_gradient_over_rows():
    """gemm_lt's GELU_AUX_BIAS writes gelu(A B^T + bias) and, to aux, its input; DGELU_BGRAD
    writes gelu'(aux) * (A B) and, to bias_grad, that result's sums over D's rows (one per
    column): the semantics matmul_forward_gelu and matmul_backward_dgelu rely on, at pure FP32."""
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv

    from references.gelu_backward import gelu_backward
    from references.gelu_forward import gelu_forward
    from workbench import library_calls
    rng = np.random.default_rng(0)
    m, n, k = 37, 24, 19
    A = rng.normal(size=(m, k)).astype(np.float32)
    W = rng.normal(0, 0.5, size=(n, k)).astype(np.float32)
    bias = rng.normal(size=n).astype(np.float32)
    a, w, bb = drv.to_device(A), drv.to_device(W), drv.to_device(bias)
    d, aux = drv.mem_alloc(m * n * 4), drv.mem_alloc(m * n * 4)
    stream = drv.Stream()
    library_calls.gemm_lt(a=int(a), b=int(w), d=int(d), m=m, n=n, k=k, trans_b=True, bias=int(bb), gelu=True,
                          aux=int(aux))(stream)
    stream.synchronize()
    pre = A.astype(np.float64) @ W.T + bias
    np.testing.assert_allclose(drv.from_device(aux, (m, n), np.float32), pre, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(drv.from_device(d, (m, n), np.float32), gelu_forward(pre)["out"], atol=1e-4, rtol=1e-4)
    G = rng.normal(size=(m, k)).astype(np.float32)  # D = gelu'(pre) * (G @ V), V (k x n)
    V = rng.normal(0, 0.5, size=(k, n)).astype(np.float32)
    g, v, dbias = drv.to_device(G), drv.to_device(V), drv.mem_alloc(n * 4)
    library_calls.gemm_lt(a=int(g), b=int(v), d=int(d), m=m, n=n, k=k, dgelu=True, aux=int(aux),
                          bias_grad=int(dbias))(stream)
    stream.synchronize()
    want = gelu_backward(drv.from_device(aux, (m, n), np.float32).astype(np.float64), G.astype(np.float64) @ V)["dinp"]
    np.testing.assert_allclose(drv.from_device(d, (m, n), np.float32), want, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(drv.from_device(dbias, (n,), np.float32), want.sum(axis=0), atol=1e-3, rtol=1e-4)
