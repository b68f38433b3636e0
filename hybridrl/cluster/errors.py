"""Typed errors for remote work: each names the role (or pool), the rank and what was being done."""


class WorkerCallError(RuntimeError):
    def __init__(self, role: str, rank: int, method: str, cause: str) -> None:
        super().__init__(f"{role} worker rank {rank} failed in {method}: {cause}")
        self.role, self.rank, self.method = role, rank, method


class WorkerCallTimeout(TimeoutError):
    def __init__(self, role: str, ranks: list[int], method: str, timeout_s: float) -> None:
        super().__init__(
            f"{role} worker rank(s) {ranks} did not finish {method} within {timeout_s:.0f} s "
            f"(trainer.ray.call_timeout_s). A rank may be stuck in a collective or out of memory."
        )
        self.role, self.ranks, self.method = role, ranks, method


class PoolPlacementError(RuntimeError):
    """The cluster cannot place a pool's bundles within the start-up timeout."""


class ClusterConnectError(ConnectionError):
    """Nothing answers at ``trainer.ray.address``."""
