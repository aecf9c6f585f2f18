"""Shared helpers of the continual and streaming experiments (Chang et al. 2023, Secs. 4.2-4.4).

* model factories with the settings of the issue: :func:`make_dual` (ours, with or without
  memory, BLS or random memory), :func:`make_bui` (Bui et al. 2017), :func:`fit_offline`
  (offline GPyTorch SVGP on all data);
* :func:`evaluate` -- accuracy / NLPD (classification) or RMSE / NLPD (regression);
* :class:`Store` -- one JSON file per unit of work (seed, fold, configuration) so that an
  interrupted run resumes where it stopped; a unit is recomputed only when its configuration
  changed or ``--force`` is given;
* :func:`summary` -- mean and standard deviation over runs.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.models import DualSVGP
from bo_ncgp.models.base import FitStep
from bo_ncgp.models.baselines import BuiStreamingSVGP, OfflineSVGP

RESULTS = Path(__file__).resolve().parent / "results" / "continual"

__all__ = [
    "RESULTS",
    "Store",
    "evaluate",
    "fit_offline",
    "log",
    "make_bui",
    "make_dual",
    "matern",
    "metrics",
    "pointwise",
    "save_png",
    "setup",
    "summary",
    "timed_update",
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def setup(threads: int = 1) -> None:
    """One torch thread (small dense algebra on a shared machine), float64."""
    torch.set_num_threads(threads)
    torch.set_default_dtype(torch.float64)


def matern(
    nu: float = 2.5,
    lengthscale: float = 1.0,
    outputscale: float = 1.0,
    ard_num_dims: int | None = None,
    constant: float | None = None,
) -> gpytorch.kernels.Kernel:
    """``ScaleKernel(Matern)`` (+ a learnable constant ``sigma_0^2`` when ``constant`` is set,
    the magnetometer prior of Sec. 4.2)."""
    k = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.MaternKernel(nu=nu, ard_num_dims=ard_num_dims)
    )
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = outputscale
    if constant is not None:
        c = gpytorch.kernels.ConstantKernel()
        c.constant = torch.tensor(float(constant))
        k = k + c
    return k


def make_dual(
    kernel: gpytorch.kernels.Kernel,
    likelihood: Likelihood,
    Z0: Tensor,
    cfg: dict,
    memory_size: int,
    selection: str = "bls",
    seed: int = 0,
    max_inducing: int | None = None,
) -> DualSVGP:
    """Ours (:class:`DualSVGP`): ``cfg`` holds ``rho``, ``inner_steps``, ``hyper_steps``,
    ``lr`` and optionally ``rounds``; ``memory_size = 0`` is the no-memory (VCL-style)
    variant."""
    model = DualSVGP(
        kernel,
        likelihood,
        Z0,
        memory_size=memory_size,
        rho=cfg["rho"],
        num_inner_steps=cfg["inner_steps"],
        num_hyper_steps=cfg["hyper_steps"],
        num_rounds=cfg.get("rounds", 1),
        lr=cfg["lr"],
        memory_selection=selection,
        generator=torch.Generator().manual_seed(seed),
    )
    if max_inducing is not None:
        model.max_inducing = int(max_inducing)  # Z grows by pivoted Cholesky up to this size
    return model


def make_bui(
    kernel: gpytorch.kernels.Kernel,
    likelihood: Likelihood,
    Z0: Tensor,
    cfg: dict,
    max_inducing: int | None = None,
) -> BuiStreamingSVGP:
    """Bui et al. (2017): ``cfg`` holds ``bui_steps``, ``bui_lr`` and optionally
    ``bui_learn_inducing`` / ``bui_learn_hypers``."""
    model = BuiStreamingSVGP(
        kernel,
        likelihood,
        Z0,
        num_steps=cfg["bui_steps"],
        lr=cfg["bui_lr"],
        learn_hyperparameters=cfg.get("bui_learn_hypers", True),
        learn_inducing=cfg.get("bui_learn_inducing", False),
    )
    if max_inducing is not None:
        model.max_inducing = int(max_inducing)
    return model


def fit_offline(
    kernel: gpytorch.kernels.Kernel,
    likelihood: Likelihood,
    X: Tensor,
    y: Tensor,
    cfg: dict,
    seed: int = 0,
    progress: Callable[[FitStep], bool | None] | None = None,
) -> OfflineSVGP:
    """Offline SVGP on all data: ``cfg`` holds ``m``, ``offline_steps``, ``offline_lr`` and
    ``offline_batch`` (``None``: full batch). Inducing inputs start at random data points."""
    g = torch.Generator().manual_seed(seed)
    m = min(int(cfg["m"]), X.shape[0])
    Z0 = X[torch.randperm(X.shape[0], generator=g)[:m]]
    model = OfflineSVGP(kernel, likelihood, Z0)
    return model.fit(
        X,
        y,
        num_steps=cfg["offline_steps"],
        batch_size=cfg.get("offline_batch"),
        lr=cfg["offline_lr"],
        generator=g,
        callback=progress,
    )


def add_stored_run_arguments(parser, out: Path, rebuilds: str) -> None:
    """The options shared by the resumable continual-learning scripts: ``--root``, ``--out``,
    ``--force``, ``--summary-only`` (rebuilding ``rebuilds`` without computing) and
    ``--threads``."""
    parser.add_argument(
        "--root", default=None, help="data root (default: $BO_NCGP_DATA or ../shared)"
    )
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--force", action="store_true", help="recompute stored units")
    parser.add_argument(
        "--summary-only",
        action="store_true",
        help=f"rebuild {rebuilds} from the stored units, compute nothing",
    )
    parser.add_argument("--threads", type=int, default=1)


def save_png(fig, path: str | os.PathLike, dpi: int = 100, colors: int = 256) -> None:
    """Save a matplotlib figure as a palette PNG (``colors`` colours): image plots shrink from
    ~1 MB to a few hundred kB, so that result folders stay small."""
    from PIL import Image

    fig.savefig(path, dpi=dpi)
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors)
    small.save(path, optimize=True)


def timed_update(model, X: Tensor, y: Tensor) -> float:
    """Seconds taken by ``model.update(X, y)``."""
    t0 = time.perf_counter()
    model.update(X, y)
    return time.perf_counter() - t0


@torch.no_grad()
def kernel_hypers(model) -> dict[str, float]:
    """Outputscale and smallest / largest lengthscale of ``model.kernel`` when it is a
    ``ScaleKernel`` (empty otherwise): logged per update to follow hyperparameter drift."""
    k = getattr(model, "kernel", None)
    if not isinstance(k, gpytorch.kernels.ScaleKernel):
        return {}
    ls = k.base_kernel.lengthscale.detach().reshape(-1)
    return {
        "outputscale": float(k.outputscale.detach().reshape(-1)[0]),
        "lengthscale_min": float(ls.min()),
        "lengthscale_max": float(ls.max()),
    }


def pointwise(
    model,
    X: Tensor,
    y: Tensor,
    likelihood: Likelihood | None = None,
    chunk: int = 2000,
) -> tuple[Tensor, Tensor]:
    """Per-point ``(hit, log_pred)``: ``hit`` is 1 for a correct class (argmax of the
    predictive class probabilities; threshold 0.5 for one latent) or the squared error for a
    Gaussian likelihood; ``log_pred`` is the log predictive density. ``likelihood``
    overrides the model's (e.g. a softmax with more Monte-Carlo samples for evaluation)."""
    lik = likelihood if likelihood is not None else model.likelihood
    regression = type(lik).__name__ == "Gaussian"
    hits, logp = [], []
    for s in range(0, X.shape[0], chunk):
        Xc, yc = X[s : s + chunk], y[s : s + chunk]
        mean, var = model.predict_f(Xc)
        mean, var = mean.detach(), var.detach()
        logp.append(lik.predictive_log_prob(yc, mean, var).detach())
        if regression:
            hits.append((mean - yc).square())
        else:
            p = lik.predictive_mean(mean, var)
            pred = p.argmax(-1) if p.dim() == 2 else (p > 0.5).to(yc.dtype)
            hits.append((pred.to(yc.dtype) == yc).to(yc.dtype))
    if not hits:
        return X.new_zeros(0), X.new_zeros(0)
    return torch.cat(hits), torch.cat(logp)


def metrics(hit: Tensor, logp: Tensor, regression: bool = False) -> dict[str, float]:
    """``accuracy`` (or ``rmse``) and ``nlpd`` from :func:`pointwise` outputs."""
    out = {"nlpd": float(-logp.mean())}
    if regression:
        out["rmse"] = math.sqrt(float(hit.mean()))
    else:
        out["accuracy"] = float(hit.mean())
    return out


def evaluate(
    model,
    X: Tensor,
    y: Tensor,
    likelihood: Likelihood | None = None,
    chunk: int = 2000,
) -> dict[str, float]:
    """Test metrics of anything with ``predict_f``: ``accuracy`` and ``nlpd`` for classifiers,
    ``rmse`` and ``nlpd`` for a Gaussian likelihood (see :func:`pointwise`)."""
    lik = likelihood if likelihood is not None else model.likelihood
    hit, logp = pointwise(model, X, y, lik, chunk)
    return metrics(hit, logp, regression=type(lik).__name__ == "Gaussian")


def summary(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "std", "n"}`` (sample std; 0 for a single value)."""
    v = torch.tensor([float(x) for x in values], dtype=torch.float64)
    if v.numel() == 0:
        return {"mean": float("nan"), "std": float("nan"), "n": 0}
    std = float(v.std()) if v.numel() > 1 else 0.0
    return {"mean": float(v.mean()), "std": std, "n": int(v.numel())}


class Store:
    """Per-unit JSON results under ``folder`` (atomic writes, config-checked resume).

    Example:
        >>> import tempfile
        >>> s = Store(tempfile.mkdtemp())
        >>> s.put("seed0", {"acc": 0.9}, config={"m": 10})
        >>> s.get("seed0", config={"m": 10})["acc"], s.get("seed0", config={"m": 20})
        (0.9, None)
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def _read(self, key: str) -> dict | None:
        p = self.path(key)
        if not p.is_file():
            return None
        try:
            return json.loads(p.read_text())
        except json.JSONDecodeError:
            return None

    def get(self, key: str, config: dict | None = None) -> dict | None:
        """The stored result, or ``None`` if absent or computed with another config."""
        data = self._read(key)
        if data is None or (config is not None and data.get("config") != _plain(config)):
            return None
        return data

    def put(self, key: str, result: dict, config: dict | None = None) -> None:
        """Store ``result``; a unit stored under ``key`` with another configuration is never
        overwritten: it is moved to ``superseded/<key>.<time>.json`` (with a message)."""
        old = self._read(key)
        if old is not None and old.get("config") != (None if config is None else _plain(config)):
            keep = self.folder / "superseded" / f"{key}.{time.strftime('%Y%m%dT%H%M%S')}.json"
            keep.parent.mkdir(exist_ok=True)
            self.path(key).replace(keep)
            print(f"{self.path(key)} was computed with another configuration; kept as {keep}",
                  file=sys.stderr)  # fmt: skip
        data = dict(result)
        if config is not None:
            data["config"] = config
        write_json(self.path(key), data)

    def all(self) -> dict[str, dict]:
        return {p.stem: json.loads(p.read_text()) for p in sorted(self.folder.glob("*.json"))}


def _plain(config: dict) -> dict:
    """``config`` as it reads back from JSON (tuples become lists, ...)."""
    return json.loads(json.dumps(config))


def write_json(path: Path, obj) -> None:
    """Atomic JSON write (temporary file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def fmt(s: dict, digits: int = 3) -> str:
    """``mean (std)`` of a :func:`summary`."""
    if s["n"] == 0 or not math.isfinite(s["mean"]):
        return "--"
    if s["n"] == 1:
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} ({s['std']:.{digits}f})"
