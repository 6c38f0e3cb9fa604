"""Prometheus metrics of the projector, fed by the driver's listener callbacks."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from little_services.projection import PartitionBatch, ProjectionStore, ProjectorListener

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _RunsByStatus(Collector):
    """``little_projector_runs{status}``, counted in the store at scrape time."""

    def __init__(self, store: ProjectionStore) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "little_projector_runs", "Runs in the projection by status", labels=["status"]
        )
        for status, n in sorted(self.store.count_by_status().items()):
            family.add_metric([status], n)
        yield family


class ProjectorMetrics(ProjectorListener):
    """Counters, histograms and gauges of one projector, in their own registry."""

    def __init__(self, registry: CollectorRegistry, store: ProjectionStore) -> None:
        self.registry = registry
        self.consumed = Counter(
            "little_projector_records_consumed",
            "Records read from the runs topic",
            registry=registry,
        )
        self.folded = Counter(
            "little_projector_events_folded", "Events applied by the fold", registry=registry
        )
        self.skipped = Counter(
            "little_projector_records_skipped",
            "Records not folded: already applied (duplicate) or of a run marked broken (integrity)",
            ["why"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "little_projector_dead_letters",
            "Records sent to the dead-letter topic",
            ["reason"],
            registry=registry,
        )
        self.snapshots = Counter(
            "little_projector_snapshots", "Snapshots written", registry=registry
        )
        self.refolded = Counter(
            "little_projector_runs_refolded",
            "Runs folded from their start through the log (after a reset or a late start)",
            registry=registry,
        )
        self.fold_latency = Histogram(
            "little_projector_fold_latency_seconds",
            "Time to fold one batch, store it and commit its offsets",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.commit_delay = Histogram(
            "little_projector_commit_delay_seconds",
            "From the log timestamp of a batch's newest record to its commit",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.lag_gauge = Gauge(
            "little_projector_consumer_lag",
            "Records left to consume per partition",
            ["partition"],
            registry=registry,
        )
        self.caught_up_gauge = Gauge(
            "little_projector_caught_up",
            "1 once every assigned partition reached its end at assignment",
            registry=registry,
        )
        registry.register(_RunsByStatus(store))

    def committed(self, batch: PartitionBatch, seconds: float) -> None:
        self.consumed.inc(batch.consumed)
        self.folded.inc(batch.folded)
        self.skipped.labels("duplicate").inc(batch.duplicates)
        self.skipped.labels("integrity").inc(batch.skipped)
        for dl in batch.dead_letters:
            self.dead_letters.labels(dl.reason).inc()
        self.snapshots.inc(len(batch.snapshots))
        self.refolded.inc(batch.refolded_runs)
        self.fold_latency.observe(seconds)
        if batch.newest_timestamp_ms > 0:
            self.commit_delay.observe(max(0.0, time.time() - batch.newest_timestamp_ms / 1000))

    def lag(self, lag: Mapping[int, int]) -> None:
        for p, n in lag.items():
            self.lag_gauge.labels(str(p)).set(n)

    def assigned(self, partitions: Sequence[int]) -> None:
        self.caught_up_gauge.set(0)

    def revoked(self, partitions: Sequence[int]) -> None:
        for p in partitions:
            with contextlib.suppress(KeyError):
                self.lag_gauge.remove(str(p))

    def caught_up(self) -> None:
        self.caught_up_gauge.set(1)
