"""attnlab: positional vs semantic attention, a solvable model and its phase transition.

A teaching library after Cui, Behrens, Krzakala, Zdeborova, *A phase transition
between positional and semantic learning in a solvable model of dot-product
attention*, NeurIPS 2024, arXiv:2402.03902.

Layout: :mod:`~attnlab.params` (validated parameters), :mod:`~attnlab.data`
(seeded sampling), :mod:`~attnlab.attention` (student and teacher),
:mod:`~attnlab.objective` (the exact risk R(Q)), :mod:`~attnlab.training`
(GD, L-BFGS, Adam), :mod:`~attnlab.metrics` (overlaps, test error),
:mod:`~attnlab.baseline` (linear positional baseline),
:mod:`~attnlab.simulation` (one experiment end to end), :mod:`~attnlab.theory`
(state evolution), :mod:`~attnlab.cli`.
"""
from .params import DEFAULT_A, PAPER_A_ASYMMETRIC, ModelParams
from .data import Dataset, make_problem, positional_encodings, sample_dataset, sample_teacher
from .attention import (AttentionStudent, AttentionTeacher, softmax_attention, student_output,
                        teacher_attention, teacher_output)
from .objective import AttentionRisk
from .training import TrainingDivergedError, TrainResult, initial_Q, minimize_risk
from .metrics import canonical_sign, generalization_error, overlaps
from .baseline import fit_linear_baseline
from .simulation import SimulationResult, run_simulation
from . import theory  # noqa: F401  (attnlab.theory.* after a plain ``import attnlab``)

__version__ = "0.1.0"
