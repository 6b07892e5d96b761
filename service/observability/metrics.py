"""Prometheus metrics of the service (one registry per app, so tests can start several apps)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests_and_batches(self.registry)
        self._continuous_batching(self.registry)
        self._documents_and_state(self.registry)

    def _requests_and_batches(self, r: CollectorRegistry) -> None:
        self.requests = Counter(
            "mt_requests_total",
            "HTTP requests by endpoint, model and status code",
            ["endpoint", "model", "status"],
            registry=r,
        )
        self.request_duration = Histogram(
            "mt_request_duration_seconds", "Request latency", ["endpoint", "model"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.queue_wait = Histogram(
            "mt_queue_wait_seconds",
            "Time a sentence waited before its engine batch started",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "mt_batch_size", "Sentences per engine batch", ["model"], buckets=BATCH_BUCKETS, registry=r
        )
        self.inference = Histogram(
            "mt_inference_duration_seconds",
            "Engine time per batch and stage",
            ["model", "stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.generated_tokens = Counter("mt_generated_tokens_total", "Target tokens generated", ["model"], registry=r)
        self.queue_depth = Gauge("mt_queue_depth", "Sentences waiting for an engine batch", ["model"], registry=r)
        self.model_info = Gauge(
            "mt_model_info", "Loaded models (value 1)", ["model", "version", "variant", "provider"], registry=r
        )
        self.dropped = Counter(
            "mt_dropped_requests_total",
            "Requests dropped before their work was done (before it started, or mid-decode with continuous batching)",
            ["model", "reason"],
            registry=r,
        )
        self.in_flight = Gauge("mt_requests_in_flight", "Requests being handled", registry=r)
        self.connections_closed = Counter(
            "mt_connections_closed_total",
            "HTTP connections the server closed on its own, by reason: header_timeout, body_timeout, shed_idle "
            "(the oldest idle one, to make room beyond MT_MAX_CONNECTIONS), refused_full (503: none idle to shed), "
            "bad_request (malformed HTTP)",
            ["reason"],
            registry=r,
        )
        self.key_rejections = Counter(
            "mt_key_rejections_total",
            "Work requests of an API key refused with 429, by key label (sha256 prefix; configured keys only) and "
            "reason: rate_limit (MT_KEY_RATE_PER_S), key_queue_full (MT_KEY_QUEUE_SHARE), queue_full (the whole queue)",
            ["key", "reason"],
            registry=r,
        )

    def _continuous_batching(self, r: CollectorRegistry) -> None:
        """continuous batching (MT_SCHEDULER=continuous) and engine faults"""
        self.step_rows = Histogram(
            "mt_decoder_step_rows",
            "Rows per decoder step (continuous batching)",
            ["model"],
            buckets=ROW_BUCKETS,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            "mt_time_to_first_token_seconds",
            "From a sentence's arrival to its first generated token (continuous batching)",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.live_rows = Gauge("mt_live_rows", "Decoder rows live now (continuous batching)", ["model"], registry=r)
        self.freed_rows = Counter(
            "mt_freed_rows_total",
            "Decoder rows freed before their sentence finished, by reason (deadline, client_disconnected, failed)",
            ["model", "reason"],
            registry=r,
        )
        self.engine_restarts = Counter(
            "mt_engine_restarts_total",
            "Engine restarts, by cause: probe_failed (an engine call raised and a probe translation on that engine "
            "failed), memory (MT_ENGINE_MEMORY_LIMIT_MB), or how its worker process ended (SIGSEGV, SIGKILL ..., "
            "exit_<code>; MT_ENGINE_PROCESS)",
            ["model", "cause"],
            registry=r,
        )
        self.engine_retried_batches = Counter(
            "mt_engine_retried_batches_total",
            "Whole batches, and live decodes' sentences that do not stream, sent once more to a new engine worker "
            "process after theirs died (MT_ENGINE_PROCESS)",
            ["model"],
            registry=r,
        )

    def _documents_and_state(self, r: CollectorRegistry) -> None:
        """document translation (service/serving/document_jobs.py); scale-out (service/state/, serving/cache.py)"""
        self.document_jobs = Counter(
            "mt_document_jobs_total",
            "Document jobs that ended, by format and outcome (done, failed)",
            ["format", "outcome"],
            registry=r,
        )
        self.document_jobs_active = Gauge(
            "mt_document_jobs_active", "Document jobs being translated by this process now", registry=r
        )
        self.document_sentences_remaining = Gauge(
            "mt_document_sentences_remaining",
            "Sentences of the document jobs this process translates now still to translate (their progress)",
            registry=r,
        )
        self.document_sentences = Counter(
            "mt_document_sentences_translated_total", "Sentences of documents translated", ["format"], registry=r
        )
        # scale-out (service/state/, service/serving/cache.py)
        self.cache_hits = Counter(
            "mt_cache_hits_total", "Sentences answered from the translation cache (no queue)", ["model"], registry=r
        )
        self.cache_misses = Counter(
            "mt_cache_misses_total", "Sentences looked up in the translation cache and not found", ["model"], registry=r
        )
        self.state_store_up = Gauge(
            "mt_state_store_up",
            "1 while the shared state store (Redis, MT_REDIS_URL) answers, 0 while this replica runs degraded on its "
            "local state; 1 with the embedded store",
            registry=r,
        )
        self.state_store_up.set(1)
