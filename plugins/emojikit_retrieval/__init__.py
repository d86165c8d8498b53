"""Offline judges (MiniLM retrieval over CLDR emoji names; a local chat LM) and the MiniLM similarity reward."""
