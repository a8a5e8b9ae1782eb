"""Tests of the counting (histogram) experiment (Cui et al. 2024, Sec. 1, Fig. 1)."""
import json
from collections import Counter

import numpy as np
import pytest
import torch

from attnlab.counting import (ATTENTION_MODES, CountingTransformer, attention_maps,
                              make_counting_data, semantic_score, semantic_score_from_maps,
                              train_counting)

TINY = dict(L=6, T=4, d_model=16, d_hidden=32, n_train=300, n_test=100, epochs=2,
            batch_size=32, progress=False)


def _model(attention, seed=0, **kw):
    torch.manual_seed(seed)
    return CountingTransformer(attention=attention, **kw).eval()


# ----------------------------------------------------------------------------- data
def test_labels_match_pure_python_count():
    tokens, labels = make_counting_data(200, L=10, T=15, seed=3)
    assert tokens.shape == labels.shape == (200, 10)
    assert tokens.dtype == labels.dtype == torch.long
    assert tokens.min() >= 0 and tokens.max() < 15
    for row, lab in zip(tokens.tolist(), labels.tolist()):
        c = Counter(row)
        assert lab == [c[s] for s in row]


def test_data_is_seeded():
    a, _ = make_counting_data(50, seed=1)
    b, _ = make_counting_data(50, seed=1)
    c, _ = make_counting_data(50, seed=2)
    assert torch.equal(a, b) and not torch.equal(a, c)


# ---------------------------------------------------------------------------- model
@pytest.mark.parametrize("attention", ATTENTION_MODES)
def test_shapes(attention):
    m = _model(attention)
    tokens, _ = make_counting_data(7, seed=0)
    logits, attn = m(tokens, return_attention=True)
    assert logits.shape == (7, 10, 11)
    assert attn.shape == (7, 10, 10)
    A = attention_maps(m, tokens)
    assert isinstance(A, np.ndarray) and A.shape == (7, 10, 10)
    np.testing.assert_allclose(A.sum(-1), 1.0, atol=1e-6)


def test_positional_attention_ignores_symbols():
    m = _model("positional")
    tok1, _ = make_counting_data(64, seed=0)
    tok2, _ = make_counting_data(64, seed=1)
    A1 = attention_maps(m, tok1)
    np.testing.assert_allclose(attention_maps(m, tok2), A1, rtol=0, atol=1e-7)
    np.testing.assert_allclose(A1, np.broadcast_to(A1[:1], A1.shape), rtol=0, atol=1e-7)
    with torch.no_grad():
        m.symbol_embedding.weight.normal_(generator=torch.Generator().manual_seed(5))
    np.testing.assert_array_equal(attention_maps(m, tok1), A1)


def test_semantic_attention_ignores_positions():
    m = _model("semantic")
    tok, _ = make_counting_data(64, seed=0)
    A = attention_maps(m, tok)
    with torch.no_grad():  # swap the positional embeddings around and rescale them
        m.position_embedding.weight.copy_(3.0 * m.position_embedding.weight.flip(0))
    np.testing.assert_array_equal(attention_maps(m, tok), A)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(0))
    A_perm = attention_maps(m, tok[:, perm])  # permutation equivariance
    np.testing.assert_allclose(A_perm, A[:, perm][:, :, perm], rtol=0, atol=1e-6)


def test_both_attention_sees_both_halves():
    m = _model("both")
    tok, _ = make_counting_data(16, seed=0)
    A = attention_maps(m, tok)
    with torch.no_grad():
        m.position_embedding.weight.mul_(-2.0)
    assert not np.allclose(attention_maps(m, tok), A)
    m = _model("both")
    with torch.no_grad():
        m.symbol_embedding.weight.mul_(-2.0)
    assert not np.allclose(attention_maps(m, tok), A)


# ------------------------------------------------------------------- semantic score
def test_semantic_score_reference_patterns():
    tok, _ = make_counting_data(2000, seed=0)
    t = tok.numpy()
    same = (t[:, :, None] == t[:, None, :]).astype(float)
    sem = same / same.sum(-1, keepdims=True)
    assert semantic_score_from_maps(sem, t) == pytest.approx(1.0)
    uniform = np.full((2000, 10, 10), 0.1)
    assert semantic_score_from_maps(uniform, t) == pytest.approx(0.0, abs=1e-12)
    rng = np.random.default_rng(0)  # any token-independent pattern scores ~0
    P = rng.dirichlet(np.ones(10) * 0.3, size=10)
    assert abs(semantic_score_from_maps(np.broadcast_to(P, (2000, 10, 10)), t)) < 0.05
    other = (1 - same) / (1 - same).sum(-1, keepdims=True)  # avoid own symbol
    assert semantic_score_from_maps(other, t) < -0.1
    assert np.isnan(semantic_score_from_maps(np.broadcast_to(np.eye(10), (2000, 10, 10)), t))
    m = _model("positional")
    assert abs(semantic_score(m, tok)) < 0.05


# ------------------------------------------------------------------------- training
def test_training_is_deterministic_and_leaves_global_rng_alone():
    state, threads = torch.get_rng_state(), torch.get_num_threads()
    r1 = train_counting("both", seed=4, **TINY)
    r2 = train_counting("both", seed=4, **TINY)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads
    for (k, v1), v2 in zip(r1.model.state_dict().items(), r2.model.state_dict().values()):
        assert torch.equal(v1, v2), k
    np.testing.assert_array_equal(r1.loss_history, r2.loss_history)
    assert r1.test_accuracy == r2.test_accuracy and r1.semantic_score == r2.semantic_score
    r3 = train_counting("both", seed=5, **TINY)
    assert not np.array_equal(r1.loss_history, r3.loss_history)


@pytest.mark.parametrize("attention", ["positional", "semantic"])
def test_short_training_beats_chance(attention):
    # Majority class (count 1) has probability (14/15)^9 = 0.54 at L=10, T=15.
    r = train_counting(attention, seed=0, n_train=6000, n_test=1000, epochs=3, batch_size=32,
                       lr=5e-3, progress=False)
    assert r.test_accuracy > 0.7
    assert r.loss_history.shape == r.test_accuracy_history.shape == (3,)
    assert r.loss_history[-1] < r.loss_history[0]
    assert r.seconds > 0 and r.attention == attention and r.seed == 0
    if attention == "positional":
        assert abs(r.semantic_score) < 0.05


# ---------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("call, name", [
    (lambda: make_counting_data(0), "n"),
    (lambda: make_counting_data(5, L=1), "L"),
    (lambda: make_counting_data(5, T=0), "T"),
    (lambda: make_counting_data(5, seed=-1), "seed"),
    (lambda: CountingTransformer(attention="content"), "attention"),
    (lambda: CountingTransformer(d_model=15), "d_model"),
    (lambda: CountingTransformer(d_hidden=0), "d_hidden"),
    (lambda: train_counting("nope", progress=False), "attention"),
    (lambda: train_counting("both", epochs=0, progress=False), "epochs"),
    (lambda: train_counting("both", n_train=-5, progress=False), "n_train"),
    (lambda: train_counting("both", batch_size=0, progress=False), "batch_size"),
    (lambda: train_counting("both", lr=0.0, progress=False), "lr"),
    (lambda: train_counting("both", num_threads=0, progress=False), "num_threads"),
])
def test_bad_input_raises_value_error_naming_parameter(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()


# ------------------------------------------------------------------------------ CLI
def _parser():
    from attnlab.cli import build_parser

    return build_parser()


def test_cli_contract():
    args = _parser().parse_args(["counting", "--attention", "positional", "--seed", "2",
                                 "--epochs", "1", "--n-train", "200", "--n-test", "50",
                                 "--json", "--no-progress"])
    assert args.json and args.no_progress
    out = args.func(args)
    assert {"test_accuracy", "semantic_score", "seconds", "attention", "seed"} <= set(out)
    assert out["attention"] == "positional" and out["seed"] == 2
    json.dumps(out)


def test_cli_bad_attention_raises_value_error():
    args = _parser().parse_args(["counting", "--attention", "content", "--no-progress"])
    with pytest.raises(ValueError, match="attention"):
        args.func(args)
