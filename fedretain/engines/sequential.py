"""The sequential engine: the reference, one client after another, as plain as a loop can be.

Each client of the round trains with :func:`~fedretain.core.client.train_client` on its own
seeded mini-batches; :class:`~fedretain.engines.round.Rounds` does the rest of the round.

With ``workers=N > 1`` (``engine.workers``), N clients train at a time on N Python threads,
each with one torch thread and its own copy of the model (``functional_call`` substitutes the
parameters into the module, so threads cannot share one): PyTorch's kernels release the GIL,
and on small batches N one-threaded clients use N cores better than one client on N intra-op
threads (``benchmarks/RESULTS.md``, "Clients on threads"). Each client's numbers are those of
the engine with ``threads=1``, whatever the threads' timing; updates come back in the round's
order, with at most ``2 N`` clients in flight. Modules an algorithm holds itself (DGR's
generator) are shared by the threads, one forward pass at a time
(:func:`~fedretain.models.registry.substituted_call`). Models that draw random numbers in training
(dropout, from torch's global generator) keep ``workers=1``: their draws would depend on the
threads' timing.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import torch
from torch import nn

from fedretain.core.client import ClientUpdate, train_client
from fedretain.engines.round import Trained, Work
from fedretain.errors import ConfigError


def draws_random_numbers(model: nn.Module) -> bool:
    """Whether ``model`` draws from torch's global generator in training (dropout)."""
    return any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules())


class SequentialEngine:
    name = "sequential"
    choice = ""  # engine=auto: why this engine was chosen
    store = None  # the run's store keeps the client states
    remote = False

    def __init__(self, workers: int = 1) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"engine.workers must be an integer >= 1, got {workers!r}")
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()  # each worker thread's copy of the task

    debug = False  # engine=debug: errors located, NaN/Inf stopped where they arise

    def train(self, work: Work) -> Iterator[Trained]:
        if self.workers > 1:
            yield from self._train_on_threads(work)
            return
        for cid in work.info.clients:
            update = train_client(
                work.algorithm,
                work.task,
                work.downlink,
                *work.inputs(cid),
                work.info,
                cid,
                debug=self.debug,
            )
            yield Trained.one(cid, update, work.keep_models)

    def _train_on_threads(self, work: Work) -> Iterator[Trained]:
        if draws_random_numbers(work.task.model):
            raise ConfigError(
                "engine.workers > 1: the model draws random numbers in training (dropout), "
                "which threads would draw in a timing-dependent order; set engine.workers=1"
            )
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="fedretain-client")
        outer = torch.get_num_threads()
        torch.set_num_threads(1)  # for the round: the clients' threads and the main thread's work

        def run(cid: int, inputs: tuple) -> ClientUpdate:
            torch.set_num_threads(1)  # this thread's OpenMP setting, not only the global one
            local = self._local.__dict__
            if local.get("source") is not work.task:  # this thread's own copy of the model
                local["source"] = work.task
                local["task"] = replace(work.task, model=copy.deepcopy(work.task.model))
            return train_client(
                work.algorithm, local["task"], work.downlink, *inputs, work.info, cid
            )

        pending: deque[tuple[int, Future[ClientUpdate]]] = deque()
        try:
            for cid in work.info.clients:
                inputs = work.inputs(cid)  # the store is read by the main thread only
                pending.append((cid, self._pool.submit(run, cid, inputs)))
                if len(pending) >= 2 * self.workers:
                    done, future = pending.popleft()
                    yield Trained.one(done, future.result(), work.keep_models)
            while pending:
                done, future = pending.popleft()
                yield Trained.one(done, future.result(), work.keep_models)
        finally:
            for _, future in pending:
                future.cancel()
            for _, future in pending:
                if not future.cancelled():
                    future.exception()  # wait: no thread may still run after the round
            torch.set_num_threads(outer)

    def close(self) -> None:
        """Stop the worker threads, if any."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class DebugEngine(SequentialEngine):
    """``engine=debug``: the sequential engine, one client at a time on one thread, where an
    error raised in a client's training or in the server's aggregation carries a note naming
    the round, the client and the stage (``local_init``, ``local_step 3 of 40``,
    ``local_final``), and the first NaN or Inf a stage gives stops the run naming the stage
    and the value's key. Its numbers are the sequential engine's (a run that meets no NaN)."""

    name = "debug"
    debug = True

    def __init__(self) -> None:
        super().__init__(workers=1)
