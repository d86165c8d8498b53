"""The `tinker` judge: a chat model served by Tinker sampling reconstructs the message.

Each episode is a conversation: the emoji of each turn as a user message, the judge's own
earlier guesses as its assistant messages. All views of a batch are sent at once (up to
`concurrency` requests in flight) and each answer is cleaned to a short one-line message.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from emojikit.api.components import JudgeView
from emojikit.play.guesses import clean_guess

from emojikit_tinker import chat
from emojikit_tinker.clients import make_service_client
from emojikit_tinker.config import RetrySettings, TinkerJudgeConfig
from emojikit_tinker.retry import Retrier

def judge_tokenizer(sampler: Any, model: str) -> Any:
    """The judge model's tokenizer: from the sampling client, else from the local HF cache."""
    get = getattr(sampler, "get_tokenizer", None)
    if get is not None:
        try:
            return get()
        except Exception:  # noqa: BLE001 - e.g. offline without the SDK's cache: try ours
            pass
    from emojikit.support.bundled import load_tokenizer

    return load_tokenizer(model)  # local_files_only when offline; a one-line error if missing


class TinkerJudge:
    def __init__(self, config: TinkerJudgeConfig, *, service_client: Any = None, retrier: Optional[Retrier] = None):
        self.config = config
        self._retrier = retrier or Retrier(RetrySettings.of(config))
        service = service_client if service_client is not None else make_service_client(config.base_url, "the tinker judge")
        self._sampler = self._retrier.call(lambda: service.create_sampling_client(base_model=config.model), "create_sampling_client")
        self.tokenizer = judge_tokenizer(self._sampler, config.model)
        self._stop_ids = chat.stop_token_ids(self.tokenizer)

    def messages(self, view: JudgeView) -> list[dict[str, str]]:
        """The conversation for one episode, ending with the newest emoji."""
        messages = [{"role": "system", "content": self.config.system_prompt}] if self.config.system_prompt else []
        for turn, emoji in enumerate(view.emoji_turns):
            template = self.config.first_turn if turn == 0 else self.config.follow_up
            messages.append({"role": "user", "content": template.format(emoji=emoji)})
            if turn < len(view.emoji_turns) - 1 and turn < len(view.guesses):
                messages.append({"role": "assistant", "content": view.guesses[turn]})
        return messages

    def guess(self, views: Sequence[JudgeView]) -> list[Optional[str]]:
        """One guess per view; None for a view whose request still failed after its retries
        (the game ends that episode as failed). Non-transient errors (e.g. 400, 401) raise."""
        import tinker

        params = tinker.SamplingParams(max_tokens=self.config.max_tokens, temperature=self.config.temperature, stop=list(self._stop_ids))
        prompts = [chat.encode_prompt(self.tokenizer, self.messages(v), self.config.enable_thinking) for v in views]
        submits = [
            (lambda tokens=tokens: self._sampler.sample(prompt=tinker.ModelInput.from_ints(tokens), num_samples=1, sampling_params=params))
            for tokens in prompts
        ]
        responses = self._retrier.gather(submits, self.config.concurrency, "judge sample", give_up_as_none=True)
        guesses: list[Optional[str]] = []
        for response in responses:
            if response is None:
                guesses.append(None)
                continue
            tokens = list(response.sequences[0].tokens) if response.sequences else []
            guesses.append(clean_guess(self.tokenizer.decode(tokens, skip_special_tokens=True), max_chars=self.config.max_chars))
        return guesses
