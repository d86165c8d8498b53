"""The `local` backend's config (pydantic only: no torch here, so listing plugins stays fast)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal, Optional, Union

from pydantic import Field, field_validator

from emojikit.support.bundled import SMOLLM2
from emojikit.api.config import ConfigModel, ExistingPath


class LocalConfig(ConfigModel):
    training_placement: ClassVar[tuple[str, ...]] = ("init_from", "lora_layers")
    model: str = Field(SMOLLM2, description="bundled:smollm2-135m-instruct, a local model directory, or a Hugging Face id (local cache only when HF_HUB_OFFLINE=1)")
    lora_rank: int = Field(16, ge=1, description="LoRA rank r")
    lora_alpha: float = Field(32.0, gt=0, description="LoRA alpha (scale = alpha / rank)")
    lora_b_lr_ratio: float = Field(1.0, gt=0, description="LoRA+ (Hayou et al. 2024): the LoRA B matrices train at this many times the step's learning rate, the A matrices at it; 1 = plain LoRA. Measured on SmolLM2 (ratio 16, lr 2.5e-4): ahead early, the same test NLL and game after 1250 steps in all layers, worse in the last 10 (docs/experiments/learning-per-minute.md)")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the LoRA input during forward_backward")
    target_modules: Union[Literal["all-linear"], list[str]] = Field("all-linear", description="modules that get LoRA: 'all-linear' (every linear projection except the output head) or a list of module names")
    lora_layers: Optional[int] = Field(None, ge=1, description="LoRA in the last N decoder layers only (default: every layer). Backward then stops below the lowest of them: on SmolLM2-135M (30 layers) an SFT step with the last 10 adapted takes 2.69 s against 4.57 s on an AVX2 CPU and learns about as much per step (docs/experiments/learning-per-minute.md). With init_from, the checkpoint's adapter trains in the last N layers only; its weights below stay as loaded")
    device: str = Field("auto", description="auto (cuda, then mps, then cpu), or a torch device such as cpu or cuda:0")
    dtype: Literal["auto", "float32", "bfloat16"] = Field("float32", description="compute dtype: bfloat16 runs every projection (frozen base, LoRA, output head) in bf16 with float32 results, LoRA weights, gradients and optimizer state (2-4x faster matmuls on CPUs with AVX512-BF16 or AMX, but several times slower where bf16 is emulated, e.g. AVX2-only CPUs); sampler and trainer then differ by ~1e-2 nats per token, which sampler_correction handles. auto: bfloat16 where the device multiplies it natively (such a CPU, or a GPU with bf16), else float32. float32 where logprobs must match the sampler's to 1e-3 without a correction")
    sampler_correction: Literal["auto", "none", "truncated_is"] = Field("auto", description="RL losses: truncated_is takes the PPO ratio against the trainer's own logprobs (1 on the first pass) and weights each token's advantage by min(p_trainer / p_sampler, truncated_is_cap); auto = truncated_is when the run computes in bfloat16, else none")
    truncated_is_cap: float = Field(2.0, ge=1.0, description="upper bound of the truncated importance-sampling weight (sampler_correction)")
    base_matmul_dtype: Literal["float32", "bfloat16"] = Field("float32", description="dtype of the frozen base projections under LoRA (weights and matmuls; LoRA, attention and the output head stay in dtype): bfloat16 trains 1.45-1.7x faster on CPUs with AVX512-BF16, but logprobs then move by ~0.03 nats (worst ~0.1), sampler and trainer included, so keep float32 for GRPO")
    grad_clip: float = Field(1.0, ge=0, description="clip the gradient norm to this before each optimizer step (0 disables)")
    max_seq_len: int = Field(1024, ge=2, description="longest prompt + completion sampled or trained; longer ones are an error")
    micro_batch_size: int = Field(8, ge=1, description="sequences per forward pass; larger batches accumulate gradients over micro-batches")
    prepack_weights: bool = Field(True, description="with bf16 compute on a CPU whose oneDNN lays out bf16 weights (AVX512 with bw/vl/dq, AMX; not AVX2-only, where the products run from the plain weights): every frozen bf16 weight (and the sampler's merged weights) is also laid out once in oneDNN's blocked format, so a product does not reorder its weight on each call; the same products (bit-identical on AVX512-BF16), 2 more bytes per frozen weight for each layout kept (forward, input gradient; ~0.75 GB for SmolLM2-135M). On AVX512-BF16 1.04-1.05x an SFT step and a GRPO training pass, 1.10-1.13x sampling (bench/prepack.py; docs/performance.md, change 20); on AMX not yet measured")
    pack_rows: bool = Field(False, description="training and scoring run several short sequences of one prompt side by side in one row, each seeing only its prompt and itself: a random SFT batch of 16 training chats is ~37 % padding one a row, ~4 % packed, and its step 1.27-1.31x faster with bf16 units (bench/length_groups.py); the same loss and gradients in float32. Off by default: over three training seeds of recipes/sft-long.toml in bf16, packed senders played 2.3 / 1.6 / 1.0 points lower under keywords / retrieval / lm-reader, inside the spread between seeds (t <= 1.2), a cost not excluded (docs/experiments/learning-per-minute.md). Models on sdpa attention only; others run one a row")
    keep_lower_layers_mb: int = Field(0, ge=0, description="with lora_layers: memory (MB) for the output of the frozen layers below the adapter in training passes, so a batch trained again skips those layers (SFT's repeat_batches: a later pass's step in ~0.6x the time with 10 of SmolLM2's 30 layers adapted; ~1.2 MB a batch of 16 chats; bench/repeat_batches.py). 0: nothing kept")
    sample_batch_size: int = Field(64, ge=1, description="sequences decoded together when sampling")
    parallel: Literal["auto", "rows", "ops"] = Field("auto", description="how the CPU threads share a scoring, training or sampling pass: rows, each thread runs its own rows of a micro-batch on one torch thread, the rows cut by length, and the threads join once per pass; ops, every product is split across the threads (torch's way: thousands of joins a step, and a thread descheduled by another process stalls its sibling). Measured on an Intel AVX512 CPU in float32: idle, the main job's SFT step (length-grouped batches) 1.05x slower by rows, a random batch's 1.05x faster (less padding), a GRPO training pass the same; beside two competing two-thread processes an SFT step took 2.7x its idle time by rows against 4.3-4.4x by ops, 1.6x faster (docs/performance.md, change 22). auto: rows where that was measured (float32 compute, two torch threads, no LoRA dropout), else ops (not yet measured with bf16 units or more threads). Sampling follows the same choice: by rows each thread decodes its own rows (a prompt's samples together, each part from its own seeded generator), 1.4-1.7x faster idle on an AVX2 CPU (change 24); the samples a seed gives then depend on the number of threads, as by ops they do not. The same gradients up to float rounding; by rows they do not depend on thread timing (except LoRA dropout's masks, drawn from one generator by both threads)")
    threads: Optional[int] = Field(None, ge=1, description="torch CPU threads for this process (default: torch's choice); 1 is often fastest on a shared, busy machine")
    seed: Optional[int] = Field(None, description="seed for LoRA init and sampling (default: the run seed)")
    init_from: Optional[ExistingPath] = Field(None, description="a saved checkpoint (adapter folder) to start from, e.g. an SFT adapter; it is also the reference policy for KL, and its LoRA config replaces the one above")

    @field_validator("init_from")
    @classmethod
    def _run_dir_means_its_final_checkpoint(cls, value: Optional[Path]) -> Optional[Path]:
        from emojikit.api.errors import InputFileError
        from emojikit.stages.runs import resolve_checkpoint

        if value is None:
            return None
        try:
            return Path(resolve_checkpoint(str(value)))
        except InputFileError as exc:
            raise ValueError(str(exc)) from None
