"""A SuperNode whose ClientApp stays warm: one long-running ClientApp process per SuperNode.

Flower 1.41 starts a fresh ``flwr-clientapp`` process for every message a SuperNode receives
(``--isolation subprocess``: the SuperNode's ``flower-superexec`` polls its Runtime API and
launches ``flwr-clientapp --token ...``, which serves one task and exits; see
``flwr/supercore/superexec/executor/subprocess_executor.py`` and
``flwr/supernode/runtime/run_clientapp.py``): 3-4 s of imports (torch, fedretain) and a rebuilt
federation per client per round. Its warm executor pools
(``flwr/supercore/superexec/executor/warm_executor_pool.py``) serve Kubernetes and the
``flwr-agentapp``/``flwr-model``/``flwr-connector`` task types only, not ClientApps.

Here, instead, the SuperNode runs with ``--isolation process`` ("the ClientApp runs in a
separate process started outside the SuperNode") and :func:`serve`, one process started beside
it, takes the place of Flower's SuperExec: it acquires each ClientApp task from the SuperNode's
Runtime API and runs it *in its own process* (what ``flwr-clientapp`` does, minus the exit), so
torch, fedretain, the ClientApp and the federation the ClientApp builds
(:func:`fedretain.flower.client.federation_of`, cached per process) are loaded once and serve
every message of every run. Per-client state still lives in the SuperNode's ``context.state``
(pulled and pushed with each task, exactly as in the cold path). Commands::

    python -m fedretain.flower node --insecure --superlink 127.0.0.1:9093 \\
        --host 127.0.0.1 --port 9100 --node-config "partition-id=0 num-partitions=3"
    python -m fedretain.flower node --cold ...        # Flower's SuperExec: a process a message
    python -m fedretain.flower worker --runtime-api-address 127.0.0.1:9100 --insecure
                                                      # the warm process alone, beside a
                                                      # `flower-supernode --isolation process`

``node`` takes ``flower-supernode``'s arguments and becomes the SuperNode (``exec``: same
process id); the SuperNode keeps the warm worker running as its child (unless ``--cold``),
starting another if it crashes, so stopping the node's process tree stops its worker too, and
the worker exits when the node dies.

Polling: an idle Flower 1.41 SuperNode asks the SuperLink for messages every 3 s
(``time.sleep(3)`` in ``start_client_internal``, ``flwr/supernode/start_client_internal.py``;
not configurable) and waits for its ClientApp's reply in steps of 0.5 s (``_push_messages``):
with rounds of a few seconds that alone is 3 s per round. ``node --poll S`` (default 0.1)
caps those sleeps at ``S`` seconds after each message, growing by 1.25x per empty poll up to
``IDLE_POLL`` (1 s) while no message comes (the warm worker polls its SuperNode the same
way); ``--poll 0`` keeps Flower's. Idle, a warm node and its worker then cost ~1 small loopback
HTTP request a second each. Objects of a message not yet there are asked for again after
50 ms (the SuperNode, from the SuperLink) or 20 ms (the worker, from its SuperNode), not
Flower's 1 s (``PULL_INITIAL_BACKOFF``, ``flwr/supercore/constant.py``).

Drawbacks of warm mode (``--cold`` keeps Flower's process per message): a ClientApp that
crashes its process (segfault, out of memory) takes down the warm process: the message it
was serving is lost (Flower answers it with an error once the task's heartbeat expires) and
the SuperNode starts another warm process (a cold start) for the next ones. The process keeps
what the app imported, so a new version of fedretain (or of an app's own modules) needs the
node restarted, and the runs on one node share one process (torch threads, module state),
one message at a time, as the SuperNode serves them anyway.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from fedretain.errors import ConfigError

if TYPE_CHECKING:
    from flwr.clientapp import ClientApp

log = logging.getLogger("fedretain.flower.node")

DEFAULT_POLL = 0.1  # seconds: the worker's and (capped) the SuperNode's polling intervals
IDLE_POLL = 1.0  # seconds: what they grow to (x1.25 per empty poll) while no message comes
PULL_RETRY, PULL_RETRY_CAP = 0.02, 0.5  # seconds: first and longest wait for a missing object
SUPERNODE_HOST, SUPERNODE_PORT = "127.0.0.1", 9094  # flower-supernode's --host/--port defaults

# The SuperNode, with its polling sleeps capped, and its warm ClientApp process, restarted if
# it crashes (argv: poll and idle poll seconds, the worker's command as JSON or [], then
# flower-supernode's arguments). Only Flower is imported: the SuperNode process stays light.
_SUPERNODE = """
import functools, inspect, json, logging, os, signal, subprocess, sys, threading, time
poll, slowest = float(sys.argv.pop(1)), float(sys.argv.pop(1))
worker = json.loads(sys.argv.pop(1))
import flwr.supernode.start_client_internal as sci
if poll > 0:
    if "time.sleep(3)" not in inspect.getsource(sci) or not hasattr(sci, "_push_messages"):
        logging.warning("fedretain: this Flower's SuperNode polls differently; --poll ignored")
    else:
        class _Polls:  # Flower's idle poll (3 s): from poll up to idle, x1.25 per empty poll
            idle = poll
            def __getattr__(self, name):
                return getattr(time, name)
            def sleep(self, seconds):
                if seconds == 3:
                    time.sleep(self.idle)
                    self.idle = min(self.idle * 1.25, max(slowest, poll))
                else:
                    time.sleep(min(seconds, poll))
        sci.time = polls = _Polls()
        push_messages = sci._push_messages
        def _push_then_poll_fast(*args, **kwargs):  # a message came: the next may come soon
            polls.idle = poll
            return push_messages(*args, **kwargs)
        sci._push_messages = _push_then_poll_fast
    sci.pull_objects = functools.partial(
        sci.pull_objects, initial_backoff=min(poll, 0.05), backoff_cap=max(poll, 0.5)
    )
if worker:
    def supervise():
        stopped = (0, -signal.SIGTERM, -signal.SIGINT)
        while True:
            code = subprocess.Popen([*worker, "--parent-pid", str(os.getpid())]).wait()
            if code in stopped:
                return
            logging.warning("fedretain: the warm ClientApp process died (%s); restarting", code)
            time.sleep(1.0)
    threading.Thread(target=supervise, name="fedretain-worker", daemon=True).start()
sys.argv[0] = "flower-supernode"
from flwr.supernode.cli.flower_supernode import flower_supernode
sys.exit(flower_supernode())
"""


# ---- the warm ClientApp process ------------------------------------------------------------


def _retry_invoker() -> Any:
    """Retries for the Runtime API that never signal this process (Flower's own send SIGINT
    on a 401, which would end a warm worker): transport errors and 502/503/504, for 30 s."""
    import httpx
    from flwr.supercore.retry import RetryInvoker, exponential

    def giveup(exc: Exception) -> bool:
        if isinstance(exc, httpx.HTTPStatusError):
            return exc.response.status_code not in (502, 503, 504)
        return False

    return RetryInvoker(
        lambda: exponential(max_delay=2),
        (httpx.TransportError, httpx.HTTPStatusError),
        max_tries=None,
        max_time=30,
        should_giveup=giveup,
    )


def _runtime_client(address: str, certificates: bytes | None, interceptors: list) -> Any:
    from flwr.supercore.runtime import RuntimeHttpClient

    return RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=certificates is None,
        root_certificates=certificates,
        interceptors=interceptors,
        retry_invoker=_retry_invoker(),
    )


class Worker:
    """A warm ClientApp process for the SuperNode whose Runtime API is at ``address``: it
    runs every ClientApp task of that node in this process (:meth:`serve`)."""

    def __init__(self, address: str, certificates: bytes | None = None) -> None:
        self.address = address
        self.certificates = certificates
        self.apps: dict[str, ClientApp] = {}  # FAB hash -> its ClientApp (the latest only)
        self.tasks = 0

    def preload(self) -> None:
        """Import what every fedretain message needs, before the first one comes (by name, as
        Flower loads an app: the worker is a launcher, above the app it serves)."""
        import importlib

        for name in ("torch", "fedretain.flower.app", "fedretain.flower.records"):
            importlib.import_module(name)

    def acquire(self, client: Any) -> str | None:
        """The token of a ClientApp task of this node, or None when there is none."""
        from flwr.proto.runtime_pb2 import AcquireTaskRequest
        from flwr.supercore.constant import TaskType

        res = client.AcquireTask(AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP]))
        return res.token if res.HasField("task") and res.token else None

    def client_app(self, run: Any, fab: Any) -> ClientApp:
        """The ClientApp of ``run`` (its FAB installed and its module imported once)."""
        from flwr.cli.install import install_from_fab
        from flwr.clientapp.utils import get_load_client_app_fn

        if fab.hash_str not in self.apps:
            self.apps.clear()  # one run's app at a time (a FAB per run: the config is in it)
            install_from_fab(fab.content, skip_prompt=True)
            load = get_load_client_app_fn(default_app_ref="", app_path=None, multi_app=True)
            self.apps[fab.hash_str] = load(run.fab_id, run.fab_version, fab.hash_str)
        return self.apps[fab.hash_str]

    def run_task(self, token: str) -> None:
        """One ClientApp task, as ``flwr-clientapp --token`` runs it
        (``flwr/supernode/runtime/run_clientapp.py``), in this process."""
        import httpx
        from flwr.app import Error, Message
        from flwr.clientapp.client_app import LoadClientAppError
        from flwr.common.constant import ErrorCode, SubStatus
        from flwr.proto.runtime_pb2 import SendTaskHeartbeatRequest
        from flwr.supercore.heartbeat import HeartbeatSender
        from flwr.supercore.interceptors import (
            RuntimeTokenHttpInterceptor,
            RuntimeVersionHttpInterceptor,
        )
        from flwr.supernode.runtime.run_clientapp import push_message, push_task_output

        client = _runtime_client(
            self.address,
            self.certificates,
            [
                RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
                RuntimeTokenHttpInterceptor(token),
            ],
        )

        def heartbeat() -> bool:  # Flower's raises SIGINT once the task is over: not here
            try:
                client.SendTaskHeartbeat(SendTaskHeartbeatRequest())
            except httpx.TransportError:
                return False
            except httpx.HTTPStatusError:
                return True  # the task is gone: nothing to keep alive
            return True

        beat = HeartbeatSender(heartbeat)
        beat.start()
        message = reply = context = None
        status, details = SubStatus.FAILED, "ClientApp task failed due to unknown reason"
        started = time.monotonic()
        times = [started]
        try:
            message, context, run, fab = pull_task_input(client)
            times.append(time.monotonic())
            reply = self.client_app(run, fab)(message=message, context=context)
            times.append(time.monotonic())
            status, details = SubStatus.COMPLETED, ""
        except Exception as ex:  # the ClientApp's error goes back as the reply, as Flower's
            code = ErrorCode.CLIENT_APP_RAISED_EXCEPTION
            reason = f"{type(ex)}:<'{ex}'>"
            if isinstance(ex, LoadClientAppError):
                code = ErrorCode.LOAD_CLIENT_APP_EXCEPTION
                reason = "An exception was raised when attempting to load `ClientApp`"
            log.exception("the ClientApp raised an exception")
            details = reason
            if message is not None:
                reply = Message(Error(code=code, reason=reason), reply_to=message)
        finally:
            try:
                if reply is not None and context is not None:
                    push_message(client, reply, context)
            except Exception:
                log.exception("could not push the reply to the SuperNode")
            with contextlib.suppress(RuntimeError):  # already stopped if its thread died
                beat.stop()
            push_task_output(client=client, context=context, sub_status=status, details=details)
            client.close()
            self.tasks += 1
            times.append(time.monotonic())
            steps = " + ".join(f"{b - a:.3f}" for a, b in itertools.pairwise(times))
            kind = message.metadata.message_type if message is not None else "?"
            log.info("task %d (%s): %s s (pull + app + push)", self.tasks, kind, steps)

    def serve(self, poll: float = DEFAULT_POLL) -> None:
        """Run the node's ClientApp tasks, one at a time, until this process is stopped."""
        import httpx
        from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor

        self.preload()
        client = _runtime_client(
            self.address,
            self.certificates,
            [RuntimeVersionHttpInterceptor(component_name="SuperExec")],
        )
        log.info("warm ClientApp process %d serving %s", os.getpid(), self.address)
        wait = poll
        while True:
            try:
                token = self.acquire(client)
            except (httpx.HTTPError, RuntimeError) as exc:  # the node is not up yet, or gone
                log.debug("AcquireTask: %s", exc)
                token = None
            if token is None:
                time.sleep(wait)
                wait = min(wait * 1.25, max(IDLE_POLL, poll))
            else:
                self.run_task(token)
                wait = poll  # the node's next message may come soon


def pull_task_input(client: Any) -> tuple[Any, Any, Any, Any]:
    """The task's (message, context, run, FAB), as Flower's ``pull_task_input``
    (``flwr/supernode/runtime/run_clientapp.py``) but retrying objects not there yet after
    ``PULL_RETRY`` s, not 1 s (``PULL_INITIAL_BACKOFF``, ``flwr/supercore/constant.py``): a
    warm process asks as soon as the SuperNode creates the task, which is before the SuperNode
    has pulled the message's objects from the SuperLink."""
    from flwr.app import Message
    from flwr.common.serde import context_from_proto, fab_from_proto, run_from_proto
    from flwr.proto.node_pb2 import Node
    from flwr.proto.runtime_pb2 import PullAppMessagesRequest, PullTaskInputRequest
    from flwr.supercore.inflatable.inflatable_protobuf_utils import (
        make_confirm_message_received_fn_protobuf,
        make_pull_object_fn_protobuf,
    )
    from flwr.supercore.inflatable.inflatable_utils import pull_and_inflate_object_from_tree
    from flwr.supercore.task_identity import TaskIdentity

    res = client.PullTaskInput(PullTaskInputRequest())
    TaskIdentity.task_id = res.task_id
    TaskIdentity.run_id = res.run.run_id
    TaskIdentity.node_id = res.context.node_id
    context, run, fab = (
        context_from_proto(res.context),
        run_from_proto(res.run),
        fab_from_proto(res.fab),
    )
    pulled = client.PullMessages(PullAppMessagesRequest())
    if not pulled.messages_list:
        raise RuntimeError("No messages received from Runtime API")
    node = Node(node_id=context.node_id)
    tree = pulled.message_object_trees[0]
    message = pull_and_inflate_object_from_tree(
        tree,
        make_pull_object_fn_protobuf(client.PullObject, node, context.run_id),
        make_confirm_message_received_fn_protobuf(
            client.ConfirmMessageReceived, node, context.run_id
        ),
        return_type=Message,
        initial_backoff=PULL_RETRY,
        backoff_cap=PULL_RETRY_CAP,
    )
    message.metadata.__dict__["_message_id"] = tree.object_id
    return message, context, run, fab


def _exit_with(parent_pid: int) -> None:
    """End this process (at once: no task to finish for a dead node) when ``parent_pid``
    ends."""

    own_parent = os.getppid() == parent_pid

    def watch() -> None:
        while True:
            time.sleep(0.2)
            if own_parent and os.getppid() != parent_pid:  # re-parented: it died (maybe a
                os._exit(0)  # zombie nobody reaped yet, which os.kill would still find)
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="parent-monitor", daemon=True).start()


def serve(
    address: str,
    *,
    root_certificates: str | None = None,
    parent_pid: int | None = None,
    poll: float = DEFAULT_POLL,
) -> None:
    """Serve the ClientApp tasks of the SuperNode whose Runtime API is at ``address`` (no TLS
    unless ``root_certificates``, a PEM file) from this process; stop when ``parent_pid``
    (if given) ends."""
    if poll <= 0:
        raise ConfigError(f"--poll must be > 0 seconds, got {poll}; e.g. --poll 0.1")
    certificates = None
    if root_certificates:
        with open(root_certificates, "rb") as f:
            certificates = f.read()
    if parent_pid is not None:
        _exit_with(parent_pid)
    Worker(address, certificates).serve(poll)


# ---- command lines --------------------------------------------------------------------------


def _node_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="python -m fedretain.flower node", add_help=False)
    p.add_argument("--cold", action="store_true")
    p.add_argument("--poll", type=float, default=DEFAULT_POLL)
    p.add_argument("--isolation")
    p.add_argument("--host", default=SUPERNODE_HOST)
    p.add_argument("--port", type=int, default=SUPERNODE_PORT)
    p.add_argument("--ssl-ca-certfile")
    return p.parse_known_args(argv)


def supernode_command(
    argv: list[str], poll: float = DEFAULT_POLL, worker: list[str] | None = None
) -> list[str]:
    """The command of a ``flower-supernode`` with ``argv`` whose polling sleeps are capped at
    ``poll`` seconds (0: Flower's own) and which keeps the process ``worker`` (a command, to
    which it adds ``--parent-pid``) running beside it, restarting it if it crashes."""
    settings = [str(poll), str(IDLE_POLL), json.dumps(worker or [])]
    return [sys.executable, "-c", _SUPERNODE, *settings, *argv]


def node_main(argv: list[str]) -> int:
    """``python -m fedretain.flower node [--cold] [--poll S] FLOWER-SUPERNODE-ARGS``."""
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    args, rest = _node_args(argv)
    if args.poll < 0:
        raise ConfigError(f"--poll must be >= 0 seconds, got {args.poll}; 0 keeps Flower's 3 s")
    if args.isolation is not None:
        raise ConfigError(
            "node sets --isolation itself (process when warm, subprocess with --cold); drop it"
        )
    if "--ssl-certfile" in rest and not args.ssl_ca_certfile and not args.cold:
        raise ConfigError(
            "a warm node's worker needs the Runtime API's CA: add --ssl-ca-certfile, or --cold"
        )
    isolation = "subprocess" if args.cold else "process"
    flower = [*rest, "--isolation", isolation, "--host", args.host, "--port", str(args.port)]
    if args.ssl_ca_certfile:
        flower += ["--ssl-ca-certfile", args.ssl_ca_certfile]
    worker: list[str] = []
    if not args.cold:
        host = f"[{args.host}]" if ":" in args.host else args.host
        worker = [sys.executable, "-m", "fedretain.flower.node", "worker"]
        worker += ["--runtime-api-address", f"{host}:{args.port}"]
        worker += ["--poll", str(args.poll or DEFAULT_POLL)]
        if args.ssl_ca_certfile:
            worker += ["--root-certificates", args.ssl_ca_certfile]
    sys.stdout.flush()
    sys.stderr.flush()
    command = supernode_command(flower, args.poll, worker)
    os.execv(command[0], command)
    return 0  # pragma: no cover - execv does not return


def worker_main(argv: list[str]) -> int:
    """``python -m fedretain.flower worker --runtime-api-address HOST:PORT ...``."""
    p = argparse.ArgumentParser(
        prog="python -m fedretain.flower worker",
        description="A warm ClientApp process serving a SuperNode started with "
        "--isolation process (one per SuperNode).",
    )
    p.add_argument("--runtime-api-address", required=True, help="the SuperNode's --host:--port")
    p.add_argument("--root-certificates", help="the Runtime API's CA (PEM); none: no TLS")
    p.add_argument("--insecure", action="store_true", help="no TLS (the default without certs)")
    p.add_argument("--parent-pid", type=int, help="exit when this process ends")
    p.add_argument("--poll", type=float, default=DEFAULT_POLL, help="seconds between polls")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fedretain worker: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    with contextlib.suppress(KeyboardInterrupt):
        serve(
            args.runtime_api_address,
            root_certificates=args.root_certificates,
            parent_pid=args.parent_pid,
            poll=args.poll,
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m fedretain.flower.node node|worker ...`` (what ``python -m fedretain.flower
    node|worker`` runs, with fewer imports): a bad option is one line and exit status 2."""
    argv = sys.argv[1:] if argv is None else argv
    commands = {"node": node_main, "worker": worker_main}
    if not argv or argv[0] not in commands:
        print("usage: python -m fedretain.flower.node {node,worker} ...", file=sys.stderr)
        return 2
    try:
        return commands[argv[0]](argv[1:])
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


__all__ = [
    "DEFAULT_POLL",
    "Worker",
    "main",
    "node_main",
    "serve",
    "supernode_command",
    "worker_main",
]

if __name__ == "__main__":
    sys.exit(main())
