"""Worker threads that each run torch ops on one torch thread of their own.

Why: torch splits every product across its threads and joins them after each op; for the small
float32 products of a decode step or a MiniLM batch that costs more than the products. Given
each its own rows, the threads join once per call: sampling 1.6-1.7x faster, MiniLM's embeddings
1.36x on an AVX2 CPU (docs/performance.md, changes 24 and 25).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, Sequence, TypeVar

import torch

T = TypeVar("T")
P = TypeVar("P")


class RowWorkers:
    """`threads` worker threads, each running torch ops on one thread of its own."""

    def __init__(self, threads: int):
        self.threads = threads
        ready = threading.Barrier(threads)

        def one_thread() -> None:
            # torch sets a thread's OpenMP and MKL count from a global default on its first op in
            # that thread; take that first, then set this thread's own count
            torch.get_num_threads()
            torch.set_num_threads(1)
            ready.wait(timeout=60)  # every worker starts (and sets its own) before the pool is used

        main_threads = torch.get_num_threads()
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="emojikit-rows", initializer=one_thread)
        for future in [self.pool.submit(lambda: None) for _ in range(threads)]:
            future.result()
        # torch keeps one global default too, which the workers set to 1: back to the caller's, so
        # that threads started later (none of emojikit's compute) begin from it
        torch.set_num_threads(main_threads)

    def map(self, fn: Callable[[P], T], parts: Sequence[P]) -> list[T]:
        """fn(part) for every part, in the workers; the results in the parts' order. A part that
        raised raises here (after every part has finished)."""
        futures = [self.pool.submit(fn, part) for part in parts]
        try:
            errors = [f.exception() for f in futures]
        finally:  # interrupted (a second Ctrl-C): no part keeps running under the caller's clean-up
            wait(futures)
        for error in errors:
            if error is not None:
                raise error
        return [f.result() for f in futures]
