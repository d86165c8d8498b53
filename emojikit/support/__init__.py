"""Plumbing every layer uses: bundled models and caches, atomic file I/O, retry with backoff,
worker threads of one torch thread each."""
