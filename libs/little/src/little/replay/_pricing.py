"""Dollars for recorded tokens: the one place a price is computed (seed 000).

``cost_of`` prices one recorded call (a ``harness.model.responded``, an ``agent.call.settled``):
the fold, the coordinator's metrics and the projector's inspector all call it, so a dollar in
a report, on a dashboard and in the inspector is the same dollar.

Prices come from the table bundled with the pinned ``genai-prices`` release, never from the
network, and each call is priced at its event's ``occurred_at``, so one log always folds to
the same dollars. An unknown provider or model is unpriced (``None``), never zero.

``genai_prices`` is imported on the first price asked for, not with ``little``: a process
that resumes a run and prices nothing (a worker, a crashed run's restart) does not pay its
import (its HTTP client and price tables, a sizeable part of ``import little``).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any, Protocol

from little.events import Usage


@lru_cache(maxsize=1)
def _snapshot() -> Any:
    # Not genai_prices.calc_price: that uses a snapshot downloaded by update_prices() if any
    # code in the process called it, and a fold must not depend on what was fetched when.
    from genai_prices.data_snapshot import _bundled_snapshot  # the table shipped in the wheel

    return _bundled_snapshot()


@lru_cache(maxsize=4096)
def _lookup(provider: str, model: str) -> tuple[Any, Any] | None:
    try:
        return _snapshot().find_provider_model(model, None, provider, None)  # type: ignore[no-any-return]
    except LookupError:
        return None


_MTOK = 1_000_000
_PROBE = (123_457, 2_345, 6_789)  # an off-grid usage to check linearity against the library
_rates_by_price: dict[int, tuple[Any, tuple[Decimal, Decimal, Decimal] | None]] = {}


def _library_price(
    price_model: Any, price_provider: Any, at: datetime, i: int, c: int, o: int
) -> Decimal:
    from genai_prices import Usage as _PriceUsage

    usage = _PriceUsage(input_tokens=i, output_tokens=o, cache_read_tokens=c)
    calc = price_model.calc_price(usage, price_provider, genai_request_timestamp=at)
    return Decimal(calc.total_price)


def _rates(
    price_model: Any, price_provider: Any, at: datetime
) -> tuple[Decimal, Decimal, Decimal] | None:
    """Per-token rates (input, cached input, output) of the price in force at ``at``.

    Derived from the library's own results for unit usages and kept only if the price has
    no tiers and the library agrees at an off-grid point, i.e. the price is linear; else
    ``None`` and every call is priced by the library directly. The library call costs
    ~100 us, which would dominate a fold.
    """
    model_price = price_model.get_prices(at)
    cached = _rates_by_price.get(id(model_price))
    if cached is not None and cached[0] is model_price:
        return cached[1]
    from genai_prices.types import TieredPrices as _TieredPrices

    if any(isinstance(p, _TieredPrices) for p in vars(model_price).values()):
        # A probe cannot see a tier that starts below it (tiers start at 32k in the table):
        # unit rates taken above the tier would overcharge every smaller call.
        _rates_by_price[id(model_price)] = (model_price, None)
        return None
    per_in = _library_price(price_model, price_provider, at, _MTOK, 0, 0) / _MTOK
    per_cached = _library_price(price_model, price_provider, at, _MTOK, _MTOK, 0) / _MTOK
    per_out = _library_price(price_model, price_provider, at, 0, 0, _MTOK) / _MTOK
    i, c, o = _PROBE
    linear = (i - c) * per_in + c * per_cached + o * per_out
    rates: tuple[Decimal, Decimal, Decimal] | None = (per_in, per_cached, per_out)
    if linear != _library_price(price_model, price_provider, at, i, c, o):
        rates = None
    _rates_by_price[id(model_price)] = (model_price, rates)
    return rates


def price_usd(provider: str, model: str, usage: Usage, at: datetime) -> Decimal | None:
    """The cost of one call, or ``None`` when the price table does not know the model.

    ``usage.input_tokens`` counts all input tokens, cached ones included (as providers'
    ``prompt_tokens``); ``cached_input_tokens`` is the part read from cache.
    """
    found = _lookup(provider, model)
    if found is None:
        return None
    price_provider, price_model = found
    rates = _rates(price_model, price_provider, at)
    i, c, o = usage.input_tokens, usage.cached_input_tokens, usage.output_tokens
    if rates is None:
        return _library_price(price_model, price_provider, at, i, c, o)
    per_in, per_cached, per_out = rates
    return (i - c) * per_in + c * per_cached + o * per_out


class PricedCall(Protocol):
    """What ``cost_of`` reads from a recorded call's event."""

    @property
    def provider(self) -> str | None: ...

    @property
    def model(self) -> str | None: ...

    @property
    def usage(self) -> Usage | None: ...

    @property
    def occurred_at(self) -> datetime: ...


def cost_of(call: PricedCall) -> Decimal | None:
    """The cost of a recorded call at the price in force when it happened (its event's
    ``occurred_at``); ``None`` when the call names no provider, model or usage, or the price
    table does not know the model."""
    if call.provider is None or call.model is None or call.usage is None:
        return None
    return price_usd(call.provider, call.model, call.usage, call.occurred_at)
