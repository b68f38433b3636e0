"""The plan as ``hybridrl plan`` prints it: per worker group a row per phase, the verdict, and the changes that
make a run fit."""

from __future__ import annotations

from hybridrl.planning.fixes import Fix
from hybridrl.planning.memory import GB, Plan


def verdict(plan: Plan) -> str:
    group, phase = plan.peak
    where = f"in {phase.name} on pool '{group.pool}'"
    room = plan.device.memory_bytes / GB
    if plan.fits:
        return f"fits: peak {phase.bytes / GB:.1f} of {room:.1f} GB per {plan.device.kind} rank {where}"
    return f"does not fit: peak {phase.bytes / GB:.1f} of {room:.1f} GB per {plan.device.kind} rank {where}"


def render(plan: Plan, fixes: list[Fix] | None = None) -> str:
    lines = []
    for group in plan.groups:
        lines.append(f"pool '{group.pool}': {'+'.join(group.roles)} on {group.world_size} worker(s), per rank:")
        lines.append(f"  {'phase':<15}{'GB':>8}  largest parts (GB)")
        for phase in group.phases:
            parts = sorted(phase.parts.items(), key=lambda kv: -kv[1])[:4]
            shown = ", ".join(f"{name} {value / GB:.1f}" for name, value in parts if value > 0)
            mark = "  <- peak" if phase is group.peak else ""
            lines.append(f"  {phase.name:<15}{phase.bytes / GB:>8.1f}  {shown}{mark}")
    lines.append(verdict(plan))
    if fixes:
        lines.append("changes that make it fit, cheapest first:")
        for rank, fix in enumerate(fixes, 1):
            group, phase = fix.plan.peak
            lines.append(f"  {rank}. {' '.join(fix.overrides)}")
            lines.append(f"     peak {phase.bytes / GB:.1f} GB ({phase.name}); costs: {fix.cost}")
    elif fixes is not None and not plan.fits:
        lines.append("no single change or combination the planner knows makes it fit: add GPUs or use a smaller model")
    return "\n".join(lines) + "\n"
