"""Campaign strategies: the :class:`Strategy` interface, :class:`History`,
:class:`RandomSearch`, and strategies composed from parts configured by frozen dataclasses
(:mod:`.hotspots`, :mod:`.lunar`), named in one registry (:mod:`.registry`)."""

from bo_ncgp.campaigns.strategies.base import History, RandomSearch, Strategy

__all__ = ["History", "RandomSearch", "Strategy"]
