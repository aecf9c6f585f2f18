"""Where evaluations run: any :class:`concurrent.futures.Executor`.

* ``workers <= 1`` and no scheduler: :class:`InlineExecutor` (same process, no pickling);
* ``workers >= 2``: a :class:`~concurrent.futures.ProcessPoolExecutor`;
* ``dask_scheduler="tcp://host:8786"``: ``distributed.Client(address).get_executor()``, so a
  campaign spreads episodes and seeds over a dask cluster without code changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any

__all__ = ["InlineExecutor", "make_executor"]


class InlineExecutor(Executor):
    """Runs each submitted call immediately in the calling process (``--workers 1``);
    an exception is stored in the future, as a process pool would.

    Example:
        >>> fut = InlineExecutor().submit(divmod, 7, 0)
        >>> type(fut.exception()).__name__
        'ZeroDivisionError'
    """

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as err:  # the campaign records failures
            fut.set_exception(err)
        return fut


@contextlib.contextmanager
def make_executor(workers: int = 1, dask_scheduler: str | None = None) -> Iterator[Executor]:
    """Context manager yielding the executor for ``workers`` / ``dask_scheduler``.

    Example:
        >>> with make_executor(1) as ex:
        ...     ex.submit(sum, [1, 2]).result()
        3
    """
    if dask_scheduler:
        try:
            from distributed import Client
        except ImportError as err:  # pragma: no cover - extra not installed
            raise ImportError(
                "--dask-scheduler needs dask.distributed: pip install 'bo-ncgp[distributed]'"
            ) from err
        client = Client(dask_scheduler)
        try:
            yield client.get_executor()
        finally:
            client.close()
    elif workers <= 1:
        yield InlineExecutor()
    else:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            yield ex
