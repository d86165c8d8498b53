"""The Tinker backend and judge, tested at the tinker SDK's client boundary.

A fake ServiceClient / TrainingClient / SamplingClient accepts and returns the SDK's real
types (tinker.Datum, ModelInput, TensorData, SamplingParams, SampleResponse, SampledSequence,
ForwardBackwardOutput, OptimStepResponse, SaveWeightsResponse, APIFutures) and computes with
a real (tiny, random) Llama model over the bundled SmolLM2 tokenizer. It is injected through
`emojikit_tinker.clients.service_client_factory`; nothing touches the network.
"""

from __future__ import annotations

import concurrent.futures
import copy
import itertools
import json
import math
from pathlib import Path

import httpx
import numpy as np
import pytest
import tinker
import torch
from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

from emojikit.support.bundled import SMOLLM2, load_tokenizer
from emojikit.api.components import BuildContext, FormatCheck, JudgeView
from emojikit.api.errors import ConfigError, MissingCredentialError, RemoteServiceError
from emojikit.api.policy import AdamParams, Datum, SamplingParams
from emojikit_tinker import clients
from emojikit_tinker.config import RetrySettings, TinkerBackendConfig, TinkerJudgeConfig
from emojikit_tinker.judge import TinkerJudge
from emojikit_tinker.policy import TinkerPolicy, resolve_state_path
from emojikit_tinker.retry import Retrier

REQUIRED_INPUTS = {
    "cross_entropy": {"target_tokens", "weights"},
    "importance_sampling": {"target_tokens", "logprobs", "advantages"},
    "ppo": {"target_tokens", "logprobs", "advantages"},
}


# --- the fake service --------------------------------------------------------------------


def tiny_model(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).eval()


def target_logprobs(model, tokens_T: list[int], targets_T) -> torch.Tensor:
    logits_TV = model(torch.tensor([tokens_T])).logits[0].float()
    return torch.log_softmax(logits_TV, -1).gather(-1, torch.as_tensor(targets_T, dtype=torch.long)[:, None])[:, 0]


class LoggedFuture(concurrent.futures.Future):
    """Records when the client waits for a result, so tests can check pipelining."""

    def __init__(self, log: list, op: str):
        super().__init__()
        self._log, self._op = log, op

    def result(self, timeout=None):
        self._log.append(("wait", self._op))
        return super().result(timeout)


class FakeService:
    """A tinker.ServiceClient stand-in; the server is sequential, like a Tinker model's queue."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.log: list[tuple[str, str]] = []  # ("submit" | "wait", op)
        self.created: list[tuple] = []
        self.store: dict[str, tuple[dict, dict]] = {}  # tinker:// path -> (weights, optimizer state)
        self.received: list[tuple[str, list, object]] = []  # (loss_fn, datums, loss_fn_config)
        self.sampled: list[tinker.SampledSequence] = []
        self.sample_prompts: list[list[int]] = []
        self.failures: dict[str, int] = {}  # op -> transient failures still to raise
        self._ids = itertools.count()

    def future(self, op: str, compute):
        self.log.append(("submit", op))
        future = LoggedFuture(self.log, op)
        if self.failures.get(op, 0) > 0:
            self.failures[op] -= 1
            future.set_exception(tinker.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1/fake")))
        else:
            try:
                future.set_result(compute())
            except Exception as exc:  # noqa: BLE001 - delivered through the future, like the SDK
                future.set_exception(exc)
        return AwaitableConcurrentFuture(future)

    def create_lora_training_client(self, base_model, rank=32, seed=None, **kwargs):
        self.created.append(("lora", base_model, rank))
        return self.future("create", lambda: FakeTrainer(self, tiny_model(0)))

    def _from_state(self, path, with_optimizer):
        weights, optimizer = self.store[path]
        model = tiny_model(0)
        model.load_state_dict(weights)
        return FakeTrainer(self, model, optimizer if with_optimizer else None)

    def create_training_client_from_state(self, path, base_model=None, **kwargs):
        self.created.append(("from_state", path))
        return self.future("create", lambda: self._from_state(path, False))

    def create_training_client_from_state_with_optimizer(self, path, base_model=None, **kwargs):
        self.created.append(("from_state_with_optimizer", path))
        return self.future("create", lambda: self._from_state(path, True))

    def create_sampling_client(self, model_path=None, base_model=None, **kwargs):
        self.created.append(("sampler", base_model))
        return self.future("create", lambda: FakeSampler(self, tiny_model(1)))


class FakeTrainer:
    def __init__(self, service: FakeService, model, optimizer_state=None):
        self.service, self.model = service, model
        self.run_id = f"fake-run-{next(service._ids)}"
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)

    def get_tokenizer(self):
        return self.service.tokenizer

    def forward_backward(self, data, loss_fn, loss_fn_config=None):
        return self.service.future("forward_backward", lambda: self._run(data, loss_fn, loss_fn_config, backward=True))

    def forward(self, data, loss_fn, loss_fn_config=None):
        return self.service.future("forward", lambda: self._run(data, loss_fn, loss_fn_config, backward=False))

    def _run(self, data, loss_fn, config, backward: bool):
        assert loss_fn in REQUIRED_INPUTS, loss_fn
        self.service.received.append((loss_fn, list(data), config))
        config = dict(config or {})
        total, outputs = 0.0, []
        for datum in data:
            assert isinstance(datum, tinker.Datum) and isinstance(datum.model_input, tinker.ModelInput)
            assert set(datum.loss_fn_inputs) == REQUIRED_INPUTS[loss_fn], sorted(datum.loss_fn_inputs)
            assert all(isinstance(v, tinker.TensorData) and v.shape == [datum.model_input.length] for v in datum.loss_fn_inputs.values())
            inputs = {k: v.to_torch() for k, v in datum.loss_fn_inputs.items()}
            with torch.set_grad_enabled(backward):
                logprobs_T = target_logprobs(self.model, datum.model_input.to_ints(), inputs["target_tokens"])
                if loss_fn == "cross_entropy":
                    loss = -(logprobs_T * inputs["weights"]).sum()
                else:
                    ratio_T = torch.exp(logprobs_T - inputs["logprobs"])
                    advantages_T = inputs["advantages"]
                    if loss_fn == "importance_sampling":
                        loss = -(ratio_T * advantages_T).sum()
                    else:
                        clipped_T = ratio_T.clamp(config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2))
                        loss = -torch.minimum(ratio_T * advantages_T, clipped_T * advantages_T).sum()
                if backward:
                    loss.backward()
            total += float(loss.detach())
            outputs.append({"logprobs": tinker.TensorData.from_torch(logprobs_T.detach())})
        return tinker.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics={"loss:sum": total})

    def optim_step(self, params):
        assert isinstance(params, tinker.AdamParams)

        def step():
            for group in self.optimizer.param_groups:
                group.update(lr=params.learning_rate, betas=(params.beta1, params.beta2), eps=params.eps, weight_decay=params.weight_decay)
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), float("inf"))
            self.optimizer.step()
            self.optimizer.zero_grad()
            return tinker.OptimStepResponse(metrics={"grad_norm": float(norm)})

        return self.service.future("optim_step", step)

    def save_state(self, name, ttl_seconds=None, overwrite=False, user_metadata=None):
        path = f"tinker://{self.run_id}/weights/{name}"
        self.service.store[path] = (copy.deepcopy(self.model.state_dict()), copy.deepcopy(self.optimizer.state_dict()))
        return self.service.future("save_state", lambda: tinker.types.SaveWeightsResponse(path=path))

    def save_weights_and_get_sampling_client(self, name=None, retry_config=None, **kwargs):
        snapshot = copy.deepcopy(self.model)
        return self.service.future("save_weights_and_get_sampling_client", lambda: FakeSampler(self.service, snapshot))


class FakeSampler:
    def __init__(self, service: FakeService, model):
        self.service, self.model = service, model
        self._seeds = itertools.count(1000)

    def get_tokenizer(self):
        return self.service.tokenizer

    def sample(self, prompt, num_samples, sampling_params, include_prompt_logprobs=False, **kwargs):
        assert isinstance(prompt, tinker.ModelInput) and isinstance(sampling_params, tinker.SamplingParams)
        return self.service.future("sample", lambda: self._generate(prompt.to_ints(), num_samples, sampling_params))

    @torch.no_grad()
    def _generate(self, prompt: list[int], num_samples: int, params: tinker.SamplingParams):
        self.service.sample_prompts.append(prompt)
        generator = torch.Generator().manual_seed(params.seed if params.seed is not None else next(self._seeds))
        stop = set(params.stop) if params.stop else {self.service.tokenizer.eos_token_id}
        sequences = []
        for _ in range(num_samples):
            tokens, logprobs, reason = [], [], "length"
            out = self.model(torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
            for _ in range(params.max_tokens):
                if tokens:  # the KV cache holds everything before the newest token
                    out = self.model(torch.tensor([tokens[-1:]]), past_key_values=out.past_key_values, use_cache=True)
                logits_V = out.logits[0, -1].float()
                if params.temperature == 0:
                    logp_V = torch.log_softmax(logits_V, -1)
                    token = int(logp_V.argmax())
                else:
                    logp_V = torch.log_softmax(logits_V / params.temperature, -1)
                    token = int(torch.multinomial(logp_V.exp(), 1, generator=generator))
                tokens.append(token)
                logprobs.append(float(logp_V[token]))
                if token in stop:
                    reason = "stop"
                    break
            sequence = tinker.SampledSequence(
                stop_reason=reason, sequence_id=f"seq-{next(self.service._ids)}",
                tokens_np=np.array(tokens, dtype=np.int32), logprobs_np=np.array(logprobs, dtype=np.float32),
            )
            self.service.sampled.append(sequence)
            sequences.append(sequence)
        return tinker.SampleResponse(sequences=sequences)

    def compute_logprobs(self, prompt, prompt_logprobs_last_n=None):
        tokens = prompt.to_ints()

        def score():
            with torch.no_grad():
                return [None] + target_logprobs(self.model, tokens[:-1], tokens[1:]).tolist()

        return self.service.future("compute_logprobs", score)


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(SMOLLM2)


@pytest.fixture
def service(tokenizer, monkeypatch):
    fake = FakeService(tokenizer)
    seen_keys = []

    def factory(base_url, api_key):
        seen_keys.append(api_key)
        return fake

    monkeypatch.setenv("TINKER_API_KEY", "tk-test-key")
    monkeypatch.setattr(clients, "service_client_factory", factory)
    fake.seen_keys = seen_keys
    return fake


def no_sleep_retrier(**settings) -> Retrier:
    delays = []
    retrier = Retrier(RetrySettings(**settings), sleep=delays.append)
    retrier.delays = delays
    return retrier


def make_policy(service, **config) -> TinkerPolicy:
    return TinkerPolicy(TinkerBackendConfig(**config), seed=0, retrier=no_sleep_retrier())


CHAT = [{"role": "user", "content": "I just got the job!"}]
PARAMS = SamplingParams(max_tokens=6, temperature=1.0, seed=11)


class ParityDecoder:
    """A decoder whose check accepts about half of all texts, deterministically."""

    min_emoji, max_emoji = 1, 8

    def check(self, text: str) -> FormatCheck:
        ok = sum(map(ord, text)) % 2 == 0
        return FormatCheck(valid=ok, n_emoji=1 if ok else 0, reason="" if ok else "odd")

    def bind(self, tokenizer):
        return None


class RejectAll(ParityDecoder):
    def check(self, text: str) -> FormatCheck:
        return FormatCheck(valid=False, n_emoji=0, reason="never")


# --- credentials ---------------------------------------------------------------------------


def test_missing_key_fails_before_anything_runs(tmp_path, monkeypatch):
    from emojikit.composition.registry import Registry

    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here
    calls = []
    monkeypatch.setattr(clients, "service_client_factory", lambda *a: calls.append(a))
    from emojikit.composition.assembly import choose, preflight

    registry = Registry()
    for kind, config in (("backend", TinkerBackendConfig()), ("judge", TinkerJudgeConfig())):
        spec = registry.get(kind, "tinker")
        assert spec.needs_key == "TINKER_API_KEY"  # declared on the component; the core checks it
        with pytest.raises(MissingCredentialError, match="TINKER_API_KEY"):
            preflight(choose(kind, "tinker", config, BuildContext(registry=registry)), BuildContext(registry=registry))
        with pytest.raises(MissingCredentialError, match="TINKER_API_KEY"):
            spec.factory(config, BuildContext())
    assert calls == []  # the SDK was never reached


# --- SFT: cross_entropy, pipelining --------------------------------------------------------


def test_cross_entropy_datums_and_pipelined_step(service):
    from emojikit.training.sft import chat_datum

    policy = make_policy(service)
    chats = [CHAT + [{"role": "assistant", "content": "🎉💼"}], [{"role": "user", "content": "rainy day"}, {"role": "assistant", "content": "🌧️☔"}]]
    datums = [chat_datum(policy, c) for c in chats]
    out = policy.forward_backward(datums, "cross_entropy")
    optim = policy.optim_step(AdamParams(learning_rate=1e-3))

    # Both training requests were queued before the first result was awaited.
    log = service.log
    assert log.index(("submit", "optim_step")) < log.index(("wait", "forward_backward"))
    loss_fn, sent, config = service.received[0]
    assert loss_fn == "cross_entropy" and config is None and len(sent) == 2
    for datum, tdatum in zip(datums, sent):
        inputs = tdatum.loss_fn_inputs
        assert set(inputs) == {"target_tokens", "weights"}
        assert tdatum.model_input.to_ints() == datum.model_input
        assert inputs["target_tokens"].dtype == "int64" and inputs["target_tokens"].tolist() == datum.target_tokens
        assert inputs["weights"].dtype == "float32" and inputs["weights"].tolist() == datum.weights
        answer = policy.encode_completion(chats[sent.index(tdatum)][-1]["content"])
        assert answer[-1] == service.tokenizer.convert_tokens_to_ids("<|im_end|>")  # the end-of-turn token is trained
        assert sum(inputs["weights"].tolist()) == len(answer)
    assert out.n_tokens == sum(sum(d.weights) for d in datums)
    assert math.isfinite(out.loss) and out.loss > 0 and optim["grad_norm"] > 0


# --- RL: what importance_sampling and ppo receive -----------------------------------------


def test_rl_datums_carry_advantages_on_sender_tokens_only(service):
    policy = make_policy(service)
    (sample_a, sample_b), = policy.sample([CHAT], 2, PARAMS)
    datums = [Datum.from_sample(sample_a, advantage=0.75, decoded=True), Datum.from_sample(sample_b, advantage=-0.5, decoded=True)]
    out = policy.forward_backward(datums, "importance_sampling")
    policy.forward_backward(datums, "ppo", clip=0.1)
    policy.optim_step(AdamParams(learning_rate=1e-3))

    (is_name, is_sent, is_config), (ppo_name, ppo_sent, ppo_config) = service.received
    assert (is_name, is_config) == ("importance_sampling", None)
    assert ppo_name == "ppo" and ppo_config == pytest.approx({"clip_low_threshold": 0.9, "clip_high_threshold": 1.1})
    for sample, advantage, tdatum in zip((sample_a, sample_b), (0.75, -0.5), is_sent):
        inputs = tdatum.loss_fn_inputs
        assert set(inputs) == {"target_tokens", "logprobs", "advantages"}
        n, k = tdatum.model_input.length, len(sample.tokens)
        assert tdatum.model_input.to_ints() == (sample.prompt_tokens + sample.tokens)[:-1]
        advantages = inputs["advantages"].tolist()
        assert advantages[: n - k] == [0.0] * (n - k)  # prompt: no advantage
        assert advantages[n - k :] == pytest.approx([advantage] * k)  # the sender's tokens
        assert inputs["logprobs"].tolist()[n - k :] == pytest.approx(sample.logprobs)  # the sampler's own logprobs
        assert inputs["target_tokens"].tolist()[n - k :] == sample.tokens
    # Sampled and trained with the same weights: the learner agrees with the sampler.
    assert out.metrics["ratio_deviation"] < 1e-3 and out.metrics["clip_fraction"] == 0.0
    assert math.isfinite(out.loss)


def test_rl_losses_need_temperature_one(service):
    policy = make_policy(service)
    (sample,), = policy.sample([CHAT], 1, PARAMS)
    with pytest.raises(ConfigError, match="temperature 1.0"):
        policy.forward_backward([Datum.from_sample(sample, advantage=1.0)], "ppo", temperature=0.7)
    assert service.received == []


# --- sampling under a decoder: redraw, never edit ------------------------------------------


def _verbatim(service, sample) -> bool:
    return any(list(s.tokens) == sample.tokens and s.logprobs == pytest.approx(sample.logprobs, abs=1e-6) for s in service.sampled)


def test_invalid_samples_are_redrawn_not_edited(service):
    policy = make_policy(service, max_redraws=8)
    decoder = ParityDecoder()
    prompts = [CHAT, [{"role": "user", "content": "missing you"}], [{"role": "user", "content": "pizza tonight?"}]]
    groups = policy.sample(prompts, 2, PARAMS, decoder)
    stats = policy.last_sample_stats
    assert [len(g) for g in groups] == [2, 2, 2]
    assert all(decoder.check(s.text).valid for g in groups for s in g)
    assert all(_verbatim(service, s) for g in groups for s in g)  # exactly what the sampler produced
    assert stats["drawn"] == len(service.sampled) > 6  # some were rejected and redrawn
    assert stats["rounds"] > 1 and stats["acceptance_rate"] == pytest.approx(stats["accepted"] / stats["drawn"])
    assert policy.last_sample_valid == [[True, True]] * 3


def test_still_invalid_after_redraws_is_returned_as_sampled(service):
    policy = make_policy(service, max_redraws=2)
    (group,) = policy.sample([CHAT], 2, PARAMS, RejectAll())
    assert len(group) == 2 and all(_verbatim(service, s) for s in group)
    assert policy.last_sample_valid == [[False, False]]
    assert policy.last_sample_stats["rounds"] == 3 and policy.last_sample_stats["acceptance_rate"] == 0.0
    assert len(service.sampled) == 6


def test_sampling_requests_are_concurrent_with_a_limit(service):
    policy = make_policy(service, concurrency=2)
    policy.sample([[{"role": "user", "content": f"message {i}"}] for i in range(5)], 1, SamplingParams(max_tokens=2, seed=1))
    outstanding = peak = 0
    for event, op in service.log:
        if op == "sample":
            outstanding += 1 if event == "submit" else -1
            peak = max(peak, outstanding)
    assert peak == 2


def test_transient_errors_are_retried_with_backoff(service):
    retrier = no_sleep_retrier(max_attempts=4, backoff_seconds=1.0, jitter=0.5)
    policy = TinkerPolicy(TinkerBackendConfig(), retrier=retrier)
    policy.encode_prompt(CHAT)  # start the clients
    service.failures["sample"] = 2
    (group,) = policy.sample([CHAT], 1, PARAMS)
    assert len(group) == 1 and retrier.retries == 2
    assert 0.5 <= retrier.delays[0] <= 1.0 and 1.0 <= retrier.delays[1] <= 2.0  # doubling, minus jitter
    service.failures["sample"] = 10
    with pytest.raises(RemoteServiceError, match="APIConnectionError"):
        policy.sample([CHAT], 1, PARAMS)


# --- fresh weights, reference, checkpoints -------------------------------------------------


def test_fresh_sampler_after_each_step_and_frozen_reference(service):
    policy = make_policy(service)
    (sample,), = policy.sample([CHAT], 1, PARAMS)
    datum = Datum.from_sample(sample, advantage=1.0)
    before = policy.compute_logprobs([datum], reference=True)[0]
    # Reference scoring lines up with the sampler's logprobs on the sampled tokens.
    assert before[-len(sample.tokens) :] == pytest.approx(sample.logprobs, abs=1e-4)

    snapshots = service.log.count(("submit", "save_weights_and_get_sampling_client"))
    for _ in range(2):
        policy.forward_backward([datum], "importance_sampling")
        policy.optim_step(AdamParams(learning_rate=5e-2))
    (new_sample,), = policy.sample([CHAT], 1, PARAMS)
    assert service.log.count(("submit", "save_weights_and_get_sampling_client")) == snapshots + 1

    after_reference = policy.compute_logprobs([datum], reference=True)[0]
    after_current = policy.compute_logprobs([datum])[0]
    assert after_reference == pytest.approx(before, abs=1e-5)  # the start weights stay frozen
    assert sum(after_current[-len(sample.tokens) :]) > sum(before[-len(sample.tokens) :])  # trained towards the sample
    # The fresh sampler samples from the trained weights: its logprobs match the learner's.
    fresh = Datum.from_sample(new_sample, advantage=1.0)
    assert policy.compute_logprobs([fresh])[0][-len(new_sample.tokens) :] == pytest.approx(new_sample.logprobs, abs=1e-4)


def test_save_records_tinker_path_and_load_resumes(service, tmp_path):
    policy = make_policy(service)
    (sample,), = policy.sample([CHAT], 1, PARAMS)
    datum = Datum.from_sample(sample, advantage=1.0)
    policy.forward_backward([datum], "importance_sampling")
    policy.optim_step(AdamParams(learning_rate=5e-2))
    trained = policy.compute_logprobs([datum])[0]

    checkpoint = tmp_path / "checkpoints" / ".step_3.tmp"
    ref = policy.save(str(checkpoint))
    assert ref.startswith("tinker://") and ref.endswith("/step_3")
    record = json.loads((checkpoint / "tinker.json").read_text())
    assert record["state_path"] == ref and "key" not in json.dumps(record).lower()
    assert resolve_state_path(str(checkpoint)) == ref

    resumed = make_policy(service)
    resumed.load(str(checkpoint))
    assert service.created[-1] == ("from_state_with_optimizer", ref)
    assert resumed.compute_logprobs([datum])[0] == pytest.approx(trained, abs=1e-5)
    resumed.load(ref, with_optimizer=False)
    assert service.created[-1] == ("from_state", ref)

    started = make_policy(service, init_from=str(checkpoint))  # e.g. GRPO from the SFT checkpoint
    assert started.compute_logprobs([datum], reference=True)[0] == pytest.approx(trained, abs=1e-5)
    assert ("from_state", ref) in service.created
    with pytest.raises(ConfigError, match="tinker.json"):
        resolve_state_path(str(tmp_path))


# --- the judge ---------------------------------------------------------------------------------


def test_tinker_judge_prompts_concurrency_and_cleaning(service):
    config = TinkerJudgeConfig(concurrency=2, max_tokens=8)
    judge = TinkerJudge(config, retrier=no_sleep_retrier())
    assert service.created == [("sampler", "Qwen/Qwen3-30B-A3B-Instruct-2507")] and service.seen_keys == ["tk-test-key"]
    views = [JudgeView(["🎉💼"]), JudgeView(["🌧️☔", "🏠📚"], ["It is raining"]), JudgeView(["🍕"])]
    guesses = judge.guess(views)
    assert len(guesses) == 3 and all("\n" not in g and len(g) <= config.max_chars for g in guesses)

    prompts = [service.tokenizer.decode(p) for p in service.sample_prompts]
    assert len(prompts) == 3 and all(p.endswith("<|im_start|>assistant\n") for p in prompts)
    second = prompts[1]
    # Multi-turn: first emoji, the judge's own earlier guess, then the follow-up emoji.
    assert second.index("Emoji: 🌧️☔") < second.index("It is raining") < second.index("More emoji: 🏠📚")
    assert config.system_prompt in prompts[0]
    outstanding = peak = 0
    for event, op in service.log:
        if op == "sample":
            outstanding += 1 if event == "submit" else -1
            peak = max(peak, outstanding)
    assert peak == 2


# --- the SFT loop end to end through the Tinker backend ---------------------------------------


def test_sft_loop_end_to_end_records_and_resumes_tinker_checkpoints(service, tmp_path, monkeypatch):
    from emojikit.composition.recipe import load_recipe
    from emojikit.stages.runs import RunDir

    monkeypatch.chdir(tmp_path)
    for name, n in (("train", 6), ("test", 2)):
        rows = [{"messages": [{"role": "user", "content": f"news number {i}"}, {"role": "assistant", "content": "🎉🎂"}]} for i in range(n)]
        Path(f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    Path("tinker-sft.toml").write_text(
        'kind = "sft"\nname = "t"\nout = "runs/t"\n\n[backend]\nuse = "tinker"\nrank = 8\n\n'
        '[sft]\ntrain_file = "train.jsonl"\ntest_file = "test.jsonl"\nbatch_size = 3\nlearning_rate = 5e-3\nsteps = 4\n'
        "eval_every = 2\neval_examples = 2\nsample_every = 4\nsample_prompts = 1\nsave_every = 2\nmax_new_tokens = 3\nreport_examples = 0\n",
        encoding="utf-8",
    )
    monkeypatch.delenv("TINKER_API_KEY")
    with pytest.raises(ConfigError, match=r"\[backend\].*TINKER_API_KEY"):
        load_recipe("tinker-sft.toml")
    assert service.created == []
    monkeypatch.setenv("TINKER_API_KEY", "tk-test-key")

    recipe = load_recipe("tinker-sft.toml")
    with RunDir(recipe.out, recipe_toml=recipe.to_toml()) as run_dir:
        recipe.runner()(recipe, run_dir)
        metrics = run_dir.read("metrics.jsonl")
    assert [r["step"] for r in metrics] == [1, 2, 3, 4]
    assert service.created[0] == ("lora", "Qwen/Qwen3.5-4B", 8)
    assert {name for name, _, _ in service.received} == {"cross_entropy"}
    assert metrics[-1]["loss"] < metrics[0]["loss"] and "test_nll" in metrics[1]
    state = json.loads(Path("runs/t/checkpoints/step_4/tinker.json").read_text())["state_path"]
    assert state.startswith("tinker://") and state in service.store
    assert "tk-test-key" not in "".join(p.read_text() for p in Path("runs/t").rglob("*") if p.is_file() and p.name != ".lock")

    recipe = load_recipe("tinker-sft.toml", ["sft.steps=6"])
    with RunDir(recipe.out, resume=True, recipe_toml=recipe.to_toml()) as run_dir:
        recipe.runner()(recipe, run_dir)
        metrics = run_dir.read("metrics.jsonl")
    assert ("from_state_with_optimizer", state) in service.created
    assert [r["step"] for r in metrics] == [1, 2, 3, 4, 5, 6]


def test_grpo_loop_end_to_end_through_tinker_backend_and_judge(service, tmp_path, monkeypatch):
    from emojikit.composition.recipe import load_recipe
    from emojikit.stages.runs import RunDir

    monkeypatch.chdir(tmp_path)
    Path("tinker-grpo.toml").write_text(
        'kind = "grpo"\nname = "g"\nout = "runs/g"\n\n[backend]\nuse = "tinker"\nmax_redraws = 1\n\n[decoder]\nuse = "emoji-mask"\n\n'
        '[judge]\nuse = "tinker"\nmax_tokens = 6\n\n[reward]\nuse = "similarity"\n\n[prompts]\nuse = "generated"\n\n'
        "[game]\nmax_turns = 2\nmax_new_tokens = 4\n\n"
        '[grpo]\nsteps = 2\nbatch_size = 2\ngroup_size = 2\nloss = "ppo"\nclip = 0.2\nkl_coef = 0.1\neval_targets = 1\ntarget_pool = 8\nstart_from = "base"\n'
        "temperature = 1.0\n",  # Tinker trains at temperature 1 (the code default is the local recipe's 0.5)
        encoding="utf-8",
    )
    recipe = load_recipe("tinker-grpo.toml")
    with RunDir(recipe.out, recipe_toml=recipe.to_toml()) as run_dir:
        recipe.runner()(recipe, run_dir)
        metrics = run_dir.read("metrics.jsonl")
    assert [r["step"] for r in metrics] == [1, 2]
    assert ("sampler", "Qwen/Qwen3-30B-A3B-Instruct-2507") in service.created  # the judge
    trained = [r for r in metrics if r["datums"]]
    assert trained and {name for name, _, _ in service.received} == {"ppo"}
    for _, sent, config in service.received:
        assert config == pytest.approx({"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
        assert all(set(d.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"} for d in sent)
    # Every trained sequence is one the sampler produced, token for token.
    sampled = {tuple(s.tokens) for s in service.sampled}
    for _, sent, _ in service.received:
        for d in sent:
            advantages = d.loss_fn_inputs["advantages"].tolist()
            first = next((i for i, a in enumerate(advantages) if a), None)
            if first is None:
                continue
            completion = tuple(d.loss_fn_inputs["target_tokens"].tolist()[first:])
            assert completion in sampled
    assert json.loads(Path("runs/g/checkpoints/step_2/tinker.json").read_text())["state_path"].startswith("tinker://")
    assert all(0.0 <= r["acceptance_rate"] <= 1.0 for r in metrics)  # the decoder's check of redrawn samples (SampleTotals)
