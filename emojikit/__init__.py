"""emojikit: teach language models to communicate in emoji."""

from emojikit.components import Component
from emojikit.hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["Component", "hookimpl", "__version__"]
