"""Pre-flight: every check a run passes before Ray or any worker starts, above the domains it asks
(algorithms, data, rewards, the engines' layouts, the cluster's pools). ``check(cfg)`` runs them;
``load_and_check`` is ``load_config`` followed by ``check``."""

from hybridrl.preflight.checks import check, load_and_check

__all__ = ["check", "load_and_check"]
