"""The projection database's URL as logs and messages print it: no password, whatever the form."""

from __future__ import annotations

import pytest

from little_services.projection import ProjectionSettings
from little_services.projection._postgres import redact


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u@h/db?password=secret", "postgresql://u@h/db?password=***"),
        (
            "postgresql:///db?host=/sock&password=pw&sslmode=require",
            "postgresql:///db?host=/sock&password=***&sslmode=require",
        ),
        (
            "postgresql://u:pw@h1:5432,h2:5432/db",
            "postgresql://u:***@h1:5432,h2:5432/db",
        ),
        ("postgresql://u:pw@h:notaport/db", "postgresql://u:***@h:notaport/db"),
        ("postgresql://u:pw@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
        ("postgresql://u:p:w@x@h/db", "postgresql://u:***@h/db"),
        ("postgres://u:pw@h", "postgres://u:***@h"),
        ("postgresql://h/db?PassWord=x#frag", "postgresql://h/db?PassWord=***#frag"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
    ],
)
def test_the_password_is_masked(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_the_store_description_names_no_password() -> None:
    settings = ProjectionSettings(projection_store="postgresql://u@h1,h2:x/db?password=hunter2")
    described = settings.store_description()
    assert "hunter2" not in described
    assert "h1,h2:x" in described
