"""Row-parallel passes: a micro-batch's rows (or a sampling call's) split across the CPU threads,
one torch thread each.

Why: with every product split across two threads (torch's way), a step is thousands of
parallel regions, each ending in a join. On a machine that runs something else one thread is
often descheduled, and its sibling waits at the join: beside two competing two-thread
processes an SFT step took 4.3-4.4x its idle time where a fair share of the CPU is 3x. Split by
rows instead, each thread scores and back-propagates its own rows on one torch thread and the
threads join once per pass: 2.7x loaded. Idle it costs a little: each thread reads every weight,
where a split product reads half (the main job's SFT step 1.05x slower; docs/performance.md,
change 22). A decode step multiplies a few rows per product, so there the joins cost more than
the products: sampling split by rows ran 1.6-1.7x faster idle (change 24).

The gradient does not depend on which thread finishes first: each part's gradient is returned,
and the parts are added to the weights' .grad in a fixed order.
"""

from __future__ import annotations

from typing import Sequence

import torch


def split_rows(sizes: Sequence[int], keys: Sequence[object], parts: int) -> list[list[int]]:
    """Row indices in at most `parts` lists of about equal work. A part runs its rows padded to
    its longest (`sizes`: tokens per row), so rows are cut by length: the shortest rows in one
    part, the longest in another, the cuts (in that order) placed so that the largest part
    (rows x longest) is as small as such cuts make it. Rows that share a key (a GRPO group's
    prompt, run once for all of them) stay in one part; within a part rows keep their order.
    Deterministic: a scoring pass and the training pass after it form the same parts."""
    by_key: dict[object, list[int]] = {}
    for i, key in enumerate(keys):
        by_key.setdefault(key, []).append(i)
    groups = sorted(by_key.values(), key=lambda rows: (max(sizes[i] for i in rows), rows[0]))
    longest = [max(sizes[i] for i in rows) for rows in groups]
    count = [0]
    for rows in groups:
        count.append(count[-1] + len(rows))

    def cost(a: int, b: int) -> int:  # groups a..b-1 as one part (longest last: sorted)
        return (count[b] - count[a]) * longest[b - 1]

    # best[p][j]: the smallest largest part over the first j groups cut into p parts
    n, inf = len(groups), float("inf")
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0
    for p in range(1, parts + 1):
        for j in range(1, n + 1):
            for i in range(p - 1, j):
                value = max(best[p - 1][i], cost(i, j))
                if value < best[p][j]:
                    best[p][j], cut[p][j] = value, i
    p = min(range(1, parts + 1), key=lambda q: (best[q][n], q)) if n else 0
    bounds, j = [], n
    while p > 0:
        bounds.append((cut[p][j], j))
        j, p = cut[p][j], p - 1
    return [sorted(i for rows in groups[a:b] for i in rows) for a, b in reversed(bounds)]


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
