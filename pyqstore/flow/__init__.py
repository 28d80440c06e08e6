"""pyqstore.flow: data flows whose nodes each own a casket.

So far the foundation the runners build on: the exactly-once edge between
two caskets (:mod:`pyqstore.flow.edge`: :class:`Outbox`, :class:`Inbox`,
:func:`transfer`) and the one-owner-per-casket rule
(:mod:`pyqstore.flow.owner`: :func:`claim`).  See docs/DESIGN.md, "Flow
edges".
"""
from __future__ import annotations

from .edge import TRANSPORT_ERRORS, Inbox, Outbox, Verdict, transfer
from .owner import check_local_volume, claim, owner_epoch

__all__ = ["Outbox", "Inbox", "Verdict", "transfer", "TRANSPORT_ERRORS",
           "claim", "owner_epoch", "check_local_volume"]
