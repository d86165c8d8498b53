"""The local backend: logprob consistency, losses, training, checkpoints, offline loading.

Exact loss arithmetic runs on a tiny random Llama built here (no download); behaviour on a
real model runs on the bundled SmolLM2, loaded once per session.
"""

import time
from pathlib import Path

import pytest
import torch

from emojikit.support.bundled import SMOLLM2
from emojikit.api.components import BuildContext
from emojikit.api.errors import ConfigError, InputFileError, ModelUnavailableError
from emojikit.api.policy import AdamParams, Datum, Policy, SamplingParams
from emojikit_local.config import LocalConfig
from emojikit_local.head import decoder_of
from emojikit.support.models import load_model, load_model_and_tokenizer
from emojikit_local.plugin import check_model_available
from emojikit_local.policy import LocalPolicy
from emojikit_local.rows import split_rows
from emojikit_local.scoring import MIN_COMMON_PREFIX, common_prefix_length, prefix_key

TINY_VOCAB = 64
PAD, EOS = 0, 1


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Two cores shared with other processes: OpenMP with 2 spinning threads runs ~10x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- decoders written for the tests -----------------------------------------------------


class IdSetConstraint:
    """A TokenConstraint: only `ids`; EOS once `min_tokens` are out; only EOS with one token left."""

    def __init__(self, ids, eos_token_id, vocab_size, min_tokens=2):
        self.ids, self.eos_token_id, self.vocab_size, self.min_tokens = list(ids), eos_token_id, vocab_size, min_tokens

    def start(self):
        return 0

    def allowed(self, state, tokens_left):
        mask_V = torch.zeros(self.vocab_size, dtype=torch.bool)
        if tokens_left > 1:
            mask_V[self.ids] = True
        if state >= self.min_tokens or tokens_left == 1:
            mask_V[self.eos_token_id] = True
        return mask_V

    def advance(self, state, token_id):
        assert token_id in self.ids, f"token {token_id} sampled outside the mask"
        return state + 1


class IdSetDecoder:
    min_emoji, max_emoji = 2, 8

    def __init__(self, ids_for):
        self.ids_for = ids_for  # tokenizer -> allowed ids

    def bind(self, tokenizer):
        return IdSetConstraint(self.ids_for(tokenizer), tokenizer.eos_token_id, len(tokenizer))


# --- a tiny model --------------------------------------------------------------------------


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<eos>": EOS, "<unk>": 2, **{f"w{i}": i for i in range(3, TINY_VOCAB)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return tokenizer


def tiny_policy(layers: int = 2, row_threads: int = 0, **config) -> LocalPolicy:
    """row_threads: a policy built while torch has that many threads, so that with parallel =
    "rows" (the default) it splits each micro-batch among that many row workers."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model_config = LlamaConfig(
        vocab_size=TINY_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None,
        initializer_range=0.5,  # a peaked, not uniform, next-token distribution
    )
    model = LlamaForCausalLM(model_config).eval()
    config.setdefault("model", "tiny-test")
    config.setdefault("micro_batch_size", 2)
    before = torch.get_num_threads()
    torch.set_num_threads(row_threads or before)
    try:
        return LocalPolicy(model, tiny_tokenizer(), LocalConfig(**config), seed=0)
    finally:
        torch.set_num_threads(before)


def random_datums(n=5, seed=0, prompts="distinct"):
    """Datums of different lengths, loss on their tails, with advantages and sampler logprobs.

    prompts: "distinct"; "grouped" (datums in pairs share their whole prompt, as the samples of
    a GRPO group do); "common" (different prompts that start alike, as SFT chats share a
    system prompt). The backend shares the prefix pass in the last two.
    """
    g = torch.Generator().manual_seed(seed)
    shared = torch.randint(3, TINY_VOCAB, (8,), generator=g).tolist()
    datums = []
    for i in range(n):
        length = 6 + 2 * i
        tokens = torch.randint(3, TINY_VOCAB, (length + 1,), generator=g).tolist()
        n_prompt = 3
        if prompts == "grouped":
            n_prompt = 4
            tokens[:n_prompt] = shared[i // 2 : i // 2 + n_prompt]
        elif prompts == "common":
            n_prompt = 6
            tokens[:4] = shared[:4]
        weights = [0.0] * (n_prompt - 1) + [1.0] * (length - n_prompt + 1)
        advantage = float(torch.randn(1, generator=g))
        datums.append(Datum(
            model_input=tokens[:-1], target_tokens=tokens[1:], weights=weights,
            advantages=[advantage * w for w in weights],
            logprobs=[0.0] * length,  # filled in by the test
        ))
    return datums


def hand_logprobs(model, datum, temperature):
    """Unpadded, one datum at a time, straight from the logits."""
    logits_T_V = model(input_ids=torch.tensor([datum.model_input])).logits[0]
    return torch.log_softmax(logits_T_V / temperature, dim=-1).gather(-1, torch.tensor(datum.target_tokens)[:, None]).squeeze(-1)


def trainable_grads(policy):
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in policy.trainable]


@pytest.mark.parametrize("row_threads", [0, 2])
@pytest.mark.parametrize("prompts", ["distinct", "grouped", "common"])
@pytest.mark.parametrize("loss", ["ppo", "importance_sampling", "cross_entropy"])
def test_losses_match_a_hand_computation(loss, prompts, row_threads):
    policy = tiny_policy(micro_batch_size=3, row_threads=row_threads)
    assert (policy.row_workers is not None) == (row_threads == 2)
    # move off the zero-initialised LoRA B so gradients reach every LoRA matrix
    for p in policy.trainable:
        torch.nn.init.normal_(p, std=0.05)
    temperature, clip = 0.8, 0.2
    datums = random_datums(prompts=prompts)
    keys = [prefix_key(d) for d in datums]
    assert (len(set(keys)) < len(datums)) == (prompts == "grouped")
    assert (common_prefix_length(keys) >= MIN_COMMON_PREFIX) == (prompts == "common")
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for d in datums:  # sampler logprobs off by up to ~0.5 nats, so some ratios clip
            d.logprobs = (hand_logprobs(policy.model, d, temperature) + 0.3 * torch.randn(len(d.weights), generator=noise)).tolist()

    out = policy.forward_backward(datums, loss, temperature=temperature, clip=clip)
    backend_grads = trainable_grads(policy)
    policy.model.zero_grad(set_to_none=True)

    terms, clipped = [], []
    for d in datums:
        logp = hand_logprobs(policy.model, d, temperature)
        on = torch.tensor(d.weights) != 0
        q, adv, w = torch.tensor(d.logprobs), torch.tensor(d.advantages), torch.tensor(d.weights)
        ratio = torch.exp(logp - q)
        if loss == "cross_entropy":
            term = -w * logp
        elif loss == "importance_sampling":
            term = -ratio * adv
        else:
            unclipped, clipped_obj = ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv
            term = -torch.minimum(unclipped, clipped_obj)
            clipped.append((unclipped > clipped_obj)[on])
        terms.append(term[on])
    n_tokens = sum(int((torch.tensor(d.weights) != 0).sum()) for d in datums)
    hand_loss = torch.cat(terms).sum() / n_tokens
    hand_loss.backward()

    assert out.n_tokens == n_tokens
    assert out.loss == pytest.approx(hand_loss.item(), abs=1e-5)
    hand_grads = trainable_grads(policy)
    scale = max(float(g.abs().max()) for g in hand_grads)
    for got, want in zip(backend_grads, hand_grads):
        # float32 rounding: a cached prefix sums attention in another order than one pass
        torch.testing.assert_close(got, want, atol=1e-5 * scale, rtol=1e-4)
    if loss == "ppo":
        fraction = float(torch.cat(clipped).float().mean())
        assert 0 < fraction < 1  # the test exercises both branches
        assert out.metrics["clip_fraction"] == pytest.approx(fraction)
        assert out.metrics["ratio_max_deviation"] > clip


def test_pack_rows_fills_rows_longest_first_with_suffixes_of_one_prefix():
    from emojikit_local.scoring import pack_rows

    rows = pack_rows([5, 2, 3, 4, 1, 5], [0, 0, 0, 0, 0, 1], width=5)
    assert sorted(i for row in rows for i in row) == list(range(6))
    assert rows == [[0], [5], [3, 4], [2, 1]]  # 5 / 5 (another prefix) / 4+1 / 3+2
    assert all(sum([5, 2, 3, 4, 1, 5][i] for i in row) <= 5 for row in rows)
    assert pack_rows([3, 3, 3], [0, 1, 2], width=6) == [[0], [1], [2]]  # one prefix a row


def test_packing_widens_rows_past_the_longest_suffix_when_that_runs_fewer_positions():
    from emojikit_local.scoring import packing

    # at the longest suffix's width (10) every suffix needs a row: 4 x 10 = 40 positions;
    # at 14 two rows hold all four: 2 x 14 = 28, the fewest positions of any width up to 20
    rows, width = packing([10, 4, 4, 10], [0, 0, 0, 0])
    assert (width, sorted(sorted(row) for row in rows)) == (14, [[0, 1], [2, 3]])
    assert packing([6, 6], [0, 1]) == ([[0], [1]], 6)  # rows of different prefixes never share: the narrowest


def test_rows_are_packed_only_under_sdpa_attention_and_within_a_sliding_window():
    from types import SimpleNamespace

    from emojikit_local.scoring import packable

    def model(**config):
        return SimpleNamespace(config=SimpleNamespace(**config))

    assert packable(model(_attn_implementation="sdpa"), 64)
    assert not packable(model(_attn_implementation="eager"), 64)  # adds its mask: a boolean one would be wrong
    assert packable(model(_attn_implementation="sdpa", sliding_window=512), 64)
    assert not packable(model(_attn_implementation="sdpa", sliding_window=32), 64)  # the mask would drop the window


@pytest.mark.parametrize("prompts", ["grouped", "common"])
@pytest.mark.parametrize("loss", ["ppo", "cross_entropy"])
def test_packed_rows_give_the_logprobs_and_gradients_of_one_sequence_a_row(loss, prompts, monkeypatch):
    """Suffixes side by side in one row see their own prefix and themselves only: logprobs,
    loss and gradients are those of one sequence a row, to float32 rounding."""
    import emojikit_local.scoring as scoring

    packed, one_a_row = tiny_policy(micro_batch_size=5, pack_rows=True), tiny_policy(micro_batch_size=5)
    for a, b in zip(packed.trainable, one_a_row.trainable):
        torch.nn.init.normal_(a, std=0.05, generator=torch.Generator().manual_seed(a.numel()))
        b.data.copy_(a.data)
    datums = random_datums(n=8, prompts=prompts)
    with torch.no_grad():
        for d in datums:
            d.logprobs = (hand_logprobs(packed.model, d, 1.0) + 0.2).tolist()
    rows = []
    real = scoring._packed_suffixes
    monkeypatch.setattr(scoring, "_packed_suffixes", lambda model, decoder, cache, packing, *a: rows.append(packing) or real(model, decoder, cache, packing, *a))

    got = packed.forward_backward(datums, loss)
    assert rows and any(len(row) > 1 for packing in rows for row in packing)  # some rows hold several suffixes
    n_packed = len(rows)
    want = one_a_row.forward_backward(datums, loss)
    assert len(rows) == n_packed  # pack_rows = false: one a row
    assert got.loss == pytest.approx(want.loss, rel=1e-5, abs=1e-6)
    for a, b in zip(trainable_grads(packed), trainable_grads(one_a_row)):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    for a, b in zip(packed.compute_logprobs(datums, weighted_only=True), one_a_row.compute_logprobs(datums, weighted_only=True)):
        assert a == pytest.approx(b, abs=1e-5)


def test_bfloat16_base_projections_train_the_same_float32_adapter(tmp_path):
    exact, lowered = tiny_policy(), tiny_policy(base_matmul_dtype="bfloat16")
    for a, b in zip(exact.trainable, lowered.trainable):
        torch.nn.init.normal_(a, std=0.05, generator=torch.Generator().manual_seed(a.numel()))
        b.data.copy_(a.data)
    bases = [m.get_base_layer() for m in lowered.model.modules() if hasattr(m, "get_base_layer") and m is not m.get_base_layer()]
    assert len(bases) == 14 and all(b.weight.dtype == torch.bfloat16 for b in bases)  # 2 layers x 7 projections
    assert all(p.dtype == torch.float32 for p in lowered.trainable)
    assert lowered.model.get_output_embeddings().weight.dtype == torch.float32
    top_only = tiny_policy(base_matmul_dtype="bfloat16", lora_layers=1)  # the layer below has no adapter: lowered all the same
    assert [m.weight.dtype for name, m in top_only.model.named_modules() if ".layers.0." in name and isinstance(m, torch.nn.Linear)] == [torch.bfloat16] * 7

    datums = random_datums(prompts="common")
    want, got = exact.compute_logprobs(datums), lowered.compute_logprobs(datums)
    errors = [abs(a - b) for x, y in zip(want, got) for a, b in zip(x, y)]
    # bfloat16 keeps ~3 significant digits per projection: close, not equal (this peaked tiny
    # model: mean 0.06 nats; SmolLM2 on SFT answers: mean 0.03, worst 0.12)
    assert 0 < sum(errors) / len(errors) < 0.1
    out_exact, out_lowered = exact.forward_backward(datums, "cross_entropy"), lowered.forward_backward(datums, "cross_entropy")
    assert out_lowered.loss == pytest.approx(out_exact.loss, rel=0.01)
    grads_exact, grads_lowered = torch.cat([g.flatten() for g in trainable_grads(exact)]), torch.cat([g.flatten() for g in trainable_grads(lowered)])
    assert torch.nn.functional.cosine_similarity(grads_exact, grads_lowered, dim=0) > 0.98

    # The checkpoint is a plain float32 adapter: a float32 policy loads it unchanged.
    lowered.optim_step(AdamParams(learning_rate=1e-2))
    ref = lowered.save(str(tmp_path / "step1"))
    reloaded = tiny_policy()
    reloaded.load(ref, with_optimizer=False)
    for a, b in zip(reloaded.trainable, lowered.trainable):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_tiny_sampler_logprobs_match_compute_logprobs_under_a_mask(top_p):
    policy = tiny_policy()
    decoder = IdSetDecoder(lambda tok: list(range(4, TINY_VOCAB, 2)))
    prompts = [[{"role": "user", "content": "w5 w6 w7"}], [{"role": "user", "content": "w9 w10 w11 w12 w13 w14"}]]
    params = SamplingParams(max_tokens=7, temperature=0.7, top_p=top_p, seed=3)
    groups = policy.sample(prompts, 4, params, decoder)
    samples = [s for group in groups for s in group]
    assert [len(g) for g in groups] == [4, 4]
    for s in samples:
        assert all(t % 2 == 0 and t >= 4 for t in s.tokens if t != EOS)
        assert len(s.tokens) <= 7 and s.tokens[-1] == EOS  # the mask forces EOS within the budget
    datums = [Datum.from_sample(s, advantage=1.0, decoded=True) for s in samples]
    recomputed = policy.compute_logprobs(datums, temperature=0.7, decoder=decoder)
    for d, s, lp in zip(datums, samples, recomputed):
        assert lp[-len(s.tokens):] == pytest.approx(s.logprobs, abs=1e-3)
    # without the mask the same tokens score differently: the mask is really applied
    unmasked = policy.compute_logprobs(datums, temperature=0.7)
    assert any(abs(a - b) > 1e-2 for lp, um in zip(recomputed, unmasked) for a, b in zip(lp, um))


def test_the_head_over_some_columns_gives_those_columns_of_the_whole_head():
    from emojikit_local.head import allowed_columns, project

    policy = tiny_policy()
    hidden_N_D = torch.randn(3, 32)
    columns_K = torch.tensor([1, 4, 6, 30])
    torch.testing.assert_close(project(policy.model, hidden_N_D, columns_K), project(policy.model, hidden_N_D)[:, columns_K])
    allowed_N_V = torch.zeros(3, TINY_VOCAB, dtype=torch.bool)
    allowed_N_V[0, [6, 4]] = True
    allowed_N_V[2, 9] = True
    assert allowed_columns(allowed_N_V).tolist() == [4, 6, 9]  # any row's, ascending
    assert allowed_columns(allowed_N_V, torch.tensor([12, 4, 4])).tolist() == [4, 6, 9, 12]  # and every target
    allowed_N_V[1, : TINY_VOCAB // 4 + 1] = True
    assert allowed_columns(allowed_N_V) is None  # more than a quarter of the vocabulary: every column


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-5), ("bfloat16", 2e-2)])
def test_a_narrow_mask_samples_scores_and_trains_as_over_the_whole_vocabulary(monkeypatch, dtype, tolerance):
    from emojikit_local import head, sampling, scoring

    policy = tiny_policy(dtype=dtype)  # bfloat16: the head's bf16 copy, for the allowed rows too
    decoder = IdSetDecoder(lambda tok: [4, 10, 22, 36, 50])  # with EOS, 6 of the 64 tokens: narrow
    prompts = [[{"role": "user", "content": "w5 w6 w7"}], [{"role": "user", "content": "w9 w10 w11 w12 w13 w14"}]]
    params = SamplingParams(max_tokens=7, temperature=0.7, seed=3)
    widths = []
    real_project = head.project

    def spy(model, hidden, columns=None):
        widths.append(TINY_VOCAB if columns is None else len(columns))
        return real_project(model, hidden, columns)

    def run():
        samples = [s for group in policy.sample(prompts, 4, params, decoder) for s in group]
        datums = [Datum.from_sample(s, advantage=1.0 - i % 2, decoded=True) for i, s in enumerate(samples)]
        logprobs = policy.compute_logprobs(datums, temperature=0.7, decoder=decoder, weighted_only=True)  # as GRPO's reference pass
        out = policy.forward_backward(datums, "ppo", temperature=0.7, decoder=decoder)
        grads = [p.grad.clone() for p in policy.trainable]
        policy.model.zero_grad(set_to_none=True)
        return samples, logprobs, out.loss, grads

    monkeypatch.setattr(sampling, "project", spy)
    monkeypatch.setattr(scoring, "project", spy)
    narrow = run()
    assert widths and max(widths) <= 6  # every product ran on the allowed columns
    widths.clear()
    monkeypatch.setattr(sampling, "allowed_columns", lambda *a, **k: None)
    monkeypatch.setattr(scoring, "allowed_columns", lambda *a, **k: None)
    whole = run()
    assert set(widths) == {TINY_VOCAB}
    assert [s.tokens for s in narrow[0]] == [s.tokens for s in whole[0]]  # the same draws
    for a, b in zip(narrow[0], whole[0]):
        assert a.logprobs == pytest.approx(b.logprobs, abs=tolerance)
    for a, b in zip(narrow[1], whole[1]):
        assert a == pytest.approx(b, abs=tolerance)
    assert narrow[2] == pytest.approx(whole[2], abs=tolerance / 10)
    for a, b in zip(narrow[3], whole[3]):
        torch.testing.assert_close(a, b, atol=tolerance / 10, rtol=tolerance)


def test_the_float32_sampler_multiplies_by_the_merged_adapter_and_merges_again_after_a_step():
    policy = tiny_policy(lora_rank=4)
    assert policy.dtype == "float32" and policy.merged_sampling is not None
    bases = [layer.get_base_layer().weight.clone() for layer in policy.merged_sampling.layers]
    with policy.merged_sampling.active():  # a fresh adapter (B = 0) multiplies by the base weights themselves: no copies
        assert all(w is layer.get_base_layer().weight for w, layer in zip(policy.merged_sampling.weights, policy.merged_sampling.layers))
    decoder = IdSetDecoder(lambda tok: list(range(4, TINY_VOCAB, 2)))
    prompts = [[{"role": "user", "content": "w5 w6 w7"}], [{"role": "user", "content": "w9 w10 w11"}]]
    for step in range(2):
        samples = [s for group in policy.sample(prompts, 3, SamplingParams(max_tokens=6, temperature=1.0, seed=step), decoder) for s in group]
        datums = [Datum.from_sample(s, advantage=1.0 - i % 2, decoded=True) for i, s in enumerate(samples)]
        for s, lp in zip(samples, policy.compute_logprobs(datums, temperature=1.0, decoder=decoder)):
            assert lp[-len(s.tokens):] == pytest.approx(s.logprobs, abs=1e-5)  # a stale merge would be a step behind
        policy.forward_backward(datums, "ppo", temperature=1.0, decoder=decoder)
        policy.optim_step(AdamParams(learning_rate=0.05))
        assert policy.merged_sampling.weights is None  # the step invalidated the merge
    for layer, base in zip(policy.merged_sampling.layers, bases):
        assert torch.equal(layer.get_base_layer().weight, base)  # merged into a copy, never into the base


def test_prompts_that_start_alike_prefill_their_start_once_and_sample_as_before(monkeypatch):
    from emojikit_local import sampling

    policy = tiny_policy()
    decoder = IdSetDecoder(lambda tok: list(range(4, TINY_VOCAB, 2)))
    start = "w20 w21 w22 w23 w24 w25"  # as every game prompt starts with the chat template and system prompt
    prompts = [[{"role": "user", "content": f"{start} {rest}"}] for rest in ("w5 w6 w7", "w9", "w10 w11 w12 w13 w14")]
    params = SamplingParams(max_tokens=7, temperature=0.7, seed=3)
    widths = []
    body = decoder_of(policy.model)  # the sampler runs the transformer and applies the head itself
    forward = body.forward
    monkeypatch.setattr(body, "forward", lambda *a, **k: (widths.append(tuple(k["input_ids"].shape)), forward(*a, **k))[1])
    shared = [s for group in policy.sample(prompts, 2, params, decoder) for s in group]
    assert widths[0] == (1, 6) and widths[1] == (3, 5)  # the start once, then each prompt's rest (left-padded)
    widths.clear()
    monkeypatch.setattr(sampling, "MIN_COMMON_PREFIX", 10**6)  # every prompt prefilled whole
    whole = [s for group in policy.sample(prompts, 2, params, decoder) for s in group]
    assert widths[0] == (3, 11)
    assert [s.tokens for s in shared] == [s.tokens for s in whole]
    for a, b in zip(shared, whole):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    datums = [Datum.from_sample(s, advantage=1.0, decoded=True) for s in shared]
    for s, lp in zip(shared, policy.compute_logprobs(datums, temperature=0.7, decoder=decoder)):
        assert lp[-len(s.tokens):] == pytest.approx(s.logprobs, abs=1e-3)


def test_weighted_only_logprobs_are_the_full_ones_at_weighted_positions():
    """fold_kl's cheap path (shared prompt, weighted positions only) scores what the full pass
    scores, masked, for the policy and for the reference."""
    policy = tiny_policy()
    decoder = IdSetDecoder(lambda tok: list(range(4, TINY_VOCAB, 2)))
    prompts = [[{"role": "user", "content": "w5 w6 w7"}], [{"role": "user", "content": "w9 w10 w11"}]]
    groups = policy.sample(prompts, 3, SamplingParams(max_tokens=6, temperature=0.7, seed=1), decoder)
    datums = [Datum.from_sample(s, advantage=1.0, decoded=True) for group in groups for s in group]
    policy.forward_backward(random_datums(2), "cross_entropy")
    policy.optim_step(AdamParams(learning_rate=1e-2))  # the policy now differs from its reference
    for reference in (False, True):
        full = policy.compute_logprobs(datums, temperature=0.7, decoder=decoder, reference=reference)
        cheap = policy.compute_logprobs(datums, temperature=0.7, decoder=decoder, reference=reference, weighted_only=True)
        for d, f, c in zip(datums, full, cheap):
            assert len(c) == len(f)
            assert [x for x, w in zip(c, d.weights) if w] == pytest.approx([x for x, w in zip(f, d.weights) if w], abs=1e-5)
            assert all(x == 0 for x, w in zip(c, d.weights) if not w)
    assert full != policy.compute_logprobs(datums, temperature=0.7, decoder=decoder)  # reference and policy differ


def test_sfts_test_nll_asks_for_the_answer_positions_only_and_equals_the_full_pass():
    from emojikit.training import sft

    policy = tiny_policy()
    datums = random_datums(5, prompts="common")
    full_pass, asked = policy.compute_logprobs, []
    policy.compute_logprobs = lambda ds, **kwargs: asked.append(kwargs) or full_pass(ds, **kwargs)
    nll = sft.test_nll(policy, datums)
    full = full_pass(datums)
    expected = sum(-lp * w for d, lps in zip(datums, full) for lp, w in zip(lps, d.weights)) / sum(sum(d.weights) for d in datums)
    assert asked == [{"decoder": None, "weighted_only": True}]
    assert nll == pytest.approx(expected, abs=1e-5)


def test_reference_is_the_init_checkpoint_and_stays_frozen(tmp_path):
    policy = tiny_policy()
    datums = random_datums(3)
    for _ in range(3):
        policy.forward_backward(datums, "cross_entropy")
        policy.optim_step(AdamParams(learning_rate=1e-2))
    trained = policy.compute_logprobs(datums)
    assert trained != policy.compute_logprobs(datums, reference=True)  # the base differs
    ref = policy.save(str(tmp_path / "sft"))

    started = tiny_policy(init_from=ref)
    for got, want in zip(started.compute_logprobs(datums), trained):
        assert got == pytest.approx(want, abs=1e-6)
    started.forward_backward(datums, "cross_entropy")
    started.optim_step(AdamParams(learning_rate=1e-2))
    for got, want in zip(started.compute_logprobs(datums, reference=True), trained):
        assert got == pytest.approx(want, abs=1e-6)
    assert started.compute_logprobs(datums) != trained
    assert all(p.requires_grad for p in started.trainable)  # switching adapters left training on


def test_lora_layers_trains_the_last_layers_only_and_a_checkpoint_keeps_that(tmp_path):
    policy = tiny_policy(lora_layers=1)
    adapted = {name.split(".layers.")[1].split(".")[0] for name, p in policy.model.named_parameters() if "lora_" in name}
    assert adapted == {"1"}  # the last of two layers; every projection of it
    assert {name.rsplit(".lora_", 1)[0].rsplit(".", 1)[-1] for name, _ in policy.model.named_parameters() if "lora_B" in name} == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    datums = random_datums(3)
    for _ in range(2):
        policy.forward_backward(datums, "cross_entropy")
        policy.optim_step(AdamParams(learning_rate=1e-2))
    trained = policy.compute_logprobs(datums)
    assert trained != policy.compute_logprobs(datums, reference=True)
    started = tiny_policy(init_from=policy.save(str(tmp_path / "sft")))  # the placement comes with the adapter
    assert {name for name, _ in started.model.named_parameters() if "lora_" in name and ".default." in name} == {
        name for name, _ in policy.model.named_parameters() if "lora_" in name}
    for got, want in zip(started.compute_logprobs(datums), trained):
        assert got == pytest.approx(want, abs=1e-6)
    with pytest.raises(ConfigError, match=r"lora_layers = 3: the model has 2 decoder layers"):
        tiny_policy(lora_layers=3)


def test_lora_b_lr_ratio_moves_the_b_matrices_that_many_times_further():
    """LoRA+: B at ratio x the step's rate, A at it. Adam's first step moves each weight by the
    rate times the sign of its gradient, and peft starts B at zero (so A's first gradient is 0)."""
    datums = random_datums(3)
    moved = {}
    for ratio in (1.0, 4.0):
        policy = tiny_policy(lora_b_lr_ratio=ratio)
        before = {name: p.detach().clone() for name, p in policy.model.named_parameters() if p.requires_grad}
        policy.forward_backward(datums, "cross_entropy")
        policy.optim_step(AdamParams(learning_rate=1e-3))
        moved[ratio] = {name: (p.detach() - before[name]).abs().max().item() for name, p in policy.model.named_parameters() if p.requires_grad}
    b_names = [name for name in moved[1.0] if ".lora_B." in name]
    assert b_names and all(moved[1.0][n] == pytest.approx(1e-3, rel=1e-3) for n in b_names)
    assert all(moved[4.0][n] == pytest.approx(4e-3, rel=1e-3) for n in b_names)
    assert all(moved[4.0][n] == moved[1.0][n] == 0.0 for n in moved[1.0] if ".lora_A." in n)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [{"lora_rank": 4, "lora_alpha": 2.0}, {"lora_alpha": 8.0}, {"lora_rank": 8, "lora_alpha": 8.0, "lora_layers": 1}])
def test_a_checkpoint_of_another_lora_rank_or_alpha_plays_as_it_was_trained(tmp_path, shape, dtype):
    """eval, chat and serve load a checkpoint into a policy built from their own recipe: the
    saved rank and alpha (the scaling is not among the saved weights) must come with it."""
    trained = tiny_policy(dtype=dtype, **shape)
    trained.forward_backward(random_datums(3), "cross_entropy")
    trained.optim_step(AdamParams(learning_rate=5e-2))
    saved = trained.save(str(tmp_path / "ckpt"))
    played = tiny_policy(dtype=dtype)  # rank 16, alpha 32: this run's recipe

    def logprobs(policy):
        return [x for row in policy.compute_logprobs(random_datums(3)) for x in row]

    assert logprobs(played) != pytest.approx(logprobs(trained), abs=1e-3)
    played.load(saved, with_optimizer=False)
    assert logprobs(played) == pytest.approx(logprobs(trained), abs=1e-5)
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=5)
    prompts = [[{"role": "user", "content": "w5 w6 w7"}]]
    if dtype == "float32" or "lora_layers" not in shape:  # bf16 rounds a layer with a B = 0 adapter other than one without
        assert [s.tokens for s in played.sample(prompts, 3, params)[0]] == [s.tokens for s in trained.sample(prompts, 3, params)[0]]
    # and it trains on from there: the optimizer holds the saved shape's weights, and they move
    before = logprobs(played)
    played.forward_backward(random_datums(2), "cross_entropy")
    played.optim_step(AdamParams(learning_rate=1e-3))
    rank = shape.get("lora_rank", 16)
    assert {p.shape[0] for name, p in played.model.named_parameters() if ".lora_A." in name} == {rank}
    assert {id(p) for group in played.optimizer.param_groups for p in group["params"]} == {id(p) for p in played.trainable}
    assert logprobs(played) != pytest.approx(before, abs=1e-6)


def test_a_checkpoint_of_another_lora_shape_after_training_is_a_clear_error(tmp_path):
    saved = tiny_policy(lora_rank=4).save(str(tmp_path / "ckpt"))
    busy = tiny_policy()
    busy.forward_backward(random_datums(2), "cross_entropy")
    busy.optim_step(AdamParams(learning_rate=1e-3))
    with pytest.raises(InputFileError, match=r"ckpt: saved with LoRA rank 4, alpha 32.0; this run has trained another shape already"):
        busy.load(saved, with_optimizer=False)


def test_resuming_with_another_lora_b_lr_ratio_grouping_names_the_optimizer_file(tmp_path):
    policy = tiny_policy(lora_b_lr_ratio=4.0)
    policy.forward_backward(random_datums(2), "cross_entropy")
    policy.optim_step(AdamParams(learning_rate=1e-3))
    saved = policy.save(str(tmp_path / "ckpt"))
    resumed = tiny_policy(lora_b_lr_ratio=2.0)
    resumed.load(saved)
    resumed.forward_backward(random_datums(2), "cross_entropy")
    resumed.optim_step(AdamParams(learning_rate=1e-3))
    assert [g["lr"] for g in resumed.optimizer.param_groups] == pytest.approx([1e-3, 2e-3])  # this run's ratio, not the saved one
    with pytest.raises(InputFileError, match=r"optimizer\.pt: optimizer state does not fit this run's trainable weights \(saved with another \[backend\] lora_b_lr_ratio"):
        tiny_policy().load(saved)


@pytest.mark.parametrize("row_threads", [0, 2])
@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("prompts", ["distinct", "grouped", "common"])
def test_a_training_pass_after_the_reference_pass_reuses_the_layers_below_the_adapter(prompts, pack, row_threads):
    """With LoRA in the top layer of three, forward_backward takes the two lower layers' output
    from the reference pass on the same batch, and trains exactly as when it runs them; with
    row workers, each part of a micro-batch replays what the same part recorded."""
    replaying, running = (tiny_policy(layers=3, lora_layers=1, micro_batch_size=3, pack_rows=pack, row_threads=row_threads) for _ in range(2))
    assert replaying.lower_layers.depth == 2
    for a, b in zip(replaying.trainable, running.trainable):
        torch.nn.init.normal_(a, std=0.05, generator=torch.Generator().manual_seed(a.numel()))
        b.data.copy_(a.data)
    datums = random_datums(prompts=prompts)
    with torch.no_grad():
        for d in datums:
            d.logprobs = (hand_logprobs(replaying.model, d, 1.0) + 0.1).tolist()
    micro_batches = sum(len(replaying._row_parts([datums[i] for i in batch])) for batch in replaying._micro_batches(datums))
    assert micro_batches > len(list(replaying._micro_batches(datums))) if row_threads else True

    reference = replaying.compute_logprobs(datums, reference=True, weighted_only=True)
    assert len(replaying.lower_layers.entries) == micro_batches
    out = replaying.forward_backward(datums, "ppo")
    assert replaying.lower_layers.hits == micro_batches

    assert running.compute_logprobs(datums, reference=True, weighted_only=True) == reference
    running.lower_layers.clear()  # the training pass runs every layer
    want = running.forward_backward(datums, "ppo")
    assert running.lower_layers.hits == 0
    assert out.loss == want.loss
    for got, expected in zip(trainable_grads(replaying), trainable_grads(running)):
        assert torch.equal(got, expected)


def test_a_batch_scored_again_after_a_training_step_replays_its_lower_layers_and_another_call_drops_it():
    """The SFT's test chats are scored every eval_every steps: the layers below the adapter give
    the same output after an optimizer step, so a later call replays them; a call on other
    datums keeps only its own batches."""
    policy = tiny_policy(layers=3, lora_layers=1, micro_batch_size=3)
    tests, others = random_datums(seed=0), random_datums(seed=1)
    micro_batches = len(list(policy._micro_batches(tests)))
    before = policy.compute_logprobs(tests, weighted_only=True)
    policy.forward_backward(random_datums(seed=2), "cross_entropy")
    policy.optim_step(AdamParams(learning_rate=1e-2))
    after = policy.compute_logprobs(tests, weighted_only=True)
    assert policy.lower_layers.hits == micro_batches and after != before
    policy.lower_layers.clear()
    assert policy.compute_logprobs(tests, weighted_only=True) == after  # every layer run: the same
    assert policy.lower_layers.hits == micro_batches
    policy.compute_logprobs(others, weighted_only=True)
    kept = {policy._unit_key([others[i] for i in batch], True) for batch in policy._micro_batches(others)}
    assert set(policy.lower_layers.entries) == kept
    assert policy.lower_layers.bytes == sum(t.numel() * t.element_size() for ts in policy.lower_layers.entries.values() for t in ts)


def test_rows_split_by_length_into_parts_of_equal_padded_work_keeping_a_shared_prompt_in_one_part():
    # sizes: tokens per row; rows 0-3 share a prompt (one GRPO group), the rest are alone
    sizes, keys = [5, 5, 5, 5, 9, 8, 3, 2], ["g", "g", "g", "g", "a", "b", "c", "d"]
    parts = split_rows(sizes, keys, 2)
    assert parts == [[0, 1, 2, 3, 6, 7], [4, 5]]  # 6 rows padded to 5 tokens, 2 rows to 9
    assert parts == split_rows(sizes, keys, 2)  # the scoring pass and the training pass form the same parts
    assert split_rows([10] * 16, list(range(16)), 2) == [list(range(8)), list(range(8, 16))]
    # the largest part is as small as any cut by length makes it: one long row alone
    assert split_rows([3, 50, 4, 5, 6, 7, 8, 9], list(range(8)), 2) == [[0, 2, 3, 4, 5, 6, 7], [1]]
    assert split_rows([4], ["a"], 2) == [[0]]  # no empty part
    assert split_rows([1, 1, 1], ["a", "b", "c"], 4) == [[0], [1], [2]]


def test_row_workers_by_default_where_measured_float32_on_two_threads_and_when_asked():
    assert tiny_policy(row_threads=2).row_workers.threads == 2
    assert tiny_policy(row_threads=2, dtype="bfloat16").row_workers is None  # auto: not yet measured with bf16 units
    assert tiny_policy(row_threads=2, dtype="bfloat16", parallel="rows").row_workers.threads == 2
    assert tiny_policy(row_threads=2, parallel="ops").row_workers is None
    assert tiny_policy(row_threads=1).row_workers is None  # one thread: nothing to split
    assert tiny_policy(row_threads=3).row_workers is None  # auto: measured on two threads only
    assert tiny_policy(row_threads=3, parallel="rows").row_workers.threads == 3
    assert tiny_policy(row_threads=2, lora_dropout=0.1).row_workers is None  # auto: dropout masks would depend on thread timing


@pytest.mark.parametrize("loss", ["cross_entropy", "ppo"])
def test_row_workers_train_as_one_thread_does_and_the_same_every_run(loss):
    """parallel = "rows" (two row workers) against "ops" on the same weights and batch: the same
    loss and gradients up to float rounding; two row-parallel runs give identical gradients."""
    rows_a, rows_b = tiny_policy(micro_batch_size=4, row_threads=2), tiny_policy(micro_batch_size=4, row_threads=2)
    ops = tiny_policy(micro_batch_size=4, row_threads=2, parallel="ops")
    assert rows_a.row_workers.threads == 2 and ops.row_workers is None
    # each worker computes on one thread, whatever torch's global default is
    assert rows_a.row_workers.map(lambda part: torch.get_num_threads(), [[0], [1]]) == [1, 1]
    for a, b, c in zip(rows_a.trainable, rows_b.trainable, ops.trainable):
        torch.nn.init.normal_(a, std=0.05, generator=torch.Generator().manual_seed(a.numel()))
        b.data.copy_(a.data)
        c.data.copy_(a.data)
    datums = random_datums(n=8, prompts="grouped")
    with torch.no_grad():
        for d in datums:
            d.logprobs = (hand_logprobs(ops.model, d, 1.0) + 0.1).tolist()
    outs = [policy.forward_backward(datums, loss) for policy in (rows_a, rows_b, ops)]
    assert outs[0].loss == outs[1].loss and outs[0].metrics == outs[1].metrics
    assert outs[0].loss == pytest.approx(outs[2].loss, abs=1e-6)
    for a, b, c in zip(trainable_grads(rows_a), trainable_grads(rows_b), trainable_grads(ops)):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, c, atol=1e-6, rtol=1e-5)
    assert rows_a.compute_logprobs(datums) == rows_b.compute_logprobs(datums)
    for got, want in zip(rows_a.compute_logprobs(datums), ops.compute_logprobs(datums)):
        assert got == pytest.approx(want, abs=1e-5)


def test_row_workers_sample_their_own_rows_the_same_every_run_and_as_the_scorer_reads_them(monkeypatch):
    """parallel = "rows" while sampling: the rows split between the workers, a prompt's samples in
    one part, each part decoded on its worker's thread. Two policies draw the same samples whatever
    thread finishes first, every sample is its own prompt's, the scorer gives its logprobs, and a
    greedy decode gives the tokens of the products split across threads ("ops")."""
    import threading

    import emojikit_local.policy as policy_module

    calls = []
    real = policy_module.decode_batch

    def spy(model, rows, **kwargs):
        calls.append((threading.current_thread().name, {tuple(r) for r in rows}, len(rows)))
        return real(model, rows, **kwargs)

    monkeypatch.setattr(policy_module, "decode_batch", spy)
    rows_a, rows_b = tiny_policy(row_threads=2), tiny_policy(row_threads=2)
    ops = tiny_policy(row_threads=2, parallel="ops")
    for a, b, c in zip(rows_a.trainable, rows_b.trainable, ops.trainable):  # an adapter that changes the draws
        torch.nn.init.normal_(a, std=0.05, generator=torch.Generator().manual_seed(a.numel()))
        b.data.copy_(a.data)
        c.data.copy_(a.data)
    decoder = IdSetDecoder(lambda tok: list(range(4, TINY_VOCAB, 2)))
    prompts = [[{"role": "user", "content": text}] for text in ("w5 w6 w7", "w9 w10 w11 w12 w13 w14", "w8", "w15 w16")]
    params = SamplingParams(max_tokens=7, temperature=0.9, seed=5)

    groups = rows_a.sample(prompts, 3, params, decoder)
    assert len(calls) == 2 and all(name.startswith("emojikit-rows") for name, _, _ in calls)
    assert sum(n for _, _, n in calls) == 12 and not calls[0][1] & calls[1][1]  # each prompt's rows in one part
    for prompt, group in zip(prompts, groups):
        assert len(group) == 3 and all(s.prompt_tokens == rows_a.encode_prompt(prompt) for s in group)
    again = rows_b.sample(prompts, 3, params, decoder)
    assert [[s.tokens for s in g] for g in again] == [[s.tokens for s in g] for g in groups]
    assert [[s.logprobs for s in g] for g in again] == [[s.logprobs for s in g] for g in groups]
    samples = [s for group in groups for s in group]
    assert len({tuple(s.tokens) for s in samples}) > 4  # real draws, not one answer repeated
    datums = [Datum.from_sample(s, advantage=1.0, decoded=True) for s in samples]
    for s, lp in zip(samples, rows_a.compute_logprobs(datums, temperature=0.9, decoder=decoder)):
        assert lp[-len(s.tokens):] == pytest.approx(s.logprobs, abs=1e-4)

    calls.clear()
    greedy = SamplingParams(max_tokens=7, temperature=0.0, seed=5)
    by_rows, by_ops = rows_a.sample(prompts, 1, greedy, decoder), ops.sample(prompts, 1, greedy, decoder)
    assert len(calls) == 3  # two parts by rows, one call by ops
    assert [g[0].tokens for g in by_rows] == [g[0].tokens for g in by_ops]
    for a, b in zip(by_rows, by_ops):
        assert a[0].logprobs == pytest.approx(b[0].logprobs, abs=1e-4)  # float rounding: one thread against two


def test_an_error_in_a_row_worker_is_raised_by_the_step(monkeypatch):
    import emojikit_local.policy as policy_module

    policy = tiny_policy(micro_batch_size=4, row_threads=2)
    real = policy_module.target_logprobs

    def fails_on_long_rows(model, datums, **kwargs):
        if any(len(d.model_input) > 15 for d in datums):
            raise ValueError("a part failed")
        return real(model, datums, **kwargs)

    monkeypatch.setattr(policy_module, "target_logprobs", fails_on_long_rows)
    with pytest.raises(ValueError, match="a part failed"):
        policy.forward_backward(random_datums(n=8), "cross_entropy")


def test_from_a_checkpoint_lora_layers_trains_the_last_layers_and_runs_the_ones_below_once(tmp_path):
    """An adapter in all three layers as the start, lora_layers = 1: the two lower layers keep the
    checkpoint's weights (through the reference pass's adapter switch), the training pass takes
    their output from the reference pass, and it trains exactly as when it runs them."""
    sft = tiny_policy(layers=3)
    for p in sft.trainable:
        torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(p.numel()))
    start = sft.save(str(tmp_path / "sft"))
    replaying = tiny_policy(layers=3, init_from=start, lora_layers=1, micro_batch_size=3)
    running = tiny_policy(layers=3, init_from=start, lora_layers=1, micro_batch_size=3)
    running.lower_layers.enabled = False
    assert replaying.lower_layers.depth == 2
    trained = [name for name, p in replaying.model.named_parameters() if p.requires_grad]
    assert len(trained) == 14 and all(".layers.2." in name and ".default." in name for name in trained)
    below = [p.detach().clone() for p in replaying.frozen]
    assert len(below) == 28
    datums = random_datums(prompts="grouped")
    with torch.no_grad():
        for d in datums:
            d.logprobs = (hand_logprobs(replaying.model, d, 1.0) + 0.1).tolist()

    reference = replaying.compute_logprobs(datums, reference=True, weighted_only=True)
    assert not any(p.requires_grad for p in replaying.frozen)  # set_adapter marked them trainable; frozen again
    assert running.compute_logprobs(datums, reference=True, weighted_only=True) == reference
    out, want = replaying.forward_backward(datums, "ppo"), running.forward_backward(datums, "ppo")
    assert replaying.lower_layers.hits == len(list(replaying._micro_batches(datums))) and running.lower_layers.hits == 0
    assert out.loss == want.loss
    for got, expected in zip(trainable_grads(replaying), trainable_grads(running)):
        assert torch.equal(got, expected)
    replaying.optim_step(AdamParams(learning_rate=1e-2))
    assert all(torch.equal(p, b) for p, b in zip(replaying.frozen, below))
    assert replaying.compute_logprobs(datums) != replaying.compute_logprobs(datums, reference=True)

    replaying.load(replaying.save(str(tmp_path / "grpo")))  # its own checkpoint: the layers below are the start's
    assert replaying.lower_layers.enabled
    other = tiny_policy(layers=3)
    for p in other.trainable:
        torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(p.numel() + 1))
    replaying.load(other.save(str(tmp_path / "other")))  # trained below: the reference's lower outputs no longer serve
    assert not replaying.lower_layers.enabled


def test_a_batch_trained_again_skips_the_layers_below_the_adapter_and_trains_the_same(tmp_path):
    """keep_lower_layers_mb: a training pass keeps the lower layers' output of its batches; the
    same batches trained again (after optimizer steps) replay it and get the gradients of a
    policy that runs every layer. A full store keeps no more; a load forgets what was kept."""
    keeping, running = tiny_policy(layers=3, lora_layers=1, micro_batch_size=3, keep_lower_layers_mb=1), tiny_policy(layers=3, lora_layers=1, micro_batch_size=3)
    for a, b in zip(keeping.trainable, running.trainable):
        torch.nn.init.normal_(a, std=0.05, generator=torch.Generator().manual_seed(a.numel()))
        b.data.copy_(a.data)
    batches = [random_datums(prompts="common", seed=seed) for seed in (0, 1)]
    micro_batches = sum(len(list(keeping._micro_batches(b))) for b in batches)
    for repeat in range(2):
        for datums in batches:
            for policy in (keeping, running):
                policy.forward_backward(datums, "cross_entropy")
            for got, expected in zip(trainable_grads(keeping), trainable_grads(running)):
                assert torch.equal(got, expected)
            for policy in (keeping, running):
                policy.optim_step(AdamParams(learning_rate=1e-2))
        assert keeping.lower_layers.hits == repeat * micro_batches and running.lower_layers.hits == 0
    assert len(keeping.lower_layers.kept) == micro_batches and not running.lower_layers.kept
    keeping.compute_logprobs(batches[0], weighted_only=True)  # a scoring pass clears its own entries only
    assert len(keeping.lower_layers.kept) == micro_batches

    full = tiny_policy(layers=3, lora_layers=1, micro_batch_size=3, keep_lower_layers_mb=1)
    full.lower_layers.keep_bytes = full.lower_layers.kept_bytes = 1
    full.forward_backward(batches[0], "cross_entropy")
    assert not full.lower_layers.kept

    keeping.load(keeping.save(str(tmp_path / "ckpt")))
    assert not keeping.lower_layers.kept


def test_every_layer_adapted_keeps_no_lower_layers():
    policy = tiny_policy()
    datums = random_datums(3)
    policy.compute_logprobs(datums, reference=True, weighted_only=True)
    assert policy.lower_layers.depth == 0 and not policy.lower_layers.entries


# --- the bundled SmolLM2 ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def smol():
    torch.set_num_threads(1)
    model, tokenizer = load_model_and_tokenizer(SMOLLM2)
    return LocalPolicy(model, tokenizer, LocalConfig(), seed=0)


PROMPTS = [
    [{"role": "user", "content": "Describe a rainy afternoon in the city."}],
    [{"role": "user", "content": "What should I cook tonight?"}],
]


def assert_consistent(policy, groups, temperature, decoder=None):
    samples = [s for group in groups for s in group]
    datums = [Datum.from_sample(s, advantage=0.5, decoded=decoder is not None) for s in samples]
    recomputed = policy.compute_logprobs(datums, temperature=temperature, decoder=decoder)
    worst = max(abs(a - b) for d, s, lp in zip(datums, samples, recomputed) for a, b in zip(lp[-len(s.tokens):], s.logprobs))
    assert worst < 1e-3
    # and so the importance ratio starts at 1
    out = policy.forward_backward(datums, "ppo", temperature=temperature, decoder=decoder)
    policy.model.zero_grad(set_to_none=True)
    assert out.metrics["ratio_max_deviation"] < 1e-3


def test_bundled_sampler_logprobs_match_compute_logprobs(smol):
    assert isinstance(smol, Policy)
    groups = smol.sample(PROMPTS, 3, SamplingParams(max_tokens=10, temperature=1.0, top_p=0.95, seed=1))
    assert all(len(g) == 3 for g in groups)
    samples = [s for g in groups for s in g]
    assert all(s.text == smol.decode(s.tokens) and "<|im_end|>" not in s.text for s in samples)
    assert all(s.stop_reason == "length" or s.tokens[-1] in smol.stop_ids for s in samples)
    assert_consistent(smol, groups, 1.0)


def test_bundled_logprobs_match_under_a_test_mask(smol):
    digits = IdSetDecoder(lambda tok: [tok.convert_tokens_to_ids(str(d)) for d in range(10)])
    groups = smol.sample(PROMPTS, 3, SamplingParams(max_tokens=6, temperature=0.7, seed=2), digits)
    for s in (s for g in groups for s in g):
        assert s.text.isdigit() and s.stop_reason == "eos"
    assert_consistent(smol, groups, 0.7, digits)


def test_bundled_logprobs_match_under_the_emoji_mask(smol):
    from emojikit.composition.registry import get_registry

    component = get_registry().get("decoder", "emoji-mask")
    decoder = component.factory(component.config(), BuildContext())
    groups = smol.sample(PROMPTS, 2, SamplingParams(max_tokens=16, temperature=1.0, seed=4), decoder)
    for s in (s for g in groups for s in g):
        assert decoder.check(s.text).valid, s.text
    assert_consistent(smol, groups, 1.0, decoder)


def sft_datums(policy):
    pairs = [("I love pizza", "🍕❤️"), ("Going to the beach", "🏖️🌊☀️"), ("Happy birthday!", "🎂🎉"), ("It is raining", "🌧️☔")]
    datums = []
    for message, answer in pairs:
        prompt = policy.encode_prompt([{"role": "user", "content": message}])
        completion = policy.encode_completion(answer)
        assert completion[-1] in policy.stop_ids and policy.decode(completion) == answer
        tokens = prompt + completion
        weights = [0.0] * (len(prompt) - 1) + [1.0] * len(completion)
        datums.append(Datum(model_input=tokens[:-1], target_tokens=tokens[1:], weights=weights))
    return datums


@pytest.fixture(scope="module")
def trained(smol, tmp_path_factory):
    """A few cross_entropy steps, then a checkpoint."""
    datums = sft_datums(smol)
    losses = []
    for _ in range(4):
        losses.append(smol.forward_backward(datums, "cross_entropy").loss)
        smol.optim_step(AdamParams(learning_rate=3e-3))
    losses.append(smol.forward_backward(datums, "cross_entropy").loss)
    smol.model.zero_grad(set_to_none=True)
    ref = smol.save(str(tmp_path_factory.mktemp("ckpt") / "step4"))
    return datums, losses, ref


def test_cross_entropy_steps_lower_the_loss(trained):
    _, losses, _ = trained
    assert losses[-1] < losses[0] - 0.5, losses


def test_dataset_normalization_makes_the_sft_loss_a_sum_over_a_constant():
    """[sft] loss_normalization = "dataset": a batch's loss is its answer tokens' summed NLL over
    batch_size x the data's mean answer tokens, so a token weighs the same in a short batch as in
    a long one (the backend's own mean would weigh a short batch's tokens more)."""
    from emojikit.training.weights import loss_weights

    policy = tiny_policy()
    short, long = random_datums(2, seed=1), random_datums(5, seed=2)
    for batch in (short, long):
        nll = -sum(lp for d, lps in zip(batch, policy.compute_logprobs(batch)) for lp, w in zip(lps, d.weights) if w)
        n_tokens = sum(1 for d in batch for w in d.weights if w)
        assert policy.forward_backward(batch, "cross_entropy").loss == pytest.approx(nll / n_tokens, rel=1e-4)  # "batch"
        loss_weights([[d] for d in batch], "constant", 40.0 / len(batch))  # as the SFT loop calls it: a chat an episode
        assert policy.forward_backward(batch, "cross_entropy").loss == pytest.approx(nll / 40.0, rel=1e-4)
        policy.model.zero_grad(set_to_none=True)


def test_save_then_load_gives_identical_logprobs(smol, trained):
    datums, _, ref = trained
    saved = smol.compute_logprobs(datums)
    saved_state = {k: v.clone() for k, v in smol.optimizer.state_dict()["state"][0].items()}
    smol.forward_backward(datums, "cross_entropy")
    smol.optim_step(AdamParams(learning_rate=3e-3))
    assert smol.compute_logprobs(datums) != saved
    smol.load(ref)
    assert smol.compute_logprobs(datums) == saved
    assert smol.step == 4
    for key, value in smol.optimizer.state_dict()["state"][0].items():
        torch.testing.assert_close(value, saved_state[key])


def test_the_checkpoint_is_a_plain_peft_adapter_and_reference_is_the_base(smol, trained):
    from peft import PeftModel

    datums, _, ref = trained
    base = load_model(SMOLLM2)

    def plain_logprobs(model):
        with torch.inference_mode():
            return [hand_logprobs(model, d, 1.0).tolist() for d in datums]

    for got, want in zip(smol.compute_logprobs(datums, reference=True), plain_logprobs(base)):
        assert got == pytest.approx(want, abs=1e-4)
    adapted = PeftModel.from_pretrained(base, ref)
    for got, want in zip(smol.compute_logprobs(datums), plain_logprobs(adapted)):
        assert got == pytest.approx(want, abs=1e-4)


# --- offline loading ---------------------------------------------------------------------


def test_a_model_not_available_offline_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = "emojikit-tests/no-such-model"
    started = time.monotonic()
    with pytest.raises(ModelUnavailableError) as error:
        load_model_and_tokenizer(missing)
    assert time.monotonic() - started < 10
    message = str(error.value)
    assert missing in message and "huggingface-cli download" in message
    with pytest.raises(ModelUnavailableError, match="huggingface-cli download"):
        check_model_available(LocalConfig(model=missing), BuildContext())


def test_lora_layers_beyond_the_models_layers_fails_at_validate_in_one_line(tiny_model, tmp_path):
    from click.testing import CliRunner

    from emojikit.ui.cli import cli

    check_model_available(LocalConfig(model=str(tiny_model), lora_layers=2), BuildContext())  # every layer: fine
    with pytest.raises(ConfigError, match=r"^lora_layers = 3: the model has 2 decoder layers$"):
        check_model_available(LocalConfig(model=str(tiny_model), lora_layers=3), BuildContext())
    with pytest.raises(ConfigError, match=r"lora_layers = 31: the model has 30 decoder layers"):  # SmolLM2-135M
        check_model_available(LocalConfig(model=SMOLLM2, lora_layers=31), BuildContext())
    recipe = Path(__file__).resolve().parents[1] / "recipes/sft.toml"
    result = CliRunner().invoke(cli, ["validate", str(recipe), "--set", "backend.lora_layers=40"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "[backend] lora_layers = 40: the model has 30 decoder layers" in result.output


def test_the_bundled_model_loads_unquantized(smol):
    base = smol.model.get_base_model()
    assert not getattr(base, "is_quantized", False) and getattr(base, "hf_quantizer", None) is None
    assert getattr(base.config, "quantization_config", None) is None
    assert next(base.parameters()).dtype == torch.float32


@pytest.mark.slow
def test_the_bundled_model_is_dequantized_once_then_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("EMOJIKIT_CACHE_DIR", str(tmp_path))
    first = load_model(SMOLLM2)  # from the GGUF (~20 s)
    assert (tmp_path / "models" / "smollm2-135m-instruct" / "config.json").exists()
    started = time.monotonic()
    second = load_model(SMOLLM2)
    assert time.monotonic() - started < 15
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)


def test_draw_past_the_total_by_rounding_takes_the_last_token_with_mass(monkeypatch):
    from emojikit_local import distribution

    logprobs_N_V = torch.log(torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.1, 0.0, 0.9, 0.0], [0.25, 0.25, 0.25, 0.25]]))
    # u = the total mass exactly: the search runs past the end of every row
    monkeypatch.setattr(distribution.torch, "rand", lambda n, **kw: torch.ones(n, dtype=kw.get("dtype")))
    assert distribution.draw(logprobs_N_V, 1.0, 1.0, None).tolist() == [1, 2, 3]


def test_the_local_backend_keeps_freed_memory_in_the_heap():
    import sys

    from emojikit_local.allocator import keep_freed_memory

    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's mallopt is Linux only")
    assert keep_freed_memory() and keep_freed_memory()  # set once, then a no-op that says so


def test_the_command_sets_torch_allocation_settings_before_torch_loads():
    import os
    import subprocess
    import sys

    probe = "import emojikit.ui.cli, os, sys; print(os.environ.get('THP_MEM_ALLOC_ENABLE'), 'torch' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True).stdout.split()
    assert out == ["1", "False"]  # set, and torch not imported yet, so torch reads it
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env={**env, "THP_MEM_ALLOC_ENABLE": "0"}, check=True).stdout.split()
    assert out[0] == "0"  # the user's value wins


def test_the_command_sets_how_torch_threads_wait_for_this_cpu_unless_the_user_chose():
    """OMP_WAIT_POLICY and GOMP_SPINCOUNT are read when OpenMP starts: the command sets the
    setting for this CPU's kind before torch loads, and leaves the user's own choice alone."""
    import os
    import subprocess
    import sys

    from emojikit.support.cpu import cpu_features
    from emojikit.support.torch_env import wait_policy_environment

    probe = ("import emojikit.ui.cli, os, sys; "
             "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}

    def run(**extra):
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env={**env, **extra}, check=True).stdout.split()

    chosen = wait_policy_environment(cpu_features())
    assert run() == [chosen.get("OMP_WAIT_POLICY", "None"), chosen.get("GOMP_SPINCOUNT", "None"), "False"]
    assert run(OMP_WAIT_POLICY="ACTIVE") == ["ACTIVE", "None", "False"]
    assert run(GOMP_SPINCOUNT="3000") == ["None", "3000", "False"]


@pytest.mark.parametrize("features, chosen", [
    ({"avx", "avx2", "fma"}, {"OMP_WAIT_POLICY": "PASSIVE"}),  # AVX2-only, float32 compute, long ops: sleep at once
    ({"avx2", "avx512f", "avx512_vnni"}, {"GOMP_SPINCOUNT": "10000"}),  # AVX512 without bf16 units: float32, short ops
    (None, {"OMP_WAIT_POLICY": "PASSIVE"}),  # flags unreadable (macOS, Windows)
    ({"avx2", "avx512f", "avx512_bf16"}, {"GOMP_SPINCOUNT": "10000"}),  # bf16 compute: short ops, spin ~0.1 ms
    ({"avx512_bf16", "amx_bf16"}, {"GOMP_SPINCOUNT": "10000"}),
])
def test_threads_wait_by_the_cpu_kind_the_step_was_measured_on(features, chosen):
    from emojikit.support.torch_env import wait_policy_environment

    assert wait_policy_environment(features) == chosen
