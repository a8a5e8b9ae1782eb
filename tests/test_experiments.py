"""The parameter record, the process pool and its thread limits, where cached tables are read from."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import attnlab
from attnlab import ModelParams
from attnlab.experiments import store
from attnlab.experiments.figures import FIGURES, figure_specs, theory_specs
from attnlab.experiments.runners import run_theory_spec, se_curve_spec, spec_key, transition_spec
from attnlab.parallel import limit_threads, parallel_imap


@pytest.mark.parametrize("params", [ModelParams(), ModelParams(omega=0.1, sigma=0.7, lam=0.0,
                                                            A=((0.3, 0.7), (0.8, 0.2))), ModelParams(r=2), ModelParams(L=3, A=np.full((3, 3), 1 / 3)),
                                    ModelParams(L=11, A=np.full((11, 11), 1 / 11))], ids=str)
def test_record_round_trip(params):
    record = params.to_record()
    assert ModelParams.from_record(record) == params
    assert ModelParams.from_record(json.loads(json.dumps(record))) == params  # plain JSON values
    assert len([k for k in record if k.startswith("A")]) == params.L ** 2


def test_record_is_the_format_of_the_tables_and_run_ids():
    """A rank-1 record is exactly the model columns of the cached tables (so run ids do not move)."""
    assert list(ModelParams().to_record()) == ["omega", "sigma", "lambda", "A11", "A12", "A21", "A22"]
    row = {"run_id": "x", "d": 1000, "alpha": 1.5, "omega": 0.3, "sigma": 0.5, "lambda": 0.01, "A11": 0.6,
           "A12": 0.4, "A21": 0.4, "A22": 0.6, "rank": 1, "init": "random"}
    assert ModelParams.from_record(row) == ModelParams()
    with pytest.raises(ValueError, match=r"missing \['lambda'\]"):
        ModelParams.from_record({k: v for k, v in row.items() if k != "lambda"})
    spec = transition_spec(ModelParams(omega=0.3))
    assert spec_key(spec) == "360d623b457f281e"  # the run id of omega = 0.3 in results/phase-diagram-theory.csv


def test_every_figure_builds_its_specs_and_their_run_ids_are_unique():
    for name, fig in FIGURES.items():
        for quick in (False, True):
            keys = [spec_key(s) for s in figure_specs(name, quick=quick)]
            tkeys = [spec_key(s) for s in theory_specs(name, quick=quick)]
            assert len(set(keys)) == len(keys) and len(set(tkeys)) == len(tkeys) and tkeys, name
            assert bool(keys) == fig.simulations


def test_theory_task_rows_carry_the_record_and_the_minimizer():
    p = ModelParams(omega=0.2)
    rows = run_theory_spec(se_curve_spec(p, "positional", [1.0]))
    assert len(rows) == 1 and rows[0]["minimizer"] == "followed" and rows[0]["branch"] == "positional"
    assert {k: rows[0][k] for k in p.to_record()} == p.to_record() and rows[0]["converged"]
    with pytest.raises(ValueError, match="kind"):
        run_theory_spec(dict(p.to_record(), kind="curve"))


def _blas_threads(_=None):
    import threadpoolctl

    return os.getpid(), sorted({info["num_threads"] for info in threadpoolctl.threadpool_info()})


def test_pool_workers_run_one_blas_thread():
    """The old thread limit set OPENBLAS_NUM_THREADS after numpy was imported, so a worker's BLAS ran 2 threads."""
    results = list(parallel_imap(_blas_threads, range(4), workers=2))
    assert {pid for pid, _ in results} != {os.getpid()}  # worker processes
    assert all(threads == [1] for _, threads in results), results


def test_limit_threads_limits_loaded_blas():
    code = ("import numpy, threadpoolctl\nfrom attnlab.parallel import limit_threads\nlimit_threads(1)\n"
            "print(sorted({i['num_threads'] for i in threadpoolctl.threadpool_info()}))")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "[1]"
    with pytest.raises(ValueError, match="threads"):
        limit_threads(0)


def test_parallel_imap_order_and_errors():
    assert list(parallel_imap(abs, [-3, 1, -2], workers=2, backend="threading")) == [3, 1, 2]
    assert sorted(parallel_imap(abs, [-3, 1, -2], workers=2, ordered=False)) == [1, 2, 3]
    with pytest.raises(TypeError):
        list(parallel_imap(abs, ["x"], workers=2, backend="threading"))
    with pytest.raises(ValueError, match="workers"):
        list(parallel_imap(abs, [1], workers=0))
    with pytest.raises(ValueError, match="backend must be one of"):
        list(parallel_imap(abs, [1], backend="processes"))


def test_cached_path_reads_the_results_folder_then_the_package(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "RESULTS_DIR", tmp_path)
    assert store.cached_path("overlaps-vs-alpha.csv", tmp_path / "x") == tmp_path / "x" / "overlaps-vs-alpha.csv"
    # (a source checkout has no packaged copy; tests/test_package_data.py checks an installed wheel)
    assert store.cached_path("no-such.csv") == tmp_path / "no-such.csv"
    (tmp_path / "overlaps-vs-alpha.csv").write_text("run_id\n")
    assert store.cached_path("overlaps-vs-alpha.csv") == tmp_path / "overlaps-vs-alpha.csv"
    assert store.book_data_path("se_curves.csv") == store.SOURCE_ROOT / "book" / "_data" / "se_curves.csv"


def test_top_level_import_stays_light():
    """``import attnlab`` and the experiments' loaders import neither torch nor numba."""
    code = ("import sys, attnlab, attnlab.experiments.figures, attnlab.cli\n"
            "print(sorted(m for m in ('torch', 'numba', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(attnlab.__file__)))).stdout
    assert out.strip() == "[]"


def test_a_bad_backend_is_refused_before_anything_is_written(tmp_path):
    from attnlab.experiments.sweeps import run_sweep

    with pytest.raises(ValueError, match="backend must be one of"):
        run_sweep([{"x": 1}], tmp_path / "t.csv", runner=abs, backend="spark", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_phase_diagram_on_the_pool_matches_in_process():
    """The phase diagram's omegas solved on two worker processes: the same thresholds, in omega order."""
    from attnlab.theory import Quadrature, phase_diagram

    kw = dict(quad=Quadrature.fast(), xtol=1e-2)
    pooled = phase_diagram(ModelParams(), [0.3, 0.1], workers=2, **kw)
    here = phase_diagram(ModelParams(), [0.3, 0.1], workers=1, **kw)
    assert [t.params.omega for t in pooled] == [0.3, 0.1]
    for a, b in zip(pooled, here):
        assert a.alpha_c == pytest.approx(b.alpha_c, rel=1e-6) and a.alpha_l == pytest.approx(b.alpha_l, rel=1e-6)
