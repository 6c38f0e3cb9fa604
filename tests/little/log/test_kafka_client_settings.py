"""The Kafka client security settings: read from LITTLE_KAFKA_*, merged into every client's
librdkafka config under the caller's own keys, the password never in a repr or an error."""

from __future__ import annotations

import pytest

from little import ConfigurationError
from little.log.kafka.client import BrokerWatch, client_config
from little.settings import KafkaClientSettings

PASSWORD = "pw-SECRET-51c0"


def test_security_settings_reach_every_client_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITTLE_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("LITTLE_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("LITTLE_KAFKA_SASL_USERNAME", "app")
    monkeypatch.setenv("LITTLE_KAFKA_SASL_PASSWORD", PASSWORD)
    monkeypatch.setenv("LITTLE_KAFKA_SSL_CA_LOCATION", "/etc/ca.pem")
    monkeypatch.setenv("LITTLE_KAFKA_CLIENT_CONFIG", '{"delivery.timeout.ms": 120000}')
    config = client_config("b:9092", {"sasl.username": "given"})
    assert {k: v for k, v in config.items() if k not in ("logger", "error_cb")} == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "given",  # the caller's own keys win
        "sasl.password": PASSWORD,
        "ssl.ca.location": "/etc/ca.pem",
        "delivery.timeout.ms": "120000",
    }
    assert isinstance(config["error_cb"], BrokerWatch)
    assert PASSWORD not in repr(KafkaClientSettings())


def test_unset_settings_add_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SECURITY_PROTOCOL", "SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD"):
        monkeypatch.delenv(f"LITTLE_KAFKA_{name}", raising=False)
    monkeypatch.delenv("LITTLE_KAFKA_SSL_CA_LOCATION", raising=False)
    monkeypatch.delenv("LITTLE_KAFKA_CLIENT_CONFIG", raising=False)
    assert KafkaClientSettings().librdkafka() == {}


def test_a_bad_client_config_is_a_configuration_error_without_its_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LITTLE_KAFKA_CLIENT_CONFIG", f'["sasl.password", "{PASSWORD}"]')
    with pytest.raises(ConfigurationError, match="LITTLE_KAFKA_CLIENT_CONFIG must be a JSON") as e:
        client_config("b:9092", None)
    assert PASSWORD not in str(e.value)
