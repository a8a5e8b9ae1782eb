"""attnlab: positional vs semantic attention, a solvable model and its phase transition.

A teaching library after Cui, Behrens, Krzakala, Zdeborova, *A phase transition
between positional and semantic learning in a solvable model of dot-product
attention*, NeurIPS 2024, arXiv:2402.03902.

Layout, imported one way (model -> theory -> experiments): :mod:`~attnlab.params`
(validated parameters, the paper's defaults, the one record format),
:mod:`~attnlab.data` (seeded sampling), :mod:`~attnlab.attention` (student and teacher),
:mod:`~attnlab.objective` (the exact risk R(Q)), :mod:`~attnlab.training` (GD, L-BFGS,
Adam), :mod:`~attnlab.metrics` (overlaps, test error), :mod:`~attnlab.baseline` (linear
positional baseline), :mod:`~attnlab.simulation` (one experiment end to end),
:mod:`~attnlab.counting` (the counting task); :mod:`~attnlab.theory` (state evolution);
:mod:`~attnlab.experiments` (sweeps, cached tables, the paper's figures) on
:mod:`~attnlab.parallel` (the process pool); :mod:`~attnlab.plots`, :mod:`~attnlab.widgets`,
:mod:`~attnlab.explorers` (figures and explorers); :mod:`~attnlab.cli` (the ``attnlab`` command).
"""
import importlib
import importlib.util

from .params import DEFAULT_A, PAPER_A_ASYMMETRIC, ModelParams

# The other names are imported on first use (PEP 562): `import attnlab` (and with it the
# state evolution and its CLI) does not import torch (about 3 s).
_LAZY = {
    "data": ("Dataset", "make_problem", "positional_encodings", "sample_dataset", "sample_teacher"),
    "attention": ("AttentionStudent", "AttentionTeacher", "softmax_attention", "student_output",
                  "teacher_attention", "teacher_output"),
    "objective": ("AttentionRisk",),
    "training": ("TrainingDivergedError", "TrainResult", "initial_Q", "minimize_risk"),
    "metrics": ("canonical_sign", "generalization_error", "overlaps"),
    "baseline": ("fit_linear_baseline",),
    "simulation": ("SimulationResult", "run_simulation"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}

__all__ = ["DEFAULT_A", "PAPER_A_ASYMMETRIC", "ModelParams", "theory", *_WHERE]
__version__ = "0.1.0"


def __getattr__(name):
    if name in _WHERE:
        value = getattr(importlib.import_module("." + _WHERE[name], __name__), name)
        globals()[name] = value
        return value
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a submodule: attnlab.theory, attnlab.training, ...
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
