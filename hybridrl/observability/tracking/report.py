"""One self-contained HTML page per run (``hybridrl report RUN_DIR``): curves, phase times, config.

Everything is inside the file (plots as base64 PNG, inline CSS), so it can be mailed, attached to an
issue or opened from a machine without the run directory. It reads only what the run wrote:
``metrics.jsonl`` (required), ``config.yaml`` and ``summary.json`` (shown when present).
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hybridrl.observability.tracking.breakdown import (
    as_number,
    mean_of,
    phase_breakdown,
    sub_phase_means,
    top_level_phases,
)

# The breakdown leaves the first step out: it pays one-time costs (warm-up, first hand-over).
BREAKDOWN_SKIP_FIRST = 1

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 980px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.8em;
     border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
.meta { color: #666; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.92em; }
th, td { padding: 0.25em 0.8em; border-bottom: 1px solid #eee; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.total td { font-weight: 600; border-top: 1px solid #999; }
figure { margin: 1em 0; } figcaption { color: #555; font-size: 0.9em; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
.note { color: #8a5a00; background: #fff8e6; padding: 0.3em 0.6em; border-radius: 3px; }
pre { background: #f6f8fa; padding: 0.8em; overflow-x: auto; font-size: 0.85em; border-radius: 3px; }
"""

Rows = list[dict[str, Any]]
Panels = list[tuple[Callable[[Any], None], str]]  # (draw on an axes, y label), one per stacked axes


def read_metrics(path: Path) -> tuple[Rows, int]:
    """Metric rows from ``metrics.jsonl`` and the number of unreadable lines skipped.

    A crash can leave a half-written last line; the rest of the run is still worth a report.
    Raises FileNotFoundError / ValueError (naming the path) when there is nothing to report on.
    """
    if not path.is_file():
        raise FileNotFoundError(
            f"no metrics file at {path} (is this a hybridrl run directory with 'jsonl' in trainer.logger?)"
        )
    rows: Rows = []
    bad = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad += 1
    if not rows:
        raise ValueError(f"{path} holds no metric rows: the run logged no step")
    return rows, bad


def _series(rows: Rows, key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of the rows that have a finite ``key``."""
    xs: list[float] = []
    ys: list[float] = []
    for index, row in enumerate(rows):
        value = as_number(row.get(key))
        if value is not None and math.isfinite(value):
            xs.append(_step(row, index))
            ys.append(value)
    return xs, ys


def _step(row: dict[str, Any], index: int) -> float:
    """The row's step, or its 1-based position when the row has none."""
    step = as_number(row.get("step"))
    return float(index + 1) if step is None else step


def _has(rows: Rows, key: str) -> bool:
    return bool(_series(rows, key)[0])


class _Plotter:
    """Builds figures with the Agg canvas directly, without pyplot, so the caller's backend is untouched."""

    def __init__(self) -> None:
        # matplotlib is heavy and only needed to draw: importing hybridrl.observability.tracking (every run)
        # must not load it.
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - heavy, only to draw plots
        from matplotlib.figure import Figure  # noqa: PLC0415 - heavy, only to draw plots

        self._figure_cls = Figure
        self._canvas_cls = FigureCanvasAgg

    def png(self, panels: Panels, legend_outside: bool = False) -> str:
        """Draw each (draw, ylabel) panel on its own axes, stacked with a shared step axis; base64 PNG.

        Separate panels keep curves of very different scale (reward KL vs PPO KL) readable.
        """
        height = 3.4 if len(panels) == 1 else 0.6 + 2.1 * len(panels)
        fig = self._figure_cls(figsize=(8.0, height), dpi=100)
        self._canvas_cls(fig)
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        for ax, (draw, ylabel) in zip(axes, panels):
            draw(ax)
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                if legend_outside:
                    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
                else:
                    ax.legend(loc="best", fontsize="small")
        axes[-1].set_xlabel("step")
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return base64.b64encode(buffer.getvalue()).decode("ascii")


def _line_with_band(rows: Rows, key: str, label: str, lo_key: str, hi_key: str) -> Callable[[Any], None]:
    def draw(ax: Any) -> None:
        xs, ys = _series(rows, key)
        ax.plot(xs, ys, marker="." if len(xs) < 50 else None, label=label)
        band = [(_step(r, i), as_number(r.get(lo_key)), as_number(r.get(hi_key))) for i, r in enumerate(rows)]
        band = [
            (x, lo, hi)
            for x, lo, hi in band
            if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)
        ]
        if band:
            ax.fill_between(
                [b[0] for b in band], [b[1] for b in band], [b[2] for b in band], alpha=0.2, label="min-max"
            )

    return draw


def _lines(rows: Rows, keys: Sequence[str]) -> Callable[[Any], None]:
    def draw(ax: Any) -> None:
        for key in keys:
            xs, ys = _series(rows, key)
            ax.plot(xs, ys, marker="." if len(xs) < 50 else None, label=key)

    return draw


def _stacked_phases(rows: Rows, phases: Sequence[str]) -> Callable[[Any], None]:
    def draw(ax: Any) -> None:
        steps = [_step(r, i) for i, r in enumerate(rows)]
        stacks = [[as_number(r.get(key)) or 0.0 for r in rows] for key in phases]
        ax.stackplot(steps, stacks, labels=[key.split("/", 1)[1] for key in phases], alpha=0.85)
        xs, ys = _series(rows, "timing_s/step")
        if xs:
            ax.plot(xs, ys, color="black", linestyle="--", linewidth=1, label="step (total)")

    return draw


def _plots(rows: Rows) -> list[tuple[str, str | None, str]]:
    """(title, base64 PNG or None, caption or skip note) for each plot, in page order."""
    plotter = _Plotter()
    out: list[tuple[str, str | None, str]] = []

    def add(
        title: str, needed: Sequence[str], make: Callable[[], Panels], caption: str, legend_outside: bool = False
    ) -> None:
        if not any(_has(rows, key) for key in needed):
            out.append((title, None, f"Skipped: no {' / '.join(needed)} in metrics.jsonl."))
            return
        out.append((title, plotter.png(make(), legend_outside), caption))

    add(
        "Reward",
        ["critic/score/mean"],
        lambda: [
            (
                _line_with_band(rows, "critic/score/mean", "score mean", "critic/score/min", "critic/score/max"),
                "task score",
            )
        ],
        "critic/score/mean: mean task score of the step's responses, before any KL penalty "
        "(band: min to max over responses).",
    )
    kl_keys = ("actor/reward_kl_penalty", "actor/kl_loss", "actor/ppo_kl")
    add(
        "KL",
        kl_keys,
        lambda: [(_lines(rows, [key]), key.split("/", 1)[1]) for key in kl_keys if _has(rows, key)],
        "reward_kl_penalty: KL to the reference model inside the reward; kl_loss: the KL term of the "
        "actor loss; ppo_kl: how far each update moved the policy from the one that generated the rollouts.",
    )
    entropy_keys = ("actor/entropy", "actor/entropy_before_update")
    add(
        "Entropy",
        entropy_keys,
        lambda: [(_lines(rows, [key for key in entropy_keys if _has(rows, key)]), "nats / token")],
        "Policy entropy per response token; a fast fall means the policy is collapsing onto few answers.",
    )
    add(
        "Response length",
        ["response_length/mean"],
        lambda: [
            (
                _line_with_band(rows, "response_length/mean", "mean", "response_length/min", "response_length/max"),
                "tokens",
            )
        ],
        "Response length in tokens, EOS included (band: min to max).",
    )
    if _has(rows, "tool_calls/mean"):  # multi-turn rollouts only: no empty panel on single-turn runs
        add(
            "Tool use",
            ["tool_calls/mean"],
            lambda: [
                (_lines(rows, ["tool_calls/mean", "tool_calls/samples_with_call"]), "calls per sample"),
                (_line_with_band(rows, "num_turns/mean", "turns", "num_turns/min", "num_turns/max"), "turns"),
            ],
            "tool_calls/mean: tool calls per sample; samples_with_call: the share of samples that called one; "
            "num_turns: model, tool and user turns plus the prompt, as verl counts them (band: min to max).",
        )
    val_keys = sorted({k for row in rows for k in row if k.startswith("val-core/")})
    add(
        "Validation",
        val_keys or ["val-core/<data_source>/<metric>/mean@n"],
        lambda: [(_lines(rows, [key]), key.removeprefix("val-core/")) for key in val_keys],
        "val-core/<data_source>/<metric>/mean@n: the mean over the validation prompts of each data source "
        "(reward, and any extra key a reward function returns, such as acc), every trainer.test_freq steps.",
    )
    loss_keys = ("actor/pg_loss", "critic/vf_loss")
    add(
        "Losses",
        loss_keys,
        lambda: [(_lines(rows, [key]), key) for key in loss_keys if _has(rows, key)],
        "actor/pg_loss: the clipped policy-gradient loss; critic/vf_loss: the (clipped) value loss.",
    )
    norm_keys = ("actor/grad_norm", "critic/grad_norm")
    add(
        "Gradient norms",
        norm_keys,
        lambda: [(_lines(rows, [key for key in norm_keys if _has(rows, key)]), "norm before clipping")],
        "Global gradient norm of each optimizer step, before grad_clip (mean over the step's mini-batches).",
    )
    clip_keys = ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "critic/vf_clipfrac")
    add(
        "Clip fractions",
        clip_keys,
        lambda: [(_lines(rows, [key for key in clip_keys if _has(rows, key)]), "fraction of tokens")],
        "Share of tokens whose ratio (actor) or value (critic) was clipped; a large one means updates too big.",
    )
    lr_keys = ("actor/lr", "critic/lr")
    add(
        "Learning rate",
        lr_keys,
        lambda: [(_lines(rows, [key for key in lr_keys if _has(rows, key)]), "lr")],
        "The learning rate each step's updates used (warm-up and schedule: optim.lr_scheduler_type).",
    )
    phases = top_level_phases(rows)
    add(
        "Phase times",
        phases or ["timing_s/<phase>"],
        lambda: [(_stacked_phases(rows, phases), "seconds")],
        "Top-level phases stacked per step; the gap up to the dashed line is driver time outside them.",
        legend_outside=True,
    )
    throughput_keys = ("perf/throughput", "perf/gen_tokens_per_s")
    add(
        "Throughput",
        throughput_keys,
        lambda: [(_lines(rows, [key]), "tokens / s") for key in throughput_keys if _has(rows, key)],
        "perf/throughput: prompt + response tokens per second per worker (verl's definition); "
        "perf/gen_tokens_per_s: response tokens per second of the whole step.",
    )
    return out


def _fmt(value: Any) -> str:
    number = as_number(value)
    if number is None:
        return "-" if value is None else str(value)
    if number.is_integer() and abs(number) < 1e15:
        return str(int(number))
    return f"{number:.4g}"


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s ({datetime.timedelta(seconds=round(seconds))})"


def _summary_html(rows: Rows, summary: dict[str, Any] | None, skipped_lines: int) -> str:
    esc = html.escape
    steps = [s for s in (as_number(r.get("step")) for r in rows) if s is not None]
    items: list[tuple[str, str]] = [("steps logged", str(len(rows)))]
    if steps:
        items.append(("step range", f"{_fmt(min(steps))} - {_fmt(max(steps))}"))
    if summary is not None and as_number(summary.get("wall_s")) is not None:
        items.append(("wall time (every leg)", _duration(as_number(summary["wall_s"]) or 0.0)))
    legs = summary.get("legs") if summary is not None else None
    if isinstance(legs, list) and len(legs) > 1:
        items.append(("resumed after steps", ", ".join(str(step) for step in legs[1:])))
    _, scores = _series(rows, "critic/score/mean")
    if scores:
        items.append(("first reward (critic/score/mean)", _fmt(scores[0])))
        items.append(("last reward (critic/score/mean)", _fmt(scores[-1])))
    step_mean = mean_of(rows[BREAKDOWN_SKIP_FIRST:] or rows, "timing_s/step")
    if step_mean:
        items.append(("mean step time (first step left out)", f"{step_mean:.3f} s"))
    if summary is not None:
        for key, value in summary.items():
            if key not in ("wall_s", "legs"):
                items.append((f"summary.json: {key}", _fmt(value)))
    body = "".join(f'<tr><th>{esc(k)}</th><td class="num">{esc(v)}</td></tr>' for k, v in items)
    note = (
        f'<p class="note">{skipped_lines} unreadable line(s) in metrics.jsonl were skipped '
        f"(a crash can leave the last one half-written).</p>"
        if skipped_lines
        else ""
    )
    return f"<table>{body}</table>{note}"


def _breakdown_html(rows: Rows) -> str:
    esc = html.escape
    table = phase_breakdown(rows, skip_first=BREAKDOWN_SKIP_FIRST)
    if not table:
        return '<p class="note">No timing_s/* metrics: no breakdown.</p>'
    used = len(rows) - BREAKDOWN_SKIP_FIRST if len(rows) > BREAKDOWN_SKIP_FIRST else len(rows)
    caption = (
        f"Mean over {used} step(s), the first left out (one-time costs)."
        if len(rows) > BREAKDOWN_SKIP_FIRST
        else "Mean over the only step, warm-up included."
    )
    lines = ['<table><tr><th>phase</th><th class="num">seconds</th><th class="num">% of step</th></tr>']
    for name, seconds, share in table:
        cls = ' class="total"' if name == "step" else ""
        lines.append(
            f'<tr{cls}><td>{esc(name)}</td><td class="num">{seconds:.3f}</td><td class="num">{share:.1f}%</td></tr>'
        )
    lines.append("</table>")
    lines.append(
        f'<p class="meta">{esc(caption)} "other" is the step minus the phases: collation and '
        f"key selection on the driver.</p>"
    )
    subs = sub_phase_means(rows, skip_first=BREAKDOWN_SKIP_FIRST)
    if subs:
        lines.append(
            '<p class="meta">Measured on the workers, slowest rank, inside the phases above and already '
            "counted there (weight_sync and generate_worker are parts of gen):</p><table>"
        )
        lines.extend(f'<tr><td>{esc(name)}</td><td class="num">{seconds:.3f} s</td></tr>' for name, seconds in subs)
        lines.append("</table>")
    return "\n".join(lines)


GENERATIONS_SHOWN = 3  # validations shown (the latest), each with the samples the run saved


def _generations_html(folder: Path) -> str:
    """The latest validations' saved samples (``trainer.val_generations_to_log``) as a table each."""
    files = sorted(folder.glob("step_*.jsonl"), key=lambda p: int(p.stem.removeprefix("step_") or 0))
    if not files:
        return f'<p class="note">No samples in {html.escape(str(folder))} (trainer.val_generations_to_log).</p>'
    esc = html.escape
    parts = []
    for path in reversed(files[-GENERATIONS_SHOWN:]):
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        parts.append(f"<h3>Validation at step {esc(path.stem.removeprefix('step_'))}</h3>")
        parts.append("<table><tr><th>prompt</th><th>response</th><th>ground truth</th><th>score</th></tr>")
        for row in rows:
            parts.append(
                "<tr>"
                + "".join(
                    f"<td><pre>{esc(str(row.get(key, '')))}</pre></td>"
                    for key in ("prompt", "response", "ground_truth")
                )
                + f"<td>{_fmt(row.get('score'))}</td></tr>"
            )
        parts.append("</table>")
    return "\n".join(parts)


def _read_optional(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the run's HTML report (default ``run_dir/report.html``) and return its path."""
    run_dir = Path(run_dir)
    rows, skipped_lines = read_metrics(run_dir / "metrics.jsonl")
    config_text = _read_optional(run_dir / "config.yaml")
    summary: dict[str, Any] | None = None
    summary_text = _read_optional(run_dir / "summary.json")
    summary_note = ""
    if summary_text is not None:
        try:
            loaded = json.loads(summary_text)
            summary = loaded if isinstance(loaded, dict) else None
        except json.JSONDecodeError:
            summary_note = '<p class="note">summary.json could not be parsed and is left out.</p>'

    esc = html.escape
    title = f"hybridrl run report: {run_dir.resolve().name}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">{esc(str(run_dir.resolve()))} &middot; generated '
        f"{esc(datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S'))}</p>",
        "<h2>Summary</h2>",
        _summary_html(rows, summary, skipped_lines),
        summary_note,
        "<h2>Where the step time goes</h2>",
        _breakdown_html(rows),
        "<h2>Curves</h2>",
    ]
    for plot_title, png, caption in _plots(rows):
        parts.append(f"<h3>{esc(plot_title)}</h3>")
        if png is None:
            parts.append(f'<p class="note">{esc(caption)}</p>')
        else:
            parts.append(
                f'<figure><img src="data:image/png;base64,{png}" alt="{esc(plot_title, quote=True)}">'
                f"<figcaption>{esc(caption)}</figcaption></figure>"
            )
    parts += ["<h2>Sample generations</h2>", _generations_html(run_dir / "val_generations")]
    parts.append("<h2>Resolved config</h2>")
    if config_text is None:
        parts.append(f'<p class="note">No config.yaml in {esc(str(run_dir))}.</p>')
    else:
        parts.append(f"<pre>{esc(config_text)}</pre>")
    parts += ["</body>", "</html>", ""]

    target = Path(out) if out is not None else run_dir / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(parts), encoding="utf-8")
    return target
