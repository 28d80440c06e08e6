"""Where a flow keeps things in its shared casket: one naming scheme, so the
firing, the runner and ``status`` agree.  Every name starts ``flow/``, as
the edge's records do (docs/DESIGN.md, "Flow edges")."""
from __future__ import annotations

#: the casket file of a flow's shared layout, inside the run's directory
CASKET = "flow.qdb"
#: the flow itself, pickled by the runner for its node processes
FLOW = "flow.pickle"


def input_queue(node: str, port: str, instance: int | None) -> str:
    """The queue of an input port: one per port for shared work (instance
    None), one per instance for a partitioned edge."""
    base = f"flow/in/{node}/{port}"
    return base if instance is None else f"{base}/{instance}"


def dead_queue(node: str) -> str:
    """The node's dead-letter port: items that failed max_deliveries times."""
    return f"flow/dead/{node}"


def instance_prefix(node: str, instance: int) -> bytes:
    """The record namespace of one node instance; its state lives under
    ``PREFIX + b"s/"``, the runner's bookkeeping under the other letters."""
    return f"flow/node/{len(node)}:{node}/{instance}/".encode()


def state_prefix(node: str, instance: int) -> bytes:
    return instance_prefix(node, instance) + b"s/"


def meta_key(node: str, instance: int, what: str) -> bytes:
    """A bookkeeping record of an instance: ``in``, ``out``, ``failed``
    (counters), ``done`` (finished), ``last`` (its last firing's
    time.time_ns()), ``seq`` and ``inflight`` (sinks), ``closed`` (a
    put-driven source: its producers ended the stream)."""
    return instance_prefix(node, instance) + b"m/" + what.encode()


# ------------------------------------------------- the per-node layout

#: the run's directory records its layout here ("shared" or "per-node"), so
#: a resumed run cannot read one layout's caskets as the other's
LAYOUT = "layout"
#: the per-node layout's caskets, one per node instance, in this directory
NODES = "nodes"


def node_casket(node: str, instance: int) -> str:
    """The casket of one node instance on the per-node layout, relative to
    the run's directory (node names hold no '/' nor '.', so the name is
    unambiguous)."""
    return f"{NODES}/{node}.{instance}.qdb"


def edge_to(edge: str, instance: int) -> str:
    """The name on the wire of an edge into one receiving instance: the
    sender keeps an outbox, and the receiver a mark, per such name."""
    return f"{edge}[{instance}]"


def sender(node: str, instance: int) -> str:
    """The name of a sending instance on the wire."""
    return f"{node}[{instance}]"


def producer_mark(source: str, producer: str) -> bytes:
    """The sequence number of the last batch a producer put into a
    put-driven source: beside the source's records, in its port's casket."""
    p = producer.encode("utf-8")
    return instance_prefix(source, 0) + b"p/" + p
