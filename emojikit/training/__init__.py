"""The training loops, written once against Policy: the data pipeline, SFT, GRPO and the pieces
GRPO is made of (teacher-guided episodes, per-emoji credit, what the start was trained on)."""
