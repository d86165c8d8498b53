"""The `local` backend: a trainable sender on transformers + peft LoRA (bundled SmolLM2 by default)."""
