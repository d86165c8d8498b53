"""The local backend's dtype = "bfloat16" path: bf16 matmuls with float32 results, fp32 LoRA
weights, gradients and optimizer state, and the sampler correction that makes the PPO ratio
start at 1 (plugins/emojikit_local/precision.py). Tiny random Llama from test_local_backend."""

import math

import pytest
import torch

from emojikit.api.policy import AdamParams, Datum, SamplingParams
from test_local_backend import TINY_VOCAB, IdSetDecoder, one_thread, random_datums, tiny_policy, trainable_grads  # noqa: F401

PROMPTS = [[{"role": "user", "content": "w5 w6 w7"}], [{"role": "user", "content": "w9 w10 w11 w12"}]]


def same_adapters(*policies):
    """Every policy gets the same non-zero LoRA weights (B starts at 0, which would hide LoRA)."""
    for params in zip(*(p.trainable for p in policies)):
        torch.nn.init.normal_(params[0], std=0.05, generator=torch.Generator().manual_seed(params[0].numel()))
        for other in params[1:]:
            other.data.copy_(params[0].data)


def sampled_datums(policy, decoder=None, seed=1):
    groups = policy.sample(PROMPTS, 4, SamplingParams(max_tokens=6, temperature=0.8, seed=seed), decoder)
    rewards = [0.0, 1.0, 2.0, 3.0]
    return [Datum.from_sample(s, advantage=r - 1.5, decoded=decoder is not None, decode_budget=6) for group in groups for s, r in zip(group, rewards)]


def test_float32_stays_the_default_and_uncorrected():
    policy = tiny_policy()
    assert policy.config.dtype == "float32" and policy.correction is None
    assert all(p.dtype == torch.float32 for p in policy.model.parameters())


def test_auto_dtype_reads_the_cpu_features(tmp_path):
    from emojikit_local.hardware import bfloat16_matmul_problem, compute_dtype, cpu_features

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: other\n")
    assert cpu_features(cpuinfo) == {"fpu", "sse4_2", "avx", "avx2", "fma"}  # the first CPU's line
    assert cpu_features(tmp_path / "missing") is None
    assert "avx2 at most" in bfloat16_matmul_problem("cpu", {"avx2", "fma"})
    assert compute_dtype("auto", "cpu", {"avx2", "fma"}) == "float32"
    assert compute_dtype("auto", "cpu", {"avx2", "avx512f", "avx512_bf16"}) == "bfloat16"
    assert compute_dtype("auto", "cpu", {"amx_bf16"}) == "bfloat16"
    assert compute_dtype("auto", "cpu", {"asimd", "bf16"}) == "bfloat16"  # aarch64 with the BF16 extension
    assert compute_dtype("auto", "cpu", set()) == "float32"
    assert compute_dtype("auto", "mps", {"avx512_bf16"}) == "float32"  # speed unknown there: the safe choice
    assert compute_dtype("float32", "cpu", {"avx512_bf16"}) == "float32"


@pytest.mark.parametrize("features, kind", [
    ({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, "AMX"),  # an Intel Xeon with AMX has AVX512-BF16 too
    ({"avx2", "avx512f", "avx512_bf16"}, "AVX512-BF16"),
    ({"avx2", "avx512f"}, "AVX512"),
    ({"avx", "avx2", "fma"}, "AVX2"),
    ({"asimd", "bf16"}, "Arm BF16"),
    ({"asimd"}, "Arm"),
    (set(), "unknown"),
])
def test_the_cpu_kind_every_bench_reports(features, kind):
    from emojikit.support.cpu import cpu_kind

    assert cpu_kind(features) == kind


def test_the_cpu_model_carries_its_family_and_model_numbers(tmp_path):
    # Two AMD VMs both named "AMD EPYC" (Zen 1 and Zen 3) ran the same SFT step 2x apart.
    from emojikit.support.cpu import cpu_model

    zen1 = tmp_path / "zen1"
    zen1.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n\n"
                    "processor\t: 1\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n")
    assert cpu_model(zen1) == "AMD EPYC, family 23 model 1"  # the first CPU's block
    bare = tmp_path / "bare"
    bare.write_text("processor\t: 0\nmodel name\t: Some CPU\n")
    assert cpu_model(bare) == "Some CPU"
    assert cpu_model(tmp_path / "missing")  # platform's answer, never empty


def test_a_bench_says_when_its_instruction_set_was_capped(monkeypatch):
    """An AVX512 CPU run with MKL and ATen capped at AVX2 stands in for an AVX2-only one; its
    figures must say so (the CPU's kind alone would name the wider unit)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_common", Path(__file__).parents[1] / "bench" / "common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    for key in common.ISA_CAPS:
        monkeypatch.delenv(key, raising=False)
    plain = common.machine()
    assert "isa_caps" not in plain and plain["aten_isa"]
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    assert common.machine()["isa_caps"] == {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def test_explicit_bfloat16_is_kept_on_a_cpu_without_bf16_units_with_one_warning(capsys):
    from emojikit_local import hardware

    hardware._warned.clear()
    assert hardware.compute_dtype("bfloat16", "cpu", {"avx2"}) == "bfloat16"
    assert hardware.compute_dtype("bfloat16", "cpu", {"avx2"}) == "bfloat16"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("emojikit: warning: backend dtype = \"bfloat16\" on cpu") and "avx2" in err[0]
    assert hardware.compute_dtype("bfloat16", "cpu", {"avx512_bf16"}) == "bfloat16"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("features, computes", [({"avx2"}, "float32"), ({"avx512f", "avx512_bf16"}, "bfloat16")])
def test_auto_dtype_policy_computes_in_what_the_machine_multiplies_fastest(monkeypatch, tmp_path, features, computes):
    import json

    from emojikit_local import hardware

    monkeypatch.setattr(hardware, "cpu_features", lambda: features)
    policy = tiny_policy(dtype="auto")
    assert policy.dtype == computes
    bases = [m.get_base_layer() for m in policy.model.modules() if hasattr(m, "get_base_layer") and m is not m.get_base_layer()]
    assert {b.weight.dtype for b in bases} == {getattr(torch, computes)}
    assert policy.merged_sampling.dtype == getattr(torch, computes) and (policy.correction is not None) == (computes == "bfloat16")
    saved = policy.save(str(tmp_path / "step0"))
    assert json.loads((tmp_path / "step0" / "trainer_state.json").read_text())["compute_dtype"] == computes and saved


def test_bfloat16_logprobs_are_close_to_float32_and_train_fp32_state():
    exact, fast = tiny_policy(), tiny_policy(dtype="bfloat16")
    same_adapters(exact, fast)
    bases = [m.get_base_layer() for m in fast.model.modules() if hasattr(m, "get_base_layer") and m is not m.get_base_layer()]
    assert len(bases) == 14 and all(b.weight.dtype == torch.bfloat16 for b in bases)  # 2 layers x 7 projections
    assert all(p.dtype == torch.float32 for p in fast.trainable)
    assert fast.model.get_input_embeddings().weight.dtype == torch.float32

    datums = random_datums(prompts="common")
    want, got = exact.compute_logprobs(datums), fast.compute_logprobs(datums)
    errors = [abs(a - b) for x, y in zip(want, got) for a, b in zip(x, y)]
    # bf16 rounds matmul inputs and outputs to ~3 significant digits: close, not equal. This
    # peaked tiny model: mean ~0.05 nats; SmolLM2 on sampled answers: median 0.02, worst 0.2.
    assert 0 < sum(errors) / len(errors) < 0.1 and max(errors) < 0.5

    out_exact, out_fast = exact.forward_backward(datums, "cross_entropy"), fast.forward_backward(datums, "cross_entropy")
    assert out_fast.loss == pytest.approx(out_exact.loss, rel=0.02)
    grads_exact, grads_fast = torch.cat([g.flatten() for g in trainable_grads(exact)]), torch.cat([g.flatten() for g in trainable_grads(fast)])
    assert all(p.grad.dtype == torch.float32 for p in fast.trainable)
    assert torch.nn.functional.cosine_similarity(grads_exact, grads_fast, dim=0) > 0.98
    fast.optim_step(AdamParams(learning_rate=1e-2))
    states = [fast.optimizer.state[p] for p in fast.trainable]
    assert all(s["exp_avg"].dtype == torch.float32 and s["exp_avg_sq"].dtype == torch.float32 for s in states)
    assert all(p.dtype == torch.float32 for p in fast.trainable)


def test_bfloat16_runs_the_projections_below_the_adapted_layers_in_bfloat16_too():
    exact, fast = tiny_policy(lora_layers=1), tiny_policy(dtype="bfloat16", lora_layers=1)
    same_adapters(exact, fast)
    below = [m for name, m in fast.model.named_modules() if ".layers.0." in name and isinstance(m, torch.nn.Linear)]
    assert len(below) == 7 and all(m.weight.dtype == torch.bfloat16 for m in below)
    datums = random_datums(prompts="common")
    errors = [abs(a - b) for x, y in zip(exact.compute_logprobs(datums), fast.compute_logprobs(datums)) for a, b in zip(x, y)]
    assert 0 < sum(errors) / len(errors) < 0.1 and max(errors) < 0.5
    out_exact, out_fast = exact.forward_backward(datums, "cross_entropy"), fast.forward_backward(datums, "cross_entropy")
    assert out_fast.loss == pytest.approx(out_exact.loss, rel=0.02)
    grads_exact, grads_fast = torch.cat([g.flatten() for g in trainable_grads(exact)]), torch.cat([g.flatten() for g in trainable_grads(fast)])
    assert torch.nn.functional.cosine_similarity(grads_exact, grads_fast, dim=0) > 0.98


def test_reference_pass_disables_the_adapter_on_the_bfloat16_path():
    fast = tiny_policy(dtype="bfloat16")
    same_adapters(fast)
    datums = random_datums()
    policy_lp = fast.compute_logprobs(datums)
    reference_lp = fast.compute_logprobs(datums, reference=True)
    plain = tiny_policy(dtype="bfloat16")  # LoRA B = 0: the base model alone
    assert reference_lp == plain.compute_logprobs(datums)
    assert reference_lp != policy_lp


@pytest.mark.parametrize("masked", [False, True])
def test_ppo_ratio_starts_at_one_on_replay_and_later_epochs_keep_the_behaviour_logprobs(masked):
    decoder = IdSetDecoder(lambda tok: list(range(4, TINY_VOCAB, 2))) if masked else None
    fast = tiny_policy(dtype="bfloat16", micro_batch_size=4)
    same_adapters(fast)
    datums = sampled_datums(fast, decoder)
    first = fast.forward_backward(datums, "ppo", temperature=0.8, decoder=decoder)
    assert first.metrics["ratio_mean"] == 1.0 and first.metrics["ratio_max_deviation"] == 0.0
    # the gap it corrects is the bf16 sampler/trainer mismatch (SmolLM2: median ~0.02 nats;
    # this 2-layer model's decode may even match the full pass exactly)
    assert 0 <= first.metrics["sampler_gap_max"] < 0.5
    fast.optim_step(AdamParams(learning_rate=1e-2))
    behaviour = dict(fast.correction.behaviour)
    second = fast.forward_backward(datums, "ppo", temperature=0.8, decoder=decoder)
    assert second.metrics["ratio_max_deviation"] > 0  # against the step-0 trainer logprobs, moved by the update
    assert second.metrics["sampler_gap_max"] == first.metrics["sampler_gap_max"]
    assert fast.correction.behaviour.keys() == behaviour.keys()
    # new samples start a new record
    fast.sample(PROMPTS[:1], 1, SamplingParams(max_tokens=3, seed=5))
    assert not fast.correction.behaviour and fast.correction.sampled_at_step == 1


def test_truncated_importance_weight_scales_the_advantage():
    fast = tiny_policy(dtype="bfloat16", micro_batch_size=8, truncated_is_cap=3.0)
    same_adapters(fast)
    datums = random_datums(4)
    trainer = fast.compute_logprobs(datums, weighted_only=True)
    fast.correction.sampled(fast.step)

    def loss_with_sampler_offset(offset):
        for d, lp in zip(datums, trainer):
            d.logprobs = [x - offset if w else 0.0 for x, w in zip(lp, d.weights)]
        fast.correction.sampled(fast.step)
        out = fast.forward_backward(datums, "importance_sampling")
        fast.model.zero_grad(set_to_none=True)
        return out

    base = loss_with_sampler_offset(0.0)
    doubled = loss_with_sampler_offset(math.log(2.0))  # p_trainer / p_sampler = 2
    capped = loss_with_sampler_offset(math.log(10.0))  # 10, truncated to the cap 3
    assert base.metrics["ratio_max_deviation"] == 0.0 and base.metrics["sampler_gap_max"] < 1e-5
    assert doubled.loss == pytest.approx(2 * base.loss, rel=1e-3)
    assert capped.loss == pytest.approx(3 * base.loss, rel=1e-3)
    assert doubled.metrics["is_truncated_fraction"] == 0.0 and capped.metrics["is_truncated_fraction"] == 1.0


def test_correction_can_be_turned_off_or_used_in_float32():
    def shifted(policy):
        """Sampled datums whose sampler logprobs are 0.1 nats below the trainer's (the bf16
        sampler's own numbers differ from the trainer's: it runs merged weights)."""
        datums = sampled_datums(policy)
        trainer = policy.compute_logprobs(datums, temperature=0.8, weighted_only=True)
        for d, lp in zip(datums, trainer):
            d.logprobs = [x - 0.1 if w else x for x, w in zip(lp, d.weights)]
        return datums

    off = tiny_policy(dtype="bfloat16", sampler_correction="none")
    assert off.correction is None
    same_adapters(off)
    out = off.forward_backward(shifted(off), "ppo", temperature=0.8)
    assert out.metrics["ratio_max_deviation"] == pytest.approx(math.exp(0.1) - 1, abs=1e-3)  # against the sampler
    assert "sampler_gap_max" not in out.metrics
    on = tiny_policy(sampler_correction="truncated_is")
    same_adapters(on)
    out = on.forward_backward(shifted(on), "ppo", temperature=0.8)
    assert out.metrics["ratio_max_deviation"] == 0.0
    assert out.metrics["sampler_gap_max"] == pytest.approx(0.1, abs=1e-3)


def test_bfloat16_checkpoint_is_a_float32_adapter(tmp_path):
    fast = tiny_policy(dtype="bfloat16")
    same_adapters(fast)
    fast.forward_backward(random_datums(2), "cross_entropy")
    fast.optim_step(AdamParams(learning_rate=1e-2))
    ref = fast.save(str(tmp_path / "step1"))
    reloaded = tiny_policy()
    reloaded.load(ref, with_optimizer=False)
    for a, b in zip(reloaded.trainable, fast.trainable):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b)


def test_grpo_runs_on_the_bfloat16_path_with_the_ratio_at_one(tmp_path, tiny_model):
    """The real loop (multi-turn game, emoji mask, KL reference pass, PPO) on dtype = bfloat16."""
    import json

    from test_training import ROOT, read_rows, run_cli

    out = tmp_path / "grpo"
    run_cli("run", str(ROOT / "recipes/grpo.toml"), "--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", "backend.lora_layers=1", "--set", 'backend.dtype="bfloat16"',
            "--set", "grpo.batch_size=2", "--set", "grpo.group_size=2", "--set", "grpo.eval_targets=2", "--set", "grpo.start_from=\"base\"",
            "--set", "game.max_turns=2", "--set", "game.max_new_tokens=6", "--set", "judge.distractors=8", "--set", "grpo.target_pool=16",
            "--set", "grpo.compare=false", "--set", "grpo.steps=1", "--set", f"out={json.dumps(str(out))}")
    trained = [r for r in read_rows(out / "metrics.jsonl") if r["datums"]]
    assert trained  # the seeded step trains (its rewards differ within the groups)
    for row in trained:
        assert row["ratio_max_deviation"] == 0.0 and "kl" in row
        assert 0 <= row["sampler_gap_max"] < 1.0


def test_dithered_rounding_keeps_a_delta_below_half_a_bfloat16_step():
    from emojikit_local.precision import dither, dithered_bfloat16

    base = torch.randn(20_000).to(torch.bfloat16).float()
    delta = torch.full_like(base, 1e-4)  # far below half a bf16 step of these weights
    nearest = (base + delta).to(torch.bfloat16).float()
    assert float((nearest - base).mean()) < 1e-5  # round-to-nearest drops the delta
    generator = torch.Generator().manual_seed(0)
    kept = dithered_bfloat16(base + delta, dither(base.shape, generator)).float() - base
    assert float(kept.mean()) == pytest.approx(1e-4, rel=0.1)  # the dither keeps it on average
    exact = torch.tensor([1.0, -2.5, 0.0])
    assert torch.equal(dithered_bfloat16(exact, dither(exact.shape, generator)).float(), exact)


def test_the_sampler_runs_merged_weights_that_follow_every_adapter_change(tmp_path):
    fast = tiny_policy(dtype="bfloat16", micro_batch_size=8)
    same_adapters(fast)
    datums = sampled_datums(fast)
    merged = fast.merged_sampling.weights
    assert merged is not None and all(w.dtype == torch.bfloat16 for w in merged)
    # close to the trainer's unmerged products: the bf16 gap the correction handles
    trainer = fast.compute_logprobs(datums, temperature=0.8, weighted_only=True)
    gaps = [abs(a - b) for d, lp in zip(datums, trainer) for a, b, w in zip(d.logprobs, lp, d.weights) if w]
    assert max(gaps) < 0.5
    saved = fast.save(str(tmp_path / "before"))
    fast.forward_backward(datums, "ppo", temperature=0.8)
    fast.optim_step(AdamParams(learning_rate=5e-2))
    assert fast.merged_sampling.weights is None  # an optimizer step invalidates the merge
    after = fast.sample(PROMPTS, 2, SamplingParams(max_tokens=4, temperature=0.8, seed=3))
    assert any(not torch.equal(a, b) for a, b in zip(merged, fast.merged_sampling.weights))
    fast.load(saved, with_optimizer=False)  # so does a load: the old adapter samples as before
    again = fast.sample(PROMPTS, 2, SamplingParams(max_tokens=4, temperature=0.8, seed=3))
    fresh = tiny_policy(dtype="bfloat16", micro_batch_size=8)
    fresh.load(saved, with_optimizer=False)
    assert [[s.logprobs for s in g] for g in again] == [[s.logprobs for s in g] for g in fresh.sample(PROMPTS, 2, SamplingParams(max_tokens=4, temperature=0.8, seed=3))]
    assert after != again


def test_the_fused_bfloat16_lora_product_matches_autograd_through_the_plain_ops():
    from emojikit_local.precision import BF16, _LoraLinearBF16

    F = torch.nn.functional
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 32, generator=generator, requires_grad=True)
    weight = torch.randn(48, 32, generator=generator).to(BF16)
    lora_A = torch.randn(4, 32, generator=generator, requires_grad=True)
    lora_B = torch.randn(48, 4, generator=generator, requires_grad=True)
    grad = torch.randn(3, 5, 48, generator=generator)
    fused = _LoraLinearBF16.apply(x, weight, None, lora_A, lora_B, 2.0)
    fused.backward(grad)
    got = [fused.detach(), x.grad.clone(), lora_A.grad.clone(), lora_B.grad.clone()]
    x.grad = lora_A.grad = lora_B.grad = None
    x_bf = x.to(BF16)
    plain = F.linear(x_bf, weight).float().add_(F.linear(F.linear(x_bf, lora_A.to(BF16)), lora_B.to(BF16)), alpha=2.0)
    plain.backward(grad)
    for a, b in zip(got, [plain.detach(), x.grad, lora_A.grad, lora_B.grad]):
        assert a.dtype == torch.float32
        # the input gradient sums its two products in one bf16 addmm: within bf16 rounding
        assert float((a - b).abs().max()) <= 0.01 * float(b.abs().max())


def test_prepacking_is_offered_exactly_where_the_cpu_has_the_bfloat16_reorder(monkeypatch):
    """An AVX2-only CPU has no oneDNN bf16 reorder: a bf16 policy asked to prepack runs from the plain weights there."""
    from emojikit.support.cpu import cpu_features
    from emojikit_local import policy as local_policy
    from emojikit_local.precision import prepack_available

    features = cpu_features()
    if features and torch.backends.mkldnn.is_available() and {"avx2", "avx512f"} & features:  # x86 Linux: the flags decide
        assert prepack_available(torch.device("cpu")) == ({"avx512bw", "avx512vl", "avx512dq"} <= features or "avx_ne_convert" in features)
    assert not prepack_available(torch.device("meta"))
    monkeypatch.setattr(local_policy, "prepack_available", lambda device: False)
    plain = tiny_policy(dtype="bfloat16", prepack_weights=True, micro_batch_size=8)
    assert plain.model.get_output_embeddings().forward.args[-1] is None
    assert plain.forward_backward(random_datums(prompts="common"), "cross_entropy").loss > 0


@pytest.mark.parametrize("lora_layers", [None, 1])
def test_prepacked_weights_give_the_plain_bfloat16_products(lora_layers):
    from emojikit_local.precision import PackedWeight, prepack_available

    if not prepack_available(torch.device("cpu")):
        pytest.skip("this CPU or torch build cannot lay out bf16 weights for oneDNN (AVX2-only, or no mkldnn): weights cannot be prepacked")
    packed, plain = (tiny_policy(dtype="bfloat16", lora_layers=lora_layers, prepack_weights=flag, micro_batch_size=8) for flag in (True, False))
    assert isinstance(packed.model.get_output_embeddings().forward.args[-1], PackedWeight)
    assert plain.model.get_output_embeddings().forward.args[-1] is None
    same_adapters(packed, plain)
    datums = random_datums(prompts="common")

    def close(a, b):  # the same bf16 products: equal to the bit on AVX512-BF16; another kernel may sum in another order
        return max(abs(x - y) for u, v in zip(a, b) for x, y in zip(u, v)) < 1e-3

    assert close(packed.compute_logprobs(datums), plain.compute_logprobs(datums))
    assert close(packed.compute_logprobs(datums, reference=True), plain.compute_logprobs(datums, reference=True))
    assert packed.forward_backward(datums, "cross_entropy").loss == pytest.approx(plain.forward_backward(datums, "cross_entropy").loss, abs=1e-4)
    grads = [torch.cat([g.flatten() for g in trainable_grads(p)]) for p in (packed, plain)]
    assert ((grads[0] - grads[1]).norm() / grads[1].norm()) < 1e-3
    for policy in (packed, plain):
        policy.optim_step(AdamParams(learning_rate=5e-2))  # the sampler's merged weights follow the step, packed again
    params = SamplingParams(max_tokens=5, temperature=0.8, seed=4)
    samples = [packed.sample(PROMPTS, 3, params), plain.sample(PROMPTS, 3, params)]
    assert all(p is not None for p in packed.merged_sampling.packed) and not any(plain.merged_sampling.packed)
    assert [[s.tokens for s in g] for g in samples[0]] == [[s.tokens for s in g] for g in samples[1]]
    assert close([s.logprobs for g in samples[0] for s in g], [s.logprobs for g in samples[1] for s in g])
