"""pyqstore.flow: data flows on caskets.

The model (:mod:`.graph`: :class:`Flow`), sources and sinks
(:mod:`.sources`, :mod:`.sinks`), the firing on the shared-casket layout
(:mod:`.firing`), the local runner (:mod:`.runner`: :func:`run`), and the
exactly-once edge between two caskets (:mod:`.edge`: :class:`Outbox`,
:class:`Inbox`, :func:`transfer`) with the one-owner-per-casket rule
(:mod:`.owner`: :func:`claim`); a put-driven source fed by the
application (:class:`PutSource`, :class:`Producer`), and what a run holds
(:func:`pyqstore.flow.status.status`).  See README.md "Flows" and docs/DESIGN.md
"Flows" and "Flow edges".
"""
from __future__ import annotations

from .edge import TRANSPORT_ERRORS, Inbox, Outbox, Verdict, transfer
from .graph import Flow
from .owner import check_local_volume, claim, owner_epoch
from .partition import partition
from .runner import Runner, Summary, run
from .sinks import CallbackSink, FileSink, QueueSink
from .producer import Producer
from .sources import FileSource, IterableSource, PutSource

__all__ = ["Flow", "run", "Runner", "Summary", "IterableSource", "FileSource", "PutSource",
           "Producer",
           "CallbackSink", "FileSink", "QueueSink", "partition",
           "Outbox", "Inbox", "Verdict", "transfer", "TRANSPORT_ERRORS",
           "claim", "owner_epoch", "check_local_volume"]
