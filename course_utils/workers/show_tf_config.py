"""Notebook 07: a worker that only reads its ``TF_CONFIG`` and says what it learned (no TensorFlow).

Every task runs this same program; the one environment variable is what makes them different.

Options that make it behave like a server, for trying the launcher without TensorFlow:
``--serve SECONDS`` listens on the task's own port (as a gRPC server would) and stays up;
``--fail TASK`` makes that task (``"worker 1"``) raise an error; ``--child`` starts a child
process, to show that stopping a task stops everything it started.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from typing import Optional, Sequence

from ..cluster.spec import chief_of, describe_jobs
from .common import ready, report, say, start_watchdog, task_from_tf_config


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_utils.workers.show_tf_config")
    parser.add_argument("--serve", type=float, default=0.0)
    parser.add_argument("--fail", default="")
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args(argv)
    start_watchdog()
    kind, index, cluster = task_from_tf_config()
    if kind is None:
        say("no TF_CONFIG: a single process, not part of any cluster")
        return
    hosts = sorted({address.rsplit(":", 1)[0] for addresses in cluster.values() for address in addresses})
    me = f"{kind} {index}"
    chief = chief_of(cluster)
    say(f"I am {me} in a cluster of {describe_jobs(cluster)} (hosts: {', '.join(hosts)})")
    say("I am the chief: I write the checkpoints and the logs" if me == chief else f"the chief is {chief}")
    if args.fail == me:
        raise RuntimeError(f"{me} was asked to fail (--fail)")
    if args.serve:
        address = cluster[kind][index]
        listener = socket.socket()
        listener.bind(("localhost", int(address.rsplit(":", 1)[1])))
        listener.listen()
        children = []
        if args.child:
            children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
        report(pid=os.getpid(), children=[c.pid for c in children])
        ready()
        say("serving")
        time.sleep(args.serve)
        listener.close()
        say("done serving")


if __name__ == "__main__":
    main()
