"""The counting (histogram) task: positional vs semantic attention in a small transformer.

Each sequence has ``L`` tokens drawn independently and uniformly from an
alphabet of ``T`` symbols. The label at position ``l`` is how many times the
symbol at ``l`` occurs in the whole sequence (its histogram count). One
dot-product attention layer whose queries and keys see only the positional
half of the embedding, only the semantic (symbol) half, or both, followed by a
residual connection, a layer norm and a ReLU MLP read-out, learns this task.
The positional and the semantic variant both solve it, with different
attention maps: a fixed, token-independent pattern versus attention to tokens
that carry the same symbol. With both halves visible, training can land on
either algorithm.

Source: Cui et al. 2024, Sec. 1, Fig. 1 (H. Cui, F. Behrens, F. Krzakala,
L. Zdeborova, *A phase transition between positional and semantic learning in
a solvable model of dot-product attention*, arXiv:2402.03902).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from .objective import resolve_device
from .params import COUNTING_ATTENTION, COUNTING_DEFAULTS, MAX_EPOCHS, check_choice, check_int, check_positive
from .training import TrainingDivergedError

__all__ = ["ATTENTION_MODES", "DEFAULTS", "CountingTransformer", "CountingResult",
           "make_counting_data", "count_labels", "attention_maps", "semantic_score",
           "semantic_score_from_maps", "evaluate", "train_counting"]

#: What the queries and keys of the attention layer may see (:data:`attnlab.params.COUNTING_ATTENTION`).
ATTENTION_MODES = COUNTING_ATTENTION
#: Default configuration of :func:`train_counting` (:data:`attnlab.params.COUNTING_DEFAULTS`).
DEFAULTS = COUNTING_DEFAULTS


# ----------------------------------------------------------------------------- data
def count_labels(tokens: torch.Tensor) -> torch.Tensor:
    """Histogram labels of a batch of sequences.

    Parameters
    ----------
    tokens : LongTensor, shape (n, L)
        Symbols in ``0..T-1``.

    Returns
    -------
    labels : LongTensor, shape (n, L)
        ``labels[i, l] = #{m : tokens[i, m] == tokens[i, l]}``, in ``1..L``.
    """
    tokens = torch.as_tensor(tokens)
    return (tokens[:, :, None] == tokens[:, None, :]).sum(-1).long()


def _check_model_sizes(L, T, d_model, d_hidden) -> tuple:
    """``(L, T, d_model, d_hidden)`` checked: ``L >= 2``, ``T >= 1``, even ``d_model >= 2``, ``d_hidden >= 1``."""
    L, T = check_int("L", L, 2), check_int("T", T, 1)
    d_model = check_int("d_model", d_model, 2)
    if d_model % 2:
        raise ValueError(f"d_model must be an even integer >= 2, got {d_model!r}")
    return L, T, d_model, check_int("d_hidden", d_hidden, 1)


def make_counting_data(n: int, L: int = 10, T: int = 15, seed: int = 0):
    """Draw a seeded data set of the counting task.

    Source: Cui et al. 2024, Sec. 1, Fig. 1.

    Parameters
    ----------
    n : int
        Number of sequences, ``>= 1``.
    L : int
        Sequence length, ``>= 2``. Paper: 10.
    T : int
        Alphabet size, ``>= 1``. Paper: 15.
    seed : int
        Seed (``>= 0``) of the ``numpy`` generator drawing the symbols.

    Returns
    -------
    tokens : LongTensor, shape (n, L)
        Symbols drawn i.i.d. uniformly from ``0..T-1``.
    labels : LongTensor, shape (n, L)
        Count of each position's symbol in its sequence (classes ``0..L``;
        in practice ``1..L``).

    Raises
    ------
    ValueError
        If a size or the seed is out of range; the message names it.
    """
    n = check_int("n", n, 1)
    L = check_int("L", L, 2)
    T = check_int("T", T, 1)
    seed = check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    tokens = torch.from_numpy(rng.integers(0, T, size=(n, L), dtype=np.int64))
    return tokens, count_labels(tokens)


# ---------------------------------------------------------------------------- model
class CountingTransformer(nn.Module):
    """One-layer, single-head transformer for the counting task.

    The input of position ``l`` is ``x_l = [e(s_l), p_l]``: the symbol
    embedding ``e(s_l)`` (the *semantic* half, width ``d_model // 2``)
    concatenated with a learned positional embedding ``p_l`` (the *positional*
    half). Then

    * ``A = softmax(q k^T / sqrt(d_model))`` with ``q = W_Q u``, ``k = W_K u``
      and ``u = p`` (``"positional"``), ``u = e`` (``"semantic"``) or
      ``u = x`` (``"both"``);
    * ``h = LayerNorm(x + A x W_V)`` (values see the full embedding);
    * ``logits = W_2 relu(W_1 h + b_1) + b_2`` over the ``L + 1`` classes.

    Source: Cui et al. 2024, Sec. 1, Fig. 1.

    Parameters
    ----------
    L : int
        Sequence length (``>= 2``); there are ``L + 1`` output classes.
    T : int
        Alphabet size (``>= 1``).
    d_model : int
        Total embedding width ``D``, even and ``>= 2``; each half is ``D // 2``.
    d_hidden : int
        Width of the ReLU read-out MLP (``>= 1``).
    attention : {"positional", "semantic", "both"}
        Which half of the embedding the queries and keys see.

    Raises
    ------
    ValueError
        On an unknown ``attention`` or an invalid size; the message names it.
    """

    def __init__(self, L: int = 10, T: int = 15, d_model: int = 64, d_hidden: int = 128,
                 attention: str = "both"):
        super().__init__()
        self.L, self.T, self.d_model, self.d_hidden = _check_model_sizes(L, T, d_model, d_hidden)
        self.attention = check_choice("attention", attention, ATTENTION_MODES)
        half = self.d_model // 2
        self.half = half
        self.symbol_embedding = nn.Embedding(self.T, half)
        self.position_embedding = nn.Embedding(self.L, half)
        d_qk_in = self.d_model if self.attention == "both" else half
        self.query = nn.Linear(d_qk_in, self.d_model, bias=False)
        self.key = nn.Linear(d_qk_in, self.d_model, bias=False)
        self.value = nn.Linear(self.d_model, self.d_model, bias=False)
        self.norm = nn.LayerNorm(self.d_model)
        self.mlp = nn.Sequential(nn.Linear(self.d_model, self.d_hidden), nn.ReLU(),
                                 nn.Linear(self.d_hidden, self.L + 1))

    def embed(self, tokens: torch.Tensor):
        """Embeddings of a batch.

        Parameters
        ----------
        tokens : LongTensor, shape (n, L)

        Returns
        -------
        x : Tensor, shape (n, L, d_model)
            ``[semantic | positional]``.
        qk_input : Tensor, shape (n, L, d_model // 2) or (n, L, d_model)
            The part of ``x`` that the queries and keys see.
        """
        if tokens.dim() != 2 or tokens.shape[1] != self.L:
            raise ValueError(f"tokens must have shape (n, L={self.L}), got {tuple(tokens.shape)}")
        sem = self.symbol_embedding(tokens)
        pos = self.position_embedding.weight.unsqueeze(0).expand(tokens.shape[0], -1, -1)
        x = torch.cat([sem, pos], dim=-1)
        qk_input = {"positional": pos, "semantic": sem, "both": x}[self.attention]
        return x, qk_input

    def forward(self, tokens: torch.Tensor, return_attention: bool = False):
        """Class logits (and optionally the attention maps).

        Parameters
        ----------
        tokens : LongTensor, shape (n, L)
        return_attention : bool
            Also return the attention maps.

        Returns
        -------
        logits : Tensor, shape (n, L, L + 1)
        attn : Tensor, shape (n, L, L), only if ``return_attention``
            ``attn[i, l, m]``: weight of key ``m`` for query ``l``; rows sum to 1.
        """
        x, u = self.embed(tokens)
        scores = self.query(u) @ self.key(u).transpose(-1, -2) / math.sqrt(self.d_model)
        attn = torch.softmax(scores, dim=-1)
        h = self.norm(x + attn @ self.value(x))
        logits = self.mlp(h)
        return (logits, attn) if return_attention else logits


# ------------------------------------------------------------------------- analysis
@torch.no_grad()
def attention_maps(model: CountingTransformer, tokens) -> np.ndarray:
    """Attention maps of ``model`` on ``tokens``.

    Parameters
    ----------
    model : CountingTransformer
    tokens : LongTensor or array_like, shape (n, L)

    Returns
    -------
    attn : ndarray, shape (n, L, L)
        Row ``attn[i, l]`` is the distribution of query ``l`` over the keys of
        sequence ``i``.
    """
    dev = next(model.parameters()).device
    tokens = torch.as_tensor(tokens, dtype=torch.long, device=dev)
    was_training = model.training
    model.eval()
    try:
        _, attn = model(tokens, return_attention=True)
    finally:
        model.train(was_training)
    return attn.cpu().double().numpy()


def semantic_score_from_maps(attn, tokens) -> float:
    """How semantic a set of attention maps is, from the maps and the tokens.

    Only the off-diagonal mass is looked at (attending to oneself is both a
    positional and a semantic move), and only queries whose symbol occurs at
    least twice (``c_l >= 2``). Over all such queries ``l`` of all sequences,

    * ``M = sum_l sum_{m != l, s_m = s_l} A_lm / sum_l sum_{m != l} A_lm`` is
      the share of the off-diagonal attention mass that lands on other tokens
      with the same symbol;
    * ``B = sum_l (1 - A_ll) (c_l - 1) / (L - 1) / sum_l (1 - A_ll)`` is the
      chance baseline: the expected value of ``M`` for *any* token-independent
      (purely positional) pattern, since given ``c_l`` the other ``c_l - 1``
      copies sit at uniformly random positions among the ``L - 1`` others.
      For ``L = 10``, ``T = 15`` it is about ``0.13``.

    The score is ``(M - B) / (1 - B)``: about 0 for a positional pattern
    (whatever its shape), 1 for attention exclusively to same-symbol tokens.
    Negative values mean that the queries *avoid* their own symbol, which is
    still a token-dependent (semantic) pattern; ``abs(score)`` then measures
    how semantic the layer is.

    Parameters
    ----------
    attn : array_like, shape (n, L, L)
        Row-stochastic attention maps.
    tokens : array_like, shape (n, L)
        Symbols of the same sequences.

    Returns
    -------
    score : float
        ``nan`` if no query has a repeated symbol or no off-diagonal mass.
    """
    attn = np.asarray(attn, dtype=float)
    tokens = np.asarray(tokens)
    if attn.ndim != 3 or attn.shape[1] != attn.shape[2] or attn.shape[:2] != tokens.shape:
        raise ValueError(f"attn must have shape (n, L, L) and tokens shape (n, L); "
                         f"got {attn.shape} and {tokens.shape}")
    L = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]
    off = ~np.eye(L, dtype=bool)
    counts = same.sum(-1)                       # c_l, shape (n, L)
    rows = counts >= 2
    off_mass = (attn * off).sum(-1)            # 1 - A_ll, shape (n, L)
    same_mass = (attn * (same & off)).sum(-1)  # mass on other copies
    denom = off_mass[rows].sum()
    if not rows.any() or denom <= 0:
        return float("nan")
    M = same_mass[rows].sum() / denom
    B = (off_mass[rows] * (counts[rows] - 1) / (L - 1)).sum() / denom
    if B >= 1.0:
        return float("nan")
    return float((M - B) / (1.0 - B))


def semantic_score(model: CountingTransformer, tokens) -> float:
    """Semantic score of the attention layer of ``model`` on a (test) set.

    See :func:`semantic_score_from_maps` for the exact definition and its
    chance baseline: ``~0`` for a positional (token-independent) attention
    pattern, ``1`` for attention exclusively to tokens with the same symbol.

    Source: Cui et al. 2024, Sec. 1, Fig. 1.

    Parameters
    ----------
    model : CountingTransformer
    tokens : LongTensor or array_like, shape (n, L)

    Returns
    -------
    score : float
    """
    tokens = torch.as_tensor(tokens, dtype=torch.long)
    return semantic_score_from_maps(attention_maps(model, tokens), tokens.cpu().numpy())


@torch.no_grad()
def evaluate(model: CountingTransformer, tokens, labels, batch_size: int = 4096):
    """Mean cross-entropy and per-token accuracy.

    Parameters
    ----------
    model : CountingTransformer
    tokens, labels : LongTensor, shape (n, L)
    batch_size : int
        Sequences per forward pass.

    Returns
    -------
    loss : float
        Cross-entropy averaged over all ``n * L`` tokens.
    accuracy : float
        Fraction of tokens whose count is predicted exactly.
    """
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss, correct, total = 0.0, 0, 0
    try:
        for i in range(0, len(tokens), batch_size):
            tok = tokens[i:i + batch_size].to(dev)
            lab = labels[i:i + batch_size].to(dev)
            logits = model(tok)
            loss += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1),
                                          reduction="sum"))
            correct += int((logits.argmax(-1) == lab).sum())
            total += lab.numel()
    finally:
        model.train(was_training)
    return loss / total, correct / total


# ------------------------------------------------------------------------- training
@dataclass(frozen=True)
class CountingResult:
    """Outcome of :func:`train_counting`.

    Attributes
    ----------
    attention : str
        ``"positional"``, ``"semantic"`` or ``"both"``.
    seed : int
    test_accuracy : float
        Per-token accuracy on the held-out test set.
    test_loss : float
        Mean cross-entropy per token on the test set.
    semantic_score : float
        :func:`semantic_score` on the test set.
    seconds : float
        Wall time of training (data generation and evaluation included).
    loss_history : ndarray, shape (epochs,)
        Mean training cross-entropy of each epoch.
    train_accuracy_history : ndarray, shape (epochs,)
        Per-token training accuracy of each epoch (running, over minibatches).
    test_accuracy_history : ndarray, shape (epochs,)
        Per-token test accuracy after each epoch.
    model : CountingTransformer
        The trained model (on ``device``, in eval mode).
    config : dict
        ``L, T, d_model, d_hidden, n_train, n_test, epochs, batch_size, lr, device,
        num_threads``.
    """

    attention: str
    seed: int
    test_accuracy: float
    test_loss: float
    semantic_score: float
    seconds: float
    loss_history: np.ndarray
    train_accuracy_history: np.ndarray
    test_accuracy_history: np.ndarray
    model: CountingTransformer = field(repr=False)
    config: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-serialisable summary (everything but the model)."""
        return dict(attention=self.attention, seed=self.seed,
                    test_accuracy=self.test_accuracy, test_loss=self.test_loss,
                    semantic_score=self.semantic_score, seconds=self.seconds,
                    loss_history=[float(v) for v in self.loss_history],
                    train_accuracy_history=[float(v) for v in self.train_accuracy_history],
                    test_accuracy_history=[float(v) for v in self.test_accuracy_history],
                    config=dict(self.config))


def train_counting(attention: str = "both", seed: int = 0, *, L: int = DEFAULTS["L"],
                   T: int = DEFAULTS["T"], d_model: int = DEFAULTS["d_model"],
                   d_hidden: int = DEFAULTS["d_hidden"], n_train: int = DEFAULTS["n_train"],
                   n_test: int = DEFAULTS["n_test"], epochs: int = DEFAULTS["epochs"],
                   batch_size: int = DEFAULTS["batch_size"], lr: float = DEFAULTS["lr"],
                   device="cpu", num_threads: int | None = 1,
                   progress: bool = True) -> CountingResult:
    """Train a :class:`CountingTransformer` on the counting task with Adam.

    The training set, the test set and the initialisation/shuffling are seeded
    by three streams derived from ``seed``; the global torch RNG is used only
    inside :func:`torch.random.fork_rng` and left unchanged. A fixed seed (and
    thread count) gives identical weights.

    Source: Cui et al. 2024, Sec. 1, Fig. 1 (about 50,000 sequences, width 64,
    MLP width 128, Adam with learning rate 1e-3).

    Parameters
    ----------
    attention : {"positional", "semantic", "both"}
        Which half of the embedding the queries and keys see.
    seed : int
        Seed, ``>= 0``.
    L, T : int
        Sequence length (``>= 2``) and alphabet size (``>= 1``).
    d_model, d_hidden : int
        Embedding width (even) and read-out MLP width.
    n_train, n_test : int
        Training and test sequences.
    epochs, batch_size : int
        Passes over the training set (in ``[1, 1000]``) and sequences per Adam step (``>= 1``).
    lr : float
        Adam learning rate, ``> 0``.
    device : str or torch.device
        ``"cpu"`` (default) or a CUDA device.
    num_threads : int or None
        Intra-op CPU threads used during this call (restored afterwards);
        ``None`` keeps the current setting. Default 1: the model is so small
        that a second thread gains ~15% on an idle machine, while on shared
        cores (oversubscription) it was measured up to 50x slower.
    progress : bool
        Show a tqdm progress bar.

    Returns
    -------
    CountingResult

    Raises
    ------
    ValueError
        On an unknown ``attention``, a non-positive size, ``lr`` or
        ``num_threads``, or an unavailable ``device``; the message names the
        parameter.
    attnlab.training.TrainingDivergedError
        (a ``RuntimeError``) If a training or the test loss is not finite (e.g. too
        large an ``lr``).
    """
    attention = check_choice("attention", attention, ATTENTION_MODES)
    seed = check_int("seed", seed, 0)
    n_train = check_int("n_train", n_train, 1)
    n_test = check_int("n_test", n_test, 1)
    epochs = check_int("epochs", epochs, 1, MAX_EPOCHS)
    batch_size = check_int("batch_size", batch_size, 1)
    lr = check_positive("lr", lr)
    _check_model_sizes(L, T, d_model, d_hidden)
    dev = resolve_device(device)
    old_threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(check_int("num_threads", num_threads, 1))
    try:
        return _train(attention, seed, L, T, d_model, d_hidden, n_train, n_test, epochs,
                      batch_size, lr, dev, progress)
    finally:
        torch.set_num_threads(old_threads)


def _train(attention, seed, L, T, d_model, d_hidden, n_train, n_test, epochs, batch_size, lr,
           dev, progress) -> CountingResult:
    t0 = time.perf_counter()
    s_train, s_test, s_torch = (int(s) for s in np.random.SeedSequence(seed).generate_state(3))
    x_train, y_train = make_counting_data(n_train, L, T, s_train)
    x_test, y_test = make_counting_data(n_test, L, T, s_test)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(s_torch)
        model = CountingTransformer(L, T, d_model, d_hidden, attention).to(dev)
    gen = torch.Generator().manual_seed(s_torch)
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=dev.type in ("cpu", "cuda"))
    x_train, y_train = x_train.to(dev), y_train.to(dev)
    n_batches = math.ceil(n_train / batch_size)
    losses, train_accs, test_accs = [], [], []
    bar = tqdm(total=epochs * n_batches, desc=f"counting[{attention}]", disable=not progress,
               leave=False)
    model.train()
    try:
        for _ in range(epochs):
            perm = torch.randperm(n_train, generator=gen).to(dev)
            ep_loss, ep_correct = 0.0, 0
            for b in range(n_batches):
                idx = perm[b * batch_size:(b + 1) * batch_size]
                tok, lab = x_train[idx], y_train[idx]
                logits = model(tok)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if not math.isfinite(float(loss.detach())):
                    raise TrainingDivergedError(f"counting training diverged in epoch {len(losses) + 1}, batch {b + 1}: "
                                                f"the loss became {float(loss.detach())} with lr={lr}; try a smaller --lr")
                ep_loss += float(loss.detach()) * lab.numel()
                ep_correct += int((logits.detach().argmax(-1) == lab).sum())
                bar.update(1)
            losses.append(ep_loss / y_train.numel())
            train_accs.append(ep_correct / y_train.numel())
            test_accs.append(evaluate(model, x_test, y_test)[1])
            bar.set_postfix(loss=f"{losses[-1]:.4f}", test_acc=f"{test_accs[-1]:.4f}")
    finally:
        bar.close()
    model.eval()
    test_loss, test_acc = evaluate(model, x_test, y_test)
    if not math.isfinite(test_loss):
        raise TrainingDivergedError(f"counting training diverged: the test loss is {test_loss} with lr={lr}")
    score = semantic_score(model, x_test)
    seconds = time.perf_counter() - t0
    config = dict(L=model.L, T=model.T, d_model=model.d_model, d_hidden=model.d_hidden,
                  n_train=n_train, n_test=n_test, epochs=epochs, batch_size=batch_size,
                  lr=lr, device=str(dev), num_threads=torch.get_num_threads())
    return CountingResult(attention=attention, seed=seed, test_accuracy=test_acc,
                          test_loss=test_loss, semantic_score=score, seconds=seconds,
                          loss_history=np.asarray(losses), train_accuracy_history=np.asarray(train_accs),
                          test_accuracy_history=np.asarray(test_accs), model=model, config=config)
