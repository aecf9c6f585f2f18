"""``torch.nn.Module`` whose buffers may change shape (streaming state) and still round-trip
through ``state_dict`` / ``load_state_dict`` into a freshly constructed module."""

from __future__ import annotations

import torch

__all__ = ["ResizableModule"]


class ResizableModule(torch.nn.Module):
    """Buffers named in ``_resizable`` are replaced by the loaded tensors' shapes on load;
    those also in ``_optional`` may be absent (``None``) on either side."""

    _resizable: tuple[str, ...] = ()
    _optional: tuple[str, ...] = ()

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
    ):
        for name in self._resizable:
            key = prefix + name
            current = self._buffers.get(name)
            if key in state_dict:
                src = state_dict[key]
                like = current if current is not None else src
                self._buffers[name] = torch.empty(
                    src.shape,
                    dtype=src.dtype if current is None else like.dtype,
                    device=like.device,
                )
            elif name in self._optional:
                self._buffers[name] = None
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
        )
        self._on_state_loaded()

    def _on_state_loaded(self) -> None:
        """Hook run after a state dict was loaded (invalidate caches)."""
