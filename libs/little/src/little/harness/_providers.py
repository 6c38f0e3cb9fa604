"""Model providers: the name of a model (``openai:gpt-4o``, ``module:factory``) to a ``Model``.

The one place that knows which adapters exist and imports them (each only when named, so
no provider SDK loads before it is used). The model protocol (``_model``) and the adapters
sit below this module and never import it.
"""

from __future__ import annotations

import os

from little.harness._model import Model

PROVIDERS = ("openai", "anthropic")
"""The providers ``model_from_spec`` builds an adapter for."""


def model_from_spec(spec: str) -> Model:
    """The model a name gives: ``openai:<model>`` or ``anthropic:<model>`` (the provider's
    adapter, its key from the provider's usual variable), or ``package.module:factory`` (a
    function of no arguments that returns a ``Model``, or a ``Model`` itself), for models of
    one's own and for tests. ``ConfigurationError`` names what is wrong with the name."""
    from little.errors import ConfigurationError

    target, sep, name = spec.partition(":")
    if not sep or not target or not name:
        raise ConfigurationError(
            f"model {spec!r}: name one as openai:<model>, anthropic:<model> or module:factory"
        )
    if target in PROVIDERS:
        key = f"{target.upper()}_API_KEY"
        if not os.environ.get(key):
            # refused before any run is started, not at its first model call
            raise ConfigurationError(f"model {spec!r} needs {key} in the environment")
    if target == "openai":
        from little.harness.adapters.openai import OpenAIModel

        return OpenAIModel(name)
    if target == "anthropic":
        from little.harness.adapters.anthropic import AnthropicModel

        return AnthropicModel(name)
    import importlib

    try:
        module = importlib.import_module(target)
    except ImportError as exc:
        raise ConfigurationError(
            f"model {spec!r}: {target!r} is neither a provider ({', '.join(PROVIDERS)}) nor a "
            f"module that imports ({exc})"
        ) from None
    found = getattr(module, name, None)
    if found is None:
        raise ConfigurationError(f"model {spec!r}: module {target} has no {name!r}")
    try:
        model = found if isinstance(found, Model) else found() if callable(found) else found
    except Exception as exc:
        raise ConfigurationError(
            f"model {spec!r}: {target}.{name}() raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(model, Model):
        raise ConfigurationError(
            f"model {spec!r}: {target}.{name} gave a {type(model).__name__}, not a Model "
            "(an object with provider, name and async complete(request))"
        )
    return model
