"""`lopd demo --quick` runs the whole pipeline on the tiny model and writes its report."""

from lopd.cli import main


def test_quick_demo_writes_report_and_plot(tmp_path):
    assert main(["demo", "--quick", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "| vanilla (warm start) |" in report and "| after LOPD |" in report
    assert (tmp_path / "reward_curve.png").stat().st_size > 1000
    assert (tmp_path / "lopd" / "checkpoints").is_dir()
