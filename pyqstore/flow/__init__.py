"""pyqstore.flow: data flows on caskets.

The model (:mod:`.graph`: :class:`Flow`), sources and sinks
(:mod:`.sources`, :mod:`.sinks`), the firing on the shared-casket layout
(:mod:`.firing`), the local runner (:mod:`.runner`: :func:`run`), and the
exactly-once edge between two caskets (:mod:`.edge`: :class:`Outbox`,
:class:`Inbox`, :func:`transfer`) with the one-owner-per-casket rule
(:mod:`.owner`: :func:`claim`), and the per-node layout built on it
(:mod:`.pernode`: :class:`NodeInstance`, :class:`Sender`; :mod:`.transport`:
:class:`Transport`, :class:`LocalTransport`); a put-driven source fed by the
application (:class:`PutSource`, :class:`Producer`), and what a run holds
(:func:`pyqstore.flow.status.status`).  The Ray runner is
:mod:`.rayrunner` (``run(flow, dir, runner="ray")``; needs
``pyqstore[ray]``, imported only then).  See README.md "Flows" and "Flows
on Ray" and docs/DESIGN.md "Flows", "Flow edges" and "Flows on Ray".
"""
from __future__ import annotations

from .edge import TRANSPORT_ERRORS, Inbox, Outbox, Verdict, transfer
from .graph import Flow
from .owner import check_local_volume, claim, owner_epoch
from .partition import partition
from .pernode import NodeInstance, Sender
from .runner import Runner, Summary, run
from .sinks import CallbackSink, FileSink, QueueSink
from .producer import Producer
from .sources import FileSource, IterableSource, PutSource
from .transport import LocalTransport, Transport, TransportFactory

__all__ = ["Flow", "run", "Runner", "Summary", "IterableSource", "FileSource", "PutSource",
           "Producer",
           "CallbackSink", "FileSink", "QueueSink", "partition",
           "Outbox", "Inbox", "Verdict", "transfer", "TRANSPORT_ERRORS",
           "claim", "owner_epoch", "check_local_volume",
           "NodeInstance", "Sender", "Transport", "TransportFactory", "LocalTransport"]
