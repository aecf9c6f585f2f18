"""Device checks that run on the CPU: a recorder of the tensors the library creates without
naming a device (such a tensor lands on the CPU whatever the device of the inputs, and breaks the
first operation that mixes it with a GPU tensor)."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

import bo_ncgp

LIBRARY = str(Path(bo_ncgp.__file__).resolve().parent)
TORCH = str(Path(torch.__file__).resolve().parent)

#: torch functions that create a tensor on the default device unless given ``device=``
FACTORIES = frozenset(
    {
        torch.arange, torch.as_tensor, torch.empty, torch.empty_strided, torch.eye,
        torch.from_numpy, torch.full, torch.linspace, torch.logspace, torch.normal, torch.ones,
        torch.rand, torch.randint, torch.randn, torch.randperm, torch.scalar_tensor,
        torch.tensor, torch.tril_indices, torch.triu_indices, torch.zeros,
    }
)  # fmt: skip


@dataclass(frozen=True)
class Creation:
    """One tensor the library created without a device: where, with which function."""

    path: str
    line: int
    function: str

    def __str__(self) -> str:
        return (
            f"{Path(self.path).relative_to(Path(LIBRARY).parent)}:{self.line} torch.{self.function}"
        )


class FactoryRecorder(TorchFunctionMode):
    """Records each call of a tensor factory made directly by ``bo_ncgp`` code without
    ``device=`` that returns a tensor of at least one dimension (a 0-d CPU tensor mixes with a
    GPU tensor like a Python number). ``torch.as_tensor`` of a tensor keeps its device and is
    not recorded; ``torch.from_numpy`` always is.
    """

    def __init__(self) -> None:
        super().__init__()
        self.created: list[Creation] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in FACTORIES and kwargs.get("device") is None and _is_array(out):
            if not (func is torch.as_tensor and args and isinstance(args[0], torch.Tensor)):
                frame = sys._getframe(1)
                while frame is not None and frame.f_code.co_filename.startswith(TORCH):
                    frame = frame.f_back
                if frame is not None and frame.f_code.co_filename.startswith(LIBRARY):
                    where = (frame.f_code.co_filename, frame.f_lineno, func.__name__)
                    self.created.append(Creation(*where))
        return out

    def report(self) -> str:
        """The distinct creation sites, one a line."""
        return "\n".join(sorted({str(c) for c in self.created}))


def _is_array(out) -> bool:
    return isinstance(out, torch.Tensor) and out.dim() > 0


def stray_tensors(obj, device: torch.device) -> list[str]:
    """Paths of the tensors reachable from ``obj`` (module parameters, buffers and attributes,
    lists, dicts, dataclasses and bo_ncgp objects) that are not on ``device``. Dict entries
    keyed by a device (per-device caches) are skipped."""
    found: list[str] = []
    seen: set[int] = set()

    def visit(x, path: str) -> None:
        if id(x) in seen:
            return
        seen.add(id(x))
        if isinstance(x, torch.Tensor):
            if x.device != device:
                found.append(f"{path} on {x.device}")
        elif isinstance(x, torch.nn.Module):
            for name, value in vars(x).items():
                if name in ("_parameters", "_buffers", "_modules"):
                    for key, v in value.items():
                        visit(v, f"{path}.{key}")
                elif not name.startswith("__"):
                    visit(value, f"{path}.{name}")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                visit(v, f"{path}[{i}]")
        elif isinstance(x, dict):
            for key, v in x.items():
                if not any(str(d) in str(key) for d in ("cpu", "cuda", "meta", "mps")):
                    visit(v, f"{path}[{key!r}]")
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                visit(getattr(x, f.name), f"{path}.{f.name}")
        elif type(x).__module__.startswith("bo_ncgp") and hasattr(x, "__dict__"):
            for name, value in vars(x).items():
                visit(value, f"{path}.{name}")

    visit(obj, "model")
    return found
