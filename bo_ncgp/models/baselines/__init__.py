"""Baselines of the continual and streaming experiments of Chang et al. (2023), Secs. 4.2-4.4.

* :class:`BuiStreamingSVGP` -- the streaming sparse GP of Bui, Nguyen & Turner (2017): the
  uncollapsed online ELBO of Chang et al.'s Eq. 5 (two extra KL terms against the old prior
  and the old posterior at the old inducing inputs) for any likelihood;
* :class:`OfflineSVGP` -- a batch SVGP on all data (GPyTorch variational strategies, the
  package's likelihood expectations), the gold standard of Tables 1 and 3;
* :mod:`~bo_ncgp.models.baselines.objective` -- the objective itself, as pure functions.

Both follow the model contract (:class:`~bo_ncgp.models.base.LatentGP`): the Bui et al.
model streams batches in with ``update``, the offline SVGP trains with ``fit``. The method
itself ("ours", with and without memory) is :class:`bo_ncgp.models.DualSVGP`.

Example:
    >>> BuiStreamingSVGP.supports_update, OfflineSVGP.supports_fit
    (True, True)
"""

from __future__ import annotations

from bo_ncgp.models.baselines.bui import BuiStreamingSVGP
from bo_ncgp.models.baselines.objective import OldPosterior, old_posterior, streaming_elbo
from bo_ncgp.models.baselines.offline import OfflineSVGP

__all__ = ["BuiStreamingSVGP", "OfflineSVGP", "OldPosterior", "old_posterior", "streaming_elbo"]
