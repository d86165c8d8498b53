"""Built-in text components: the offline message generator, JSONL prompts and the lexicon teacher."""
