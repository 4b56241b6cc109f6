"""One run's report: leaderboard, training curves, confusion matrix and mistakes, as one self-contained HTML page."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
from pathlib import Path

from matplotlib.figure import Figure

from bakeoff.components.errors import BakeoffError
from bakeoff.components.reporting import figures
from bakeoff.components.storage import Store, runs
from bakeoff.components.storage.records import Mistake, ScoredCandidate, SelectionRecord

# Inline, so the page needs nothing but itself: it is opened from disk, a KFP UI or an email.
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1150px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
.decision { font-size: 1.1em; padding: .6em 1em; background: #f3f6fa; border-left: 4px solid #3b73b9; }
table { border-collapse: collapse; } th, td { padding: .3em .8em; text-align: right; border-bottom: 1px solid #e4e4e4; }
th:nth-child(2), td:nth-child(2) { text-align: left; }
tr.winner { background: #fff4cc; font-weight: bold; } tr.stopped { color: #777; } .metric { background: #eef3fb; }
img.figure { max-width: 100%; }
.mistakes { display: grid; grid-template-columns: repeat(auto-fill, 150px); gap: 12px; }
.mistakes figure { margin: 0; font-size: .8em; text-align: center; }
.mistakes img { width: 84px; height: 84px; image-rendering: pixelated; border: 1px solid #ccc; }
""".strip()
WINNER_MARK = "★ winner"


def render(record: SelectionRecord, histories: dict[str, dict], seconds: dict[str, list[float]]) -> str:
    """The page for a selection record (``runs/<run>/selection.json``), each candidate's metrics.json ``history`` and
    its training ``seconds`` per rung (train_seconds)."""
    names = record.class_names
    ordered = {c.variant: histories.get(c.variant, {}) for c in record.contestants()}
    curves = figures.curves(ordered)
    confusion = figures.confusion(record.confusion_matrix, names)
    winner = record.winner
    title = f"bakeoff run {record.run_id}"
    body = [
        f"<h1>{_text(title)}</h1>",
        f"<p>selected by {_text(record.metric)} on validation · {_text(record.created)}</p>",
        f'<p class="decision" id="decision">{_text(_decision(record))}</p>',
        "<h2>Leaderboard</h2>",
        _leaderboard(record, seconds),
        f"<p>winner: <b>{_text(winner.variant)}</b>, test accuracy {winner.test_accuracy:.4f}</p>",
        "<h2>Training and validation, per epoch</h2>",
        _figure(curves, "training and validation curves", "curves", json.dumps(figures.series(curves))),
        f"<h2>Confusion matrix of {_text(winner.variant)} on test</h2>",
        _figure(confusion, "confusion matrix", "confusion", json.dumps(record.confusion_matrix)),
        f"<h2>Accuracy of {_text(winner.variant)} per class on test</h2>",
        _per_class(record.confusion_matrix, names),
        f"<h2>Its most confident mistakes on test ({len(record.misclassified)})</h2>",
        _mistakes(record.misclassified, names),
    ]
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_text(title)}</title><style>\n{STYLE}\n</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def markdown(record: SelectionRecord, seconds: dict[str, list[float]]) -> str:
    """The leaderboard and the promotion decision in Markdown (the KFP UI's Markdown artifact); ``seconds``: as for
    render."""
    metric = record.metric
    rows = [
        f"| | variant | {_marked('val_accuracy', metric)} | {_marked('val_loss', metric)} | epochs | workers | "
        "train s | precision |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for place, c in enumerate(record.candidates, 1):
        mark = f"{place} {WINNER_MARK}" if c.variant == record.winner.variant else str(place)
        rows.append(
            f"| {mark} | {c.variant} | {c.val_accuracy:.4f} | {c.val_loss:.4f} | {c.epochs}"
            f" | {c.workers} | {_seconds(seconds[c.variant])} | {precision_of(c)} |"
        )
    rows += [f"| stopped | {s.variant} | {s.reason} | | {s.epochs} | | | |" for s in record.stopped]
    winner = record.winner
    return (
        f"### bakeoff run {record.run_id}\n\n"
        + "\n".join(rows)
        + f"\n\nwinner: **{winner.variant}**, test accuracy {winner.test_accuracy:.4f}\n\n{_decision(record)}\n"
    )


def read_record(store: Store, run_id: str) -> SelectionRecord:
    """The run's selection record; one line when the run is unknown or never reached select."""
    if not re.fullmatch(r"[A-Za-z0-9][-A-Za-z0-9_.]*", run_id):  # a KFP job id or kfp.local's run name; never a path
        raise BakeoffError(
            f"run id {run_id!r} is not one bakeoff writes: pass the run id `bakeoff run` printed, or latest"
        )
    key = runs.selection_key(run_id)
    if not store.exists(key):
        reached = bool(store.list(f"runs/{run_id}/"))
        why = "it has no selection record (it did not reach select)" if reached else "no such run"
        raise BakeoffError(
            f"cannot report run {run_id!r} in {store.uri}: {why}; "
            "`bakeoff report latest` reports the newest run that has one"
        )
    return runs.selection(store, run_id)


def latest_run(store: Store) -> str:
    """The run id of the newest selection record in the store: as ``runs/latest.json`` names it, else by listing."""
    pointer = runs.latest(store)
    if pointer is not None:
        return pointer.run_id
    # A store whose runs all predate the pointer: listing every key under runs/ is slow, but finds them.
    records = [
        runs.selection(store, key.split("/")[1])
        for key in store.list("runs/")
        if key.count("/") == 2 and key.endswith(f"/{runs.SELECTION}")
    ]
    if not records:
        raise BakeoffError(
            f"no run in {store.uri} has a selection record: run a bake-off (`bakeoff run`) or check --store"
        )
    return max(records, key=lambda record: (record.created, record.run_id)).run_id


def train_seconds(store: Store, record: SelectionRecord) -> dict[str, list[float]]:
    """Each candidate's training seconds per rung, from its rungs' metrics (its metrics.json has the last rung's)."""
    return {
        c.variant: runs.rung_seconds(store, record.run_id, runs.metrics(store, record.run_id, c.variant))
        for c in record.candidates
    }


def write_report(store: Store, run_id: str, path: Path) -> Path:
    """Writes the run's page to ``path`` all at once, from selection.json and every candidate's metrics."""
    record = read_record(store, run_id)
    histories = {c.variant: runs.metrics(store, run_id, c.variant).history for c in record.contestants()}
    page = render(record, histories, train_seconds(store, record))
    path = Path(path)
    staged = path.with_name(f".{path.name}.{os.getpid()}.partial")  # beside it, so the rename stays on one file system
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(page, encoding="utf-8")
        os.replace(staged, path)  # never a half-written page where the last one was
    except OSError as error:
        with contextlib.suppress(OSError):  # NotADirectoryError too, where a parent is a file
            staged.unlink()
        raise BakeoffError(f"cannot write {str(path)!r} ({error.strerror}): choose another -o") from None
    return path


def precision_of(candidate: ScoredCandidate) -> str:
    """What a candidate trained at: float32 for a record written before precisions were recorded."""
    return candidate.precision or "float32"


def _text(value: object) -> str:
    return html.escape(str(value))


def _marked(column: str, metric: str) -> str:
    return f"{column} (selection)" if column == metric else column


def _decision(record: SelectionRecord) -> str:
    """The promotion decision as the run stated it, and where the winner went."""
    winner = record.winner
    where = f" at {winner.uri}" if record.promotion.published and winner.uri else " (not published)"
    return record.promotion.message + where


def _seconds(rungs: list[float]) -> str:
    """The total, then each rung's share where the variant trained in more than one: ``93.4 (31.2 + 62.2)``."""
    parts = f" ({' + '.join(f'{part:.1f}' for part in rungs)})" if len(rungs) > 1 else ""
    return f"{sum(rungs):.1f}{parts}"


def _leaderboard(record: SelectionRecord, seconds: dict[str, list[float]]) -> str:
    metric = record.metric
    columns = ("val_accuracy", "val_loss")
    head = "".join(f'<th class="metric">{c} (selection)</th>' if c == metric else f"<th>{c}</th>" for c in columns)
    rows = [
        f'<table id="leaderboard"><tr><th>#</th><th>variant</th>{head}<th>epochs</th><th>workers</th>'
        "<th>train s</th><th>examples/s</th><th>precision</th></tr>"
    ]
    for place, c in enumerate(record.candidates, 1):
        won = c.variant == record.winner.variant
        cells = "".join(
            f'<td class="metric">{c.score(k):.4f}</td>' if k == metric else f"<td>{c.score(k):.4f}</td>"
            for k in columns
        )
        rows.append(
            f'<tr{" class=winner" if won else ""} data-variant="{_text(c.variant)}"><td>{place}</td>'
            f"<td>{_text(c.variant)}{' ' + WINNER_MARK if won else ''}</td>{cells}<td>{c.epochs}</td>"
            f"<td>{c.workers}</td><td>{_seconds(seconds[c.variant])}</td><td>{c.examples_per_second:.0f}</td>"
            f"<td>{precision_of(c)}</td></tr>"
        )
    rows += [
        f'<tr class="stopped" data-variant="{_text(s.variant)}"><td>rung {s.rung}</td><td>{_text(s.variant)}</td>'
        f'<td colspan="7">stopped: {_text(s.reason)}</td></tr>'
        for s in record.stopped
    ]
    return "\n".join(rows) + "\n</table>"


def _figure(figure: Figure, alt: str, name: str, data: str) -> str:
    """An image of the figure, with the numbers it draws beside it in a data attribute."""
    return (
        f'<img class="figure" id="{name}" alt="{alt}" data-{name}="{html.escape(data)}"'
        f' src="data:image/png;base64,{figures.png_base64(figure)}">'
    )


def _per_class(matrix: list[list[int]], names: list[str]) -> str:
    """Each class's test images and the share the winner got right: an imbalanced dataset's weak class shows here,
    where the overall accuracy hides it."""
    rows = [
        f"<tr><td>{index}</td><td>{_text(name)}</td><td>{sum(row)}</td>"
        f"<td>{f'{row[index] / sum(row):.4f}' if sum(row) else '-'}</td></tr>"
        for index, (name, row) in enumerate(zip(names, matrix, strict=True))
    ]
    return (
        '<table id="per-class"><tr><th>label</th><th>class</th><th>test images</th><th>accuracy</th></tr>\n'
        + "\n".join(rows)
        + "\n</table>"
    )


def _mistakes(misclassified: list[Mistake], names: list[str]) -> str:
    if not misclassified:
        return "<p>none: every test image was classified right</p>"
    cells = [
        f'<figure><img alt="test image {m.index}" src="data:image/png;base64,{m.png}">'
        f"<figcaption>true: {_text(names[m.true])}<br>predicted: {_text(names[m.predicted])}"
        f" ({m.confidence:.0%})<br>test #{m.index}</figcaption></figure>"
        for m in misclassified
    ]
    return '<div class="mistakes">\n' + "\n".join(cells) + "\n</div>"
