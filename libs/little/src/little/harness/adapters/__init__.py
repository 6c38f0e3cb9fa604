"""Model adapters: the harness's ``Model`` protocol over provider SDKs.

``OpenAIModel`` (Chat Completions) and ``AnthropicModel`` (Messages) translate the harness's
chat-shaped requests to each provider's wire format and back, deterministically, and report
tokens only (never a cost: dollars are computed by the fold from the price table).

Importing this package never imports a provider SDK: each adapter imports its SDK when it is
constructed, and a missing SDK raises ``ConfigurationError`` naming the extra to install
(``pip install 'little-workflow[openai]'`` or ``'little-workflow[anthropic]'``).

Provider errors propagate as the SDK's exceptions; the SDK's own retries are off (the
client given is copied with ``max_retries=0``): the recording kernel retries a turn that
failed with a rate limit, a 5xx or no answer (``retry_policy``; ``max_retries``,
``retry_delay`` and ``retry_max_delay`` default to ``LITTLE_MODEL_MAX_RETRIES``,
``LITTLE_MODEL_RETRY_DELAY`` and ``LITTLE_MODEL_RETRY_MAX_DELAY``), each attempt a recorded
``harness.model.called`` and ``harness.model.failed``.
"""

from little.harness.adapters.anthropic import AnthropicModel
from little.harness.adapters.openai import OpenAIModel

__all__ = ["AnthropicModel", "OpenAIModel"]
