"""Prometheus metrics of the coordinator, in a registry of their own (served on /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from little.errors import LittleError
from little.events import EventCodec, ModelResponded
from little.replay import cost_of


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.partitions = Gauge(
            "little_coordinator_partitions_owned",
            "Partitions of the commands topic owned.",
            registry=r,
        )
        self.executing = Gauge(
            "little_coordinator_runs_executing", "Runs executing in this process.", registry=r
        )
        self.tracked = Gauge(
            "little_coordinator_runs_tracked",
            "Non-terminal runs of owned partitions under a lease (executing here or elsewhere).",
            registry=r,
        )
        self.parked = Gauge(
            "little_coordinator_runs_parked",
            "Runs of owned partitions parked here (a workflow or version this coordinator "
            "lacks, an integrity error): not resumed until a ResumeRun or another coordinator.",
            registry=r,
        )
        self.waiting = Gauge(
            "little_coordinator_runs_waiting",
            "Runs of owned partitions suspended on a durable wait (a timer, a signal, an "
            "approval): held by no execution, woken at their due time or by a signal.",
            registry=r,
        )
        self.version_missing = Counter(
            "little_coordinator_runs_failed_version_missing_total",
            "Runs failed because the version of their workflow they started on is not "
            "registered here (LITTLE_MISSING_VERSION=fail).",
            registry=r,
        )
        self.calls = Counter(
            "little_coordinator_calls_total",
            "Model and tool calls made in owned partitions (kind: model, tool), whoever made "
            "them, from the events of the runs topic.",
            ["kind"],
            registry=r,
        )
        self.tokens = Counter(
            "little_coordinator_tokens_total",
            "Tokens of answered model calls in owned partitions (kind: input, output, "
            "cached_input; cached input is part of input), answers served from a record aside.",
            ["kind", "provider", "model"],
            registry=r,
        )
        self.billed = Counter(
            "little_coordinator_billed_usd_total",
            "Dollars those calls cost at genai-prices' rates (calls of unpriced models aside).",
            ["provider", "model"],
            registry=r,
        )
        self.unpriced = Counter(
            "little_coordinator_unpriced_calls_total",
            "Answered model calls whose model the price table does not know.",
            ["provider", "model"],
            registry=r,
        )
        self.reinvoked = Counter(
            "little_coordinator_calls_reinvoked_total",
            "Model calls this coordinator invoked again because they were in flight when the "
            "run's previous writer stopped (a crash, a kill): the provider may bill them twice.",
            registry=r,
        )
        self.served = Counter(
            "little_coordinator_calls_served_total",
            "Model calls this coordinator's executions answered from the log instead of paying "
            "for them again.",
            registry=r,
        )
        self.resumed = Counter(
            "little_coordinator_executions_total",
            "Executions started, by why (start, assigned, stalled, resume, cancel).",
            ["reason"],
            registry=r,
        )
        self.finished = Counter(
            "little_coordinator_executions_finished_total",
            "Executions ended, by outcome (completed, failed, cancelled, stopped, fenced, ...).",
            ["outcome"],
            registry=r,
        )
        self.commands = Counter(
            "little_coordinator_commands_total", "Commands consumed, by type.", ["type"], registry=r
        )
        self.dead_letters = Counter(
            "little_coordinator_dead_letters_total",
            "Commands records sent to the dead-letter topic, by reason.",
            ["reason"],
            registry=r,
        )
        self.stalls = Counter(
            "little_coordinator_stalls_total",
            "Runs resumed because their lease ran out.",
            registry=r,
        )
        self.fenced = Counter(
            "little_coordinator_fenced_total",
            "Local executions stopped because a newer claim fenced them.",
            registry=r,
        )
        self.rebalances = Counter(
            "little_coordinator_rebalances_total",
            "Partition changes, by kind (assigned, revoked, lost).",
            ["kind"],
            registry=r,
        )
        self.assignment_seconds = Histogram(
            "little_coordinator_assignment_seconds",
            "From an assignment to every non-terminal run of its partitions being started.",
            registry=r,
        )
        self.time_to_running = Histogram(
            "little_coordinator_time_to_running_seconds",
            "From deciding to execute a run to its claim (and RunStarted) being in the log.",
            registry=r,
        )
        self.appends_in_flight = Gauge(
            "little_coordinator_appends_in_flight",
            "Appends submitted to the run log and not yet acknowledged.",
            registry=r,
        )
        self.oldest_append = Gauge(
            "little_coordinator_oldest_append_seconds",
            "How long the oldest unacknowledged append has waited (a stalled broker shows here).",
            registry=r,
        )
        self.loop_lag = Gauge(
            "little_coordinator_loop_lag_seconds",
            "How late the event loop ran its last timer (blocking work shows here).",
            registry=r,
        )

    def count_call(self, codec: EventCodec, kind: str, value: bytes) -> None:
        """A call's event in an owned partition (on the runs tail's thread): calls, tokens
        and dollars of the calls made here (a replayed answer is not billed)."""
        if kind == "harness.model.called":
            self.calls.labels("model").inc()
            return
        if kind == "harness.tool_call.started":
            self.calls.labels("tool").inc()
            return
        try:
            event = codec.decode(value)
        except LittleError:
            return  # the projector dead-letters it; not the coordinator's to judge
        if not isinstance(event, ModelResponded) or event.replayed_from_run_id is not None:
            return
        u, labels = event.usage, (event.provider, event.model)
        self.tokens.labels("input", *labels).inc(u.input_tokens)
        self.tokens.labels("output", *labels).inc(u.output_tokens)
        self.tokens.labels("cached_input", *labels).inc(u.cached_input_tokens)
        usd = cost_of(event)
        if usd is None:
            self.unpriced.labels(*labels).inc()
        else:
            self.billed.labels(*labels).inc(float(usd))
