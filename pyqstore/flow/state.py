"""A node instance's state: a dict-like view on a record namespace of its
casket.

The node's function runs outside any transaction, so its writes cannot go
to the casket yet: they are kept in the view (reads see them) and written
by the firing's one transaction (:meth:`State.write`), or dropped with
the firing when the function raises (:meth:`State.discard`).  Keys are str
(UTF-8 in the record's key), values anything picklable."""
from __future__ import annotations

import pickle
from typing import Any, Iterator, MutableMapping

from .. import Casket

_DELETED = object()


class State(MutableMapping[str, Any]):
    """The committed records under prefix, overlaid with this firing's
    writes."""

    def __init__(self, casket: Casket, prefix: bytes) -> None:
        self._casket = casket
        self._prefix = prefix
        self._pending: dict[str, Any] = {}

    def _key(self, key: str) -> bytes:
        if not isinstance(key, str):
            raise TypeError(f"state keys are str, not {type(key).__name__}")
        return self._prefix + key.encode("utf-8", "surrogatepass")

    def __getitem__(self, key: str) -> Any:
        if key in self._pending:
            v = self._pending[key]
            if v is _DELETED:
                raise KeyError(key)
            return v
        raw = self._casket.get(self._key(key))
        if raw is None:
            raise KeyError(key)
        return pickle.loads(raw)

    def __setitem__(self, key: str, value: Any) -> None:
        self._key(key)
        self._pending[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._pending[key] = _DELETED

    def _stored(self) -> Iterator[str]:
        n = len(self._prefix)
        for k in self._casket.keys(start=self._prefix):
            if not k.startswith(self._prefix):
                return
            yield k[n:].decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        seen = set()
        for k in self._stored():
            seen.add(k)
            if self._pending.get(k, None) is not _DELETED:
                yield k
        for k, v in list(self._pending.items()):
            if k not in seen and v is not _DELETED:
                yield k

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def write(self) -> None:
        """Store this firing's writes, inside the firing's transaction; they
        stay in the view until :meth:`discard`, so a transaction that did
        not commit (a full downstream queue) can be tried again."""
        for k, v in self._pending.items():
            if v is _DELETED:
                self._casket.out(self._key(k))
            else:
                self._casket.put(self._key(k), pickle.dumps(v, protocol=4))

    def discard(self) -> None:
        """End the firing: its writes were committed, or the function
        raised and they are dropped."""
        self._pending.clear()
