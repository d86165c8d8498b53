"""The multi-turn game: sender prompts and batched play, cleaning a judge's guesses, the shared MiniLM."""
