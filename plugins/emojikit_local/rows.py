"""Row-parallel passes: a micro-batch's rows split across the CPU threads, one thread each.

Why: with every product split across two threads (torch's way), a step is thousands of
parallel regions, each ending in a join. On a machine that runs something else one thread is
often descheduled, and its sibling waits at the join: beside two competing two-thread
processes an SFT step took 4.2-5.5x its idle time where a fair share of the CPU is 3x. Split by
rows instead, each thread scores and back-propagates its own rows on one core and the threads
join once per pass; idle, a step takes the same time (docs/performance.md, change 22).

The gradient does not depend on which thread finishes first: each part's gradient is returned,
and the parts are added to the weights' .grad in a fixed order.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

import torch

T = TypeVar("T")


def split_rows(sizes: Sequence[int], keys: Sequence[object], parts: int) -> list[list[int]]:
    """Row indices in `parts` lists of about equal work (`sizes`: tokens per row). Rows that share
    a key (a GRPO group's prompt, run once for all of them) stay in one part; within a part rows
    keep their order. Deterministic: the same rows split the same way, so a scoring pass and the
    training pass after it form the same parts. Empty parts are dropped."""
    groups: dict[object, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    load, chosen = [0] * parts, [[] for _ in range(parts)]
    # the largest groups first, each to the least loaded part (ties: the lower part)
    for rows in sorted(groups.values(), key=lambda rows: (-sum(sizes[i] for i in rows), rows[0])):
        part = min(range(parts), key=lambda p: (load[p], p))
        chosen[part] += rows
        load[part] += sum(sizes[i] for i in rows)
    return [sorted(rows) for rows in chosen if rows]


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
            ready.wait()  # every worker starts (and sets its own) before the pool is used

        main_threads = torch.get_num_threads()
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="emojikit-rows", initializer=one_thread)
        for future in [self.pool.submit(lambda: None) for _ in range(threads)]:
            future.result()
        torch.set_num_threads(main_threads)  # torch keeps one global default too: the calling thread's stays as it was

    def map(self, fn: Callable[[list[int]], T], parts: Sequence[list[int]]) -> list[T]:
        """fn(part) for every part, in the workers; the results in the parts' order. A part that
        raised raises here (after every part has finished)."""
        futures = [self.pool.submit(fn, part) for part in parts]
        errors = [f.exception() for f in futures]
        for error in errors:
            if error is not None:
                raise error
        return [f.result() for f in futures]

    def close(self) -> None:
        self.pool.shutdown(wait=False)


def add_gradients(params: Sequence[torch.Tensor], part_grads: Sequence[Sequence[torch.Tensor | None]]) -> None:
    """Adds each part's gradients to the weights' .grad, part by part in order: the same sums
    whichever part finished first."""
    for grads in part_grads:
        for p, g in zip(params, grads):
            if g is None:
                continue
            if p.grad is None:
                p.grad = g
            else:
                p.grad.add_(g)
