"""`swarm report` and `swarm export`: thin commands over the report library."""

from __future__ import annotations

from pathlib import Path

import click

from swarm.report.source import is_archive, open_run, unpack


def _default_out(runs: tuple[Path, ...]) -> Path:
    if len(runs) > 1:
        return Path("comparison.html")
    run = runs[0]
    if is_archive(run):
        return run.with_name(run.name.split(".")[0] + "-report.html")
    return run / "report.html"


@click.command("report")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path),
    help="The HTML file to write (the Markdown summary goes beside it, as .md).",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="Comparisons report the time each run took to reach this pass rate.",
)
def report_command(runs: tuple[Path, ...], out: Path | None, threshold: float) -> None:
    """Write a self-contained HTML report (and Markdown summary) of one run, or compare runs.

    RUNS are run directories or archives made by `swarm export`. An experiment's directory
    (made by `swarm experiment`) is reported as an experiment: statistics over its runs, with
    the per-run figures as CSV."""
    from swarm.experiment.state import is_experiment

    if len(runs) == 1 and is_experiment(runs[0]):
        from swarm.experiment.report import write_report

        html_path, md_path, csv_path, warnings = write_report(runs[0], out)
        for warning in warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(f"wrote {html_path}, {md_path} and {csv_path}")
        return
    from swarm.report import render  # matplotlib: only when a report is written
    from swarm.report.measures import measure

    out = out or _default_out(runs)
    measured = []
    for path in runs:
        with open_run(path) as source:
            measured.append(measure(source))
    if len(measured) == 1:
        m = measured[0]
        title = f"swarm run {m.name}"
        subtitle = f"{len(m.workers)} workers; {len(m.checkpoints)} evaluator checkpoints."
        sections = render.run_sections(m)
    else:
        title = "swarm runs compared: " + ", ".join(m.name for m in measured)
        subtitle = f"Time to reach a {threshold:.0%} pass rate is measured from each run's start."
        sections = render.compare_sections(measured, threshold)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render.html(title, subtitle, sections))
    out.with_suffix(".md").write_text(render.markdown(title, subtitle, sections))
    click.echo(f"wrote {out} and {out.with_suffix('.md')}")


@click.command("export")
@click.argument("run", type=click.Path(exists=True, path_type=Path))
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path),
    help="The archive to write (default: <run>.tar.gz beside the run directory).",
)
@click.option(
    "--unpack",
    "unpack_into",
    type=click.Path(file_okay=False, path_type=Path),
    help="Instead: unpack the archive RUN into this folder as a run directory "
    "that `swarm hub --run-dir` can serve.",
)
def export_command(run: Path, out: Path | None, unpack_into: Path | None) -> None:
    """Pack a run (database, git bundle, evaluator log) into one archive, or unpack one."""
    from swarm.report.export import export_run

    if unpack_into is not None:
        if not is_archive(run):
            raise click.BadParameter(f"{run} is not a .tar.gz made by swarm export")
        unpack_into.mkdir(parents=True, exist_ok=True)
        click.echo(f"unpacked into {unpack(run, unpack_into)}")
        return
    if not run.is_dir():
        raise click.BadParameter(f"{run} is not a run directory")
    click.echo(f"wrote {export_run(run, out)}")
