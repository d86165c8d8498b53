"""emojikit on Tinker: the `tinker` backend (LoRA training and sampling on remote GPUs through
the tinker SDK) and the `tinker` judge (a large chat model served by Tinker sampling)."""
