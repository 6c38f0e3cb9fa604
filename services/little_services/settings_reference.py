"""docs/settings.md: every ``LITTLE_*`` variable of the CLI and the services, from their
settings classes (``python -m little_services.settings_reference`` rewrites it; a test checks
it is current)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic_settings import BaseSettings

from little.cli import CommandSettings
from little.settings import KafkaClientSettings, LittleSettings, SettingDoc, describe_settings
from little_services.projector import ProjectorServiceSettings
from little_services.resume_coordinator import CoordinatorSettings

__all__ = ["OTHER", "SECTIONS", "main", "render", "settings_help"]

SECTIONS: Sequence[tuple[str, type[BaseSettings], type[BaseSettings] | None, str]] = (
    (
        "The world (every command and service)",
        LittleSettings,
        None,
        "Where the log, the artifacts and the topics are. Every `little` command, the "
        "projector and the coordinator read these, so one env file points them all at one "
        "world.",
    ),
    (
        "Kafka client security (every Kafka client: the world, the services, the CLI)",
        KafkaClientSettings,
        None,
        "librdkafka's connection settings, for SASL and TLS. `deploy/local-kafka/kafka.sh "
        "client-env` prints them for a broker it started in its `sasl_ssl` mode "
        "(deploy/local-kafka/README.md). "
        "Settings passed in code (`kafka_world(**config)`) win. How long a writer waits out a "
        "broker outage is librdkafka's `delivery.timeout.ms` (default 30000), set through "
        "`LITTLE_KAFKA_CLIENT_CONFIG`.",
    ),
    ("The `little` command", CommandSettings, LittleSettings, ""),
    (
        "little-projector",
        ProjectorServiceSettings,
        LittleSettings,
        "`little projections rebuild | status` read the same projection settings.",
    ),
    ("little-resume-coordinator", CoordinatorSettings, LittleSettings, ""),
)

OTHER: Sequence[tuple[str, Sequence[SettingDoc]]] = (
    (
        "Logging (the CLI and the services)",
        (
            SettingDoc(("LITTLE_LOG_LEVEL",), "info", "debug, info, warning or error."),
            SettingDoc(
                ("LITTLE_LOG_JSON",), "(unset)", "`1`: JSON lines (the services log JSON anyway)."
            ),
        ),
    ),
    (
        "Durable waits (every process that executes runs)",
        (
            SettingDoc(
                ("LITTLE_WAIT_HOLD_SECONDS",),
                "1.0",
                "Timers due within this many seconds are slept in the process; longer waits "
                "suspend the run (status `waiting`, held by nobody) until it is woken.",
            ),
        ),
    ),
    (
        "Topic provisioning (`little topics apply`, `LITTLE_PROVISION_TOPICS`)",
        (
            SettingDoc(
                ("LITTLE_TOPIC_PARTITIONS",), "(topics.yaml)", "Partitions of every topic created."
            ),
            SettingDoc(
                ("LITTLE_TOPIC_REPLICATION_FACTOR",),
                "(topics.yaml)",
                "Replication factor of every topic created (1 for a one-node dev broker).",
            ),
            SettingDoc(
                ("LITTLE_TOPIC_MIN_INSYNC_REPLICAS",),
                "(topics.yaml)",
                "`min.insync.replicas` of every topic created.",
            ),
        ),
    ),
    (
        "The example workflow (`little demo`, `little.examples.research`)",
        (
            SettingDoc(
                ("LITTLE_EXAMPLE_MODEL",),
                "(scripted)",
                "`openai:<model>` or `anthropic:<model>`: a real model instead of the script.",
            ),
            SettingDoc(
                ("LITTLE_EXAMPLE_MODEL_LATENCY",), "0", "Seconds the scripted model takes per call."
            ),
            SettingDoc(
                ("LITTLE_EXAMPLE_CALLS_DIR",),
                "(unset)",
                "A directory where the example logs every model and tool invocation (JSON lines).",
            ),
        ),
    ),
    (
        "Fault injection (tests and the demo; never in production)",
        (
            SettingDoc(
                ("LITTLE_CRASH_AFTER_EVENT",),
                "(unset)",
                "`k`: the process kills itself (SIGKILL) right after its k-th acked event.",
            ),
            SettingDoc(
                ("LITTLE_CRASH_AFTER_CALL",),
                "(unset)",
                "`n`: the process kills itself while its n-th model or tool call is in flight.",
            ),
            SettingDoc(
                ("LITTLE_PROJECTOR_CRASH_IN_TRANSACTION",),
                "(unset)",
                "`n`: the projector kills itself inside its n-th offset transaction.",
            ),
        ),
    ),
)


def _own(cls: type[BaseSettings], base: type[BaseSettings] | None) -> list[SettingDoc]:
    inherited = set(base.model_fields) if base is not None else set()
    names = [n for n in cls.model_fields if n not in inherited]
    docs = dict(zip(cls.model_fields, describe_settings(cls), strict=True))
    return [docs[n] for n in names]


def _names(doc: SettingDoc) -> str:
    first, *rest = doc.env
    return f"`{first}`" + "".join(f" (or `{r}`)" for r in rest)


def _table(docs: Iterable[SettingDoc]) -> list[str]:
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for d in docs:
        meaning = d.meaning.replace("``", "`").replace("|", "\\|")
        lines.append(f"| {_names(d)} | `{d.default}` | {meaning} |")
    return lines


def render() -> str:
    out = [
        "# Settings reference",
        "",
        "Every `LITTLE_*` environment variable of the `little` command and the services.",
        "Generated from their settings classes by `python -m little_services.settings_reference`",
        "(a test fails when this file is out of date). A per-service name (e.g.",
        "`LITTLE_PROJECTOR_HTTP_PORT`) wins over the shared one (`LITTLE_HTTP_PORT`), so one",
        "env file can serve both services. `little-projector --help` and",
        "`little-resume-coordinator --help` print their own.",
        "",
        "The local broker's variables (`LITTLE_KAFKA_*` of `deploy/local-kafka/kafka.sh`) are",
        "described at the top of that script.",
    ]
    for title, cls, base, intro in SECTIONS:
        out += ["", f"## {title}", ""]
        if intro:
            out += [intro, ""]
        out += _table(_own(cls, base))
    for title, docs in OTHER:
        out += ["", f"## {title}", ""]
        out += _table(docs)
    return "\n".join(out) + "\n"


def settings_help(prog: str, summary: str, cls: type[BaseSettings]) -> str:
    """``prog --help``: what it is, and every variable it reads (its own first)."""
    lines = [f"usage: {prog}", "", *textwrap.wrap(summary, 88), ""]
    lines += ["It takes no arguments: it is configured by environment variables.", ""]
    sections = (
        (f"{prog}:", _own(cls, LittleSettings)),
        ("The world:", describe_settings(LittleSettings)),
    )
    for title, docs in sections:
        lines.append(title)
        for d in docs:
            meaning = d.meaning.replace("``", "")
            if "[default:" not in meaning:
                meaning += f" [default: {d.default}]"
            lines.append("  " + " | ".join(d.env))
            lines += textwrap.wrap(meaning, 88, initial_indent="      ", subsequent_indent="      ")
        lines.append("")
    lines.append("Logging: LITTLE_LOG_LEVEL (debug, info, warning, error).")
    lines.append("Every variable: docs/settings.md")
    return "\n".join(lines) + "\n"


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/settings.md")
    target.write_text(render())
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
