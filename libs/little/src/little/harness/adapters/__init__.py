"""Model adapters: the harness's ``Model`` protocol over provider SDKs.

``OpenAIModel`` (Chat Completions) and ``AnthropicModel`` (Messages) translate the harness's
chat-shaped requests to each provider's wire format and back, deterministically, and report
tokens only (never a cost: dollars are computed by the fold from the price table).

Importing this package never imports a provider SDK: each adapter imports its SDK when it is
constructed, and a missing SDK raises ``ConfigurationError`` naming the extra to install
(``pip install 'little-workflow[openai]'`` or ``'little-workflow[anthropic]'``).
"""

from little.harness.adapters.anthropic import AnthropicModel
from little.harness.adapters.openai import OpenAIModel

__all__ = ["AnthropicModel", "OpenAIModel"]
