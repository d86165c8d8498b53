"""Teacher-guided episodes for GRPO: off-policy guidance toward the teacher (as LUFFY does
for reasoning). In each group, `teacher_episodes` episodes open with the teacher's answer
instead of a sample; the sender plays any later turn. Their reward joins the group's, so the
teacher's answer is pushed up where it beats the sender's own samples and down where it loses:
the judge, not imitation, decides what is learned from the teacher.

The teacher's answer becomes a `Sample` in the sender's own tokens, scored by the sender under
the same temperature and decoder mask, so its datum replays like a sampled turn (the PPO ratio
starts at 1). An answer the mask cannot produce falls back to the sender's own sample.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from emojikit.api.policy import ChatMessages, Datum, Sample, SamplingParams


class GuidedSender:
    """A Policy for `game.play`: first turns are the teacher's answers, later turns the sender's."""

    def __init__(self, policy, teacher_sender):
        self.policy = policy
        self.teacher = teacher_sender  # play.teacher_sender.TeacherSender: the answer to a prompt's target
        self.name = f"{policy.name}+teacher"
        self.fallbacks = 0  # teacher answers the mask could not produce, played by the sender

    def sample(self, prompts: Sequence[ChatMessages], n: int, params: SamplingParams, decoder: Any = None) -> list[list[Sample]]:
        first = [i for i, p in enumerate(prompts) if not any(m["role"] == "assistant" for m in p)]
        out: list = [None] * len(prompts)
        guided = self._teacher_samples([prompts[i] for i in first], params, decoder)
        for i, sample in zip(first, guided):
            out[i] = [sample] * n if sample is not None else None
        rest = [i for i in range(len(prompts)) if out[i] is None]
        if rest:
            for i, samples in zip(rest, self.policy.sample([prompts[i] for i in rest], n, params, decoder)):
                out[i] = samples
        return out

    def _teacher_samples(self, prompts: list[ChatMessages], params: SamplingParams, decoder: Any) -> list:
        if not prompts:
            return []
        answers = [samples[0].text for samples in self.teacher.sample(prompts, 1, params)]
        out = answers_as_samples(self.policy, prompts, answers, params, decoder)
        self.fallbacks += sum(sample is None for sample in out)
        return out


def answers_as_samples(policy, prompts: Sequence[ChatMessages], answers: Sequence[str], params: SamplingParams, decoder: Any) -> list:
    """Each answer as a `Sample` of `policy` on its prompt, in the policy's own tokens and with
    its logprobs under params.temperature and the decoder's mask; None for an answer the policy
    could not have sampled (empty, over the token budget, or outside the mask)."""
    if not prompts:
        return []
    samples = [
        Sample(prompt_tokens=policy.encode_prompt(p), tokens=policy.encode_completion(a), logprobs=[], text=a, stop_reason="eos")
        for p, a in zip(prompts, answers)
    ]
    datums = [Datum.from_sample(s, advantage=0.0, decoded=decoder is not None, decode_budget=params.max_tokens) for s in samples]
    scored = policy.compute_logprobs(datums, temperature=params.temperature, decoder=decoder)
    out = []
    for sample, logprobs in zip(samples, scored):
        sample.logprobs = [float(x) for x in logprobs[-len(sample.tokens) :]]
        producible = bool(sample.text) and len(sample.tokens) <= params.max_tokens and all(math.isfinite(x) and x > -1e4 for x in sample.logprobs)
        out.append(sample if producible else None)
    return out
