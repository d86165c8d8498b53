"""Hook implementations: the `tinker` backend and the `tinker` judge.

Only configs are imported here; the tinker SDK loads inside the factories. Both components
declare TINKER_API_KEY (`needs_key`): the core checks it before the run starts and keeps its
value out of error messages.
"""

from emojikit.api.components import Component
from emojikit.api.hookspecs import hookimpl

from emojikit_tinker.config import API_KEY_VAR, TinkerBackendConfig, TinkerJudgeConfig


def _build_policy(config: TinkerBackendConfig, ctx):
    from emojikit_tinker.policy import TinkerPolicy

    return TinkerPolicy(config, seed=ctx.seed)


def _build_judge(config: TinkerJudgeConfig, ctx):
    from emojikit_tinker.judge import TinkerJudge

    return TinkerJudge(config)


@hookimpl
def register_backends():
    return [
        Component(
            name="tinker",
            summary="Remote LoRA training and sampling on Tinker (default Qwen/Qwen3.5-4B); decoders validate and redraw",
            config=TinkerBackendConfig,
            factory=_build_policy,
            needs_key=API_KEY_VAR,
        )
    ]


@hookimpl
def register_judges():
    return [
        Component(
            name="tinker",
            summary="Qwen3-30B-A3B-Instruct (configurable) through Tinker sampling, concurrent requests, answer cleaned",
            config=TinkerJudgeConfig,
            factory=_build_judge,
            needs_key=API_KEY_VAR,
        )
    ]
