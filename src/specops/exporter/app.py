"""Wire the exporter together: log follower, scraper thread, registry, HTTP exposition."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.exposition import generate_latest

from specops.exporter.collector import SpecopsCollector
from specops.exporter.config import ExporterConfig
from specops.exporter.logfollow import FileFollower, JournalFollower, LogFollower
from specops.exporter.logline import LogAcceptance
from specops.exporter.state import Scraper

log = logging.getLogger("specops.exporter")


class StartupError(RuntimeError):
    """The exporter cannot start (its port is in use, ...); the message is one line."""


class Exporter:
    def __init__(self, cfg: ExporterConfig) -> None:
        self.cfg = cfg
        self.stop = threading.Event()
        self.log_acceptance: LogAcceptance | None = None
        self.follower: LogFollower | None = None
        if cfg.log_journal_unit or cfg.log_file:
            self.log_acceptance = LogAcceptance()
            if cfg.log_journal_unit:
                self.follower = JournalFollower(cfg.log_journal_unit, self.log_acceptance.feed, self.stop)
            else:
                assert cfg.log_file is not None
                self.follower = FileFollower(cfg.log_file, self.log_acceptance.feed, self.stop)
        self.scraper = Scraper(cfg, self.log_acceptance)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SpecopsCollector(self.scraper))
        # the exporter's own process_* series (CPU, RSS): what the overhead benchmark reads
        ProcessCollector(registry=self.registry)
        self._thread = threading.Thread(target=self.scraper.run, args=(self.stop,), name="scraper",
                                        daemon=True)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def start(self, serve: bool = True) -> None:
        """Listen first (raising :class:`StartupError` before anything else runs), then follow and scrape."""
        if serve:
            where = f"{self.cfg.listen_address}:{self.cfg.listen_port}"
            try:
                self.server, _ = start_http_server(self.cfg.listen_port, self.cfg.listen_address, self.registry)
            except (OSError, OverflowError) as exc:  # in use, no such address, not permitted, out of range
                self.scraper.close()
                raise StartupError(f"cannot listen on {where}: {getattr(exc, 'strerror', None) or exc}") from exc
            log.info("serving on http://%s/metrics, scraping %s (%s) every %gs", where, self.cfg.server_url,
                     self.scraper.engine.label, self.cfg.interval)
        for series, reason in self.scraper.engine.unsupported:
            log.info("engine %s: no %s (%s)", self.scraper.engine.name, series, reason)
        if self.follower:
            self.follower.start()
        self._thread.start()

    def shutdown(self) -> None:
        self.stop.set()
        self._thread.join(timeout=self.cfg.timeout * 5 + 5)
        server = getattr(self, "server", None)
        if server is not None:
            server.shutdown()
            server.server_close()
        self.scraper.close()

    def serve_forever(self) -> int:
        def _stop(signum: int, frame: FrameType | None) -> None:
            log.info("signal %d: stopping", signum)
            self.stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        self.start()
        self.stop.wait()
        self.shutdown()
        return 0
