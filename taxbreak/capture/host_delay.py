"""A fixed host delay per framework op, for captures that check the what-if replay against reality.

``host_delay(ns)`` is a context manager: while it is active every aten op that reaches the dispatcher's Python key
first busy-waits ``ns`` on the calling thread (a ``TorchDispatchMode``), inside the op's profiler range and
before its kernels are launched, as a slower host would. Under ``inference_mode`` the mode sees the ops Python
calls (``aten::linear``, not the ``aten::addmm`` inside it): on a tiny CPU capture 317 delayed ops against 309
outermost framework ops in the trace. The what-if replay (``taxbreak whatif --host-delay-ns``) adds the same
delay to each outermost framework op of the undelayed capture; comparing the two captures tests that prediction
(docs/method.md, "What-if replay").
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def host_delay(delay_ns: int) -> Iterator[None]:
    """Busy-wait ``delay_ns`` before each aten op dispatched inside the block (no-op when ``delay_ns`` <= 0)."""
    if delay_ns <= 0:
        yield
        return
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Delay(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            end = time.perf_counter_ns() + delay_ns
            while time.perf_counter_ns() < end:
                pass
            return func(*args, **(kwargs or {}))

    with _Delay():
        yield
