"""verl's interactions: the YAML read with one-line errors, and a user turn run in the tool processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridrl.tools.interactions import InteractionSpec, load_interaction_config
from hybridrl.tools.processes import ToolProcesses

VERL_GSM8K = "interaction:\n  - name: gsm8k\n    class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n    config: {}\n"


def test_verls_gsm8k_interaction_file_loads_as_ours(tmp_path: Path) -> None:
    path = tmp_path / "gsm8k_interaction_config.yaml"
    path.write_text(VERL_GSM8K)
    assert load_interaction_config(str(path)) == [
        InteractionSpec("gsm8k", "hybridrl.tools.interactions.Gsm8kInteraction", {})
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "no such file"),
        ("interaction: [\n", "not valid YAML"),
        ("tools: []\n", "no 'interaction' list"),
        ("interaction:\n  - name: x\n", "needs a class_name"),
        (
            "interaction:\n  - class_name: no_such_module.User\n",
            r"cannot be imported: importing module 'no_such_module'",
        ),
        ("interaction:\n  - class_name: verl.interactions.weather_interaction.WeatherInteraction\n", "port it to"),
        ("interaction:\n  - class_name: tests.tools.sample_tools.SampleTool\n", "has no async start_interaction"),
        (VERL_GSM8K + "  - name: gsm8k\n    class_name: hybridrl.tools.interactions.BaseInteraction\n", "used twice"),
    ],
    ids=["missing", "syntax", "no-list", "no-class", "not-importable", "verl-only", "not-an-interaction", "twice"],
)
def test_a_bad_interaction_file_is_one_line(tmp_path: Path, text: str | None, message: str) -> None:
    path = tmp_path / "interactions.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=message) as caught:
        load_interaction_config(str(path))
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_the_gsm8k_user_ends_the_conversation_at_the_right_answer() -> None:
    spec = InteractionSpec("gsm8k", "hybridrl.tools.interactions.Gsm8kInteraction", {})
    tools = ToolProcesses([], num_workers=1, timeout_s=60.0, max_response_bytes=1 << 20)
    try:
        for call_id, answer in enumerate(["#### 41", "#### 42"]):
            messages = [{"role": "user", "content": "6 times 7?"}, {"role": "assistant", "content": answer}]
            tools.submit_user_turn(call_id, spec, {"name": "gsm8k", "ground_truth": "42"}, messages)
        finished = dict(tools.collect(block=True))
        while tools.pending():
            finished.update(tools.collect(block=True))
    finally:
        tools.close()
    wrong, right = finished[0], finished[1]
    assert (wrong.terminate, wrong.reward, wrong.error) == (False, 0.0, None) and "incorrect" in wrong.text
    assert (right.terminate, right.reward, right.text) == (True, 1.0, "Your response is correct!")
