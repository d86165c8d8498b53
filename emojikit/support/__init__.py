"""Plumbing every layer uses: bundled models and caches, atomic file I/O, retry with backoff."""
