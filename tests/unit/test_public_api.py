"""The public API is curated: __all__ lists exactly what the packages export."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = ["little", "little.events", "little.log", "little.errors"]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(set(exported)) == len(exported)
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.{symbol} is in __all__ but missing"


@pytest.mark.parametrize("name", PACKAGES)
def test_no_public_name_outside_all(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and not (getattr(v, "__module__", name) or name).startswith(
            ("typing", "collections", "__future__")
        )
        and not isinstance(v, type(importlib))
        and n != "annotations"
    }
    assert public <= set(module.__all__), sorted(public - set(module.__all__))


def test_importing_little_does_not_import_the_kafka_client() -> None:
    import subprocess
    import sys

    code = "import sys, little, little.events, little.log; print('confluent_kafka' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
