"""The model worker: one thread runs every model call, off the request path.

Requests put jobs on a queue and return at once; the page polls the game's state. Models
are not thread-safe and two cores gain nothing from running two at once, so one thread does
the work, and it batches: when it takes a job it also takes every job already waiting, and
jobs with the same (kind, key), e.g. sender turns of one checkpoint from several tabs, go
into one batched call.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

log = logging.getLogger("emojikit.serve")

# run(kind, key, payloads) -> one result per payload
Runner = Callable[[str, Any, list], list]


@dataclass
class Job:
    kind: str
    key: Any
    payload: Any
    on_done: Callable[[Any], None]
    on_error: Callable[[BaseException], None]
    seq: int = 0
    done: threading.Event = field(default_factory=threading.Event)


class ModelWorker:
    def __init__(self, run: Runner, max_batch: int = 16):
        self._run = run
        self._queue: "queue.Queue[Optional[Job]]" = queue.Queue()
        self._max_batch = max_batch
        self._seq = itertools.count(1)
        self._waiting: dict[int, Job] = {}  # queued or running, by seq
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="emojikit-model-worker", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None

    def submit(self, kind: str, key: Any, payload: Any, on_done: Callable[[Any], None], on_error: Callable[[BaseException], None]) -> Job:
        job = Job(kind, key, payload, on_done, on_error, seq=next(self._seq))
        with self._lock:
            self._waiting[job.seq] = job
        self._queue.put(job)
        return job

    def ahead_of(self, job: Optional[Job]) -> int:
        """Jobs queued or running before this one (what the page shows while it waits)."""
        if job is None:
            return 0
        with self._lock:
            return sum(1 for seq in self._waiting if seq < job.seq)

    def pending(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _take_batch(self, first: Job) -> tuple[list[Job], bool]:
        jobs, stop = [first], False
        while len(jobs) < self._max_batch * 4:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                stop = True
                break
            jobs.append(job)
        return jobs, stop

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs, stop = self._take_batch(first)
            groups: dict[tuple, list[Job]] = {}
            for job in jobs:
                groups.setdefault((job.kind, job.key), []).append(job)
            for (kind, key), group in groups.items():
                for start in range(0, len(group), self._max_batch):
                    self._run_group(kind, key, group[start : start + self._max_batch])
            if stop:
                return

    def _run_group(self, kind: str, key: Any, group: list[Job]) -> None:
        try:
            results = self._run(kind, key, [job.payload for job in group])
            if len(results) != len(group):
                raise RuntimeError(f"{kind}: {len(results)} results for {len(group)} jobs")
        except Exception as exc:  # a model fault ends these games with a message, not the server
            log.exception("model work %s failed", kind)
            for job in group:
                self._finish(job, lambda j=job: j.on_error(exc))
            return
        for job, result in zip(group, results):
            self._finish(job, lambda j=job, r=result: j.on_done(r))

    def _finish(self, job: Job, callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:
            log.exception("callback of %s failed", job.kind)
        finally:
            with self._lock:
                self._waiting.pop(job.seq, None)
            job.done.set()
