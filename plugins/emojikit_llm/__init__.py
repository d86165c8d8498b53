"""emojikit senders as models of simonw/llm (registered through llm's entry-point group)."""
