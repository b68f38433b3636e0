from hybridrl.cli import main

from .helpers import synthetic_rows, write_run


def test_report_subcommand_prints_the_path(tmp_path, capsys):
    run = write_run(tmp_path / "run", synthetic_rows(3))
    assert main(["report", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "report.html")
    out = tmp_path / "elsewhere.html"
    assert main(["report", str(run), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out) and out.read_text().count("data:image/png") >= 5


def test_report_subcommand_exits_2_on_missing_run_dir_or_metrics(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "run directory not found" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Report error:") and str(tmp_path / "metrics.jsonl") in err
