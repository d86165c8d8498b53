"""emoji-mask: exact emoji-only constrained decoding for byte-level BPE and SentencePiece
tokenizers (automaton.py -> binding.py -> constraint.py; processor.py for transformers)."""
