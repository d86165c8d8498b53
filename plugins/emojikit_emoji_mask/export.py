"""Statistics and export of a bound emoji mask (behind `emojikit mask`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from emojikit.support.io import atomic_path, writing

from .constraint import EmojiConstraint


def explore(constraint: EmojiConstraint) -> dict[str, np.ndarray]:
    """Every state reachable from the start, with its allowed tokens (unlimited budget).

    Arrays, CSR by state: `allowed_ptr[s]..allowed_ptr[s+1]` index `token`, `next_state`
    and `next_steps` (fewest tokens from the next state to an accepting one). Under a budget
    of L tokens left, a token is allowed iff next_steps <= L - 1; EOS (listed with
    next_state -1) iff `accepting[s]`.
    """
    budget = 1 << 20
    index = {constraint.start(): 0}
    order = [constraint.start()]
    ptr, token, next_state, next_steps, accepting = [0], [], [], [], []
    i = 0
    while i < len(order):
        state = order[i]
        accepting.append(constraint.accepting(state))
        for tok in constraint.allowed_ids(state, budget).tolist():
            token.append(tok)
            if tok == constraint.eos_token_id:
                next_state.append(-1)
                next_steps.append(0)
                continue
            nxt = constraint.advance(state, tok)
            j = index.get(nxt)
            if j is None:
                j = index[nxt] = len(order)
                order.append(nxt)
            next_state.append(j)
            next_steps.append(constraint.tokens_to_accept(nxt))
        ptr.append(len(token))
        i += 1
    return {
        "allowed_ptr": np.asarray(ptr, dtype=np.int64),
        "token": np.asarray(token, dtype=np.int64),
        "next_state": np.asarray(next_state, dtype=np.int64),
        "next_steps": np.asarray(next_steps, dtype=np.int64),
        "accepting": np.asarray(accepting, dtype=bool),
        "meta": np.asarray([constraint.vocab_size, constraint.eos_token_id, constraint.min_emoji, constraint.max_emoji], dtype=np.int64),
    }


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    # A failure names `path`, the file asked for, never the temporary file beside it.
    with writing(path, "writing the mask export", name_path=True), atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays)


def mask_report(model: str, decoder: Any, export: Path | None = None) -> list[tuple[str, str]]:
    """(label, value) rows: vocabulary, usable tokens, automaton size, build times."""
    from emojikit.support.bundled import load_tokenizer

    from .automaton import EmojiAutomaton
    from .binding import bind_graph

    tokenizer = load_tokenizer(model)

    def bind(cache_dir):
        started = time.perf_counter()
        automaton = EmojiAutomaton(decoder.inventory, decoder.separator)
        graph = bind_graph(automaton, tokenizer, cache_dir)
        constraint = EmojiConstraint(graph, decoder.min_emoji, decoder.max_emoji)
        return automaton, graph, constraint, time.perf_counter() - started

    automaton, graph, constraint, first = bind(None)  # built from scratch
    bind(decoder.cache_dir)  # makes sure the disk cache exists
    _, cached_graph, _, cached = bind(decoder.cache_dir)
    rows = [
        ("model", model),
        ("vocabulary size", str(graph.vocab_size)),
        ("usable tokens", f"{graph.usable_tokens} (+ EOS id {graph.eos_token_id})"),
        ("allowed emoji", str(len(decoder.inventory))),
        ("automaton states", f"{automaton.n_nodes} byte nodes; {graph.n_nodes} token-boundary nodes; {graph.n_nodes * (decoder.max_emoji + 1)} (node, count) states"),
        ("token edges", str(len(graph.edge_token))),
        ("fewest tokens for a valid answer", str(constraint.min_tokens)),
        ("build time, first", f"{first:.3f} s"),
        ("build time, cached", f"{cached:.3f} s" + ("" if cached_graph.from_cache else " (cache not writable)")),
    ]
    if export is not None:
        arrays = explore(constraint)
        save_npz(export, arrays)
        rows.append(("exported", f"{export} ({len(arrays['accepting'])} reachable states, {len(arrays['token'])} allowed (state, token) pairs)"))
    return rows
