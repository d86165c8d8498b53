"""The `tinker` backend: emojikit's Policy on the tinker SDK.

Mapping to Tinker:
- training: a LoRA TrainingClient; forward_backward(datums, loss_fn) with cross_entropy,
  importance_sampling or ppo; optim_step(AdamParams); save_state / create_training_client_
  from_state(_with_optimizer) for checkpoints (tinker:// paths, recorded in the run directory).
- sampling: a SamplingClient of the latest weights (save_weights_and_get_sampling_client after
  each optimizer step, made when the next sample needs it); the start weights stay in a frozen
  reference SamplingClient that scores KL.
- decoders: Tinker cannot mask logits, so whole samples are checked with `decoder.check` and
  the invalid ones redrawn. A sample is never edited: the tokens and logprobs trained on are
  exactly the ones the sampler produced.
- pipelining: forward_backward only submits; optim_step submits right behind it and then
  waits, so both requests are queued before the first result is awaited.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Optional, Sequence

from emojikit.api.errors import ConfigError, RemoteServiceError
from emojikit.api.policy import AdamParams, ChatMessages, Datum, LossName, LossOutput, Sample, SamplingParams

from emojikit_tinker import chat
from emojikit_tinker.clients import make_service_client
from emojikit_tinker.config import RetrySettings, TinkerBackendConfig
from emojikit_tinker.retry import Retrier, remote_error

CHECKPOINT_FILE = "tinker.json"  # written into each checkpoint directory: the tinker:// state path

# What each built-in Tinker loss reads from a datum's loss_fn_inputs.
LOSS_INPUTS = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
}


def resolve_state_path(ref: str) -> str:
    """A tinker:// state path from a tinker:// path or a checkpoint directory holding tinker.json."""
    if ref.startswith("tinker://"):
        return ref
    record = Path(ref) / CHECKPOINT_FILE
    if not record.is_file():
        raise ConfigError(f"{ref}: not a tinker:// path nor a tinker checkpoint directory (no {CHECKPOINT_FILE})")
    try:
        path = json.loads(record.read_text(encoding="utf-8"))["state_path"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{record}: expected a JSON object with a \"state_path\"") from None
    if not isinstance(path, str) or not path.startswith("tinker://"):
        raise ConfigError(f"{record}: state_path is not a tinker:// path")
    return path


def checkpoint_name(path: str) -> str:
    """A Tinker checkpoint name for a local checkpoint path (runs/x/checkpoints/.step_5.tmp -> step_5)."""
    name = Path(path).name
    match = re.search(r"step_\d+", name)
    name = match.group(0) if match else name
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "checkpoint"


def to_tinker_datum(datum: Datum, loss: str) -> Any:
    """The tinker.Datum for a loss, carrying exactly the inputs that loss reads.

    Tinker's RL losses have no per-token weights, so emojikit's weights are folded into the
    advantages: positions with weight 0 (prompt, earlier turns) carry no advantage at all.
    """
    import numpy as np
    import tinker

    n = len(datum.model_input)
    columns = {"target_tokens": datum.target_tokens, "weights": datum.weights}
    if loss != "cross_entropy":
        if datum.advantages is None or datum.logprobs is None:
            raise ValueError(f"loss {loss!r} needs datums with advantages and sampler logprobs")
        columns["advantages"] = [a * w for a, w in zip(datum.advantages, datum.weights)]
        columns["logprobs"] = datum.logprobs
    for key, values in columns.items():
        if len(values) != n:
            raise ValueError(f"datum {key} has {len(values)} positions, model_input has {n}")
    dtypes = {"target_tokens": np.int64}
    inputs = {key: tinker.TensorData.from_numpy(np.asarray(columns[key], dtype=dtypes.get(key, np.float32))) for key in LOSS_INPUTS[loss]}
    return tinker.Datum(model_input=tinker.ModelInput.from_ints(list(datum.model_input)), loss_fn_inputs=inputs)


class PendingLoss(LossOutput):
    """A LossOutput whose loss and metrics arrive with the forward_backward result.

    Reading `loss` or `metrics` waits for it; optim_step waits for it anyway, so a loop that
    reads them after the optimizer step never blocks twice.
    """

    def __init__(self, future: Any, datums: Sequence[Datum], loss_name: str, clip: float):
        self._future = future
        self._datums = list(datums)
        self._loss_name = loss_name
        self._clip = clip
        self._resolved: Optional[tuple[float, dict[str, float]]] = None
        # Weighted positions, counted: GRPO's loss_normalization sets weights other than 1.
        self.n_tokens = float(sum(sum(1 for w in d.weights if w) for d in self._datums))

    def resolve(self) -> tuple[float, dict[str, float]]:
        if self._resolved is None:
            try:
                output = self._future.result()
            except Exception as exc:  # noqa: BLE001
                raise remote_error(exc, f"forward_backward ({self._loss_name})") from exc
            metrics = {k: float(v) for k, v in (output.metrics or {}).items()}
            loss_sum = metrics.get("loss:sum", float("nan"))
            metrics.update(self._ratio_metrics(output))
            self._resolved = (loss_sum / max(self.n_tokens, 1e-9), metrics)
        return self._resolved

    def _ratio_metrics(self, output: Any) -> dict[str, float]:
        """Learner vs sampler probability ratios on the trained tokens (RL losses only)."""
        if self._loss_name == "cross_entropy":
            return {}
        deviation = clipped = count = 0.0
        for datum, record in zip(self._datums, output.loss_fn_outputs):
            learner = record["logprobs"].tolist()
            for new, old, weight in zip(learner, datum.logprobs or [], datum.weights):
                if weight:
                    ratio = math.exp(new - old)
                    deviation += abs(ratio - 1.0)
                    clipped += not (1.0 - self._clip <= ratio <= 1.0 + self._clip)
                    count += 1
        if not count:
            return {}
        return {"ratio_deviation": deviation / count, "clip_fraction": clipped / count}

    @property
    def loss(self) -> float:  # type: ignore[override]
        return self.resolve()[0]

    @property
    def metrics(self) -> dict[str, float]:  # type: ignore[override]
        return self.resolve()[1]


class TinkerPolicy:
    """A Policy backed by a Tinker LoRA training client. Clients are created on first use."""

    def __init__(self, config: TinkerBackendConfig, *, seed: int = 0, service_client: Any = None, retrier: Optional[Retrier] = None):
        self.config = config
        self.seed = seed
        self._service = service_client if service_client is not None else make_service_client(config.base_url, "the tinker backend")
        self._retrier = retrier or Retrier(RetrySettings.of(config))
        self._training: Any = None
        self._reference: Any = None  # SamplingClient of the start weights (frozen)
        self._sampler: Any = None  # SamplingClient of the current weights; None when stale
        self._tokenizer: Any = None
        self._stop_ids: list[int] = []
        self._end_of_turn: list[int] = []
        self._pending: list[PendingLoss] = []
        self.state_path: Optional[str] = None  # the tinker:// path last saved or loaded
        self.last_sample_stats: dict[str, float] = {}
        self.last_sample_valid: list[list[bool]] = []
        self._totals = {"drawn": 0.0, "accepted": 0.0}  # every sample() call so far (SampleTotals)

    @property
    def name(self) -> str:
        return f"tinker:{self.config.base_model}"

    # -- clients ---------------------------------------------------------------------

    def _start(self) -> None:
        """The training client (from init_from or a fresh LoRA) and the frozen reference sampler."""
        if self._training is not None:
            return
        if self.config.init_from:
            state = resolve_state_path(self.config.init_from)
            self._training = self._retrier.call(lambda: self._service.create_training_client_from_state(state), "create_training_client_from_state")
            self.state_path = state
        else:
            self._training = self._retrier.call(
                lambda: self._service.create_lora_training_client(base_model=self.config.base_model, rank=self.config.rank, seed=self.seed),
                "create_lora_training_client",
            )
        self._reference = self._retrier.call(self._training.save_weights_and_get_sampling_client, "save_weights_and_get_sampling_client")
        self._sampler = self._reference

    def _current_sampler(self) -> Any:
        self._start()
        if self._sampler is None:
            self._wait_for_training()
            self._sampler = self._retrier.call(self._training.save_weights_and_get_sampling_client, "save_weights_and_get_sampling_client")
        return self._sampler

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._start()
            self._tokenizer = self._training.get_tokenizer()
            self._end_of_turn = chat.end_of_turn_ids(self._tokenizer)
            self._stop_ids = chat.stop_token_ids(self._tokenizer)
        return self._tokenizer

    def _wait_for_training(self) -> None:
        pending, self._pending = self._pending, []
        for out in pending:
            out.resolve()

    # -- tokens ----------------------------------------------------------------------

    def encode_prompt(self, messages: ChatMessages) -> list[int]:
        return chat.encode_prompt(self.tokenizer, list(messages), self.config.enable_thinking)

    def encode_completion(self, text: str) -> list[int]:
        tokens = list(self.tokenizer.encode(text, add_special_tokens=False))
        return tokens + list(self._end_of_turn)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    # -- sampling --------------------------------------------------------------------

    def sample(self, prompts: Sequence[ChatMessages], n: int, params: SamplingParams, decoder: Any = None) -> list[list[Sample]]:
        import tinker

        sampler = self._current_sampler()
        prompt_tokens = [self.encode_prompt(p) for p in prompts]
        kept: list[list[Sample]] = [[] for _ in prompts]
        rejected: list[list[Sample]] = [[] for _ in prompts]
        drawn = accepted = rounds = 0
        for round_index in range(1 + (self.config.max_redraws if decoder is not None else 0)):
            wanted = [(i, n - len(kept[i])) for i in range(len(prompts)) if len(kept[i]) < n]
            if not wanted:
                break
            rounds += 1
            # A redraw must not replay the first draw's randomness.
            seed = None if params.seed is None else params.seed + 7919 * round_index
            tparams = tinker.SamplingParams(
                max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p, seed=seed, stop=list(self._stop_ids)
            )
            submits = [
                (lambda i=i, k=k: sampler.sample(prompt=tinker.ModelInput.from_ints(prompt_tokens[i]), num_samples=k, sampling_params=tparams))
                for i, k in wanted
            ]
            responses = self._retrier.gather(submits, self.config.concurrency, "sample")
            for (i, k), response in zip(wanted, responses):
                for sequence in list(response.sequences)[:k]:
                    sample = self._to_sample(prompt_tokens[i], sequence)
                    drawn += 1
                    if decoder is None or decoder.check(sample.text).valid:
                        kept[i].append(sample)
                        accepted += 1
                    else:
                        rejected[i].append(sample)
        # Still short after every redraw: return drawn samples as they are, flagged invalid;
        # the game's format check and penalty deal with them.
        self.last_sample_valid = [[True] * len(k) for k in kept]
        for i in range(len(prompts)):
            missing = n - len(kept[i])
            if missing > 0:
                kept[i].extend(rejected[i][:missing])
                self.last_sample_valid[i].extend([False] * min(missing, len(rejected[i])))
            if len(kept[i]) < n:
                raise RemoteServiceError(f"tinker sample returned {len(kept[i])} sequences for a prompt, expected {n}")
        invalid = sum(row.count(False) for row in self.last_sample_valid)
        self._totals["drawn"] += drawn
        self._totals["accepted"] += accepted
        self.last_sample_stats = {
            "drawn": float(drawn),
            "accepted": float(accepted),
            "acceptance_rate": accepted / drawn if drawn else 1.0,
            "returned_invalid": float(invalid),
            "rounds": float(rounds),
        }
        return kept

    def sample_totals(self) -> dict[str, float]:
        """Samples drawn and accepted by the decoder's check over every sample() call
        (emojikit.api.policy.SampleTotals: GRPO logs each step's acceptance_rate)."""
        return dict(self._totals)

    def _to_sample(self, prompt_tokens: list[int], sequence: Any) -> Sample:
        tokens = [int(t) for t in sequence.tokens]
        logprobs = sequence.logprobs
        if logprobs is None or len(logprobs) != len(tokens):
            raise RemoteServiceError(f"tinker sample returned {0 if logprobs is None else len(logprobs)} logprobs for {len(tokens)} tokens")
        return Sample(
            prompt_tokens=list(prompt_tokens),
            tokens=tokens,
            logprobs=[float(lp) for lp in logprobs],
            text=self.decode(tokens),
            stop_reason="eos" if sequence.stop_reason == "stop" else "length",
        )

    # -- scoring and training --------------------------------------------------------

    @staticmethod
    def _check_temperature(temperature: float, what: str) -> None:
        # Tinker scores and trains at temperature 1; other temperatures would make the
        # learner's logprobs disagree with the sampler's.
        if abs(temperature - 1.0) > 1e-9:
            raise ConfigError(f"the tinker backend {what} at temperature 1.0 only (got {temperature}); set the training temperature to 1.0")

    def compute_logprobs(self, datums: Sequence[Datum], *, temperature: float = 1.0, decoder: Any = None, reference: bool = False, weighted_only: bool = False) -> list[list[float]]:
        """Per-position target logprobs, every position (Tinker scores whole sequences, so
        weighted_only saves nothing here). Nothing is masked: Tinker samples unmasked
        (redrawing invalid samples), so scoring unmasked matches the sampler."""
        import tinker

        self._check_temperature(temperature, "scores")
        self._start()
        if not datums:
            return []
        if reference:
            full = [list(d.model_input) + [d.target_tokens[-1]] for d in datums]
            submits = [(lambda tokens=tokens: self._reference.compute_logprobs(tinker.ModelInput.from_ints(tokens))) for tokens in full]
            results = self._retrier.gather(submits, self.config.concurrency, "compute_logprobs")
            # Entry j scores token j given the ones before it; position t predicts token t + 1.
            return [[float(lp) if lp is not None else 0.0 for lp in row[1:]] for row in results]
        batch = [to_tinker_datum(Datum(d.model_input, d.target_tokens, [1.0] * len(d.target_tokens)), "cross_entropy") for d in datums]
        output = self._retrier.call(lambda: self._training.forward(batch, "cross_entropy"), "forward")
        return [[float(x) for x in record["logprobs"].tolist()] for record in output.loss_fn_outputs]

    def forward_backward(self, datums: Sequence[Datum], loss: LossName, *, temperature: float = 1.0, decoder: Any = None, clip: float = 0.2) -> LossOutput:
        if loss not in LOSS_INPUTS:
            raise ConfigError(f"unknown loss {loss!r}; the tinker backend has {', '.join(LOSS_INPUTS)}")
        if loss != "cross_entropy":
            self._check_temperature(temperature, "trains")
        self._start()
        batch = [to_tinker_datum(d, loss) for d in datums]
        config = {"clip_low_threshold": 1.0 - clip, "clip_high_threshold": 1.0 + clip} if loss == "ppo" else None
        try:
            future = self._training.forward_backward(batch, loss, loss_fn_config=config)
        except Exception as exc:  # noqa: BLE001
            raise remote_error(exc, f"forward_backward ({loss})") from exc
        out = PendingLoss(future, datums, loss, clip)
        self._pending.append(out)
        return out

    def optim_step(self, params: AdamParams) -> dict[str, float]:
        import tinker

        self._start()
        adam = tinker.AdamParams(
            learning_rate=params.learning_rate, beta1=params.beta1, beta2=params.beta2, eps=params.eps, weight_decay=params.weight_decay
        )
        try:
            future = self._training.optim_step(adam)  # queued behind the forward_backward requests
        except Exception as exc:  # noqa: BLE001
            raise remote_error(exc, "optim_step") from exc
        self._wait_for_training()
        try:
            response = future.result()
        except Exception as exc:  # noqa: BLE001
            raise remote_error(exc, "optim_step") from exc
        self._sampler = None  # new weights: the next sample() gets a fresh sampling client
        return {k: float(v) for k, v in (response.metrics or {}).items()}

    # -- checkpoints -----------------------------------------------------------------

    def save(self, path: str, *, with_optimizer: bool = True) -> str:
        """Save the training state on Tinker; `path/tinker.json` records its tinker:// path.

        Tinker's save_state always includes the optimizer state; with_optimizer decides only
        whether load() restores it.
        """
        self._start()
        self._wait_for_training()
        name = checkpoint_name(path)
        response = self._retrier.call(lambda: self._training.save_state(name, overwrite=True), "save_state")
        self.state_path = response.path
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        record = {"state_path": response.path, "base_model": self.config.base_model, "rank": self.config.rank, "with_optimizer": with_optimizer}
        (directory / CHECKPOINT_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        return response.path

    def export_weights(self, out: str, *, merged: bool, system_prompt: str) -> dict[str, Any]:
        """WeightsExport: the loaded state's LoRA, downloaded through the SDK (see export.py)."""
        from emojikit_tinker.export import export_weights

        return export_weights(self, out, merged=merged, system_prompt=system_prompt)

    def load(self, ref: str, *, with_optimizer: bool = True) -> None:
        """Continue from a saved state (a tinker:// path or a checkpoint directory).

        The reference sampler keeps the run's start weights, so KL stays measured against them.
        """
        state = resolve_state_path(ref)
        self._start()
        self._wait_for_training()
        if with_optimizer:
            create = lambda: self._service.create_training_client_from_state_with_optimizer(state)  # noqa: E731
        else:
            create = lambda: self._service.create_training_client_from_state(state)  # noqa: E731
        self._training = self._retrier.call(create, "load state")
        self._sampler = None
        self.state_path = state
