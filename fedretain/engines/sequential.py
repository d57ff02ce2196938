"""The sequential engine: the reference, one client after another, as plain as a loop can be.

Each round: sample clients, broadcast, train each client locally (its own seeded mini-batch
order), collect the uplinks, aggregate them stacked on a client axis, keep the client states.
"""

from __future__ import annotations

import numpy as np
import torch

from fedretain.core.algorithm import RoundInfo
from fedretain.core.tree import Tree
from fedretain.engines.base import EMPTY_ROUND, DivergenceError, EngineBase, UplinkStack


class SequentialEngine(EngineBase):
    name = "sequential"

    def train_client(self, cid: int, downlink: Tree, info: RoundInfo) -> tuple[Tree, float]:
        """Local training of one client: returns its uplink and mean training loss."""
        algo = self.algorithm
        data = self.client_data(cid)
        ctx = self.context(cid, info, data)
        client_state = self.client_state(cid, downlink)
        state = algo.local_init(downlink, client_state, ctx)
        losses = []
        for idx in self.plan(cid, info):
            i = torch.from_numpy(idx).to(self.device)
            batch = {"x": data["x"][i], "y": data["y"][i], "w": data["w"][i], "idx": i}
            batch["label_mask"] = data["label_mask"]
            state, metrics = algo.local_step(state, batch, ctx)
            losses.append(metrics["loss"])
        uplink, new_client_state = algo.local_final(state, client_state, ctx)
        self.check_payload(uplink, algo.uplink_keys, "uplink")
        loss = torch.stack(losses).mean()
        self.check_finite({"loss": loss, **uplink}, info.round, f"the update of client {cid}")
        self.keep_client_state(cid, new_client_state)
        self.remember_local_model(cid, state)
        return uplink, float(loss)

    def run_round(
        self,
        server_state: Tree,
        rnd: int,
        lr: float,
        per_round: int = 0,
        clients: np.ndarray | None = None,
    ) -> tuple[Tree, dict[str, float]]:
        """One round with ``clients`` (default: ``per_round`` drawn uniformly)."""
        info = self.start_round(rnd, lr, per_round, clients)
        if info is None:  # nobody reachable: the global model stays
            return server_state, dict(EMPTY_ROUND)
        downlink = self.algorithm.broadcast(server_state, info)
        self.check_payload(downlink, self.algorithm.downlink_keys, "downlink")
        stack = UplinkStack(len(info.clients))
        losses, kept = [], []
        for cid in info.clients:
            self.ledger.record(cid, "down", downlink)
            try:
                uplink, loss = self.train_client(cid, downlink, info)
            except DivergenceError:
                if self.on_divergence != "skip":
                    raise
                continue
            self.ledger.record(cid, "up", uplink)
            stack.add(uplink)
            losses.append(loss)
            kept.append(cid)
        return self.finish_round(server_state, info, stack.stacked(), kept, losses)
