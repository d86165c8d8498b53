"""The emoji mask bound to a tokenizer: a `policy.TokenConstraint` over token ids.

A state is a set of threads (graph node, emoji completed), interned to an int. A thread is
*viable* when it can still end in an accepting state: at the boundary node it needs at most
max_emoji emoji; anywhere else an emoji is in progress or must follow, so it needs room for
one more. `steps_to_accept[node, count]` is the fewest tokens after which a viable thread
accepts (0 if it accepts now), computed once per (min, max) by relaxing the token graph.

A token is allowed in a state with `tokens_left` (the token being chosen included) when it
leads some thread to a viable thread that accepts within the `tokens_left - 1` tokens after
it; EOS is allowed when some thread accepts. So EOS is allowed only at an emoji boundary
with min..max emoji out, it is the only choice after max_emoji, and a budget never cuts an
emoji: a sample that stops at its budget has just accepted.
"""

from __future__ import annotations

import threading
from typing import Optional, Sequence

import numpy as np
import torch

from .binding import TokenGraph

UNREACHABLE = np.iinfo(np.int32).max // 2


def steps_to_accept(graph: TokenGraph, min_emoji: int, max_emoji: int) -> np.ndarray:
    """[N, max_emoji + 2] fewest tokens to acceptance per (node, count); the last column and
    non-viable threads are UNREACHABLE. Breadth-first by relaxation: each round extends
    every path by one token, so it ends after (longest shortest path + 1) rounds."""
    n_nodes, width = graph.n_nodes, max_emoji + 2
    counts = np.arange(width)
    viable = np.zeros((n_nodes, width), dtype=bool)
    viable[:, : max_emoji] = True  # count + 1 <= max: room for the emoji in progress
    if graph.boundary >= 0:
        viable[graph.boundary, : max_emoji + 1] = True
    dist = np.full((n_nodes, width), UNREACHABLE, dtype=np.int64)
    if graph.boundary >= 0:
        accepting = (counts >= min_emoji) & (counts <= max_emoji)
        dist[graph.boundary, accepting] = 0
    # Distinct (src, dst, delta) edges are all the relaxation needs.
    src_E = np.repeat(np.arange(n_nodes), np.diff(graph.edge_ptr))
    edges = np.unique(np.stack([src_E, graph.edge_dst, graph.edge_delta], axis=1), axis=0)
    if len(edges) == 0:
        return dist
    src, dst, delta = edges[:, 0], edges[:, 1], edges[:, 2]
    group_starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
    group_src = src[group_starts]
    target_count_E_C = np.minimum(counts[None, :] + delta[:, None], width - 1)
    while True:
        via_E_C = dist[dst[:, None], target_count_E_C] + 1
        best_G_C = np.minimum.reduceat(via_E_C, group_starts, axis=0)
        updated = np.minimum(dist[group_src], best_G_C)
        updated[~viable[group_src]] = UNREACHABLE
        if np.array_equal(updated, dist[group_src]):
            break
        dist[group_src] = updated
    dist[~viable] = UNREACHABLE
    dist = np.minimum(dist, UNREACHABLE)
    return dist


class EmojiConstraint:
    """Allowed next tokens for emoji-only answers of min_emoji..max_emoji emoji.

    `allowed` never returns an empty set: from a state with no valid continuation (a dead
    state, or a budget too small for min_emoji) only EOS is allowed, and the sample then
    fails the decoder's check.
    """

    def __init__(self, graph: TokenGraph, min_emoji: int, max_emoji: int):
        self.graph = graph
        self.min_emoji = min_emoji
        self.max_emoji = max_emoji
        self.eos_token_id = graph.eos_token_id
        self.vocab_size = graph.vocab_size
        self._dist = steps_to_accept(graph, min_emoji, max_emoji)
        finite = self._dist[self._dist < UNREACHABLE]
        # With more tokens left than this, no token is excluded for budget reasons.
        self._budget_cap = int(finite.max()) + 1 if finite.size else 1
        self._states: list[frozenset] = []
        self._state_ids: dict[frozenset, int] = {}
        self._node_tokens: dict[int, dict[int, list[tuple[int, int]]]] = {}
        self._next: dict[tuple[int, int], int] = {}
        self._allowed_ids: dict[tuple[int, int], np.ndarray] = {}
        self._eos_only = np.array([self.eos_token_id], dtype=np.int64)
        self._lock = threading.Lock()
        self.dead = self._intern(frozenset())
        self._start = self._intern(frozenset({(graph.start, 0)}))

    # --- states ----------------------------------------------------------------------

    def _intern(self, threads: frozenset) -> int:
        state = self._state_ids.get(threads)
        if state is None:
            with self._lock:
                state = self._state_ids.get(threads)
                if state is None:
                    state = len(self._states)
                    self._states.append(threads)
                    self._state_ids[threads] = state
        return state

    def start(self) -> int:
        return self._start

    def threads(self, state: int) -> frozenset:
        """The (node, emoji completed) threads of a state."""
        return self._states[state]

    def accepting(self, state: int) -> bool:
        return any(self._dist[node, done] == 0 for node, done in self._states[state])

    def emoji_count(self, state: int) -> Optional[int]:
        """Emoji completed in an accepting state (None if the state does not accept)."""
        counts = [done for node, done in self._states[state] if self._dist[node, done] == 0]
        return max(counts) if counts else None

    def tokens_to_accept(self, state: int) -> int:
        """Fewest tokens after which the state accepts (0 if it accepts; huge if it cannot)."""
        return int(min((self._dist[node, done] for node, done in self._states[state]), default=UNREACHABLE))

    @property
    def min_tokens(self) -> int:
        """Fewest new tokens (EOS not counted) of a valid answer: smaller budgets give EOS only."""
        return int(self._dist[self.graph.start, 0])

    @property
    def n_states_seen(self) -> int:
        return len(self._states)

    # --- transitions -------------------------------------------------------------------

    def _tokens_from(self, node: int) -> dict[int, list[tuple[int, int]]]:
        table = self._node_tokens.get(node)
        if table is None:
            table = {}
            lo, hi = self.graph.edge_ptr[node], self.graph.edge_ptr[node + 1]
            for token, dst, delta in zip(self.graph.edge_token[lo:hi].tolist(), self.graph.edge_dst[lo:hi].tolist(), self.graph.edge_delta[lo:hi].tolist()):
                table.setdefault(token, []).append((dst, delta))
            self._node_tokens[node] = table
        return table

    def advance(self, state: int, token_id: int) -> int:
        """The state after token_id; EOS and tokens no thread can read lead to `dead`."""
        key = (state, int(token_id))
        nxt = self._next.get(key)
        if nxt is not None:
            return nxt
        threads = set()
        for node, done in self._states[state]:
            for dst, delta in self._tokens_from(node).get(int(token_id), ()):
                if self._dist[dst, min(done + delta, self.max_emoji + 1)] < UNREACHABLE:
                    threads.add((dst, done + delta))
        nxt = self._intern(frozenset(threads)) if token_id != self.eos_token_id else self.dead
        self._next[key] = nxt
        return nxt

    # --- masks -------------------------------------------------------------------------

    def _allowed_np(self, state: int, tokens_left: int) -> np.ndarray:
        """Sorted token ids allowed next (int64); cached per (state, effective budget)."""
        budget = min(int(tokens_left), self._budget_cap)
        key = (state, budget)
        ids = self._allowed_ids.get(key)
        if ids is not None:
            return ids
        parts = []
        ends = False
        if budget >= 1:
            g = self.graph
            for node, done in self._states[state]:
                if self._dist[node, done] == 0:
                    ends = True
                lo, hi = g.edge_ptr[node], g.edge_ptr[node + 1]
                count_E = np.minimum(done + g.edge_delta[lo:hi], self.max_emoji + 1)
                fits_E = self._dist[g.edge_dst[lo:hi], count_E] <= budget - 1
                parts.append(g.edge_token[lo:hi][fits_E])
        if ends:
            parts.append(np.array([self.eos_token_id], dtype=np.int64))
        merged = np.unique(np.concatenate(parts)).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
        ids = merged if merged.size else self._eos_only
        self._allowed_ids[key] = ids
        return ids

    def allowed_ids(self, state: int, tokens_left: int) -> torch.Tensor:
        """Sorted token ids allowed next (int64)."""
        return torch.from_numpy(self._allowed_np(state, tokens_left).copy())

    def allowed(self, state: int, tokens_left: int, width: Optional[int] = None) -> torch.Tensor:
        """Boolean mask [width or vocab_size]: True where the token may come next."""
        return self.allowed_batch([state], [tokens_left], width)[0]

    def allowed_batch(self, states: Sequence[int], tokens_left: Sequence[int], width: Optional[int] = None) -> torch.Tensor:
        """Boolean masks [B, width or vocab_size] for a batch (width: the logits' last dim).

        Built in numpy: single-threaded small ops stay fast when torch's thread pool is busy.
        """
        width = width or self.vocab_size
        mask_B_V = np.zeros((len(states), width), dtype=bool)
        for row, (state, left) in enumerate(zip(states, tokens_left)):
            ids = self._allowed_np(state, left)
            mask_B_V[row, ids if width >= self.vocab_size else ids[ids < width]] = True
        return torch.from_numpy(mask_B_V)
