import base64
import html.parser
import json
import re

import pytest

from hybridrl.observability.tracking.report import write_report

from .helpers import synthetic_rows, write_run


@pytest.fixture
def run_dir(tmp_path):
    run = write_run(
        tmp_path / "run",
        synthetic_rows(),
        summary={"first_mean": 0.2, "last_mean": 0.6, "gain": 0.4, "window": 2, "wall_s": 83.5, "legs": [0, 4, 8]},
    )
    (run / "val_generations").mkdir()
    for step in (5, 10):
        sample = {"step": step, "prompt": "<b>2+2</b>", "response": "4", "ground_truth": "4", "score": 0.75}
        (run / "val_generations" / f"step_{step}.jsonl").write_text(json.dumps(sample) + "\n")
    return run


IMG = '<img src="data:image/png;base64,'


def images(text: str) -> list[bytes]:
    return [base64.b64decode(m, validate=True) for m in re.findall(r'<img src="data:image/png;base64,([^"]+)"', text)]


class TagChecker(html.parser.HTMLParser):
    """Checks that non-void tags are closed in order: enough to catch broken markup or bad escaping."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)


def test_report_has_plots_table_summary_and_escaped_config(run_dir):
    path = write_report(run_dir)
    assert path == run_dir / "report.html"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    checker = TagChecker()
    checker.feed(text)
    assert not checker.errors and not checker.stack

    pngs = images(text)
    assert len(pngs) == 11
    for title in ("Validation", "Losses", "Gradient norms", "Clip fractions", "Learning rate"):
        assert f"<h3>{title}</h3>\n<figure>" in text, title
    assert all(png.startswith(b"\x89PNG") for png in pngs)

    # Breakdown table (first step left out), with the sub-phases shown apart, not as phases.
    assert re.search(r"<td>update_actor</td><td class=\"num\">0\.300</td>", text)
    assert "<td>other</td>" in text and "100.0%" in text
    assert "Mean over 9 step(s)" in text
    assert "<td>weight_sync</td>" in text
    # Summary: steps, wall time, first/last reward.
    assert 'resumed after steps</th><td class="num">4, 8<' in text
    assert ">10<" in text and "83.5 s" in text and ">0.15<" in text and ">0.6<" in text
    # Config in a <pre>, escaped.
    assert "<pre>trainer:\n  experiment_name: &lt;demo &amp; test&gt;\n</pre>" in text
    assert "<demo" not in text
    # Sample generations of the latest validations, newest first, escaped.
    assert text.index("Validation at step 10") < text.index("Validation at step 5")
    assert "<pre>&lt;b&gt;2+2&lt;/b&gt;</pre>" in text and ">0.75<" in text


def test_report_out_and_missing_metrics_are_skipped_with_a_note(tmp_path):
    rows = [
        {k: v for k, v in r.items() if not k.startswith("perf/") and k != "actor/entropy"}
        for r in synthetic_rows(4, kl_key="actor/kl_loss")
    ]
    run = write_run(tmp_path / "run", rows, config=None)
    out = write_report(run, out=tmp_path / "nested" / "r.html")
    assert out == tmp_path / "nested" / "r.html" and not (run / "report.html").exists()
    text = out.read_text()
    assert len(images(text)) == 8  # no entropy, no throughput, no validation before step 5
    assert "Skipped: no val-core/&lt;data_source&gt;/&lt;metric&gt;/mean@n in metrics.jsonl." in text
    assert "No samples in" in text
    assert "Skipped: no actor/entropy / actor/entropy_before_update in metrics.jsonl." in text
    assert "Skipped: no perf/throughput / perf/gen_tokens_per_s in metrics.jsonl." in text
    assert "No config.yaml" in text


def test_report_survives_a_truncated_last_line_and_a_single_step(tmp_path):
    run = write_run(tmp_path / "run", synthetic_rows(1))
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "critic/sc')
    text = write_report(run).read_text()
    assert "1 unreadable line(s)" in text and "Mean over the only step" in text
    assert len(images(text)) == 10


def test_missing_or_empty_metrics_name_the_path(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(FileNotFoundError, match=re.escape(str(run / "metrics.jsonl"))):
        write_report(run)
    (run / "metrics.jsonl").write_text("\n")
    with pytest.raises(ValueError, match=re.escape(str(run / "metrics.jsonl")) + ".*no metric rows"):
        write_report(run)
