"""Where gradient descent from a random start ends (issue 39): the outcome classifier, and the
``random-start`` reproduce figure end to end at toy scale."""
import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnlab.metrics import classify_outcome  # noqa: E402


def test_classify_outcome_four_kinds():
    m = [0.27, -0.01, 0.1, 0.001, -0.3]
    theta = [0.0, 0.4, -0.2, 0.0, 0.049]
    assert classify_outcome(m, theta).tolist() == ["positional", "semantic", "mixed", "collapsed", "positional"]


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_classify_outcome_rejects_a_bad_threshold(bad):
    with pytest.raises(ValueError, match="min_overlap"):
        classify_outcome(0.1, 0.1, bad)


def test_classify_outcome_rejects_nan():
    with pytest.raises(ValueError, match="finite"):
        classify_outcome([np.nan], [0.1])


def test_random_start_figure_quick(tmp_path):
    """``attnlab reproduce random-start --quick``: runs from the random start only, fractions that sum to 1."""
    from attnlab.experiments.figures import load_results, reproduce

    reproduce("random-start", quick=True, workers=1, out=tmp_path, progress=False)
    runs = load_results("random-start-quick", results_dir=tmp_path)
    assert set(runs["init"].tolist()) == {"random"} and len(runs["alpha"]) == 4
    kinds = classify_outcome(runs["m"], runs["theta"])
    assert set(kinds.tolist()) <= {"semantic", "positional", "mixed", "collapsed"}
    assert (tmp_path / "random-start-quick.png").exists()
