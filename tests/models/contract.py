"""The model contract suite (:mod:`bo_ncgp.models.base`), like GPyTorch's base test cases.

Each model's test module subclasses :class:`ModelContractTests` and implements
:meth:`ModelContractTests.make` (an untrained model and a small data set); pytest collects the
subclass (its name starts with ``Test``) and runs every contract check on that model.
"""

from __future__ import annotations

import pytest
import torch

from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.models.base import FitStep, LatentGP
from tests._devices import FactoryRecorder, stray_tensors


class ModelContractTests:
    """Checks every bo_ncgp model must pass. Subclass as ``TestXContract`` and set ``make``."""

    #: does :meth:`train` need more than one optimisation step (so early stopping is testable)?
    multi_step: bool = True

    def make(self) -> tuple[LatentGP, torch.Tensor, torch.Tensor]:  # pragma: no cover
        """An untrained model and training data ``(X (n, d), y)``."""
        raise NotImplementedError

    def train(self, model: LatentGP, X, y, callback=None) -> LatentGP:
        if model.supports_fit:
            return model.fit(X, y, callback=callback)
        return model.update(X, y, callback=callback)

    # ------------------------------------------------------------------ checks
    def test_is_a_latent_gp_with_a_training_method(self):
        model, _, _ = self.make()
        assert isinstance(model, LatentGP)
        assert model.supports_fit or model.supports_update

    def test_training_returns_the_model(self):
        model, X, y = self.make()
        assert self.train(model, X, y) is model

    def test_unsupported_training_method_raises(self):
        model, X, y = self.make()
        if not model.supports_fit:
            with pytest.raises(UnsupportedError):
                model.fit(X, y)
        if not model.supports_update:
            with pytest.raises(UnsupportedError):
                model.update(X, y)

    def test_prediction_shapes_and_types(self):
        model, X, y = self.make()
        self.train(model, X, y)
        Xt = X[:5]
        mean, var = model.predict_f(Xt)
        shape = (5,) if model.num_latents == 1 else (5, model.num_latents)
        assert tuple(mean.shape) == (*model.batch_shape, *shape)
        assert var.shape == mean.shape
        assert bool((var >= 0).all()) and bool(torch.isfinite(mean).all())
        assert mean.dtype == X.dtype and mean.device == X.device
        py = model.predict_y(Xt)
        assert isinstance(py, torch.Tensor) and py.shape[: len(shape)] == mean.shape[: len(shape)]
        lp = model.log_predictive(Xt, y[:5])
        assert tuple(lp.shape) == (*model.batch_shape, 5) and bool(torch.isfinite(lp).all())

    def test_callback_sees_fit_steps_and_can_stop(self):
        model, X, y = self.make()
        seen: list[FitStep] = []

        def stop_at_first(step: FitStep) -> bool:
            seen.append(step)
            return True

        self.train(model, X, y, callback=stop_at_first)
        assert seen, "the callback was never called"
        assert all(isinstance(s, FitStep) and s.model is model for s in seen)
        if self.multi_step:
            assert len(seen) == 1, f"training went on after the callback returned True: {seen}"

    def test_condition_adds_batch_dimensions_or_is_unsupported(self):
        model, X, y = self.make()
        self.train(model, X, y)
        Xc = X[:2].unsqueeze(0).expand(3, 2, X.shape[-1])  # 3 fantasies of 2 points
        Yc = y[:2].unsqueeze(0).expand(3, *y[:2].shape)
        try:
            cond = model.condition(Xc, Yc)
        except UnsupportedError:
            return
        assert isinstance(cond, LatentGP)
        mean, _ = cond.predict_f(X[:4])
        assert mean.shape[: 1 + len(model.batch_shape)] == (3, *model.batch_shape)

    # ------------------------------------------------------------------ devices
    def test_tensors_the_model_creates_follow_its_inputs(self, device):
        """Training, prediction and conditioning create no tensor without naming its device."""
        model, X, y = self.make()
        with FactoryRecorder() as recorder:
            self.train(model, X, y)
            mean, _ = model.predict_f(X[:3])
            model.predict_y(X[:3])
            model.log_predictive(X[:3], y[:3])
            try:
                model.condition(X[:2].unsqueeze(0), y[:2].unsqueeze(0))
            except UnsupportedError:
                pass
            try:
                index = torch.tensor([0, 2], device=X.device)
                model.pool_fantasies(X[:4]).conditioned(index, y[:2, None].expand(2, 2))
            except UnsupportedError:
                pass
        assert not recorder.created, f"tensors created without a device:\n{recorder.report()}"
        assert mean.device == X.device and mean.dtype == X.dtype
        assert X.device.type == device.type  # the lane's test device

    def test_inputs_on_another_device_raise(self):
        """Inputs on a device other than the model's are an InputDataError naming both."""
        model, X, y = self.make()
        self.train(model, X, y)
        other = X[:3].to("meta")
        with pytest.raises(InputDataError, match=rf"meta.*{X.device.type}"):
            model.predict_f(other)
        try:
            model.condition(other[:2].unsqueeze(0), y[:2].unsqueeze(0).to("meta"))
        except UnsupportedError:
            pass
        except InputDataError as err:
            assert "meta" in str(err) and X.device.type in str(err), str(err)
        else:
            raise AssertionError("condition accepted inputs on another device")
        try:
            model.pool_fantasies(other).conditioned(torch.tensor([0]), y[:1, None].to("meta"))
        except UnsupportedError:
            pass
        except InputDataError as err:
            assert "meta" in str(err) and X.device.type in str(err), str(err)
        else:
            raise AssertionError("pool_fantasies accepted a pool on another device")
        fresh, X, y = self.make()
        with pytest.raises(InputDataError, match=rf"meta.*{X.device.type}"):
            self.train(fresh, X.to("meta"), y.to("meta"))

    def test_to_moves_every_tensor_of_the_model_or_refuses(self):
        """``model.to(device)`` leaves no tensor behind (or is refused with UnsupportedError)."""
        meta = torch.device("meta")
        for trained in (False, True):
            model, X, y = self.make()
            if trained:
                self.train(model, X, y)
            try:
                model.to(meta)
            except UnsupportedError:
                assert trained, "an untrained model must move"
                continue
            left = stray_tensors(model, meta)
            assert not left, "tensors left behind by .to(meta):\n" + "\n".join(left)

    def test_a_float32_model_on_float32_inputs_predicts_in_float32(self):
        """Tensors the model creates follow the inputs' dtype, not the default (float64)."""
        model, X, y = self.make()
        model.to(torch.float32)
        X = X.to(torch.float32)
        y = y.to(torch.float32) if y.is_floating_point() else y
        self.train(model, X, y)
        mean, var = model.predict_f(X[:3])
        assert mean.dtype == var.dtype == torch.float32
        assert model.predict_y(X[:3]).dtype == torch.float32
