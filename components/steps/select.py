"""The select step: the best candidate on validation, tested, then published; its report for the KFP UI."""

from kfp import dsl


def select(
    variants: list[dict],
    data: dsl.Input[dsl.Dataset],
    store: str,
    s3_endpoint: str,
    model_name: str,
    run_id: str,
    metric: str,
    min_improvement: float,
    force_publish: bool,
    confidence: float,
    confusion: dsl.Output[dsl.ClassificationMetrics],
    report: dsl.Output[dsl.HTML],
    leaderboard: dsl.Output[dsl.Markdown],
) -> str:
    """Evaluates the variants of the run's last rung on validation, the winner on test, and publishes it past the
    promotion gate.

    ``variants`` are all the run's: which rung was the last, and who entered it, is read back from the store
    (``halving.finalists``), since the halve steps decide it at run time.

    The returned summary is a JSON string, which keeps integers integral. The
    KFP UI shows the winner's confusion matrix on test, the run's report page
    (the same as `bakeoff report`) and the leaderboard.
    """
    from pathlib import Path

    from bakeoff.components.tfenv import import_tensorflow

    import_tensorflow()  # before anything imports it: absl's start-up lines held to TF_CPP_MIN_LOG_LEVEL
    from bakeoff.components.errors import reported
    from bakeoff.components.reporting.report import markdown, read_record, train_seconds, write_report
    from bakeoff.components.selection.promotion import Gate
    from bakeoff.components.selection.settings import SelectionSettings
    from bakeoff.components.selection.winner import select_run
    from bakeoff.components.storage import open_store, use_s3_endpoint

    with reported():
        from bakeoff.components.search.halving import finalists  # not priced as select's start: within its work

        use_s3_endpoint(s3_endpoint)
        settings = SelectionSettings(model_name, metric, Gate(min_improvement, force_publish, confidence))
        opened = open_store(store)
        names = finalists(opened, run_id, [variant["name"] for variant in variants])
        summary = select_run(names, data.path, store, run_id, settings)
        record = read_record(opened, run_id)
        confusion.log_confusion_matrix(record.class_names, record.confusion_matrix)
        # Named .html so that a browser opens the downloaded artifact as a page; KFP uploads whatever URI the executor
        # output names.
        report.uri += ".html"
        write_report(opened, run_id, Path(report.path))
        Path(leaderboard.path).write_text(markdown(record, train_seconds(opened, record)), encoding="utf-8")
        return summary.to_json(indent=None)
