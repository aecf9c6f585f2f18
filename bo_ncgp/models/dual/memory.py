"""Memory of past data for the dual SVGP and the Bayesian leverage score (Chang et al. 2023).

The memory ``M`` (Secs. 3.2, 3.5) holds a few past inputs and targets together with their
current sites ``(eta_i, beta_i)`` (the pseudo-likelihood ``exp(eta f - beta f^2 / 2)`` of
Eq. 12, one per latent). Because the sites of memory points are stored individually and never
folded into the summary of the remaining old data, "removing the memory's contributions from
the old dual pair" (Eqs. 19-20) is exact at any inducing inputs and hyperparameters.

Selection (Sec. 3.5): points of a new batch enter the memory with probability proportional to
the Bayesian leverage score (Eq. 31)

    h_i = beta_hat_i * v_hat_i,

the expected negative Hessian of the log likelihood times the posterior predictive variance of
``f_i`` (summed over latents for multi-latent models), or uniformly at random for the
ablation. For class labels, :func:`sample_stratified` splits the budget across the labels
present in proportion to the points of each label the model has seen (as far as each label
has points; :func:`sample_balanced`: equal shares) and draws by BLS within each label: the
plain BLS draws a label's points in proportion to their summed scores, so a label the model
has learnt (small predictive variances, e.g. the classes of an old task) loses its memory to
the labels it is still uncertain about, and is forgotten. The loss compounds under a memory
cap, where the whole memory is re-drawn by the same rule: on class-incremental streams plain
BLS evicts the classes of earlier tasks almost entirely. Shares in proportion to the labels
seen keep every old class (equal shares where the classes are equally frequent) and a rare
label at its base rate, where equal shares would over-represent it (about 12 % positives on
the bank data). The stratified rule is therefore the default ``memory_selection`` of
:class:`~bo_ncgp.models.dual.DualSVGPConfig` (it equals plain BLS for likelihoods without
class labels); ``"bls"`` keeps the paper's rule.

Under a memory cap a uniform rule can keep a sample of the whole stream or of its recent
part: evicting uniformly from the memory and the new points together keeps a point for ``t``
more updates with a probability that decays geometrically in ``t``, a window over the recent
stream; :func:`sample_reservoir` (``memory_selection="reservoir_stratified"``) keeps each
label's memory a uniform sample of all the points of that label offered to it (reservoir
sampling), the sample of the data that an offline fit on everything seen so far would see.

Example:
    >>> mem = Memory(dim=2, num_latents=1)
    >>> mem.add(torch.zeros(3, 2), torch.ones(3), torch.zeros(3, 1), torch.ones(3, 1))
    >>> len(mem)
    3
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.models._alias import Alias
from bo_ncgp.models.dual._state import ResizableModule

__all__ = [
    "Memory",
    "bayesian_leverage_scores",
    "sample_balanced",
    "sample_by_score",
    "sample_reservoir",
    "sample_stratified",
    "stratified_quotas",
]


def bayesian_leverage_scores(beta: Tensor, var: Tensor) -> Tensor:
    """Eq. 31: ``h_i = beta_hat_i * v_hat_i`` (elementwise; shapes broadcast).

    Example:
        >>> bayesian_leverage_scores(torch.tensor([2.0]), torch.tensor([0.25]))
        tensor([0.5000])
    """
    return beta * var


def sample_by_score(
    scores: Tensor,
    k: int,
    method: Literal["bls", "random"] = "bls",
    generator: torch.Generator | None = None,
) -> Tensor:
    """Indices of ``k`` of the ``n`` points, drawn without replacement.

    ``"bls"``: with probability proportional to ``scores`` (Sec. 3.5; points whose score is
    zero are drawn only after all positive ones); ``"random"``: uniformly. All indices are
    returned, sorted, when ``k >= n``.

    Example:
        >>> scores = torch.tensor([0.0, 5.0, 0.0, 3.0])
        >>> sample_by_score(scores, 2)  # the two positive scores are drawn first
        tensor([1, 3])
        >>> g = torch.Generator().manual_seed(0)
        >>> idx = sample_by_score(scores, 3, method="random", generator=g)
        >>> idx.shape, bool((idx.diff() > 0).all())  # sorted, without replacement
        (torch.Size([3]), True)
    """
    n = scores.shape[-1]
    if k >= n:
        return torch.arange(n, device=scores.device)
    if k <= 0:
        return torch.zeros(0, dtype=torch.long, device=scores.device)
    if method == "random":
        dev = "cpu" if generator is None else generator.device
        perm = torch.randperm(n, generator=generator, device=dev).to(scores.device)
        return perm[:k].sort().values
    if method != "bls":
        raise InputDataError(f"memory selection must be 'bls' or 'random', got {method!r}")
    s = scores.detach().to(torch.float64).clamp_min(0)
    s = torch.where(torch.isfinite(s), s, torch.zeros_like(s))
    total = s.sum()
    if not bool(total > 0):
        s = torch.ones_like(s)
    # a tiny floor keeps torch.multinomial valid when fewer than k scores are positive
    s = s + 1e-12 * s.max() + torch.finfo(torch.float64).tiny
    dev = "cpu" if generator is None else generator.device
    idx = torch.multinomial(s.to(dev), k, replacement=False, generator=generator)
    return idx.to(scores.device).sort().values


def sample_balanced(
    scores: Tensor,
    labels: Tensor,
    k: int,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Indices of ``k`` of the ``n`` points: an equal share of ``k`` per label present (a label
    with fewer points keeps them all and its unused share goes to the others), drawn within
    each label by :func:`sample_by_score` (``"bls"``); sorted. :func:`sample_stratified` with
    equal weights.

    Example:
        >>> scores = torch.tensor([9.0, 8.0, 7.0, 0.1, 0.2])
        >>> labels = torch.tensor([0, 0, 0, 1, 1])
        >>> labels[sample_balanced(scores, labels, 2)]  # one point per label, not the two largest
        tensor([0, 1])
    """
    return sample_stratified(scores, labels, k, None, generator)


def sample_stratified(
    scores: Tensor,
    labels: Tensor,
    k: int,
    weights: Tensor | None = None,
    generator: torch.Generator | None = None,
    method: Literal["bls", "random"] = "bls",
) -> Tensor:
    """Indices of ``k`` of the ``n`` points: shares of ``k`` per label present in proportion to
    ``weights`` (one per label of ``torch.unique(labels)``, in its sorted order; ``None`` or
    all zero: equal shares), a label with fewer points than its share keeping them all and the
    rest going to the others in the same proportions (whole points by largest remainders, ties
    to the smaller label); drawn within each label by :func:`sample_by_score` with ``method``
    (``"bls"``: by score; ``"random"``: uniformly, so that each label's memory is an unbiased
    sample of its points); sorted.

    Example:
        >>> scores = torch.ones(20)
        >>> labels = torch.tensor([0] * 10 + [1] * 10)
        >>> picked = labels[sample_stratified(scores, labels, 10, torch.tensor([9.0, 1.0]))]
        >>> int((picked == 0).sum()), int((picked == 1).sum())  # 9 : 1, as the weights
        (9, 1)
        >>> few = labels[8:]  # 2 points of label 0, 10 of label 1
        >>> picked = few[sample_stratified(scores[:12], few, 4, torch.tensor([9.0, 1.0]))]
        >>> int((picked == 0).sum()), int((picked == 1).sum())  # label 0 keeps both
        (2, 2)
    """
    n = scores.shape[-1]
    if k >= n:
        return torch.arange(n, device=scores.device)
    if k <= 0:
        return torch.zeros(0, dtype=torch.long, device=scores.device)
    values, inverse, counts = torch.unique(labels, return_inverse=True, return_counts=True)
    quota = stratified_quotas(counts, k, weights)
    chosen = []
    for j in range(values.shape[0]):
        members = torch.nonzero(inverse == j).squeeze(-1)
        idx = sample_by_score(scores[members], int(quota[j]), method, generator)
        chosen.append(members[idx])
    return torch.cat(chosen).sort().values


def stratified_quotas(counts: Tensor, k: int, weights: Tensor | None = None) -> Tensor:
    """Shares of ``k`` points for labels with ``counts`` points each: in proportion to
    ``weights`` (``None`` or all zero: equal shares), a label with fewer points than its share
    keeping them all and the rest going to the others in the same proportions (whole points
    by largest remainders, ties to the smaller label); the quotas of
    :func:`sample_stratified` and :func:`sample_reservoir`.

    Example:
        >>> stratified_quotas(torch.tensor([10, 10, 2]), 9).tolist()  # label 2 keeps its 2
        [4, 3, 2]
        >>> stratified_quotas(torch.tensor([10, 10]), 5, torch.tensor([4.0, 1.0])).tolist()
        [4, 1]
    """
    counts = counts.cpu()  # the quotas are a few integers: worked out on the CPU
    w = torch.ones(counts.shape[0], dtype=torch.float64, device=counts.device)
    if weights is not None:
        given = torch.as_tensor(weights, dtype=torch.float64, device=counts.device).reshape(-1)
        if given.shape[0] != counts.shape[0]:
            raise ValueError(
                f"sample_stratified: {given.shape[0]} weights for {counts.shape[0]} labels"
            )
        if not bool((torch.isfinite(given) & (given >= 0)).all()):
            raise ValueError(
                f"sample_stratified: weights must be finite and >= 0, got {given.tolist()}"
            )
        if given.sum() > 0:  # all zero (nothing counted yet): equal shares
            w = given
    quota = torch.zeros_like(counts)
    left = int(k)
    open_ = counts > 0
    while left > 0 and bool(open_.any()):  # water filling in proportion to the weights
        wo = torch.where(open_, w, 0.0)
        if not wo.sum() > 0:  # the open labels all weigh zero: equal shares among them
            wo = open_.to(torch.float64)
        target = left * wo / wo.sum()
        room = counts - quota
        add = torch.minimum(target.floor().long(), room)
        # the points left after the whole shares: one each by largest remainder, among the
        # labels with room (what a full label cannot take is shared out in the next pass)
        spare = left - int(add.sum())
        frac = torch.where(open_ & (add < room), target - target.floor(), -1.0)
        order = torch.argsort(-frac, stable=True)[:spare]
        add[order[frac[order] >= 0]] += 1
        quota += add
        left -= int(add.sum())
        open_ = quota < counts
    return quota


def sample_reservoir(
    labels: Tensor,
    new: Tensor,
    k: int,
    offered: Tensor,
    weights: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Indices of ``k`` of the ``n`` points of a full memory and the points just added to it
    (``new``), such that every label's part stays a uniform sample of *all* the points of
    that label ever offered to the memory (reservoir sampling, Vitter's Algorithm R, in
    batches): the shares per label are those of :func:`sample_stratified`; of a label's share
    ``Q``, the number taken from its ``k_new`` new points is the number of new points among
    ``Q`` drawn without replacement from its ``offered + k_new`` points (hypergeometric), the
    rest uniformly from its old memory points. Evicting uniformly from the memory and the new
    points together instead (``sample_stratified`` with ``"random"``) keeps a point for
    ``t`` later updates with probability decaying geometrically in ``t``: a window over the
    recent stream, not a sample of it.

    Args:
        labels: ``(n,)`` class index (``0 ... C - 1``) of each point (all zero without labels).
        new: ``(n,)`` bool, the points added in this update.
        k: points to keep.
        offered: ``(C,)`` points of each class offered to the memory before this update.
        weights: ``(C,)`` share weights (the labels seen so far), ``None``: equal shares.
        generator: torch generator of the draws.

    Example:
        >>> labels = torch.zeros(12, dtype=torch.long)
        >>> new = torch.arange(12) >= 10  # a memory of 10 points standing for 990 offered
        >>> g = torch.Generator().manual_seed(0)
        >>> kept = sample_reservoir(labels, new, 10, torch.tensor([990]), generator=g)
        >>> len(kept), int(new[kept].sum()) <= 2  # a new point enters with prob. 10 / 1000
        (10, True)
    """
    n = labels.shape[-1]
    if k >= n:
        return torch.arange(n, device=labels.device)
    num = int(offered.numel())
    counts = torch.bincount(labels, minlength=num)
    present = torch.nonzero(counts > 0).squeeze(-1)
    w = None if weights is None else weights.to(labels.device).reshape(-1)[present]
    quota = stratified_quotas(counts[present], k, w)
    dev = "cpu" if generator is None else generator.device
    chosen = []
    for c, q in zip(present.tolist(), quota.tolist(), strict=True):
        old = torch.nonzero((labels == c) & ~new).squeeze(-1)
        fresh = torch.nonzero((labels == c) & new).squeeze(-1)
        total = int(offered[c]) + fresh.numel()
        draws = torch.randperm(max(total, 1), generator=generator, device=dev)[:q]
        j = int((draws >= total - fresh.numel()).sum())  # new points among q of all offered
        j = min(max(j, q - old.numel()), fresh.numel(), q)
        for members, size in ((fresh, j), (old, q - j)):
            perm = torch.randperm(members.numel(), generator=generator, device=dev)
            chosen.append(members[perm[:size].to(members.device)])
    return torch.cat(chosen).sort().values


class Memory(ResizableModule):
    """Past points kept individually: inputs ``X (n_M, d)``, targets ``y (n_M,)`` and sites
    ``eta``, ``beta`` ``(n_M, L)``. A ``torch.nn.Module`` whose buffers change size; its
    ``state_dict`` loads into a fresh ``Memory`` of any size.

    Args:
        dim: input dimension ``d``.
        num_latents: ``L`` (C for the softmax).
        dtype, device: of the stored tensors.

    Example:
        >>> mem = Memory(dim=2, num_latents=1)
        >>> mem.add(torch.rand(4, 2), torch.ones(4), torch.zeros(4, 1), torch.ones(4, 1))
        >>> X_out, y_out, eta_out, beta_out = mem.keep(torch.tensor([0, 2]))
        >>> len(mem), X_out.shape
        (2, torch.Size([2, 2]))
        >>> fresh = Memory(dim=2)  # empty; the state_dict of any size loads into it
        >>> _ = fresh.load_state_dict(mem.state_dict())
        >>> len(fresh), torch.equal(fresh.inputs, mem.inputs)
        (2, True)
    """

    _resizable = ("X", "y", "eta", "beta")

    def __init__(
        self,
        dim: int,
        num_latents: int = 1,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        dtype = dtype or torch.get_default_dtype()
        self.register_buffer("X", torch.zeros(0, dim, dtype=dtype, device=device))
        self.register_buffer("y", torch.zeros(0, dtype=dtype, device=device))
        self.register_buffer("eta", torch.zeros(0, num_latents, dtype=dtype, device=device))
        self.register_buffer("beta", torch.zeros(0, num_latents, dtype=dtype, device=device))

    def __len__(self) -> int:
        return int(self.X.shape[0])

    inputs: Alias[Tensor] = Alias("X", "``(n_M, d)`` stored inputs.")
    targets: Alias[Tensor] = Alias("y", "``(n_M,)`` stored targets.")

    def add(self, X: Tensor, y: Tensor, eta: Tensor, beta: Tensor) -> None:
        """Append points with their sites (``eta``, ``beta`` of shape ``(n, L)``)."""
        self.X = torch.cat([self.X, X.detach().to(self.X)])
        self.y = torch.cat([self.y, y.detach().to(self.y)])
        self.eta = torch.cat([self.eta, eta.detach().to(self.eta)])
        self.beta = torch.cat([self.beta, beta.detach().to(self.beta)])

    def set_sites(self, eta: Tensor, beta: Tensor) -> None:
        """Overwrite the sites of all stored points (``(n_M, L)`` each)."""
        if eta.shape != self.eta.shape or beta.shape != self.beta.shape:
            raise InputDataError(
                f"Memory.set_sites: expected sites of shape {tuple(self.eta.shape)}, got "
                f"{tuple(eta.shape)} and {tuple(beta.shape)}"
            )
        self.eta = eta.detach().to(self.eta)
        self.beta = beta.detach().to(self.beta)

    def keep(self, idx: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Keep only rows ``idx``; return the removed ``(X, y, eta, beta)``."""
        mask = torch.zeros(len(self), dtype=torch.bool, device=self.X.device)
        mask[idx] = True
        removed = (self.X[~mask], self.y[~mask], self.eta[~mask], self.beta[~mask])
        self.X, self.y, self.eta, self.beta = (
            self.X[mask],
            self.y[mask],
            self.eta[mask],
            self.beta[mask],
        )
        return removed

    def extra_repr(self) -> str:
        return f"size={len(self)}, dim={self.X.shape[1]}, num_latents={self.eta.shape[1]}"
