"""A teacher played as a sender in the game: the reference row of the evaluations
(a "checkpoint" spelled teacher:NAME) and the teacher-opened episodes of guided GRPO.

Shared by emojikit.evaluation (evaluate, repair) and emojikit.training (grpo, rft), so
neither imports the other for it.
"""

from __future__ import annotations

TEACHER_PREFIX = "teacher:"  # a "checkpoint" spelled teacher:NAME plays that teacher's answers


class TeacherSender:
    """A teacher played as a sender: every turn it sends its answer to the target (the judge
    never repeats a guess, so a repeated answer still moves the game). A reference row, not
    a policy: it has no tokens or logprobs."""

    def __init__(self, teacher, game_settings):
        import re

        self.teacher = teacher
        self.name = "teacher"
        pattern = re.escape(game_settings.first_turn).replace(re.escape("{target}"), "(?P<target>.*)", 1)
        self._first_turn = re.compile(pattern.replace(re.escape("{target}"), "(?P=target)"), re.S)
        self._answers: dict[str, str] = {}

    def _target(self, messages) -> str:
        first_user = next(m["content"] for m in messages if m["role"] == "user")
        found = self._first_turn.fullmatch(first_user)
        return found.group("target") if found else first_user

    def sample(self, prompts, n, params, decoder=None):
        from emojikit.api.components import Message, answers_of
        from emojikit.api.policy import Sample

        targets = [self._target(p) for p in prompts]
        todo = [t for t in dict.fromkeys(targets) if t not in self._answers]
        if todo:
            for t, answer in zip(todo, answers_of(self.teacher, [Message(t) for t in todo])):
                self._answers[t] = answer or ""
        return [[Sample(prompt_tokens=[], tokens=[], logprobs=[], text=self._answers[t], stop_reason="stop")] * n for t in targets]
