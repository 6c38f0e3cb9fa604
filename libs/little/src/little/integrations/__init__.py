"""Framework adapters: agents written with an agent framework, recorded by little's kernel.

``little.integrations.pydantic_ai`` (``durable``) records Pydantic AI agents; each adapter imports
its framework, installed by the extra of its name (``little-workflow[pydantic-ai]``).
"""

__all__: list[str] = []
