"""Typed errors for remote work: each names the role (or pool), the rank and what was being done.

``system_failure`` splits them for recovery: a worker that died, a node that left or a rank that stopped
answering is the cluster's failure and worth a restart from the last checkpoint; an exception raised by
our code or the user's (a bad reward function, a config the model cannot take) would only repeat.
"""


class WorkerCallError(RuntimeError):
    def __init__(self, role: str, rank: int, method: str, cause: str, system: bool = False) -> None:
        super().__init__(f"{role} worker rank {rank} failed in {method}: {cause}")
        self.role, self.rank, self.method = role, rank, method
        self.system = system  # the worker process or its node is gone (not an exception in its code)


class WorkerCallTimeout(TimeoutError):
    def __init__(self, role: str, ranks: list[int], method: str, timeout_s: float) -> None:
        super().__init__(
            f"{role} worker rank(s) {ranks} did not finish {method} within {timeout_s:.0f} s "
            f"(trainer.ray.call_timeout_s, or start_timeout_s at start-up). A rank may be stuck in a collective "
            f"or out of memory."
        )
        self.role, self.ranks, self.method = role, ranks, method


class WorkerStuckError(TimeoutError):
    """A rank's process stopped answering the driver's liveness questions while a call waited on it (stopped,
    swapping, hung in native code holding the interpreter): named as soon as it is seen, not when the whole
    call times out."""

    def __init__(self, role: str, ranks: list[int], method: str, silent_s: float) -> None:
        super().__init__(
            f"{role} worker rank(s) {ranks} stopped answering (no answer for {silent_s:.0f} s, "
            f"trainer.ray.liveness_timeout_s) during {method}: the process is stopped, swapping or hung; the "
            f"other ranks wait on it."
        )
        self.role, self.ranks, self.method = role, ranks, method


class PoolPlacementError(RuntimeError):
    """The cluster cannot place a pool's bundles within the start-up timeout."""


class ClusterConnectError(ConnectionError):
    """Nothing answers at ``trainer.ray.address``."""


def system_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the cluster's failure (a dead, lost or stuck worker) rather than the code's."""
    if isinstance(exc, WorkerCallError):
        return exc.system
    return isinstance(exc, (WorkerCallTimeout, WorkerStuckError))
