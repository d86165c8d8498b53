"""The multi-turn game: sender prompts and batched play, cleaning a judge's guesses, the shared MiniLM,
the targets it is played on, and a teacher played as a sender."""
