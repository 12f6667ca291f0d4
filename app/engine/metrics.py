"""The Prometheus series /metrics exposes (Metrics) and one model's engine series (EngineMetrics), which the batcher,
the compiler and the text side feed; app/metrics.py times the HTTP requests into them."""

from __future__ import annotations

import os
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from model.confidence import FLAGS, Quality

__all__ = ["EngineMetrics", "Metrics"]
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
MODEL = ("model",)
CONFIDENCE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    """The series /metrics exposes. The batcher feeds the engine series; the gauges are read only when scraped."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("nmt_requests", "HTTP requests", ["endpoint", "status"], registry=r)
        self.latency = Histogram(
            "nmt_request_duration_seconds", "HTTP request latency, to the last byte of the response", ["endpoint"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.queue_length = Gauge(
            "nmt_queue_length", "sequences submitted and waiting for a batch row", labelnames=MODEL, registry=r
        )
        self.batch_size = Gauge(
            "nmt_running_batch_size", "sequences decoding together (a beam search's one sequence)", labelnames=MODEL,
            registry=r,
        )  # fmt: skip
        self.batch_rows = Gauge(
            "nmt_batch_rows", "live rows of the running batch (a beam search's beam_size rows)", labelnames=MODEL,
            registry=r,
        )  # fmt: skip
        self.generated_tokens = Counter(
            "nmt_generated_tokens", "tokens generated, </s> included", labelnames=MODEL, registry=r
        )
        self.time_per_output_token = Histogram(
            "nmt_time_per_output_token_seconds", "per sequence: time from its first to its last token / (tokens - 1)",
            buckets=TOKEN_BUCKETS, labelnames=MODEL, registry=r,
        )  # fmt: skip
        self.time_to_first_token = Histogram(
            "nmt_time_to_first_token_seconds", "per sequence: time from submission to the engine to its first token",
            buckets=LATENCY_BUCKETS, labelnames=MODEL, registry=r,
        )  # fmt: skip
        self.decoder_steps = Counter(
            "nmt_decoder_steps", "decoder steps taken (tokens / steps = mean batch)", labelnames=MODEL, registry=r
        )
        self.step_duration = Histogram(
            "nmt_decoder_step_duration_seconds", "one decoder step for the whole running batch",
            buckets=TOKEN_BUCKETS, labelnames=MODEL, registry=r,
        )  # fmt: skip
        self.prefill_duration = Histogram(
            "nmt_prefill_duration_seconds", "one admission: the encoder and cross-attention keys/values of the "
            "sequences joining the batch", buckets=TOKEN_BUCKETS, labelnames=MODEL, registry=r,
        )  # fmt: skip
        self.prefilled_sequences = Counter(
            "nmt_prefilled_sequences", "sequences admitted into the batch (sequences / prefills = mean admission)",
            labelnames=MODEL, registry=r,
        )  # fmt: skip
        self.oom_retries = Counter("nmt_oom_retries", "CUDA out-of-memory retries", labelnames=MODEL, registry=r)
        self.compiled = Gauge(
            "nmt_compiled", "1 once the compiled graphs serve (NMT_COMPILE), else 0", labelnames=MODEL, registry=r
        )
        self.compile_duration = Gauge(
            "nmt_compile_duration_seconds", "seconds from the start of compiling to the compiled graphs serving "
            "(0 until then)", labelnames=MODEL, registry=r,
        )  # fmt: skip

        self.confidence = Histogram(
            "nmt_sentence_confidence", "per translated sentence: its confidence (model/confidence.py)",
            buckets=CONFIDENCE_BUCKETS, labelnames=MODEL, registry=r,
        )  # fmt: skip
        self.flagged = Counter(
            "nmt_flagged_sentences", "translated sentences that raised a flag, by flag", ["model", "flag"], registry=r
        )
        self.withheld = Counter(
            "nmt_withheld_sentences", "translated sentences withheld under min_confidence", labelnames=MODEL, registry=r
        )
        self.deepl_characters = Counter(
            "nmt_deepl_characters", "characters translated through DeepL's API (texts, and documents as uploaded)",
            registry=r,
        )  # fmt: skip
        # NMT_FRONTENDS: the front-ends' processes write their series into this directory (prometheus_client's
        # multiprocess mode, set before the process made any), and each one's /metrics gives them all together
        self.shared = os.environ.get("PROMETHEUS_MULTIPROC_DIR")

    def engine(self, model: str) -> EngineMetrics:
        """The engine series of one model."""
        return EngineMetrics(self, model)

    def exposition(self, engine: bytes | None = None) -> bytes:
        """The text format of every series; `engine`: the engine process's exposition of ENGINE_FAMILIES (a
        front-end's /metrics, NMT_FRONTENDS), given in place of this process's own (which nothing here feeds), after
        the HTTP and confidence series of every front-end together."""
        if engine is None:
            return generate_latest(self.registry)
        return generate_latest(_Families(self.front_side(), lambda name: name not in ENGINE_FAMILIES)) + engine

    def front_side(self) -> CollectorRegistry:
        """The registry whose HTTP-side series a front-end gives: every front-end's, summed, where they share a
        directory; else this process's."""
        if self.shared is None:
            return self.registry
        registry = CollectorRegistry()
        MultiProcessCollector(registry, self.shared)
        return registry

    def total(self, name: str) -> float:
        """The value of an unlabelled sample (e.g. "nmt_deepl_characters_total"), of every front-end together."""
        return self.front_side().get_sample_value(name) or 0.0

    def engine_exposition(self) -> bytes:
        """The text format of the series the batcher and the compiler feed (ENGINE_FAMILIES): what the engine
        process sends a front-end for its /metrics."""
        return generate_latest(_Families(self.registry, lambda name: name in ENGINE_FAMILIES))


# The families fed where the model runs (the batcher, the compiler): with NMT_FRONTENDS, the engine process's
ENGINE_FAMILIES = frozenset({
    "nmt_queue_length", "nmt_running_batch_size", "nmt_batch_rows", "nmt_generated_tokens",
    "nmt_time_per_output_token_seconds",
    "nmt_time_to_first_token_seconds", "nmt_decoder_steps", "nmt_decoder_step_duration_seconds",
    "nmt_prefill_duration_seconds", "nmt_prefilled_sequences", "nmt_oom_retries", "nmt_compiled",
    "nmt_compile_duration_seconds",
})  # fmt: skip


class _Families:
    """A registry's families that `keep` keeps, as generate_latest reads a registry."""

    def __init__(self, registry: CollectorRegistry, keep: Callable[[str], bool]):
        self.registry, self.keep = registry, keep

    def collect(self):
        return (family for family in self.registry.collect() if self.keep(family.name))


class EngineMetrics:
    """One model's engine series: what the batcher and the compiler feed, labelled with the model's name."""

    SERIES = (
        "queue_length", "batch_size", "batch_rows", "generated_tokens", "time_per_output_token", "time_to_first_token",
        "decoder_steps", "step_duration", "prefill_duration", "prefilled_sequences", "oom_retries", "compiled",
        "compile_duration", "confidence", "withheld",
    )  # fmt: skip

    def __init__(self, metrics: Metrics, model: str):
        self.registry, self.model = metrics.registry, model
        for name in self.SERIES:
            setattr(self, name, getattr(metrics, name).labels(model))
        self.flagged = {flag: metrics.flagged.labels(model, flag) for flag in FLAGS}

    def judged(self, qualities: list[Quality | None], withheld: int) -> None:
        """Count translated sentences: their confidences, the flags they raised and how many were withheld."""
        for q in qualities:
            if q is not None:
                self.confidence.observe(q.confidence)
                for flag in q.flags:
                    self.flagged[flag].inc()
        if withheld:
            self.withheld.inc(withheld)

    def watch(
        self, queue_length: Callable[[], float], batch_size: Callable[[], float], rows: Callable[[], float]
    ) -> None:
        """Read the queue and batch gauges from these callables at scrape time (no work per decoder step): sequences
        waiting, sequences decoding (which the autoscaler adds to those waiting), the rows they hold."""
        self.queue_length.set_function(queue_length)
        self.batch_size.set_function(batch_size)
        self.batch_rows.set_function(rows)

    def sample(self, name: str) -> float | None:
        """This model's value of a series, e.g. "nmt_generated_tokens_total"."""
        return self.registry.get_sample_value(name, {"model": self.model})
