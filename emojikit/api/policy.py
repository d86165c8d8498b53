"""The Policy protocol: the trainable sender, with primitives following Tinker's.

Training loops (sft.py, grpo.py) are written once against this interface; backends
(plugins/emojikit_local, plugins/emojikit_tinker) implement it.

Token alignment follows Tinker's Datum: `model_input` is the sequence without its last
token, and every per-position list (`target_tokens`, `weights`, `advantages`, `logprobs`)
has the same length and describes the prediction of the next token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Protocol, Sequence, runtime_checkable

ChatMessages = list[dict[str, str]]  # [{"role": "system"|"user"|"assistant", "content": "..."}]
LossName = Literal["cross_entropy", "importance_sampling", "ppo"]


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 24
    temperature: float = 1.0
    top_p: float = 1.0  # < 1 truncates sampling; logprobs stay those of the masked, tempered distribution
    seed: Optional[int] = None


@dataclass
class Sample:
    prompt_tokens: list[int]
    tokens: list[int]  # completion tokens, including a final EOS if one was sampled
    logprobs: list[float]  # one per completion token, under the distribution sampled from
    text: str  # decoded completion without EOS/special tokens
    stop_reason: Literal["eos", "length"] = "eos"


@dataclass
class Datum:
    model_input: list[int]
    target_tokens: list[int]
    weights: list[float]  # loss weight per position (0 on prompt tokens)
    advantages: Optional[list[float]] = None  # RL losses
    logprobs: Optional[list[float]] = None  # sampler logprobs, RL losses
    # Positions [start, end) that were sampled under the decoder, so a backend that masks
    # logits can replay the decoder and score them under the same mask.
    decoded_spans: list[tuple[int, int]] = field(default_factory=list)
    # The max_tokens those spans were sampled with: the mask near the end of a budget differs.
    decode_budget: Optional[int] = None

    @classmethod
    def from_sample(cls, sample: Sample, advantage: Optional[float] = None, decoded: bool = False, decode_budget: Optional[int] = None) -> "Datum":
        """A datum whose loss falls on the completion tokens only."""
        tokens = sample.prompt_tokens + sample.tokens
        n_prompt = len(sample.prompt_tokens)
        n = len(tokens) - 1
        weights = [0.0] * (n_prompt - 1) + [1.0] * len(sample.tokens)
        datum = cls(model_input=tokens[:-1], target_tokens=tokens[1:], weights=weights[:n])
        if advantage is not None:
            datum.advantages = [advantage * w for w in datum.weights]
            datum.logprobs = [0.0] * (n_prompt - 1) + list(sample.logprobs)
        if decoded:
            datum.decoded_spans = [(n_prompt - 1, n)]
            datum.decode_budget = decode_budget
        return datum


@dataclass
class LossOutput:
    loss: float  # mean loss per weighted token
    n_tokens: float
    metrics: dict[str, float] = field(default_factory=dict)  # e.g. ppo clip fraction, ratio deviation


@dataclass(frozen=True)
class AdamParams:
    learning_rate: float
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.0


@runtime_checkable
class TokenConstraint(Protocol):
    """A decoder bound to a tokenizer: a state machine over token ids (see emojikit_emoji_mask).

    States are hashable. `allowed` returns a boolean torch tensor of vocabulary size (EOS
    included when ending is allowed); `tokens_left` counts the new tokens still allowed,
    the one being chosen included.
    """

    eos_token_id: int

    def start(self) -> Any: ...

    def allowed(self, state: Any, tokens_left: int) -> Any: ...

    def advance(self, state: Any, token_id: int) -> Any: ...


@runtime_checkable
class Policy(Protocol):
    """The sender. Every method is batched; `prompts` are chat messages."""

    @property
    def name(self) -> str: ...

    def encode_prompt(self, messages: ChatMessages) -> list[int]:
        """Prompt tokens under the model's chat template, with the assistant turn opened."""

    def encode_completion(self, text: str) -> list[int]:
        """Tokens of an assistant answer followed by the end-of-turn token, as sampled."""

    def decode(self, tokens: Sequence[int]) -> str: ...

    def sample(self, prompts: Sequence[ChatMessages], n: int, params: SamplingParams, decoder: Any = None) -> list[list[Sample]]:
        """n samples per prompt. With a decoder, every sample satisfies it (masked or redrawn)."""

    def compute_logprobs(self, datums: Sequence[Datum], *, temperature: float = 1.0, decoder: Any = None, reference: bool = False, weighted_only: bool = False) -> list[list[float]]:
        """Logprob of each target token (per position), under the same temperature and decoder
        mask the sampler used; reference=True scores with the start weights (for KL).
        weighted_only=True asks only for positions with a non-zero weight (what a KL over the
        trained tokens needs); a backend may return 0 at the others, and save the work."""

    def forward_backward(self, datums: Sequence[Datum], loss: LossName, *, temperature: float = 1.0, decoder: Any = None, clip: float = 0.2) -> LossOutput:
        """Accumulate gradients of the named loss over the datums."""

    def optim_step(self, params: AdamParams) -> dict[str, float]:
        """Apply accumulated gradients with Adam; returns e.g. the gradient norm."""

    def save(self, path: str, *, with_optimizer: bool = True) -> str:
        """Save weights (and optimizer/trainer state for resuming); returns a reference load() accepts."""

    def load(self, ref: str, *, with_optimizer: bool = True) -> None: ...


@runtime_checkable
class SampleTotals(Protocol):
    """Optional policy capability: running totals of a sampler that checks samples against the
    decoder and redraws the invalid ones (Tinker cannot mask logits). "drawn" counts every
    sample drawn, "accepted" those that passed; the GRPO loop logs each step's share as
    `acceptance_rate` in metrics.jsonl. A policy that masks logits has no need of it."""

    def sample_totals(self) -> dict[str, float]: ...


def sample_totals(policy: Any) -> Optional[dict[str, float]]:
    """A `SampleTotals` policy's running totals (a copy), None for other policies."""
    return dict(policy.sample_totals()) if isinstance(policy, SampleTotals) else None


def acceptance_between(before: Optional[dict[str, float]], after: Optional[dict[str, float]]) -> dict[str, float]:
    """{"acceptance_rate": accepted / drawn} of the samples drawn between two sample_totals()
    readings; {} when the policy keeps no totals or drew nothing."""
    if before is None or after is None:
        return {}
    drawn = after.get("drawn", 0.0) - before.get("drawn", 0.0)
    accepted = after.get("accepted", 0.0) - before.get("accepted", 0.0)
    return {"acceptance_rate": accepted / drawn} if drawn > 0 else {}


@runtime_checkable
class WeightsExport(Protocol):
    """Optional policy capability: write the loaded weights as a folder other tools load
    without emojikit (`emojikit export`). `system_prompt` is what the exported chat template
    inserts when a conversation has no system message, so the sender keeps its format.

    merged=True: the LoRA merged into the base, a plain Hugging Face model folder (weights,
    config, tokenizer, generation config). merged=False: a plain PEFT adapter folder whose
    base_model_name_or_path is a base a user can load. Returns what the model card says:
    "base_model" (that loadable base), "base_note" (where the trained-on weights came from,
    when they differ from it), "dtype", "lora" (r, alpha, target modules)."""

    def export_weights(self, out: str, *, merged: bool, system_prompt: str) -> dict[str, Any]: ...
