"""The seeds' other systems and today's peers, each in a module of its own
(peers_*.py), registered here so backends.BACKENDS lists them after the
original adapters."""
from __future__ import annotations

from . import backends as bk
from .peers_hdf5 import HDF5
from .peers_jvm import BdbJe, Derby, SqliteJdbc
from .peers_lsm import LevelDB, RocksDB
from .peers_sql import MySQL

PEERS: list[bk.Backend] = [MySQL(), Derby(), BdbJe(), SqliteJdbc(), HDF5(), RocksDB(),
                           LevelDB()]
