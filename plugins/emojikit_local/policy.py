"""LocalPolicy: emojikit.api.policy.Policy over a transformers causal LM with a peft LoRA adapter.

The adapter named "default" is trained. The reference policy (for KL) is the start weights:
the base with the adapter disabled, or, when starting from a checkpoint (`init_from`), a frozen
second adapter "reference" holding that checkpoint; never a second copy of the base.
"""

from __future__ import annotations

import json
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import torch

from emojikit.api.errors import ConfigError, InputFileError
from emojikit.support.io import atomic_directory
from emojikit.support.workers import RowWorkers
from emojikit.api.policy import AdamParams, ChatMessages, Datum, LossOutput, Sample, SamplingParams
from emojikit_local import checkpoint
from emojikit_local.allocator import keep_freed_memory
from emojikit_local.config import LocalConfig
from emojikit_local.frozen_layers import LowerLayers
from emojikit_local.hardware import compute_dtype
from emojikit_local.losses import LOSSES, loss_sum
from emojikit_local.precision import SamplerCorrection, bfloat16_compute, float32_merged_sampling, prepack_available, unadapted_projections
from emojikit_local.rows import add_gradients, split_rows
from emojikit_local.sampling import decode_batch
from emojikit_local.scoring import first_needed_position, prefix_key, prefix_split, target_logprobs

TRAINED, REFERENCE = "default", "reference"


def _chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def lower_base_projections(model, dtype: torch.dtype) -> None:
    """Store the frozen base weight of every decoder projection (LoRA-wrapped or, below
    `lora_layers`, plain) in `dtype` and run its matmul there; inputs and outputs keep the
    model's dtype, so LoRA, attention, norms and the vocabulary projection do not change.

    Why: these projections are most of a step's time, and on CPUs with AVX512-BF16 a bfloat16
    matmul of their shapes runs 2.5-3x faster than a float32 one (docs/performance.md).
    """
    from peft.tuners.lora import LoraLayer

    adapted = [m for m in model.modules() if isinstance(m, LoraLayer)]
    # With lora_layers, the projections of the layers below carry no adapter: frozen all the same.
    for base in [layer.get_base_layer() for layer in adapted] + unadapted_projections(model, adapted):
        if not isinstance(base, torch.nn.Linear) or base.weight.dtype == dtype:
            continue
        base.weight.data = base.weight.data.to(dtype)
        if base.bias is not None:
            base.bias.data = base.bias.data.to(dtype)

        def forward(x: torch.Tensor, *args, _layer=base, **kwargs) -> torch.Tensor:
            return torch.nn.functional.linear(x.to(dtype), _layer.weight, _layer.bias).to(x.dtype)

        base.forward = forward


def lora_placement(model, target_modules, lora_layers: Optional[int]) -> dict[str, Any]:
    """LoraConfig's target_modules, and with `lora_layers` its layers_to_transform: the last
    N decoder layers. peft takes a layer list only with named modules, so "all-linear" becomes
    the names of the decoder layers' linear projections (the output head is not among them)."""
    if lora_layers is None:
        return {"target_modules": target_modules}
    layers = _decoder_layers(model)
    if lora_layers > len(layers):
        raise ConfigError(f"lora_layers = {lora_layers}: the model has {len(layers)} decoder layers")
    if target_modules == "all-linear":
        target_modules = sorted({name.rsplit(".", 1)[-1] for name, module in layers[0].named_modules() if isinstance(module, torch.nn.Linear)})
    return {"target_modules": target_modules, "layers_to_transform": list(range(len(layers) - lora_layers, len(layers)))}


def freeze_below_last_layers(model, lora_layers: int) -> list[torch.nn.Parameter]:
    """Starting from a checkpoint whose adapter covers more than the last `lora_layers` decoder
    layers: its weights below them stay as loaded (frozen, and the same in the trained and the
    reference adapter), so backward stops at the lowest trained layer and a GRPO step runs the
    layers below once for its two scoring passes (frozen_layers.py). Returns the frozen weights."""
    layers = _decoder_layers(model.get_base_model())
    if lora_layers > len(layers):
        raise ConfigError(f"lora_layers = {lora_layers}: the model has {len(layers)} decoder layers")
    frozen = [p for layer in layers[: len(layers) - lora_layers] for p in layer.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    return frozen


def _decoder_layers(model) -> torch.nn.ModuleList:
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ConfigError(f"lora_layers: cannot find the decoder layers of {type(model).__name__}; leave lora_layers unset")
    return layers


def adopt_saved_lora_shape(model, adapter: str, saved: dict) -> dict[int, torch.nn.Parameter]:
    """Give `adapter` the rank and alpha of a saved adapter_config.json (`saved`), in place:
    each LoRA projection's A and B are made again at the saved rank (their weights come from the
    checkpoint next) and its scaling set from the saved alpha. Why: the scaling is not among the
    saved weights, so an adapter loaded under another alpha would play silently wrong, and one of
    another rank would not load. Returns old parameter id -> its replacement (empty: same shape)."""
    from peft.tuners.lora import LoraLayer

    config = model.peft_config[adapter]
    if saved.get("rank_pattern") or saved.get("alpha_pattern"):
        raise ValueError("per-module ranks or alphas (rank_pattern, alpha_pattern)")
    rank, alpha, rslora = int(saved.get("r", config.r)), saved.get("lora_alpha", config.lora_alpha), bool(saved.get("use_rslora", False))
    if (rank, alpha, rslora) == (config.r, config.lora_alpha, bool(config.use_rslora)):
        return {}
    replaced: dict[int, torch.nn.Parameter] = {}
    for layer in model.modules():
        if not isinstance(layer, LoraLayer) or adapter not in layer.lora_A:
            continue
        for side, shape in (("lora_A", (rank, layer.in_features)), ("lora_B", (layer.out_features, rank))):
            old = getattr(layer, side)[adapter].weight
            if tuple(old.shape) != shape:
                new = torch.nn.Parameter(old.new_zeros(shape), requires_grad=old.requires_grad)
                getattr(layer, side)[adapter].weight = new
                replaced[id(old)] = new
        layer.r[adapter], layer.lora_alpha[adapter], layer.use_rslora[adapter] = rank, alpha, rslora
        layer.scaling[adapter] = alpha / (rank ** 0.5 if rslora else rank)
    config.r, config.lora_alpha, config.use_rslora = rank, alpha, rslora
    return replaced


class LocalPolicy:
    def __init__(self, model, tokenizer, config: LocalConfig, *, seed: int = 0):
        """Wrap a loaded base model (see emojikit.support.models.load_model_and_tokenizer) with LoRA."""
        from peft import LoraConfig, PeftModel, get_peft_model

        keep_freed_memory()  # every step reuses its activations' memory instead of faulting it in again
        self.device = next(model.parameters()).device
        # What the run computes in: dtype = "auto" resolved for this device (hardware.py).
        self.dtype = compute_dtype(config.dtype, str(self.device))
        if self.dtype == "bfloat16":
            model = model.float()  # fp32 weights where they are kept; bfloat16_compute casts the rest
        self.config = config
        self.tokenizer = tokenizer
        self.seed = config.seed if config.seed is not None else seed
        torch.manual_seed(self.seed)  # LoRA A matrices are randomly initialised
        if config.init_from is not None:
            start = str(checkpoint.check_checkpoint(str(config.init_from)))
            self.model = PeftModel.from_pretrained(model, start, adapter_name=TRAINED, is_trainable=True)
            self.model.load_adapter(start, adapter_name=REFERENCE, is_trainable=False)
            self.model.set_adapter(TRAINED)
            # With lora_layers, the checkpoint's adapter trains in the last N layers only.
            self.frozen = freeze_below_last_layers(self.model, config.lora_layers) if config.lora_layers is not None else []
        else:
            lora = LoraConfig(
                r=config.lora_rank,
                lora_alpha=config.lora_alpha,
                lora_dropout=config.lora_dropout,
                task_type="CAUSAL_LM",
                **lora_placement(model, config.target_modules, config.lora_layers),
            )
            self.model = get_peft_model(model, lora, adapter_name=TRAINED)
            self.frozen = []
        lowered = self.dtype == "float32" and compute_dtype(config.base_matmul_dtype, str(self.device), key="base_matmul_dtype") == "bfloat16"
        if lowered:
            lower_base_projections(self.model, torch.bfloat16)
        prepack = config.prepack_weights and prepack_available(self.device)
        if self.dtype == "bfloat16":
            self.merged_sampling = bfloat16_compute(self.model, prepack=prepack)
        else:  # float32: the sampler multiplies by W + BA (a bf16 base product, if lowered, stays faster unmerged)
            self.merged_sampling = None if lowered else float32_merged_sampling(self.model)
        # Below lora_layers: run once for a batch scored twice (the KL's reference pass, then training).
        self.lower_layers = LowerLayers(self.model, keep_bytes=config.keep_lower_layers_mb << 20)
        corrected = config.sampler_correction == "truncated_is" or (config.sampler_correction == "auto" and self.dtype == "bfloat16")
        self.correction = SamplerCorrection(config.truncated_is_cap) if corrected else None
        self.model.eval()
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        # parallel = "rows": each CPU thread scores and trains its own rows of a micro-batch (rows.py)
        threads = torch.get_num_threads()
        measured = self.dtype == "float32" and threads == 2 and config.lora_dropout == 0  # what auto's choice was measured on
        parallel = config.parallel if config.parallel != "auto" else ("rows" if measured else "ops")
        self.row_workers = RowWorkers(threads) if parallel == "rows" and threads > 1 and self.device.type == "cpu" else None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.step = 0
        self.generator = torch.Generator(device=self.device).manual_seed(self.seed)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.stop_ids = self._stop_ids()
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        # Decoder masks depend on the token budget (tokens_left). Scoring replays each datum's
        # own Datum.decode_budget (GRPO sets it); this budget of the latest sample call is the
        # fallback only for a decoded datum without one (built by hand from a Sample).
        self.last_sample_budget = SamplingParams().max_tokens
        self._constraints: dict[int, Any] = {}
        self._model_ref = getattr(config, "model", "")

    # -- identity and text ----------------------------------------------------------

    @property
    def name(self) -> str:
        return f"local:{self._model_ref}"

    def _stop_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id}
        generation_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids |= set(generation_eos) if isinstance(generation_eos, list) else {generation_eos}
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if im_end is not None and im_end != self.tokenizer.unk_token_id:
            ids.add(im_end)
        return {i for i in ids if i is not None}

    def encode_prompt(self, messages: ChatMessages) -> list[int]:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"model {self._model_ref!r} has no chat template; use an instruct/chat model")
        text = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_completion(self, text: str) -> list[int]:
        """The answer's tokens, then the end-of-turn token the sampler stops on (<|im_end|>
        for ChatML models, else EOS)."""
        end_of_turn = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if end_of_turn is None or end_of_turn == self.tokenizer.unk_token_id:
            end_of_turn = self.tokenizer.eos_token_id
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [end_of_turn]

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def _constraint(self, decoder: Any):
        """decoder.bind(tokenizer), once per decoder object."""
        if decoder is None:
            return None
        key = id(decoder)
        if key not in self._constraints:
            self._constraints[key] = (decoder, decoder.bind(self.tokenizer))  # keep decoder alive so id stays unique
        return self._constraints[key][1]

    # -- sampling and scoring ---------------------------------------------------------

    def sample(self, prompts: Sequence[ChatMessages], n: int, params: SamplingParams, decoder: Any = None) -> list[list[Sample]]:
        constraint = self._constraint(decoder)
        stop_ids = self.stop_ids | ({constraint.eos_token_id} if constraint is not None else set())
        prompt_tokens = [self.encode_prompt(p) for p in prompts]
        for tokens in prompt_tokens:
            if len(tokens) + params.max_tokens > self.config.max_seq_len:
                raise ConfigError(f"prompt of {len(tokens)} tokens + max_tokens {params.max_tokens} exceeds max_seq_len {self.config.max_seq_len}; raise the backend's max_seq_len")
        generator = self.generator if params.seed is None else torch.Generator(device=self.device).manual_seed(params.seed)
        self.last_sample_budget = params.max_tokens
        if self.correction is not None:
            self.correction.sampled(self.step)
        rows = [tokens for tokens in prompt_tokens for _ in range(n)]
        decode = partial(
            decode_batch, self.model, max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p,
            constraint=constraint, stop_ids=stop_ids, pad_id=self.pad_id, device=self.device,
        )
        decoded = []
        with self._sampling_weights():
            for chunk in _chunks(rows, self.config.sample_batch_size):
                decoded += self._decode_rows(decode, chunk, params.max_tokens, generator)
        samples = [
            Sample(prompt_tokens=list(rows[i]), tokens=d.tokens, logprobs=d.logprobs, text=self.decode(d.tokens), stop_reason=d.stop_reason)
            for i, d in enumerate(decoded)
        ]
        return [samples[i * n : (i + 1) * n] for i in range(len(prompts))]

    def _decode_rows(self, decode, rows: list[list[int]], max_tokens: int, generator: torch.Generator) -> list:
        """decode(rows), with row workers (parallel = "rows") each worker decoding its own rows on
        one torch thread: a decode step is a few small products per layer, where torch's split
        products spend more time joining their threads than multiplying (docs/performance.md,
        change 24). Rows of one prompt stay in one part (its prefill runs once). Each part draws
        from its own generator, seeded from the policy's in the parts' order, so the samples do
        not depend on which thread runs first."""
        parts = split_rows([len(r) + max_tokens for r in rows], [tuple(r) for r in rows], self.row_workers.threads) if self.row_workers else []
        if len(parts) < 2:
            return decode(rows, generator=generator)
        seeds = torch.randint(0, 2**62, (len(parts),), generator=generator).tolist()

        def decode_part(job: tuple[list[int], int]) -> list:
            part, seed = job
            return decode([rows[i] for i in part], generator=torch.Generator(device=self.device).manual_seed(seed))

        decoded: list = [None] * len(rows)
        for part, results in zip(parts, self.row_workers.map(decode_part, list(zip(parts, seeds)))):
            for i, result in zip(part, results):
                decoded[i] = result
        return decoded

    def _sampling_weights(self):
        """The adapter merged into the sampler's weights (precision.MergedSampling)."""
        return self.merged_sampling.active() if self.merged_sampling is not None else nullcontext()

    @contextmanager
    def _weights(self, reference: bool):
        """The start weights when reference=True: the reference adapter or no adapter."""
        if not reference:
            yield
        elif REFERENCE in self.model.peft_config:
            self.model.set_adapter(REFERENCE, inference_mode=True)
            try:
                yield
            finally:
                self.model.set_adapter(TRAINED)  # which marks every weight of the adapter trainable again
                for p in self.frozen:
                    p.requires_grad_(False)
        else:
            with self.model.disable_adapter():
                yield

    def _check(self, datums: Sequence[Datum]) -> None:
        for i, d in enumerate(datums):
            if not (len(d.model_input) == len(d.target_tokens) == len(d.weights)):
                raise ValueError(f"datum {i}: model_input, target_tokens and weights differ in length")
            if len(d.model_input) + 1 > self.config.max_seq_len:
                raise ConfigError(f"datum {i} has {len(d.model_input) + 1} tokens, over max_seq_len {self.config.max_seq_len}; raise the backend's max_seq_len")

    def _micro_batches(self, datums: Sequence[Datum]) -> Iterator[list[int]]:
        """Datum indices in micro-batches of similar length (less padding), datums that share a
        prompt next to each other (one prefix pass serves them all)."""
        keys = [prefix_key(d) for d in datums]
        order = sorted(range(len(datums)), key=lambda i: (len(keys[i]), keys[i], len(datums[i].model_input)))
        return _chunks(order, self.config.micro_batch_size)

    @staticmethod
    def _unit_key(chunk: list[Datum], share_prefix: bool) -> tuple:
        """What decides a micro-batch's decoder calls: its inputs, where each splits into a shared
        prefix and its own suffix, and whether prefixes are shared (LowerLayers.unit)."""
        return (share_prefix, tuple((tuple(d.model_input), prefix_split(d)) for d in chunk))

    def compute_logprobs(self, datums: Sequence[Datum], *, temperature: float = 1.0, decoder: Any = None, reference: bool = False, weighted_only: bool = False) -> list[list[float]]:
        self._check(datums)
        constraint = self._constraint(decoder)
        result: list[list[float]] = [[] for _ in datums]
        batches = [(batch, self._row_parts([datums[i] for i in batch])) for batch in self._micro_batches(datums)]
        # Keeps this call's batches only (a training pass on them follows); one recorded by an
        # earlier call (the SFT's test chats, scored every eval_every steps) replays its lower layers.
        self.lower_layers.retain({self._unit_key([datums[batch[j]] for j in part], weighted_only) for batch, parts in batches for part in parts})

        def score(chunk: list[Datum]) -> torch.Tensor:
            with torch.inference_mode():  # per thread: a row worker's too
                # weighted_only: as forward_backward scores, a group's shared prompt runs once
                # and only weighted positions reach the vocabulary projection (0 elsewhere).
                with self.lower_layers.unit(self._unit_key(chunk, weighted_only), record=True):
                    return target_logprobs(
                        self.model, chunk, temperature=temperature, constraint=constraint, budget=self.last_sample_budget, pad_id=self.pad_id, device=self.device,
                        first_position=first_needed_position(chunk) if weighted_only else 0, share_prefix=weighted_only, weighted_only=weighted_only, pack=self.config.pack_rows,
                    )

        with self._weights(reference):
            for batch, parts in batches:
                scored = self._run_parts(lambda part: score([datums[batch[j]] for j in part]), parts)
                for part, logprobs_B_T in zip(parts, scored):
                    for row, j in enumerate(part):
                        result[batch[j]] = logprobs_B_T[row, : len(datums[batch[j]].target_tokens)].tolist()
        return result

    def _row_parts(self, chunk: list[Datum]) -> list[list[int]]:
        """A micro-batch's rows as the row workers split it (rows.py), or one part of all."""
        if self.row_workers is None or len(chunk) < 2:
            return [list(range(len(chunk)))]
        return split_rows([len(d.model_input) for d in chunk], [prefix_key(d) for d in chunk], self.row_workers.threads)

    def _run_parts(self, fn, parts: list[list[int]]) -> list:
        if len(parts) == 1:
            return [fn(parts[0])]  # in this thread, on all of its torch threads
        grad_enabled = torch.is_grad_enabled()  # per thread: a worker runs under the caller's

        def in_worker(part: list[int]):
            with torch.set_grad_enabled(grad_enabled):
                return fn(part)

        return self.row_workers.map(in_worker, parts)

    # -- training ------------------------------------------------------------------

    def forward_backward(self, datums: Sequence[Datum], loss: str, *, temperature: float = 1.0, decoder: Any = None, clip: float = 0.2) -> LossOutput:
        if loss not in LOSSES:
            raise ConfigError(f"unknown loss {loss!r}; losses: {', '.join(LOSSES)}")
        self._check(datums)
        if loss != "cross_entropy" and any(d.advantages is None or d.logprobs is None for d in datums):
            raise ValueError(f"{loss} needs advantages and sampler logprobs on every datum")
        constraint = self._constraint(decoder)
        n_tokens = float(sum(sum(1 for w in d.weights if w != 0) for d in datums))
        denominator = max(n_tokens, 1.0)
        total, stats = 0.0, {}
        training = self.config.lora_dropout > 0
        params = self.trainable

        def train(chunk: list[Datum]) -> tuple[float, dict, Sequence[Optional[torch.Tensor]]]:
            """One part's loss, stats and gradients (returned, so that parts run side by side add up
            in their own order)."""
            part_stats: dict = {}
            with self.lower_layers.unit(self._unit_key(chunk, True), record=False, training=training, keep=True):
                logprobs_B_T = target_logprobs(
                    self.model, chunk, temperature=temperature, constraint=constraint, budget=self.last_sample_budget,
                    pad_id=self.pad_id, device=self.device, first_position=first_needed_position(chunk), share_prefix=True, weighted_only=True, pack=self.config.pack_rows,
                )
            weights_B_T = self._per_position(chunk, lambda d: d.weights, logprobs_B_T.shape)
            on_B_T = weights_B_T != 0
            advantages_B_T = self._per_position(chunk, lambda d: d.advantages or [0.0] * len(d.weights), logprobs_B_T.shape)
            sampler_B_T = self._per_position(chunk, lambda d: d.logprobs or [0.0] * len(d.weights), logprobs_B_T.shape)
            if self.correction is not None and loss != "cross_entropy":
                sampler_B_T, advantages_B_T = self.correction.apply(chunk, self.step, logprobs_B_T, sampler_B_T, advantages_B_T, on_B_T, part_stats)
            summed, batch_stats = loss_sum(loss, logprobs_B_T[on_B_T], weights_B_T[on_B_T], advantages_B_T[on_B_T], sampler_B_T[on_B_T], clip)
            for key, value in batch_stats.items():
                part_stats.setdefault(key, []).append(value)
            return float(summed.detach()), part_stats, torch.autograd.grad(summed / denominator, params, allow_unused=True)

        if training:
            self.model.train()
        try:
            for batch in self._micro_batches(datums):
                parts = self._row_parts([datums[i] for i in batch])
                done = self._run_parts(lambda part: train([datums[batch[j]] for j in part]), parts)
                add_gradients(params, [grads for _, _, grads in done])
                for summed, part_stats, _ in done:  # in the parts' order: the same sums and stats every run
                    total += summed
                    for key, values in part_stats.items():
                        stats.setdefault(key, []).extend(values)
        finally:
            self.model.eval()
        return LossOutput(loss=total / denominator, n_tokens=n_tokens, metrics=self._metrics(stats, len(datums)))

    def _per_position(self, chunk: list[Datum], field, shape) -> torch.Tensor:
        values_B_T = torch.zeros(shape, dtype=torch.float32)
        for row, datum in enumerate(chunk):
            values = field(datum)
            values_B_T[row, : len(values)] = torch.tensor(values, dtype=torch.float32)
        return values_B_T.to(self.device)

    @staticmethod
    def _metrics(stats: dict[str, list[torch.Tensor]], n_datums: int) -> dict[str, float]:
        metrics = {"n_datums": float(n_datums)}
        if "ratio" in stats:
            ratio_N = torch.cat(stats["ratio"])
            log_ratio_N = torch.cat(stats["log_ratio"])
            if ratio_N.numel():
                metrics["ratio_mean"] = float(ratio_N.mean())
                metrics["ratio_max_deviation"] = float((ratio_N - 1).abs().max())
                metrics["approx_kl_sampler"] = float((-log_ratio_N).mean())  # E_q[log q - log p]
        if "sampler_gap" in stats:  # SamplerCorrection: |trainer - sampler| logprob at sampling weights
            gap_N = torch.cat(stats["sampler_gap"])
            if gap_N.numel():
                metrics["sampler_gap_median"] = float(gap_N.median())
                metrics["sampler_gap_max"] = float(gap_N.max())
                metrics["is_truncated_fraction"] = float(torch.cat(stats["is_truncated"]).float().mean())
        if "clipped" in stats:
            clipped_N = torch.cat(stats["clipped"])
            if clipped_N.numel():
                metrics["clip_fraction"] = float(clipped_N.float().mean())
        return metrics

    def optim_step(self, params: AdamParams) -> dict[str, float]:
        optimizer = self._optimizer()
        for group, ratio in zip(optimizer.param_groups, self._lr_ratios()):
            group.update(lr=params.learning_rate * ratio, betas=(params.beta1, params.beta2), eps=params.eps, weight_decay=params.weight_decay)
        grads = [p.grad for p in self.trainable if p.grad is not None]
        if not grads:
            return {"grad_norm": 0.0, "learning_rate": params.learning_rate}
        if self.config.grad_clip > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable, self.config.grad_clip)
        else:
            grad_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self._adapter_changed()
        self.step += 1
        return {"grad_norm": float(grad_norm), "learning_rate": params.learning_rate}

    def _adopt_lora_shape(self, path: Path) -> None:
        """A checkpoint saved with another LoRA rank or alpha than this run's (a sender trained
        with other [backend] settings, played by eval, chat or serve) plays with its own."""
        try:
            saved = json.loads((path / "adapter_config.json").read_text(encoding="utf-8"))
            replaced = adopt_saved_lora_shape(self.model, TRAINED, saved)
        except (OSError, json.JSONDecodeError, ValueError, TypeError) as exc:
            raise InputFileError(f"{path / 'adapter_config.json'}: cannot read the adapter's LoRA shape ({exc})") from None
        if not replaced:
            return
        if self.optimizer is not None:
            raise InputFileError(f"{path}: saved with LoRA rank {saved.get('r')}, alpha {saved.get('lora_alpha')}; this run has trained another shape already")
        self.trainable = [replaced.get(id(p), p) for p in self.trainable]
        self.frozen = [replaced.get(id(p), p) for p in self.frozen]

    def _frozen_as_reference(self) -> bool:
        """Whether the frozen weights (below lora_layers) equal the reference adapter's."""
        params, frozen = dict(self.model.named_parameters()), {id(p) for p in self.frozen}
        return all(
            torch.equal(p, params.get(name.replace(f".{TRAINED}.", f".{REFERENCE}."), p))
            for name, p in params.items()
            if id(p) in frozen
        )

    def _adapter_changed(self) -> None:
        if self.merged_sampling is not None:
            self.merged_sampling.invalidate()

    def _lr_ratios(self) -> list[float]:
        """Each optimizer parameter group's share of the step's learning rate: one group, or
        with LoRA+ (lora_b_lr_ratio) the A matrices at 1 and the B matrices at the ratio."""
        ratio = self.config.lora_b_lr_ratio
        return [1.0] if ratio == 1.0 else [1.0, ratio]

    def _optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            # the learning rate and betas are set from AdamParams at every step
            groups: list = [{"params": self.trainable}]
            if len(self._lr_ratios()) == 2:
                b_ids = {id(p) for name, p in self.model.named_parameters() if p.requires_grad and ".lora_B." in name}
                groups = [{"params": [p for p in self.trainable if id(p) not in b_ids]}, {"params": [p for p in self.trainable if id(p) in b_ids]}]
            self.optimizer = torch.optim.AdamW(groups, lr=0.0, weight_decay=0.0)
        return self.optimizer

    # -- checkpoints -----------------------------------------------------------------

    def save(self, path: str, *, with_optimizer: bool = True) -> str:
        def fill(tmp: Path) -> None:
            try:
                self.model.save_pretrained(str(tmp), selected_adapters=[TRAINED])
            except Exception as exc:  # a full disk shows as safetensors' own error: make it an OSError
                if (error := checkpoint.as_os_error(exc, tmp / checkpoint.ADAPTER_FILE)) is exc:
                    raise
                raise error from None
            state = {"step": self.step, "model": self._model_ref, "decode_budget": self.last_sample_budget, "compute_dtype": self.dtype}
            (tmp / checkpoint.STATE_FILE).write_text(json.dumps(state, indent=2), encoding="utf-8")
            checkpoint.save_torch(self.generator.get_state(), tmp / checkpoint.RNG_FILE)
            if with_optimizer and self.optimizer is not None:
                checkpoint.save_torch(self.optimizer.state_dict(), tmp / checkpoint.OPTIMIZER_FILE)

        with atomic_directory(path) as tmp:  # replaces an older checkpoint there
            fill(tmp)
        return str(path)

    def export_weights(self, out: str, *, merged: bool, system_prompt: str) -> dict[str, Any]:
        """WeightsExport: the trained adapter as a plain PEFT folder, or merged into the base."""
        from emojikit_local.export import export_weights

        return export_weights(self, out, adapter=TRAINED, merged=merged, system_prompt=system_prompt)

    def load(self, ref: str, *, with_optimizer: bool = True) -> None:
        from peft import load_peft_weights, set_peft_model_state_dict

        path = checkpoint.check_checkpoint(ref, resuming=with_optimizer)
        self._adopt_lora_shape(path)
        weights = load_peft_weights(str(path), device=str(self.device))
        try:
            result = set_peft_model_state_dict(self.model, weights, adapter_name=TRAINED)
        except RuntimeError as exc:  # shape mismatch: a different rank or model
            raise InputFileError(f"{path}: adapter does not fit this model and LoRA config ({str(exc).splitlines()[0]})") from None
        if result.unexpected_keys:
            raise InputFileError(f"{path}: adapter has weights this model lacks, e.g. {result.unexpected_keys[0]}")
        self.lower_layers.forget()  # kept outputs were computed under the weights before this load
        if self.frozen and not self._frozen_as_reference():
            self.lower_layers.enabled = False  # trained below lora_layers: the reference pass's lower outputs are not the policy's
        self._adapter_changed()
        state = checkpoint.read_state(path)
        self.step = int(state.get("step", 0))
        self.last_sample_budget = int(state.get("decode_budget", self.last_sample_budget))
        if (path / checkpoint.RNG_FILE).exists():
            self.generator.set_state(torch.load(path / checkpoint.RNG_FILE))
        if with_optimizer and (path / checkpoint.OPTIMIZER_FILE).exists():
            try:
                self._optimizer().load_state_dict(torch.load(path / checkpoint.OPTIMIZER_FILE, map_location=self.device))
            except ValueError:  # other parameter groups, or groups of other sizes
                raise InputFileError(f"{path / checkpoint.OPTIMIZER_FILE}: optimizer state does not fit this run's trainable weights (saved with another [backend] lora_b_lr_ratio, lora_layers or target_modules?); resume with the run's own settings") from None
